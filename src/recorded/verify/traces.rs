//! The run's traces: before the replay, a trace for every result line; after it, every
//! archived trace against the replay's trace of the same question, line by line, as the JSON
//! each line holds (field order included) once [`normalised`]. A trace only one side has is a
//! mismatch.

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::Context as _;
use serde_json::Value;

use super::{ArchiveClaims, Report, relative, replay_tag};
use crate::recorded::RunFiles;
use crate::recorded::archive::{ArchiveIndex, files_under};
use crate::recorded::tape::differing_fields;

/// The result lines of the run, as `(sample, question id, file, line number)`.
fn result_lines(
    checked: &ArchiveClaims,
    root: &Path,
) -> anyhow::Result<Vec<(String, String, String, usize)>> {
    let index = &checked.index;
    let mut lines = Vec::new();
    for sample in checked.samples() {
        let path =
            crate::results::result_path(root, &index.dataset, &sample, &index.model, &index.file);
        let Ok(text) = std::fs::read_to_string(&path) else { continue };
        let name = relative(root, &path);
        for (number, line) in text.lines().enumerate().filter(|(_, line)| !line.trim().is_empty()) {
            let value: serde_json::Value = serde_json::from_str(line)
                .with_context(|| format!("{name} line {} is not JSON", number + 1))?;
            let id = value["question_id"].as_str().unwrap_or_default().to_string();
            lines.push((sample.clone(), id, name.clone(), number + 1));
        }
    }
    Ok(lines)
}

/// A trace for every result line, when the run wrote traces; the number of result lines.
pub(super) fn check_traces(
    checked: &ArchiveClaims,
    root: &Path,
) -> anyhow::Result<Result<usize, String>> {
    let index = &checked.index;
    let lines = result_lines(checked, root)?;
    if checked.manifest["settings"]["traces"] != true {
        return Ok(Ok(lines.len()));
    }
    for (sample, id, file, number) in &lines {
        let trace = crate::agent::trace::trace_path(root, &index.dataset, &index.file, sample, id);
        if !trace.is_file() {
            return Ok(Err(format!(
                "{file} line {number} (question {id}): its trace {} is missing",
                relative(root, &trace)
            )));
        }
    }
    Ok(Ok(lines.len()))
}

/// Every archived trace against the replay's trace of the same question (whatever the
/// manifest says of traces: the replay writes them as the recorded run did). An identical
/// trace is recomputed; one whose earlier attempts (a question answered again after a failure
/// or an interruption) the replay cannot make is carried, its last attempt compared.
pub(super) fn compare_traces(
    checked: &ArchiveClaims,
    root: &Path,
    report: &mut Report,
) -> anyhow::Result<Option<String>> {
    let index = &checked.index;
    let archived = RunFiles::new(root, &index.dataset, &index.model, &index.file).traces();
    let replayed = RunFiles::new(root, &index.dataset, &index.model, &replay_tag(index)).traces();
    let mut names = BTreeSet::new();
    for (folder, files) in
        [(&archived, files_under(&archived)?), (&replayed, files_under(&replayed)?)]
    {
        for file in files {
            names.insert(file.strip_prefix(folder)?.to_path_buf());
        }
    }
    for name in names {
        let (ours, theirs) = (read(&archived.join(&name))?, read(&replayed.join(&name))?);
        let path = relative(root, &archived.join(&name));
        let question = [&ours, &theirs]
            .into_iter()
            .find_map(|text| text.as_deref().and_then(question_of))
            .unwrap_or_else(|| stem(&name));
        let (ours, theirs) = match (ours, theirs) {
            (Some(ours), Some(theirs)) => (ours, theirs),
            (None, _) => {
                return Ok(Some(format!(
                    "question {question}: the replay traced it, but its trace {path} is missing"
                )));
            }
            (Some(_), None) => {
                return Ok(Some(format!(
                    "{path} (question {question}): the replay did not trace this question"
                )));
            }
        };
        match compare_trace(&ours, &theirs, Some(index)) {
            Err(difference) => {
                return Ok(Some(format!("{path} (question {question}): {difference}")));
            }
            Ok(true) => report.carried.insert(path),
            Ok(false) => report.recomputed.insert(path),
        };
    }
    Ok(None)
}

/// The text of the trace at `path`, or `None` when there is none (bytes that are not UTF-8
/// are replaced, so they differ from the replay's).
fn read(path: &Path) -> anyhow::Result<Option<String>> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(Some(String::from_utf8_lossy(&bytes).into_owned())),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(error).with_context(|| format!("reading {}", path.display())),
    }
}

