//! Per-question traces: one JSONL file per question under `log/<dataset>/<file>/<sample>/`.
//!
//! Every line is one [`TraceRecord`]: milliseconds since the attempt started plus a
//! [`TraceEvent`]. A trace holds the formatted question, the retrieval steps (their model calls
//! with request, parsed reply, tokens and timing), every request of the tool loop, every response,
//! every tool call with its result, and the final outcome. Requests record the messages added since
//! the previous request (`messages_from` says where they start), which reconstructs every full
//! request exactly without storing the growing transcript eight times; the first request also
//! carries the full tool specs.
//!
//! Lines are appended as they happen, so a killed run still leaves a readable trace. A question
//! answered again (after a failure or an interruption) appends a new attempt to the same file.
//! Trace writing never fails a question: an IO error is logged once and tracing stops.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::agent::counts::Counts;
use crate::dataset::Category;
use crate::llm::{CallLog, ChatMessage, ToolSpec, Usage};
use crate::results::Status;

/// One line of a trace file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceRecord {
    /// Milliseconds since the attempt's `start` event.
    pub t_ms: u64,
    /// What happened.
    #[serde(flatten)]
    pub event: TraceEvent,
}

/// What a trace line records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum TraceEvent {
    /// An attempt at a question begins.
    Start {
        /// Question id.
        question_id: String,
        /// Sample id.
        sample: String,
        /// Dataset name.
        dataset: String,
        /// Model id used for answering.
        model: String,
        /// Run tag (`--file`).
        file: String,
        /// Result file, relative to the project root.
        result_file: String,
        /// Category.
        category: Category,
        /// Original question.
        question: String,
        /// The question as the model sees it (category instructions added).
        formatted_question: String,
        /// Wall-clock start, RFC 3339.
        started_at: String,
    },
    /// A model call of the retrieval phase (question keywords, re-rank, tag scoring).
    Llm {
        /// What the call was for.
        purpose: String,
        /// The full request.
        messages: Vec<ChatMessage>,
        /// The parsed JSON reply, when the call succeeded.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        value: Option<Value>,
        /// Why the call failed, when it did.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        /// Requests made (re-asks included).
        attempts: u32,
        /// How each request that got a reply was obtained (the first ask, then every re-ask):
        /// attempts, retries with their reasons, hedges. Left out when every request went
        /// through at its first attempt without a hedge.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        calls: Vec<CallLog>,
        /// Tokens.
        usage: Usage,
        /// Duration.
        ms: u64,
    },
    /// A retrieval step's result (keywords, route, candidates, fallbacks).
    Retrieval {
        /// Step name.
        step: String,
        /// Step details.
        detail: Value,
    },
    /// A step fell back to a deterministic substitute for the model's answer (question
    /// keywords from the question's words, similarity order for the re-rank, the first tags
    /// for tag scoring). Counted per question and per run.
    Fallback {
        /// The step (`question_keywords`, `rerank`, `tag_scores <key>`).
        step: String,
        /// Why.
        reason: String,
    },
    /// A model call that was not needed and not made (tag scoring of a key whose tags that lead
    /// to unseen events are few enough to show whole). Counted per question and per run.
    Skipped {
        /// The step (`tag_scores <key>`).
        step: String,
        /// Why.
        reason: String,
    },
    /// A model reply that was not accepted, kept so that the user can see what the model said.
    Rejected {
        /// The step that asked (`question_keywords`, `rerank`, `tag_scores <key>`, `answer`).
        step: String,
        /// Why it was rejected.
        reason: String,
        /// The reply, cut to [`REJECTED_REPLY_CHARS`] characters, control characters escaped.
        reply: String,
    },
    /// A request of the tool loop.
    Request {
        /// 1-based request number.
        round: u32,
        /// Index of the first message in `messages` within the full transcript.
        messages_from: usize,
        /// Messages added since the previous request (all of them for the first).
        messages: Vec<ChatMessage>,
        /// Tool specs; only on the first request (later requests offer the same tools).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tools: Vec<ToolSpec>,
        /// `auto`, `none`, ...
        tool_choice: String,
        /// Whether an answer schema was sent as `response_format`.
        structured: bool,
    },
    /// The reply to a request of the tool loop.
    Response {
        /// The request it answers.
        round: u32,
        /// The assistant message, when the call succeeded.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<ChatMessage>,
        /// Provider finish reason.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        finish_reason: Option<String>,
        /// Why the call failed, when it did.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        /// How the reply was obtained: attempts, retries with their reasons, hedges (for a
        /// failed call, the attempts made). Left out for a first-attempt reply without a hedge.
        #[serde(default, skip_serializing_if = "is_plain_call")]
        calls: CallLog,
        /// Tokens.
        usage: Usage,
        /// Duration.
        ms: u64,
    },
    /// One executed tool call.
    ToolCall {
        /// Call id.
        call_id: String,
        /// Tool name.
        name: String,
        /// Arguments as executed.
        arguments: Value,
        /// The tool message text.
        result: String,
        /// Duration.
        ms: u64,
    },
    /// The attempt's outcome (also written to the result file).
    Finish {
        /// Outcome.
        status: Status,
        /// Answer text.
        prediction: String,
        /// Supporting turn ids.
        prediction_context: Vec<String>,
        /// Error text.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        /// Model rounds.
        rounds: u32,
        /// Tool calls.
        tool_calls: u32,
        /// Tokens of every call for the question.
        usage: Usage,
        /// Wall time.
        latency_ms: u64,
        /// Which path answered (`loop`, `single`, `escalated`); absent in older traces.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        path: Option<crate::results::AnswerPath>,
        /// What the question counted: fallbacks, rejected replies, skipped calls, retries and
        /// hedges (see [`Counts`]).
        #[serde(flatten)]
        counts: Counts,
    },
}

