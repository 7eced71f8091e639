//! Result files: loading them for resume, repairing them, and appending one line per question.
//!
//! A result file is append-only while a run is going: every finished question is one complete
//! line written with a single `write` call, so a killed process leaves at most one torn last line.
//! On the next start [`load_results`] reads the file, keeps the first successful line per
//! question, drops failed lines (those questions are answered again), unparsable lines and a torn
//! tail, and rewrites the file atomically if anything was dropped. The ids it returns are the
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
    /// Unparsable or duplicate lines removed, a torn last line included.
    pub dropped_invalid: usize,
}

/// Reads `path` (absent: nothing done), repairs it in place when needed, and reports which
/// questions are done.
pub fn load_results(path: &Path) -> anyhow::Result<ResumeState> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Ok(ResumeState::default());
        }
        Err(error) => return Err(error).with_context(|| format!("reading {}", path.display())),
    };
    let mut state = ResumeState::default();
    let mut kept = Vec::with_capacity(bytes.len());
    let complete_len = bytes.iter().rposition(|&byte| byte == b'\n').map_or(0, |index| index + 1);
    if complete_len < bytes.len() {
        // A torn last line: the process died in the middle of a write.
        state.dropped_invalid += 1;
    }
    for raw in bytes[..complete_len].split(|&byte| byte == b'\n') {
        if raw.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<ResultLine>(raw) {
            Ok(line) if line.status == Status::Ok => {
                if state.done.insert(line.question_id.clone()) {
                    kept.extend_from_slice(raw);
                    kept.push(b'\n');
                } else {
                    state.dropped_invalid += 1;
                }
            }
            Ok(_) => state.dropped_errors += 1,
            Err(_) => state.dropped_invalid += 1,
        }
    }
    if kept.len() != bytes.len() {
        crate::fsutil::write_atomic(path, &kept)?;
    }
    Ok(state)
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
        }
    }

    #[test]
    fn missing_file_means_nothing_done() -> anyhow::Result<()> {
        let directory = tempfile::tempdir()?;
        let state = load_results(&directory.path().join("absent.jsonl"))?;
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

        let state = load_results(&path)?;
        let done: Vec<&str> = state.done.iter().map(String::as_str).collect();
        assert_eq!(done, ["conv-1:q1", "conv-1:q3"]);
        assert_eq!(state.dropped_errors, 1);
        assert_eq!(state.dropped_invalid, 3);
        let text = fs::read_to_string(&path)?;
        assert_eq!(text.lines().count(), 2);
        assert!(text.ends_with('\n'));

        // A clean file is left untouched and reads the same.
        let again = load_results(&path)?;
        assert_eq!(again.done, state.done);
        assert_eq!((again.dropped_errors, again.dropped_invalid), (0, 0));
        assert_eq!(fs::read_to_string(&path)?, text);
        Ok(())
    }
}
