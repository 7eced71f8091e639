//! LLM-as-judge: LoCoMo's lenient protocol for categories 1–4 and LongMemEval's per-type
//! judging, with an on-disk, resumable cache of verdicts.
//!
//! Not done here: the scores built from verdicts (`report`) and the F1 scorer (`f1`).

use serde::{Deserialize, Serialize};

/// One judge verdict on one answer in one judge run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    /// Judge run index (0-based; `--judge-runs N` gives runs 0..N).
    pub run: u32,
    /// Whether the judge accepted the answer.
    pub correct: bool,
    /// The judge's one-line reason.
    pub reason: String,
}