/// Whether a call went through at its first attempt without a hedge (nothing worth a trace
/// field).
pub fn is_plain_call(calls: &CallLog) -> bool {
    calls.attempts <= 1 && calls.retries.is_empty() && calls.hedges == 0
}

/// The [`CallLog`] of a call that failed: the attempts the error reports.
pub fn failed_call(error: &crate::llm::Error) -> CallLog {
    CallLog { attempts: error.attempts(), ..CallLog::default() }
}

/// Longest rejected reply kept in a trace, in characters.
pub const REJECTED_REPLY_CHARS: usize = 2000;

/// A rejected reply as the trace keeps it: at most [`REJECTED_REPLY_CHARS`] characters (`…`
/// marks a cut), control characters other than newline and tab escaped (`\u{1b}`).
pub fn rejected_excerpt(reply: &str) -> String {
    let mut kept = String::new();
    for (count, character) in reply.chars().enumerate() {
        if count == REJECTED_REPLY_CHARS {
            kept.push('…');
            break;
        }
        if character.is_control() && character != '\n' && character != '\t' {
            kept.extend(character.escape_unicode());
        } else {
            kept.push(character);
        }
    }
    kept
}

/// `log/<dataset>/<file>/<sample>/<question>.jsonl` under `root`.
pub fn trace_path(
    root: &Path,
    dataset: &str,
    file: &str,
    sample: &str,
    question_id: &str,
) -> PathBuf {
    root.join("log")
        .join(dataset)
        .join(file)
        .join(crate::fsutil::safe_name(sample, '_'))
        .join(format!("{}.jsonl", crate::fsutil::safe_name(question_id, '_')))
}

/// Appends trace records for one attempt at one question.
///
/// Work that runs concurrently within a question (re-rank beside tag scoring, the tool calls of
/// one round) records into a [`TraceWriter::branch`] each; the branches are merged back in call
/// order, so the file keeps a deterministic order while every record keeps its own time.
#[derive(Debug)]
pub struct TraceWriter {
    file: Option<File>,
    /// Set on a branch: records wait here until [`TraceWriter::merge`].
    buffer: Option<Vec<TraceRecord>>,
    /// What the records written count ([`TraceEvent::Fallback`], [`TraceEvent::Rejected`],
    /// [`TraceEvent::Skipped`], and the retries and hedges of model calls), counted even when
    /// nothing is recorded.
    counts: Counts,
    path: PathBuf,
    started: Instant,
}

impl TraceWriter {
    /// Opens (appending) the trace at `path`. A torn last line (a run killed mid-write) is cut
    /// first, so the new attempt starts on a line of its own instead of being glued to the torn
    /// one. On failure the writer is inert and the error is logged.
    pub fn open(path: PathBuf) -> Self {
        let file = path
            .parent()
            .map_or(Ok(()), fs::create_dir_all)
            .and_then(|()| OpenOptions::new().create(true).read(true).append(true).open(&path))
            .and_then(|file| cut_torn_tail(&file).map(|()| file));
        let file = match file {
            Ok(file) => Some(file),
            Err(error) => {
                tracing::warn!(path = %path.display(), error = %error, "cannot write the question trace");
                None
            }
        };
        Self { file, buffer: None, counts: Counts::default(), path, started: Instant::now() }
    }

