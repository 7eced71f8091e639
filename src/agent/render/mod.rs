//! Rendering traces for `mragent trace <question-id|result-file>`.
//!
//! A target is either a question id (`conv-26:q7`), whose trace is looked up under `log/`, or a
//! result file, whose questions are rendered one after another. The text form is a timeline meant
//! for a terminal (colour optional, long texts shortened); the JSON form prints every record in
//! full for machines. This module only reads files; it never calls a model.
//!
//! Layout: this module finds the traces; `timeline` renders them as text.

mod timeline;

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde_json::json;

use self::timeline::render_timeline;
use crate::agent::trace::{TraceEvent, TraceRecord, read_trace};
use crate::results::ResultLine;

/// How to render.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RenderOptions {
    /// Print JSON (every record, untruncated) instead of the timeline.
    pub json: bool,
    /// Use ANSI colours (the CLI sets this when stdout is a terminal).
    pub color: bool,
    /// Only look at traces of this dataset (`locomo`, `LM`).
    pub dataset: Option<String>,
    /// Only look at traces of this run tag (`--file`).
    pub file: Option<String>,
    /// Characters kept of long texts in the timeline (0: a default of 400).
    pub max_chars: usize,
}

/// Renders the trace of a question id, of a trace file (as `ask` prints it), or of every
/// question of a result file, under the project `root`.
pub fn render_trace(root: &Path, target: &str, options: &RenderOptions) -> anyhow::Result<String> {
    let as_path = PathBuf::from(target);
    let candidates = [as_path.clone(), root.join(&as_path)];
    let traces = match candidates.iter().find(|path| path.is_file()) {
        Some(file) => match trace_question(file) {
            Some(question_id) => vec![(question_id, Some(file.clone()))],
            None => traces_of_result_file(root, file, options)?,
        },
        None => vec![(target.to_string(), find_question_trace(root, target, options)?)],
    };
    if options.json {
        let mut questions = Vec::new();
        for (question_id, path) in &traces {
            let records = match path {
                Some(path) => read_trace(path)?,
                None => Vec::new(),
            };
            questions.push(json!({
                "question_id": question_id,
                "trace_file": path.as_ref().map(|path| path.display().to_string()),
                "records": records,
            }));
        }
        return Ok(serde_json::to_string_pretty(&json!({ "questions": questions }))?);
    }
    let mut out = String::new();
    for (index, (question_id, path)) in traces.iter().enumerate() {
        if index > 0 {
            out.push('\n');
        }
        match path {
            Some(path) => {
                let records = escape_records(read_trace(path)?)?;
                render_timeline(&mut out, path, &records, options);
            }
            None => {
                let _ = writeln!(out, "{question_id}: no trace found");
            }
        }
    }
    Ok(out)
}

/// The records with every control character in their strings (ESC, BEL, OSC window titles,
/// C1 controls; not newline or tab) made visible as `\u{…}`, so that model output never
/// reaches the terminal as a control sequence.
fn escape_records(records: Vec<TraceRecord>) -> anyhow::Result<Vec<TraceRecord>> {
    records
        .into_iter()
        .map(|record| {
            let mut value = serde_json::to_value(&record)?;
            escape_strings(&mut value);
            Ok(serde_json::from_value(value)?)
        })
        .collect()
}

fn escape_strings(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::String(text)
            if text.chars().any(|c| c.is_control() && c != '\n' && c != '\t') =>
        {
            *text = escape_control(text);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(escape_strings),
        serde_json::Value::Object(map) => map.values_mut().for_each(escape_strings),
        _ => {}
    }
}

/// `text` with control characters other than newline and tab written as `\u{1b}`.
pub fn escape_control(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() && c != '\n' && c != '\t' {
            let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    out
}

/// The question id of `file` when it is a trace file (its first record the `start` of an
/// attempt), `None` otherwise (a result file, say).
fn trace_question(file: &Path) -> Option<String> {
    let text = fs::read_to_string(file).ok()?;
    let first = text.lines().find(|line| !line.trim().is_empty())?;
    match serde_json::from_str::<TraceRecord>(first).ok()?.event {
        TraceEvent::Start { question_id, .. } => Some(question_id),
        _ => None,
    }
}

/// Every trace file of `question_id` under `log/`, newest last.
fn find_question_trace(
    root: &Path,
    question_id: &str,
    options: &RenderOptions,
) -> anyhow::Result<Option<PathBuf>> {
    let file_name = format!("{}.jsonl", crate::fsutil::safe_name(question_id, '_'));
    let mut found = trace_files_named(root, &file_name, options)?;
    if found.is_empty() {
        anyhow::bail!(
            "no trace for question `{question_id}` under {}; pass a question id such as `conv-26:q1` or a result file",
            root.join("log").display()
        );
    }
    found.sort_by_key(|path| fs::metadata(path).and_then(|meta| meta.modified()).ok());
    Ok(found.pop())
}

/// `log/<dataset>/<file>/<sample>/<file_name>` paths that exist, filtered by the options.
fn trace_files_named(
    root: &Path,
    file_name: &str,
    options: &RenderOptions,
) -> anyhow::Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    for dataset in subdirectories(&root.join("log"))? {
        if options.dataset.as_deref().is_some_and(|wanted| !dataset.ends_with(wanted)) {
            continue;
        }
        for run in subdirectories(&dataset)? {
            if options.file.as_deref().is_some_and(|wanted| !run.ends_with(wanted)) {
                continue;
            }
            for sample in subdirectories(&run)? {
                let candidate = sample.join(file_name);
                if candidate.is_file() {
                    found.push(candidate);
                }
            }
        }
    }
    found.sort();
    Ok(found)
}

fn subdirectories(directory: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let entries = match fs::read_dir(directory) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => {
            return Err(error).with_context(|| format!("listing {}", directory.display()));
        }
    };
    let mut directories = Vec::new();
    for entry in entries {
        let path = entry.with_context(|| format!("listing {}", directory.display()))?.path();
        if path.is_dir() {
            directories.push(path);
        }
    }
    directories.sort();
    Ok(directories)
}

/// The trace of every question of a result file: the trace whose `start` event names this
/// result file (so runs with other models or tags are not mixed in).
fn traces_of_result_file(
    root: &Path,
    result_file: &Path,
    options: &RenderOptions,
) -> anyhow::Result<Vec<(String, Option<PathBuf>)>> {
    let text = fs::read_to_string(result_file)
        .with_context(|| format!("reading {}", result_file.display()))?;
    let result_name =
        result_file.file_name().map(|name| name.to_string_lossy().to_string()).unwrap_or_default();
    let mut traces = Vec::new();
    for line in text.lines().filter(|line| !line.trim().is_empty()) {
        let Ok(result) = serde_json::from_str::<ResultLine>(line) else { continue };
        let file_name = format!("{}.jsonl", crate::fsutil::safe_name(&result.question_id, '_'));
        let mut chosen = None;
        for path in trace_files_named(root, &file_name, options)? {
            let records = read_trace(&path).unwrap_or_default();
            let matches = records.iter().any(|record| {
                matches!(&record.event, TraceEvent::Start { result_file, .. }
                    if Path::new(result_file).file_name().is_some_and(|name| name.to_string_lossy() == result_name))
            });
            if matches {
                chosen = Some(path);
            }
        }
        traces.push((result.question_id, chosen));
    }
    if traces.is_empty() {
        anyhow::bail!("{} holds no result lines", result_file.display());
    }
    Ok(traces)
}
