//! Judge prompts: the LoCoMo protocols, LongMemEval's per-type prompts, a user-supplied prompt
//! file, how replies to it are read, and the verdict schema.

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::json;
use sha2::{Digest as _, Sha256};

use super::JudgeSettings;
use crate::dataset::{Category, DatasetKind};
use crate::llm::JsonSchemaSpec;
use crate::llm::structured::extract_json;
use crate::prompts::{self, Prompt};

/// Which judge protocol to follow. LongMemEval data is always judged by its per-type rules
/// ([`JudgeProtocol::LongMemEval`]); on LoCoMo every protocol judges categories 1–4.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JudgeProtocol {
    /// The published LoCoMo J protocol (Mem0's paper and the systems that compare with it):
    /// categories 1–4, a generous CORRECT/WRONG grade with a one-sentence reason.
    #[default]
    Mem0,
    /// Ours: categories 1–4, CORRECT only when the answer commits to the gold fact at the gold
    /// answer's precision, with nothing wrong added.
    Strict,
    /// LongMemEval's judging: on LongMemEval data its per-type rules (the only protocol that
    /// applies there); on LoCoMo its standard rule (`judge_longmemeval`: CORRECT when the
    /// response contains the correct answer or something equivalent) on categories 1–4.
    #[serde(rename = "longmemeval")]
    LongMemEval,
}

/// A judge protocol that does not apply to the dataset.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "judge protocol {protocol} does not apply to {dataset} data: {dataset} is judged by {allowed}"
)]
pub struct ProtocolMismatch {
    /// The protocol asked for.
    pub protocol: &'static str,
    /// The dataset's name (`LoCoMo`, `LongMemEval`).
    pub dataset: &'static str,
    /// What the dataset accepts instead.
    pub allowed: &'static str,
}

impl JudgeProtocol {
    /// The name used on the command line and in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            JudgeProtocol::Mem0 => "mem0",
            JudgeProtocol::Strict => "strict",
            JudgeProtocol::LongMemEval => "longmemeval",
        }
    }

    /// Whether the protocol applies to `dataset`: LoCoMo takes every protocol, LongMemEval only
    /// its own per-type rules (`longmemeval`), own conversations none (nothing is judged).
    pub fn check_dataset(self, dataset: DatasetKind) -> Result<(), ProtocolMismatch> {
        let allowed = match (dataset, self) {
            (DatasetKind::Locomo, _) | (DatasetKind::LongMemEval, JudgeProtocol::LongMemEval) => {
                return Ok(());
            }
            (DatasetKind::LongMemEval, _) => "its per-type rules (--judge-protocol longmemeval)",
            (DatasetKind::Own, _) => "no judge protocol (own conversations have no gold answers)",
        };
        let dataset = match dataset {
            DatasetKind::Locomo => "LoCoMo",
            DatasetKind::LongMemEval => "LongMemEval",
            DatasetKind::Own => "own-conversation",
        };
        Err(ProtocolMismatch { protocol: self.as_str(), dataset, allowed })
    }

    /// The protocol used when none is named: `longmemeval` for LongMemEval data, else `mem0`.
    pub fn default_for(dataset: DatasetKind) -> Self {
        match dataset {
            DatasetKind::LongMemEval => JudgeProtocol::LongMemEval,
            DatasetKind::Locomo | DatasetKind::Own => JudgeProtocol::Mem0,
        }
    }
}

/// A judge prompt read from a file (`--judge-prompt`). Its slots are `{{question}}`,
/// `{{gold}}` and `{{prediction}}`; every one must appear and no other `{{…}}` slot may.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CustomPrompt {
    /// `custom:<file name>`, as recorded in judgements.
    pub name: String,
    /// The template text.
    pub text: String,
}

/// A custom judge prompt that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CustomPromptError {
    /// The file could not be read.
    #[error("reading the judge prompt {}: {error}", path.display())]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// The IO error (part of the message, so not also the error's `source`).
        error: std::io::Error,
    },
    /// A required slot is missing or an unknown one is present.
    #[error("judge prompt {}: {problem} (slots: {{{{question}}}}, {{{{gold}}}}, {{{{prediction}}}})", path.display())]
    Slots {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong.
        problem: String,
    },
}

/// The slots a judge prompt fills.
pub const JUDGE_SLOTS: [&str; 3] = ["question", "gold", "prediction"];

impl CustomPrompt {
    /// Read a prompt file and check its slots.
    pub fn load(path: &Path) -> Result<Self, CustomPromptError> {
        let text = std::fs::read_to_string(path)
            .map_err(|error| CustomPromptError::Io { path: path.to_path_buf(), error })?;
        let found = crate::prompts::slots_in(&text);
        let missing: Vec<&str> =
            JUDGE_SLOTS.iter().copied().filter(|slot| !found.contains(slot)).collect();
        let unknown: Vec<&str> =
            found.iter().copied().filter(|slot| !JUDGE_SLOTS.contains(slot)).collect();
        let problem = match (missing.is_empty(), unknown.is_empty()) {
            (true, true) => None,
            (false, _) => Some(format!("missing slot(s) {}", braces(&missing))),
            (true, false) => Some(format!("unknown slot(s) {}", braces(&unknown))),
        };
        if let Some(problem) = problem {
            return Err(CustomPromptError::Slots { path: path.to_path_buf(), problem });
        }
        let file = path
            .file_name()
            .map_or_else(|| path.display().to_string(), |name| name.to_string_lossy().into_owned());
        Ok(Self { name: format!("custom:{file}"), text })
    }

