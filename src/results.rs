//! The result-line format shared by `run` (which writes it) and `eval` (which reads it).
//!
//! One JSON object per question in `result/<dataset>/<sample>_result_<model>_<file>.jsonl`.
//! This module owns the format and its path so that `eval` never imports `agent`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::dataset::Category;

/// Outcome of answering one question.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Answered (the answer may still say "no information available").
    Ok,
    /// Failed after retries; `error` says why. A rerun answers it again.
    Error,
}

/// One answered (or failed) question.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResultLine {
    /// Stable question id (see [`crate::dataset::Question::id`]).
    pub question_id: String,
    /// Sample id.
    pub sample: String,
    /// Original, unformatted question.
    pub question: String,
    /// Gold answer (null for LoCoMo category 5).
    pub answer: Option<String>,
    /// The model's answer (empty on error).
    pub prediction: String,
    /// Category.
    pub category: Category,
    /// Gold evidence ids.
    pub evidence: Vec<String>,
    /// Supporting dia_ids the model cited.
    pub prediction_context: Vec<String>,
    /// Outcome.
    pub status: Status,
    /// Error text when `status` is `error`.
    #[serde(default)]
    pub error: Option<String>,
    /// Model rounds used.
    #[serde(default)]
    pub rounds: u32,
    /// Tool calls made.
    #[serde(default)]
    pub tool_calls: u32,
    /// Prompt tokens over every call for this question.
    #[serde(default)]
    pub prompt_tokens: u64,
    /// Completion tokens over every call for this question.
    #[serde(default)]
    pub completion_tokens: u64,
    /// Wall time in milliseconds.
    #[serde(default)]
    pub latency_ms: u64,
}

/// `result/<dataset>/<sample>_result_<model>_<file>.jsonl` under `root`.
pub fn result_path(root: &Path, dataset: &str, sample: &str, model: &str, file: &str) -> PathBuf {
    root.join("result").join(dataset).join(format!("{sample}_result_{model}_{file}.jsonl"))
}
