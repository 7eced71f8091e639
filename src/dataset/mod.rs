//! Dataset input types and loaders (LoCoMo, LongMemEval) into one internal model.
//!
//! No LLM, no async: this module parses files into [`Conversation`]s and reports malformed input
//! with the file, sample and field that is wrong. [`load`] is the entry point: it picks the
//! loader for a [`DatasetKind`], then applies the [`LoadOptions`] (sample selection, LongMemEval
//! question type, assistant turns). The loaders themselves live in `locomo.rs` and
//! `longmemeval.rs`; both read through the lenient raw layer in `json.rs`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

mod json;
pub(crate) use json::kind as json_kind;
mod locomo;
mod longmemeval;

pub use locomo::{load_locomo, parse_locomo, parse_locomo_date};
pub use longmemeval::{
    LongMemEvalType, load_longmemeval, parse_longmemeval, parse_longmemeval_date,
};

/// Which benchmark a conversation comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum DatasetKind {
    /// LoCoMo (`--data locomo`).
    Locomo,
    /// LongMemEval (`--data LM`).
    LongMemEval,
    /// A user's own conversation from the memory store (`mragent memory add`).
    Own,
}

impl DatasetKind {
    /// The name used in paths and on the command line (`locomo`, `LM`).
    pub fn as_str(self) -> &'static str {
        match self {
            DatasetKind::Locomo => "locomo",
            DatasetKind::LongMemEval => "LM",
            DatasetKind::Own => "own",
        }
    }

    /// The kind named `name` ([`DatasetKind::as_str`]'s names; `lm` too).
    pub fn from_name(name: &str) -> Result<Self, Error> {
        match name {
            "locomo" => Ok(DatasetKind::Locomo),
            "LM" | "lm" => Ok(DatasetKind::LongMemEval),
            "own" => Ok(DatasetKind::Own),
            other => Err(Error::UnknownKind(other.to_string())),
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
    /// The dataset fields of sessions left out because they hold no turn with text (e.g.
    /// `conversation.session_3`): they add nothing to the memory, and `build` and `run` count
    /// and list them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub empty_sessions: Vec<String>,
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

/// A dataset file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be read.
    #[error("reading {}: {error}", file.display())]
    Io {
        /// The file.
        file: PathBuf,
        /// The IO error (part of the message, so not also the error's `source`).
        error: std::io::Error,
    },
    /// The file is not valid JSON, or its top level is not an array of samples.
    #[error("{}: invalid json: {error}", file.display())]
    Json {
        /// The file.
        file: PathBuf,
        /// The parser's error (with line and column; part of the message, so not also the
        /// error's `source`).
        error: serde_json::Error,
    },
    /// A field of a sample is missing or has the wrong shape.
    #[error("{}: {}{field}: {problem}", file.display(), sample_prefix(sample.as_deref()))]
    Malformed {
        /// The file.
        file: PathBuf,
        /// The sample id, or `[<index>]` when the sample has no usable id.
        sample: Option<String>,
        /// Path of the field inside the sample, e.g. `conversation.session_3[4].dia_id`.
        field: String,
        /// What is wrong.
        problem: String,
    },
    /// `--sample` named an id that is not in the file.
    #[error("unknown sample {requested:?}; valid ids: {}", list_ids(valid))]
    UnknownSample {
        /// What was asked for.
        requested: String,
        /// The ids in the file, in file order.
        valid: Vec<String>,
    },
    /// `--ca` is not one of the six LongMemEval question-type indices.
    #[error(
        "unknown longmemeval question type index {0}; valid: 0 multi-session, 1 single-session-user, 2 temporal-reasoning, 3 knowledge-update, 4 single-session-assistant, 5 single-session-preference"
    )]
    UnknownQuestionType(u8),
    /// Own conversations are not loaded from a dataset file.
    #[error(
        "own conversations live in the memory store (`mragent memory add`), not in a dataset file"
    )]
    NotADatasetFile,
    /// A dataset name that is none of `locomo`, `LM`, `own`.
    #[error("unknown dataset {0:?}; valid: locomo, LM, own")]
    UnknownKind(String),
}

fn sample_prefix(sample: Option<&str>) -> String {
    sample.map(|sample| format!("sample {sample}: ")).unwrap_or_default()
}

/// Lists sample ids for an error message; long lists (LongMemEval has 500) are cut after 30.
fn list_ids(ids: &[String]) -> String {
    const SHOWN: usize = 30;
    if ids.len() <= SHOWN {
        ids.join(", ")
    } else {
        format!("{}, … ({} in all)", ids[..SHOWN].join(", "), ids.len())
    }
}

