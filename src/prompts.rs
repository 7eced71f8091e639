//! Every prompt, compiled in from `prompts/` (one file per prompt).
//!
//! A [`Prompt`] has a name, its text and a short version hash of the text. Placeholders are
//! written `{{name}}`; [`Prompt::render`] fails on a missing or an unused value.

use sha2::{Digest, Sha256};

/// One prompt file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prompt {
    /// File stem under `prompts/`.
    pub name: &'static str,
    /// Full text.
    pub text: &'static str,
}

/// Why a prompt could not be rendered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PromptError {
    /// The template has a placeholder no value was given for.
    #[error("prompt `{prompt}` needs a value for `{placeholder}`")]
    Missing {
        /// Prompt name.
        prompt: &'static str,
        /// Placeholder name.
        placeholder: String,
    },
    /// A value was given for a placeholder the template does not have.
    #[error("prompt `{prompt}` has no placeholder `{placeholder}`")]
    Unused {
        /// Prompt name.
        prompt: &'static str,
        /// Placeholder name.
        placeholder: String,
    },
}

impl Prompt {
    /// First 12 hex digits of the SHA-256 of the text.
    pub fn version(&self) -> String {
        let digest = Sha256::digest(self.text.as_bytes());
        digest.iter().take(6).map(|byte| format!("{byte:02x}")).collect()
    }

    /// The placeholder names in order of first appearance.
    pub fn placeholders(&self) -> Vec<String> {
        let mut names = Vec::new();
        let mut rest = self.text;
        while let Some(start) = rest.find("{{") {
            let after = &rest[start + 2..];
            let Some(end) = after.find("}}") else { break };
            let name = after[..end].trim().to_string();
            if !name.is_empty() && !names.contains(&name) {
                names.push(name);
            }
            rest = &after[end + 2..];
        }
        names
    }

    /// The text with every `{{name}}` replaced by its value.
    pub fn render(&self, values: &[(&str, &str)]) -> Result<String, PromptError> {
        let placeholders = self.placeholders();
        for (name, _) in values {
            if !placeholders.iter().any(|placeholder| placeholder == name) {
                return Err(PromptError::Unused {
                    prompt: self.name,
                    placeholder: (*name).to_string(),
                });
            }
        }
        let mut text = self.text.to_string();
        for placeholder in placeholders {
            let Some((_, value)) = values.iter().find(|(name, _)| *name == placeholder) else {
                return Err(PromptError::Missing { prompt: self.name, placeholder });
            };
            text = text.replace(&format!("{{{{{placeholder}}}}}"), value);
        }
        Ok(text)
    }
}

/// Declares a prompt constant from `prompts/<file>.md`.
macro_rules! prompt {
    ($(#[$doc:meta])* $name:ident, $file:literal) => {
        $(#[$doc])*
        pub const $name: Prompt =
            Prompt { name: $file, text: include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/prompts/", $file, ".md")) };
    };
}

prompt!(/// Question keywords and time window (answer-time retrieval).
    QUESTION_KEYWORDS, "question_keywords");
prompt!(/// LLM re-rank of retrieval candidates.
    RERANK, "rerank");
prompt!(/// Usefulness scores of a keyword's tags.
    ANSWER_TAG_SCORES, "answer_tag_scores");
prompt!(/// System prompt of the tool rounds.
    ANSWER_SYSTEM, "answer_system");
prompt!(/// Strict answer-style rules.
    ANSWER_STYLE_STRICT, "answer_style_strict");
prompt!(/// Lenient answer-style rules (open-domain).
    ANSWER_STYLE_OPEN, "answer_style_open");
prompt!(/// Extra rules for LongMemEval.
    ANSWER_RULES_LONGMEMEVAL, "answer_rules_longmemeval");
prompt!(/// System prompt of the final-answer round.
    ANSWER_FINAL, "answer_final");
prompt!(/// User message opening the final-answer round.
    ANSWER_FINAL_ROUND, "answer_final_round");
prompt!(/// Reminder to resolve dates before the last tool round (temporal questions).
    ANSWER_TIME_NUDGE, "answer_time_nudge");
prompt!(/// Nudge when the model neither calls tools nor answers.
    ANSWER_NUDGE, "answer_nudge");
prompt!(/// Re-ask after an answer that breaks the schema.
    ANSWER_REASK, "answer_reask");
prompt!(/// Multi-hop question suffix.
    ANSWER_MULTI_HOP, "answer_multi_hop");
prompt!(/// Open-domain question suffix.
    ANSWER_OPEN_DOMAIN, "answer_open_domain");
prompt!(/// Temporal question suffix.
    ANSWER_TEMPORAL, "answer_temporal");
prompt!(/// Adversarial question options.
    ANSWER_ADVERSARIAL, "answer_adversarial");
prompt!(/// Tool descriptions of the answer loop.
    ANSWER_TOOLS, "answer_tools");

/// Every prompt.
pub const ALL: &[Prompt] = &[
    QUESTION_KEYWORDS,
    RERANK,
    ANSWER_TAG_SCORES,
    ANSWER_SYSTEM,
    ANSWER_STYLE_STRICT,
    ANSWER_STYLE_OPEN,
    ANSWER_RULES_LONGMEMEVAL,
    ANSWER_FINAL,
    ANSWER_FINAL_ROUND,
    ANSWER_TIME_NUDGE,
    ANSWER_NUDGE,
    ANSWER_REASK,
    ANSWER_MULTI_HOP,
    ANSWER_OPEN_DOMAIN,
    ANSWER_TEMPORAL,
    ANSWER_ADVERSARIAL,
    ANSWER_TOOLS,
];
