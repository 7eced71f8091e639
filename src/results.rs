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
    /// Which path answered it (`loop`, `single`, or `escalated`: single, then the loop); lines
    /// written before paths existed have none (the loop answered them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<AnswerPath>,
    /// What the answer was made from; a rerun answers the question again when this no longer
    /// matches (lines of older versions have none and are kept).
    #[serde(default, flatten)]
    pub provenance: Provenance,
}

/// Which path answered a question (`--answer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AnswerPath {
    /// The tool loop.
    Loop,
    /// One retrieval pass and one model call.
    Single,
    /// The single pass found nothing, then the loop answered.
    Escalated,
}

impl AnswerPath {
    /// Its name in result lines.
    pub fn as_str(self) -> &'static str {
        match self {
            AnswerPath::Loop => "loop",
            AnswerPath::Single => "single",
            AnswerPath::Escalated => "escalated",
        }
    }
}

/// What a result line was answered from. Empty fields (lines written before they existed)
/// match anything.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provenance {
    /// Fingerprint of the memory (the sample's stage caches) the question was answered over.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub memory: String,
    /// Answering model id.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub model: String,
    /// Version of the answer-time prompts.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub prompts: String,
    /// Hash of the meta-memory rules the loop was given (empty: none). Compared exactly: a
    /// line without rules is stale for a run with rules, and the other way round.
    #[serde(default, rename = "meta_rules", skip_serializing_if = "String::is_empty")]
    pub rules: String,
}

impl Provenance {
    /// Why a line with this provenance and `question` text is stale for a run that would
    /// answer `current_question` with `current`; `None` when it still holds.
    pub fn stale_reason(
        &self,
        question: &str,
        current: &Provenance,
        current_question: &str,
    ) -> Option<&'static str> {
        let differs = |old: &str, new: &str| !old.is_empty() && old != new;
        if question != current_question {
            Some("the question text changed")
        } else if differs(&self.memory, &current.memory) {
            Some("the memory changed")
        } else if differs(&self.model, &current.model) {
            Some("the answering model changed")
        } else if differs(&self.prompts, &current.prompts) {
            Some("the answer prompts changed")
        } else if self.rules != current.rules {
            Some("the meta rules changed")
        } else {
            None
        }
    }
}

/// `result/<dataset>/<sample>_result_<model>_<file>.jsonl` under `root`.
///
/// `sample` and `file` must pass [`crate::names::check_name`]; the run checks every sample id
/// and tag before anything is written.
pub fn result_path(root: &Path, dataset: &str, sample: &str, model: &str, file: &str) -> PathBuf {
    root.join("result").join(dataset).join(format!("{sample}_result_{model}_{file}.jsonl"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_lines_name_what_changed_and_old_lines_match() {
        let now = Provenance {
            memory: "m2".into(),
            model: "x".into(),
            prompts: "p".into(),
            rules: String::new(),
        };
        let old = Provenance { memory: "m1".into(), ..now.clone() };
        assert_eq!(old.stale_reason("Q", &now, "Q"), Some("the memory changed"));
        assert_eq!(now.stale_reason("Q", &now, "Q?"), Some("the question text changed"));
        assert_eq!(Provenance::default().stale_reason("Q", &now, "Q"), None);
        let other_model = Provenance { model: "y".into(), ..now.clone() };
        assert_eq!(other_model.stale_reason("Q", &now, "Q"), Some("the answering model changed"));
        // Rules are compared exactly: none then some, and some then none, are both stale.
        let ruled = Provenance { rules: "r1".into(), ..now.clone() };
        assert_eq!(now.stale_reason("Q", &ruled, "Q"), Some("the meta rules changed"));
        assert_eq!(ruled.stale_reason("Q", &now, "Q"), Some("the meta rules changed"));
        assert_eq!(ruled.stale_reason("Q", &ruled, "Q"), None);
    }
}
