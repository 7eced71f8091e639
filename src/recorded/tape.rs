//! The recorded calls of `run`, `replay`, `eval` and `verify`: where each run's call store is,
//! opening it in the right mode, and comparing a replay's result lines with the run's.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use serde::Serialize;

use super::RunFiles;
use crate::llm::tape::{CallStore, NewCall, Tape, TapeMode, TapeTotals};
use crate::settings::RunJob;

/// The tape of a run: its own store, recording; for `replay`, a copy of the recorded run's
/// store (made once, then resumed) played back.
pub fn open_run_tape(job: &RunJob) -> anyhow::Result<Arc<Tape>> {
    let path = RunFiles::of_run(job).calls();
    let Some(replay) = &job.replay else { return recording(&path) };
    let source = RunFiles::of_replayed(job, &replay.from).calls();
    if !source.is_file() {
        anyhow::bail!(
            "run {} has no recorded calls ({} is missing): only runs made by this version record their calls",
            replay.from,
            source.display()
        );
    }
    if !path.is_file() {
        copy_call_store(&source, &path)?;
    }
    let store = CallStore::open(&path)?;
    Ok(Tape::new(Arc::new(store), TapeMode::Replay { fill: replay.fill }))
}

/// A tape recording into the call store at `path` (a run's, a judge's, a comparison's).
pub fn recording(path: &Path) -> anyhow::Result<Arc<Tape>> {
    Ok(Tape::new(Arc::new(CallStore::open(path)?), TapeMode::Record))
}

/// Starts the new call store `target` with the calls recorded in `sources` (those that exist,
/// only read): a comparison's judge tape lends the verdicts `eval` already paid for. A store
/// that exists already is left as it is. The store is filled under another name and renamed
/// into place, so a failed or killed lending leaves no half-lent store that would never be
/// lent again; a source that cannot be read lends nothing (it is a memo: its verdicts are
/// asked afresh) and is logged.
pub fn lend_calls(sources: &[PathBuf], target: &Path) -> anyhow::Result<()> {
    if target.exists() {
        return Ok(());
    }
    let parent = target.parent().context("a call store path has a folder")?;
    std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    let lending = tempfile::Builder::new()
        .prefix(".lending-")
        .suffix(".sqlite")
        .tempfile_in(parent)
        .with_context(|| format!("creating a file in {}", parent.display()))?;
    let store = CallStore::open(lending.path())?;
    for source in sources.iter().filter(|source| source.is_file()) {
        let calls = match CallStore::open_read_only(source).and_then(|store| store.calls()) {
            Ok(calls) => calls,
            Err(error) => {
                tracing::warn!(source = %source.display(), error = %error, "not lending the calls of an unreadable store");
                continue;
            }
        };
        let lent: Vec<NewCall<'_>> = calls
            .iter()
            .map(|call| NewCall {
                key: &call.key,
                kind: &call.kind,
                model: &call.model,
                context: &call.context,
                request: &call.request,
                reply: &call.reply,
            })
            .collect();
        store.put_all(&lent)?;
    }
    store.checkpoint()?;
    drop(store);
    // Two comparisons starting at once: the first store in place wins, the other is dropped.
    match lending.persist_noclobber(target) {
        Ok(_) => Ok(()),
        Err(error) if error.error.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(error) => Err(error.error).with_context(|| format!("writing {}", target.display())),
    }
}

/// Copies a call store whole (its write-ahead log folded in first), through a temporary file.
pub fn copy_call_store(source: &Path, target: &Path) -> anyhow::Result<()> {
    CallStore::open(source)?.checkpoint()?;
    let parent = target.parent().context("a call store path has a folder")?;
    std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    let temporary = tempfile::NamedTempFile::new_in(parent)
        .with_context(|| format!("creating a file in {}", parent.display()))?;
    std::fs::copy(source, temporary.path())
        .with_context(|| format!("copying {}", source.display()))?;
    temporary.persist(target).with_context(|| format!("writing {}", target.display()))?;
    Ok(())
}

/// What the manifest says of a run's recorded calls.
#[derive(Debug, Clone, Serialize)]
pub struct CallsRecord {
    /// The store file.
    pub file: PathBuf,
    /// Distinct calls in it.
    pub calls: u64,
    /// Distinct bodies (messages, tool lists) they share.
    pub bodies: u64,
    /// Its size on disk.
    pub bytes: u64,
    /// What this run did with it.
    pub totals: TapeTotals,
}

impl CallsRecord {
    /// The record of `tape` now.
    pub fn of(tape: &Tape) -> anyhow::Result<Self> {
        let size = tape.store().size()?;
        Ok(Self {
            file: tape.store().path().to_path_buf(),
            calls: size.calls,
            bodies: size.bodies,
            bytes: size.file_bytes,
            totals: tape.totals(),
        })
    }
}

/// How the result lines of two runs compare, question by question.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LineComparison {
    /// Questions with a line in both runs whose lines are equal (latency aside).
    pub identical: usize,
    /// Questions compared.
    pub compared: usize,
    /// The first difference, in sample and question order: file, line number and what differs.
    pub first_mismatch: Option<String>,
    /// Lines that differ.
    pub differing: usize,
}