    /// A writer that records nothing.
    pub fn disabled() -> Self {
        Self {
            file: None,
            buffer: None,
            counts: Counts::default(),
            path: PathBuf::new(),
            started: Instant::now(),
        }
    }

    /// A writer for work running concurrently with other branches: it keeps its records (timed
    /// against the same start) until [`TraceWriter::merge`]. A branch of a writer that records
    /// nothing records nothing.
    pub fn branch(&self) -> Self {
        let recording = self.file.is_some() || self.buffer.is_some();
        Self {
            file: None,
            buffer: recording.then(Vec::new),
            counts: Counts::default(),
            path: self.path.clone(),
            started: self.started,
        }
    }

    /// Appends the records of a finished branch, in the order the branch made them.
    pub fn merge(&mut self, branch: TraceWriter) {
        match branch.buffer {
            Some(records) => records.into_iter().for_each(|record| self.write(record)),
            None => self.counts += branch.counts,
        }
    }

    /// What the records so far count (branches count once merged).
    pub fn counts(&self) -> Counts {
        self.counts
    }

    /// Where the trace goes.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Milliseconds since the writer was opened.
    pub fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Appends one event as one line.
    pub fn record(&mut self, event: TraceEvent) {
        let t_ms = self.elapsed_ms();
        self.write(TraceRecord { t_ms, event });
    }

    fn write(&mut self, record: TraceRecord) {
        match &record.event {
            TraceEvent::Fallback { .. } => self.counts.fallbacks += 1,
            TraceEvent::Rejected { .. } => self.counts.rejected += 1,
            TraceEvent::Skipped { .. } => self.counts.skipped += 1,
            TraceEvent::Llm { calls, .. } => {
                calls.iter().for_each(|call| self.counts.count_calls(call));
            }
            TraceEvent::Response { calls, .. } => self.counts.count_calls(calls),
            _ => {}
        }
        if let Some(buffer) = &mut self.buffer {
            buffer.push(record);
            return;
        }
        let Some(file) = &mut self.file else { return };
        let written =
            serde_json::to_string(&record).map_err(std::io::Error::other).and_then(|mut text| {
                text.push('\n');
                file.write_all(text.as_bytes())
            });
        if let Err(error) = written {
            tracing::warn!(path = %self.path.display(), error = %error, "trace write failed; tracing stops");
            self.file = None;
        }
    }
}

/// Cuts `file` back to its last complete line (ending in `\n`); a file that ends in one, or is
/// empty, is left alone.
fn cut_torn_tail(file: &File) -> std::io::Result<()> {
    use std::io::{Read as _, Seek as _, SeekFrom};
    let length = file.metadata()?.len();
    if length == 0 {
        return Ok(());
    }
    let mut reader = file;
    let mut last = [0u8; 1];
    reader.seek(SeekFrom::End(-1))?;
    reader.read_exact(&mut last)?;
    if last[0] == b'\n' {
        return Ok(());
    }
    // Find the last newline, reading backwards in blocks.
    let mut end = length;
    let mut block = vec![0u8; 8192];
    while end > 0 {
        let start = end.saturating_sub(block.len() as u64);
        let size = (end - start) as usize;
        reader.seek(SeekFrom::Start(start))?;
        reader.read_exact(&mut block[..size])?;
        if let Some(position) = block[..size].iter().rposition(|byte| *byte == b'\n') {
            tracing::warn!(
                bytes = length - (start + position as u64 + 1),
                "cutting a torn trace line"
            );
            return file.set_len(start + position as u64 + 1);
        }
        end = start;
    }
    file.set_len(0)
}

/// Reads a trace file; a torn last line is skipped.
pub fn read_trace(path: &Path) -> anyhow::Result<Vec<TraceRecord>> {
    use anyhow::Context;
    let text = fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut records = Vec::new();
    let lines: Vec<&str> = text.lines().collect();
    for (index, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<TraceRecord>(line) {
            Ok(record) => records.push(record),
            Err(_) if index + 1 == lines.len() => {}
            Err(error) => {
                return Err(error)
                    .with_context(|| format!("{}: line {}", path.display(), index + 1));
            }
        }
    }
    Ok(records)
}

#[cfg(test)]
mod tests;