/// The question id of a trace's last attempt (its last `start` record).
fn question_of(text: &str) -> Option<String> {
    text.lines().rev().find_map(|line| {
        let record: Value = serde_json::from_str(line).ok()?;
        (record["event"] == "start").then(|| record["question_id"].as_str().map(str::to_string))?
    })
}

/// A trace file's name without `.jsonl`, for a trace that names no question.
fn stem(name: &Path) -> String {
    name.file_stem().unwrap_or_default().to_string_lossy().into_owned()
}

/// The archived trace `ours` against the replay's `theirs`: from the archived trace's last
/// `start` record on, line for line. `Ok(true)` when the archived trace has earlier attempts
/// (not compared), `Err` with the first difference. `replayed_as`: the archive of a run whose
/// replay answered under another tag (see [`normalised`]); `None` when the replay used the
/// run's own tags (a learning replayed in a project of its own).
pub(super) fn compare_trace(
    ours: &str,
    theirs: &str,
    replayed_as: Option<&ArchiveIndex>,
) -> Result<bool, String> {
    let ours: Vec<&str> = ours.lines().collect();
    let theirs: Vec<&str> = theirs.lines().collect();
    let first = ours.iter().rposition(|line| is_start(line)).unwrap_or(0);
    let last = ours[first..].len().max(theirs.len());
    for at in 0..last {
        let number = first + at + 1;
        let (mine, replayed) = match (ours.get(first + at), theirs.get(at)) {
            (Some(mine), Some(replayed)) => (mine, replayed),
            (Some(_), None) => return Err(format!("line {number} is not in the replay's trace")),
            _ => {
                return Err(format!(
                    "it ends at line {} where the replay's trace goes on",
                    number - 1
                ));
            }
        };
        let Ok(mine) = serde_json::from_str::<Value>(mine) else {
            return Err(format!("line {number} is not JSON"));
        };
        let replayed = serde_json::from_str::<Value>(replayed).unwrap_or(Value::Null);
        let (mine, replayed) = (normalised(mine, None), normalised(replayed, replayed_as));
        // As text, so that the order of the fields counts too.
        let (text, replayed_text) = (mine.to_string(), replayed.to_string());
        if text != replayed_text {
            return Err(format!(
                "line {number} differs from the replay's trace in {}",
                differing_fields(&mine, &replayed)
            ));
        }
    }
    Ok(first > 0)
}

/// Whether a trace line is an attempt's `start` record.
fn is_start(line: &str) -> bool {
    line.contains("\"start\"")
        && serde_json::from_str::<Value>(line).is_ok_and(|record| record["event"] == "start")
}

/// What a trace line holds once the fields that differ between two runs of the same recorded
/// calls are set aside, by name, at the record's top level; nothing else is:
///
/// - `t_ms` (every record: milliseconds since the attempt started), `ms` (the duration of a
///   model call or a tool call), `latency_ms` (the question's wall time) and `started_at` (the
///   wall clock at `start`) measure the host, not the run: they are nulled on both sides;
/// - the `start` record's `file` and `result_file` name the run the trace belongs to, and the
///   replay answers into the tag `<tag>-verify`: on the replay's side (`replayed`, the
///   archive's index) they are put back to the archived run's tag and result file, so the
///   archived trace must name its own run.
///
/// Retries and hedges are not set aside: the tape keeps each reply with how it was obtained,
/// and the replay writes them as the run did.
fn normalised(mut record: Value, replayed: Option<&ArchiveIndex>) -> Value {
    let Some(fields) = record.as_object_mut() else { return record };
    for name in ["t_ms", "ms", "latency_ms", "started_at"] {
        if let Some(value) = fields.get_mut(name) {
            *value = Value::Null;
        }
    }
    let start = fields.get("event").and_then(Value::as_str) == Some("start");
    if let (true, Some(index)) = (start, replayed) {
        let sample = fields.get("sample").and_then(Value::as_str).unwrap_or_default().to_string();
        let result = |tag: &str| {
            crate::results::result_path(Path::new(""), &index.dataset, &sample, &index.model, tag)
                .display()
                .to_string()
        };
        let tag = replay_tag(index);
        let back = [
            ("file", tag.clone(), index.file.clone()),
            ("result_file", result(&tag), result(&index.file)),
        ];
        for (name, theirs, ours) in back {
            if let Some(value) = fields.get_mut(name).filter(|value| **value == theirs.as_str()) {
                *value = Value::String(ours);
            }
        }
    }
    record
}

#[cfg(test)]
mod tests;