/// What to keep when loading a dataset.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// Keep only these samples (`--sample`); each entry is a full id (`conv-26`, a LongMemEval
    /// question id) or a LoCoMo number (`26`). Empty keeps all.
    pub samples: Vec<String>,
    /// LongMemEval only (`--ca`): keep only questions of this type. Ignored for LoCoMo, as in the
    /// reference, which runs every LoCoMo question.
    pub question_type: Option<LongMemEvalType>,
    /// LongMemEval only: drop assistant turns, as the reference does. Off by default (assistant
    /// turns carry the evidence of `single-session-assistant` questions). Dia_ids are assigned
    /// before dropping, so they are the same with and without this setting.
    pub drop_assistant_turns: bool,
}

/// The default input file of a dataset: `<root>/data/dataset_<name>.json` (`locomo`, `LM`).
pub fn default_path(root: &Path, kind: DatasetKind) -> PathBuf {
    root.join("data").join(format!("dataset_{}.json", kind.as_str()))
}

/// Loads a dataset file with the loader for `kind`, then applies `options`: sample selection
/// first (an unknown id is an error listing the valid ones), then the LongMemEval filters.
pub fn load(
    kind: DatasetKind,
    path: &Path,
    options: &LoadOptions,
) -> Result<Vec<Conversation>, Error> {
    let conversations = match kind {
        DatasetKind::Locomo => load_locomo(path)?,
        DatasetKind::LongMemEval => load_longmemeval(path)?,
        DatasetKind::Own => return Err(Error::NotADatasetFile),
    };
    let mut conversations = select_samples(conversations, &options.samples)?;
    if kind == DatasetKind::LongMemEval {
        if let Some(question_type) = options.question_type {
            conversations.retain(|conversation| {
                conversation.questions.iter().any(|question| {
                    question.category == Category::LongMemEval(question_type.as_str().to_string())
                })
            });
        }
        if options.drop_assistant_turns {
            for conversation in &mut conversations {
                drop_assistant_turns(conversation);
            }
        }
    }
    Ok(conversations)
}

/// Keeps the conversations named in `wanted` (file order is kept); empty `wanted` keeps all.
/// `26` and `conv-26` both select `conv-26`. An id that matches nothing is an error listing the
/// valid ids.
pub fn select_samples(
    conversations: Vec<Conversation>,
    wanted: &[String],
) -> Result<Vec<Conversation>, Error> {
    if wanted.is_empty() {
        return Ok(conversations);
    }
    let matches = |sample_id: &str, requested: &str| {
        let requested = requested.trim();
        sample_id == requested || sample_id.strip_prefix("conv-") == Some(requested)
    };
    if let Some(unknown) = wanted.iter().find(|requested| {
        !conversations.iter().any(|conversation| matches(&conversation.sample_id, requested))
    }) {
        return Err(Error::UnknownSample {
            requested: unknown.clone(),
            valid: conversations
                .iter()
                .map(|conversation| conversation.sample_id.clone())
                .collect(),
        });
    }
    Ok(conversations
        .into_iter()
        .filter(|conversation| {
            wanted.iter().any(|requested| matches(&conversation.sample_id, requested))
        })
        .collect())
}

/// Removes every turn whose speaker is not `user` (the reference's LongMemEval behaviour),
/// then sessions left without turns, and recomputes the speaker list.
fn drop_assistant_turns(conversation: &mut Conversation) {
    for session in &mut conversation.sessions {
        session.turns.retain(|turn| turn.speaker == longmemeval::USER);
    }
    conversation.sessions.retain(|session| !session.turns.is_empty());
    conversation.speakers.retain(|speaker| speaker == longmemeval::USER);
}

/// Speakers in order of first appearance.
fn speakers_of(sessions: &[Session]) -> Vec<String> {
    let mut speakers: Vec<String> = Vec::new();
    for turn in sessions.iter().flat_map(|session| &session.turns) {
        if !speakers.contains(&turn.speaker) {
            speakers.push(turn.speaker.clone());
        }
    }
    speakers
}

/// Reads a whole file, mapping the failure to [`Error::Io`].
fn read_file(path: &Path) -> Result<String, Error> {
    std::fs::read_to_string(path).map_err(|error| Error::Io { file: path.to_path_buf(), error })
}
