//! How questions are answered (`--answer`): the mode and the gate's settings. A leaf module, so
//! that the run's settings can carry them without depending on the single path itself
//! (`agent::single`).

use serde::{Deserialize, Serialize};

use crate::retrieval::gate::{ContextSize, GATE_THRESHOLD, SINGLE_CONTEXT};

/// How questions are answered (`--answer`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum AnswerMode {
    /// The tool loop, as MRAgent answers (the default of `run`).
    #[default]
    Loop,
    /// One retrieval pass and one model call.
    Single,
    /// The single path when the retrieval is sure, else the loop.
    Adaptive,
}

impl AnswerMode {
    /// The name on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            AnswerMode::Loop => "loop",
            AnswerMode::Single => "single",
            AnswerMode::Adaptive => "adaptive",
        }
    }
}

/// The answer mode and the gate's settings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct AnswerGate {
    /// The mode.
    pub mode: AnswerMode,
    /// `adaptive`: the confidence at or above which a question takes the single path.
    pub threshold: f64,
    /// What the single-pass context shows.
    pub context: ContextSize,
}

impl Default for AnswerGate {
    fn default() -> Self {
        Self { mode: AnswerMode::Loop, threshold: GATE_THRESHOLD, context: SINGLE_CONTEXT }
    }
}

impl AnswerGate {
    /// The default gate in `mode`.
    pub fn with_mode(mode: AnswerMode) -> Self {
        Self { mode, ..Self::default() }
    }
}

/// The answer mode of own memory (`ask`, `serve`, `mcp`) when none is given: `adaptive`. Held
/// out on LoCoMo the questions its gate sends down the single path hold their evidence as often
/// as the loop's reach does, for 0.86–0.88× the loop's prompt tokens and 0.83–0.86× its wall,
/// and a single pass that finds nothing still goes on to the loop (docs/answering.md). `run`
/// keeps `loop`.
pub const OWN_ANSWER_MODE: AnswerMode = AnswerMode::Adaptive;