/// The one field of a result line that measures the host rather than the run.
const MEASURED: &str = "latency_ms";

/// Compares the result files `expected` and `actual` of each sample, line by question id, every
/// field but [`MEASURED`].
pub fn compare_results(pairs: &[(PathBuf, PathBuf)]) -> anyhow::Result<LineComparison> {
    let mut comparison = LineComparison::default();
    for (expected, actual) in pairs {
        let (want, want_twice) = read_lines(expected)?;
        let (have, have_twice) = read_lines(actual)?;
        if let Some(twice) = want_twice.or(have_twice) {
            comparison.differing += 1;
            comparison.first_mismatch.get_or_insert(twice);
        }
        for (id, (number, line)) in &want {
            comparison.compared += 1;
            let problem = match have.get(id) {
                None => Some(format!("question {id} has no line in {}", actual.display())),
                Some((_, other)) if other == line => None,
                Some((_, other)) => Some(format!(
                    "question {id}: {} line {number} differs from the replay in {}",
                    expected.display(),
                    differing_fields(line, other)
                )),
            };
            match problem {
                None => comparison.identical += 1,
                Some(problem) => {
                    comparison.differing += 1;
                    comparison.first_mismatch.get_or_insert(problem);
                }
            }
        }
        if let Some(extra) = have.keys().find(|id| !want.contains_key(*id)) {
            comparison.differing += 1;
            comparison.first_mismatch.get_or_insert(format!(
                "question {extra} has a line in {} but none in {}",
                actual.display(),
                expected.display()
            ));
        }
    }
    Ok(comparison)
}

/// The lines of a result file by question id (with their 1-based line numbers), without
/// [`MEASURED`]; a missing file has none. The second: a question with two lines, named.
type Lines = (BTreeMap<String, (usize, serde_json::Value)>, Option<String>);

fn read_lines(path: &Path) -> anyhow::Result<Lines> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Ok((BTreeMap::new(), None));
        }
        Err(error) => return Err(error).with_context(|| format!("reading {}", path.display())),
    };
    let (mut lines, mut twice) = (BTreeMap::new(), None);
    for (index, line) in text.lines().enumerate().filter(|(_, line)| !line.trim().is_empty()) {
        let mut value: serde_json::Value = serde_json::from_str(line)
            .with_context(|| format!("{} line {}", path.display(), index + 1))?;
        if let Some(object) = value.as_object_mut() {
            object.remove(MEASURED);
        }
        let id = value["question_id"].as_str().unwrap_or_default().to_string();
        if let Some((first, _)) = lines.insert(id.clone(), (index + 1, value)) {
            twice.get_or_insert(format!(
                "question {id}: {} has two lines for it ({first} and {})",
                path.display(),
                index + 1
            ));
        }
    }
    Ok((lines, twice))
}

/// The names of the top-level fields in which two records (result lines, trace lines) differ;
/// when none does, their texts differ by the order of the fields.
pub fn differing_fields(a: &serde_json::Value, b: &serde_json::Value) -> String {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return "its shape".to_string();
    };
    let mut names: Vec<&str> = a.keys().chain(b.keys()).map(String::as_str).collect();
    names.sort_unstable();
    names.dedup();
    let differing: Vec<&str> =
        names.into_iter().filter(|name| a.get(*name) != b.get(*name)).collect();
    if differing.is_empty() {
        return "the order of its fields".to_string();
    }
    format!("field(s) {}", differing.join(", "))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn store_with(path: &Path, key: &str) {
        let request = serde_json::json!({"model": "m", "messages": [key]});
        let call =
            NewCall { key, kind: "chat", model: "m", context: "", request: &request, reply: b"{}" };
        CallStore::open(path).unwrap().put(&call).unwrap();
    }

    #[test]
    fn lending_skips_an_unreadable_store_and_leaves_no_half_lent_one() {
        let directory = tempfile::tempdir().unwrap();
        let (good, bad) =
            (directory.path().join("good.sqlite"), directory.path().join("bad.sqlite"));
        store_with(&good, "k1");
        std::fs::write(&bad, b"not a call store").unwrap();
        let target = directory.path().join("record/t_vs_u.judge.sqlite");
        lend_calls(&[bad.clone(), good.clone()], &target).unwrap();
        let lent = CallStore::open_read_only(&target).unwrap().calls().unwrap();
        assert_eq!(lent.iter().map(|call| call.key.as_str()).collect::<Vec<_>>(), ["k1"]);
        // Only the store itself is left in its folder: no half-lent file under another name.
        let names: Vec<String> = std::fs::read_dir(target.parent().unwrap())
            .unwrap()
            .flatten()
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .filter(|name| !name.ends_with("-wal") && !name.ends_with("-shm"))
            .collect();
        assert_eq!(names, ["t_vs_u.judge.sqlite"]);
        // A lending that fails (its folder cannot be made) leaves no store to skip next time.
        let blocked = directory.path().join("file");
        std::fs::write(&blocked, b"").unwrap();
        assert!(lend_calls(&[good], &blocked.join("x.sqlite")).is_err());
        assert!(!blocked.join("x.sqlite").exists());
    }
}
