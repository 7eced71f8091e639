//! Dataset input types and loaders (LoCoMo, LongMemEval) into one internal model.
//!
//! No LLM, no async: this module parses files into [`Conversation`]s and reports malformed input
//! with the file, sample and field that is wrong.

use serde::{Deserialize, Serialize};

/// Which benchmark a conversation comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum DatasetKind {
    /// LoCoMo (`--data locomo`).
    Locomo,
    /// LongMemEval (`--data LM`).
    LongMemEval,
}

impl DatasetKind {
    /// The name used in paths and on the command line (`locomo`, `LM`).
    pub fn as_str(self) -> &'static str {
        match self {
            DatasetKind::Locomo => "locomo",
            DatasetKind::LongMemEval => "LM",
        }
    }
}

/// One conversation with its questions: a LoCoMo sample, or a LongMemEval question with its
/// haystack.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Conversation {
    /// Sample id (`conv-26`, or the LongMemEval question id).
    pub sample_id: String,
    /// Dataset.
    pub dataset: DatasetKind,
    /// Speaker names, in order of first appearance.
    pub speakers: Vec<String>,
    /// Sessions in chronological (file) order; only sessions with turns.
    pub sessions: Vec<Session>,
    /// Questions about this conversation.
    pub questions: Vec<Question>,
}

/// One dialogue session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Session {
    /// Session number N from `session_N` (1-based); its turns' dia_ids start with `D<N>:`.
    pub index: u32,
    /// The date string exactly as the dataset gives it, if any.
    pub date_time: Option<String>,
    /// The session's date parsed to `YYYY-MM-DD`, when the date string is understood.
    pub date: Option<chrono::NaiveDate>,
    /// Turns in order.
    pub turns: Vec<Turn>,
}

impl Session {
    /// The session id used across the project: `D<N>`.
    pub fn id(&self) -> String {
        format!("D{}", self.index)
    }
}

/// One dialogue turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Turn {
    /// `D<session>:<turn>`.
    pub dia_id: String,
    /// Speaker name (`user`/`assistant` for LongMemEval).
    pub speaker: String,
    /// Utterance text.
    pub text: String,
    /// LoCoMo image caption, if the turn shared an image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blip_caption: Option<String>,
    /// LongMemEval: this turn holds answer evidence.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub has_answer: bool,
}

impl Turn {
    /// The turn as the models see it: `speaker: text`, plus ` and shared <caption>` when the
    /// turn carried an image (the official LoCoMo prompt builder does the same).
    pub fn display(&self) -> String {
        match &self.blip_caption {
            Some(caption) => format!("{}: {} and shared {}", self.speaker, self.text, caption),
            None => format!("{}: {}", self.speaker, self.text),
        }
    }
}

/// A question category: LoCoMo's numbers (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop,
/// 5 adversarial) or LongMemEval's question-type strings.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Category {
    /// LoCoMo category number.
    Locomo(u8),
    /// LongMemEval question type.
    LongMemEval(String),
}

impl Category {
    /// Human name of the category.
    pub fn name(&self) -> &str {
        match self {
            Category::Locomo(1) => "multi-hop",
            Category::Locomo(2) => "temporal",
            Category::Locomo(3) => "open-domain",
            Category::Locomo(4) => "single-hop",
            Category::Locomo(5) => "adversarial",
            Category::Locomo(_) => "unknown",
            Category::LongMemEval(name) => name,
        }
    }
}

impl std::fmt::Display for Category {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Category::Locomo(n) => write!(f, "{n}"),
            Category::LongMemEval(name) => f.write_str(name),
        }
    }
}

/// One question with its gold data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Question {
    /// Stable id: `<sample_id>:q<n>` (1-based position) for LoCoMo, the question id for
    /// LongMemEval.
    pub id: String,
    /// Sample it belongs to.
    pub sample_id: String,
    /// Question text, unformatted.
    pub question: String,
    /// Gold answer as text (LoCoMo integers become their decimal text); `None` for LoCoMo
    /// category-5 items without an answer.
    pub answer: Option<String>,
    /// LoCoMo category 5: the distractor answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adversarial_answer: Option<String>,
    /// Category.
    pub category: Category,
    /// Gold evidence ids as given (LoCoMo dia_ids; may be malformed in the source data).
    pub evidence: Vec<String>,
    /// LongMemEval: when the question is asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question_date: Option<String>,
}
