//! Result files: loading them for resume, repairing them, and appending one line per question.
//!
//! A result file is append-only while a run is going: every finished question is one complete
//! line written with a single `write` call, so a killed process leaves at most one torn last line.
//! On the next start [`load_results`] reads the file and keeps the first successful line per
//! question that still holds (same question text, memory, model and prompts; see
//! [`crate::results::Provenance`]). Nothing is deleted: failed lines and duplicates are dropped
//! (those questions are answered again, or were already), lines that cannot be parsed (a torn
//! tail, a foreign line) are moved to `<result>.rejected.jsonl`, and stale answers to
//! `<result>.superseded.jsonl`, with a warning naming the file. The ids it returns are the
//! questions the run skips: nothing is answered twice and nothing already answered is lost.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::Context;

use crate::results::{ResultLine, Status};

/// What a result file held when a run started.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ResumeState {
    /// Questions answered successfully; the run skips them.
    pub done: BTreeSet<String>,
    /// Failed lines removed (their questions are answered again).
    pub dropped_errors: usize,
    /// Duplicate successful lines removed.
    pub dropped_duplicates: usize,
    /// Unparsable lines (a torn last line included) moved to the `.rejected.jsonl` file.
    pub rejected: usize,
    /// Stale answers moved to the `.superseded.jsonl` file (their questions are answered again).
    pub superseded: usize,
}

/// `<result>.rejected.jsonl`: where unparsable lines of `path` go.
pub fn rejected_path(path: &Path) -> PathBuf {
    sibling(path, "rejected")
}

/// `<result>.superseded.jsonl`: where stale answers of `path` go.
pub fn superseded_path(path: &Path) -> PathBuf {
    sibling(path, "superseded")
}

fn sibling(path: &Path, kind: &str) -> PathBuf {
    let stem = path.file_stem().map(|stem| stem.to_string_lossy()).unwrap_or_default();
    path.with_file_name(format!("{stem}.{kind}.jsonl"))
}

/// Reads `path` (absent: nothing done), repairs it in place when needed, and reports which
/// questions are done. `stale` says why a successful line no longer holds (`None`: it does).
pub fn load_results(
    path: &Path,
    stale: impl Fn(&ResultLine) -> Option<&'static str>,
) -> anyhow::Result<ResumeState> {
    let mut bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Ok(ResumeState::default());
        }
        Err(error) => return Err(error).with_context(|| format!("reading {}", path.display())),
    };
    let original_len = bytes.len();
    if bytes.last().is_some_and(|&byte| byte != b'\n') {
        // A torn last line (the process died in the middle of a write): rejected below.
        bytes.push(b'\n');
    }
    let mut state = ResumeState::default();
    let (mut kept, mut rejected, mut superseded) = (Vec::new(), Vec::new(), Vec::new());
    for raw in bytes.split(|&byte| byte == b'\n') {
        if raw.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let target = match serde_json::from_slice::<ResultLine>(raw) {
            Ok(line) if line.status == Status::Ok => {
                if let Some(reason) = stale(&line) {
                    tracing::info!(question = %line.question_id, reason, "answering again");
                    state.superseded += 1;
                    &mut superseded
                } else if state.done.insert(line.question_id.clone()) {
                    &mut kept
                } else {
                    state.dropped_duplicates += 1;
                    continue;
                }
            }
            Ok(_) => {
                state.dropped_errors += 1;
                continue;
            }
            Err(_) => {
                state.rejected += 1;
                &mut rejected
            }
        };
        target.extend_from_slice(raw);
        target.push(b'\n');
    }
    move_lines(&rejected_path(path), &rejected, "lines that are not result lines")?;
    move_lines(&superseded_path(path), &superseded, "stale answers")?;
    if kept.len() != original_len {
        crate::fsutil::write_atomic(path, &kept)?;
    }
    Ok(state)
}

/// Appends `lines` (whole lines) to `target`, flushed to disk before the source is rewritten.
fn move_lines(target: &Path, lines: &[u8], what: &str) -> anyhow::Result<()> {
    if lines.is_empty() {
        return Ok(());
    }
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(target)
        .with_context(|| format!("opening {}", target.display()))?;
    file.write_all(lines)
        .and_then(|()| file.sync_all())
        .with_context(|| format!("appending to {}", target.display()))?;
    let count = lines.iter().filter(|&&byte| byte == b'\n').count();
    tracing::warn!(file = %target.display(), count, "moved {what} out of the result file");
    Ok(())
}