    /// First 12 hex digits of the SHA-256 of the text (as for built-in prompts).
    pub fn version(&self) -> String {
        let digest = Sha256::digest(self.text.as_bytes());
        digest.iter().take(6).map(|byte| format!("{byte:02x}")).collect()
    }

    pub(super) fn render(&self, question: &str, gold: &str, prediction: &str) -> String {
        // Slots were checked at load time; each is replaced by its value.
        let mut out = self.text.clone();
        for (slot, value) in JUDGE_SLOTS.iter().zip([question, gold, prediction]) {
            out = out.replace(&format!("{{{{{slot}}}}}"), value);
        }
        out
    }
}

fn braces(slots: &[&str]) -> String {
    slots.iter().map(|slot| format!("{{{{{slot}}}}}")).collect::<Vec<_>>().join(", ")
}

/// The prompt one judgement uses.
#[derive(Debug, Clone)]
pub enum JudgePrompt {
    /// A prompt shipped in `prompts/`; the reply must be the JSON verdict.
    Builtin(Prompt),
    /// The user's prompt; the reply is read by [`read_custom_reply`].
    Custom(std::sync::Arc<CustomPrompt>),
}

impl JudgePrompt {
    /// Prompt name, as the judge's work items on the tape give it.
    pub fn name(&self) -> &str {
        match self {
            JudgePrompt::Builtin(prompt) => prompt.name,
            JudgePrompt::Custom(prompt) => &prompt.name,
        }
    }

    /// Prompt version (hash of the text).
    pub fn version(&self) -> String {
        match self {
            JudgePrompt::Builtin(prompt) => prompt.version(),
            JudgePrompt::Custom(prompt) => prompt.version(),
        }
    }

    pub(super) fn render(
        &self,
        question: &str,
        gold: &str,
        prediction: &str,
    ) -> anyhow::Result<String> {
        Ok(match self {
            JudgePrompt::Builtin(prompt) => prompt.render(&[
                ("question", question),
                ("gold", gold),
                ("prediction", prediction),
            ])?,
            JudgePrompt::Custom(prompt) => prompt.render(question, gold, prediction),
        })
    }
}

/// The prompt for an item, or `None` when the protocol does not judge it. LoCoMo: categories
/// 1–4 only (every protocol; category 5 is scored by the refusal rule), with the protocol's
/// prompt (`longmemeval`: LongMemEval's standard rule). LongMemEval: every question, abstention (`_abs`) questions with the abstention
/// rule, the others with their question type's rule. A custom prompt replaces whichever
/// built-in prompt would have been used.
pub fn prompt_for(
    settings: &JudgeSettings,
    question_id: &str,
    category: &Category,
) -> Option<JudgePrompt> {
    let builtin = builtin_prompt(settings.dataset, settings.protocol, question_id, category)?;
    Some(match &settings.custom {
        Some(custom) => JudgePrompt::Custom(std::sync::Arc::clone(custom)),
        None => JudgePrompt::Builtin(builtin),
    })
}

/// The built-in prompt for an item (see [`prompt_for`]).
pub fn builtin_prompt(
    dataset: DatasetKind,
    protocol: JudgeProtocol,
    question_id: &str,
    category: &Category,
) -> Option<Prompt> {
    match (dataset, category) {
        (DatasetKind::Locomo, Category::Locomo(1..=4)) => Some(match protocol {
            JudgeProtocol::Mem0 => prompts::JUDGE_LOCOMO,
            JudgeProtocol::Strict => prompts::JUDGE_LOCOMO_STRICT,
            JudgeProtocol::LongMemEval => prompts::JUDGE_LONGMEMEVAL,
        }),
        (DatasetKind::Locomo | DatasetKind::Own, _) => None,
        (DatasetKind::LongMemEval, _) if question_id.ends_with("_abs") => {
            Some(prompts::JUDGE_LONGMEMEVAL_ABSTENTION)
        }
        (DatasetKind::LongMemEval, category) => Some(match category.name() {
            "temporal-reasoning" => prompts::JUDGE_LONGMEMEVAL_TEMPORAL,
            "knowledge-update" => prompts::JUDGE_LONGMEMEVAL_KNOWLEDGE_UPDATE,
            "single-session-preference" => prompts::JUDGE_LONGMEMEVAL_PREFERENCE,
            _ => prompts::JUDGE_LONGMEMEVAL,
        }),
    }
}

/// Read a reply to a custom prompt: when it holds a JSON object with a string `label`, the
/// verdict is CORRECT exactly when the label is `CORRECT` (any case; the Mem0 format), and the
/// reason is its `reason` field if any; otherwise the verdict is CORRECT when the lowercased
/// reply contains `yes` (LongMemEval's rule) and the reason is the reply itself.
pub fn read_custom_reply(reply: &str) -> (bool, String) {
    if let Ok(value) = extract_json(reply)
        && let Some(label) = value.get("label").and_then(|label| label.as_str())
    {
        let reason = value.get("reason").and_then(|reason| reason.as_str()).unwrap_or_default();
        return (label.trim().eq_ignore_ascii_case("correct"), reason.to_string());
    }
    (reply.to_lowercase().contains("yes"), reply.trim().to_string())
}

/// The JSON Schema every judge reply must satisfy.
pub fn verdict_schema() -> JsonSchemaSpec {
    JsonSchemaSpec {
        name: "judge_verdict".into(),
        schema: json!({
            "type": "object",
            "properties": {
                "reason": {"type": "string"},
                "label": {"type": "string", "enum": ["CORRECT", "WRONG"]}
            },
            "required": ["reason", "label"],
            "additionalProperties": false
        }),
    }
}