/// Appends result lines to their files, one complete line per write.
///
/// Concurrency: one `std::sync::Mutex` guards the open files; it is held only for the
/// `write_all` of one line (never across an `.await`), so concurrent questions never interleave
/// bytes within a line.
#[derive(Debug, Default)]
pub struct ResultWriter {
    files: Mutex<BTreeMap<PathBuf, File>>,
}

impl ResultWriter {
    /// A writer with no files open yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends `line` to `path` (created with its directory if absent) and flushes it.
    pub fn append(&self, path: &Path, line: &ResultLine) -> anyhow::Result<()> {
        let mut text = serde_json::to_string(line).context("serialising a result line")?;
        text.push('\n');
        let mut files = self.files.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !files.contains_key(path) {
            if let Some(directory) = path.parent() {
                fs::create_dir_all(directory)
                    .with_context(|| format!("creating {}", directory.display()))?;
            }
            let file = OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .with_context(|| format!("opening {}", path.display()))?;
            files.insert(path.to_path_buf(), file);
        }
        let file = files.get_mut(path).ok_or_else(|| {
            anyhow::anyhow!("result file vanished from the writer: {}", path.display())
        })?;
        file.write_all(text.as_bytes())
            .with_context(|| format!("appending to {}", path.display()))?;
        file.flush().with_context(|| format!("flushing {}", path.display()))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::Category;

    fn line(id: &str, status: Status) -> ResultLine {
        ResultLine {
            question_id: id.into(),
            sample: "conv-1".into(),
            question: "Where?".into(),
            answer: Some("Paris".into()),
            prediction: if status == Status::Ok { "Paris".into() } else { String::new() },
            category: Category::Locomo(4),
            evidence: vec!["D1:1".into()],
            prediction_context: vec!["D1:1".into()],
            status,
            error: (status == Status::Error).then(|| "model call failed".into()),
            rounds: 2,
            tool_calls: 1,
            prompt_tokens: 10,
            completion_tokens: 2,
            latency_ms: 5,
            path: None,
            provenance: Default::default(),
        }
    }

    #[test]
    fn missing_file_means_nothing_done() -> anyhow::Result<()> {
        let directory = tempfile::tempdir()?;
        let state = load_results(&directory.path().join("absent.jsonl"), |_| None)?;
        assert_eq!(state, ResumeState::default());
        Ok(())
    }

    #[test]
    fn repairs_torn_duplicate_and_failed_lines() -> anyhow::Result<()> {
        let directory = tempfile::tempdir()?;
        let path = directory.path().join("result").join("r.jsonl");
        let writer = ResultWriter::new();
        writer.append(&path, &line("conv-1:q1", Status::Ok))?;
        writer.append(&path, &line("conv-1:q2", Status::Error))?;
        writer.append(&path, &line("conv-1:q1", Status::Ok))?;
        writer.append(&path, &line("conv-1:q3", Status::Ok))?;
        let mut file = OpenOptions::new().append(true).open(&path)?;
        file.write_all(b"not json\n{\"question_id\":\"conv-1:q4\",\"sam")?;
        drop(file);

        let state = load_results(&path, |_| None)?;
        let done: Vec<&str> = state.done.iter().map(String::as_str).collect();
        assert_eq!(done, ["conv-1:q1", "conv-1:q3"]);
        assert_eq!(state.dropped_errors, 1);
        assert_eq!((state.dropped_duplicates, state.rejected), (1, 2));
        let text = fs::read_to_string(&path)?;
        assert_eq!(text.lines().count(), 2);
        assert!(text.ends_with('\n'));
        // The torn and the foreign line are kept aside, byte for byte.
        let rejected = fs::read_to_string(rejected_path(&path))?;
        assert_eq!(rejected, "not json\n{\"question_id\":\"conv-1:q4\",\"sam\n");
        assert!(rejected_path(&path).ends_with("r.rejected.jsonl"));

        // A clean file is left untouched and reads the same.
        let again = load_results(&path, |_| None)?;
        assert_eq!(again.done, state.done);
        assert_eq!((again.dropped_errors, again.rejected), (0, 0));
        assert_eq!(fs::read_to_string(&path)?, text);

        // A stale answer moves to the superseded file and is answered again.
        let stale = load_results(&path, |line| {
            (line.question_id == "conv-1:q3").then_some("the memory changed")
        })?;
        assert_eq!(stale.done.iter().collect::<Vec<_>>(), ["conv-1:q1"]);
        assert_eq!(stale.superseded, 1);
        assert!(fs::read_to_string(superseded_path(&path))?.contains("conv-1:q3"));
        assert_eq!(fs::read_to_string(&path)?.lines().count(), 1);
        Ok(())
    }
}
