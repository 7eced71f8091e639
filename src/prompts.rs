//! Every prompt the project sends, compiled in from `prompts/` with `include_str!`.
//!
//! A prompt is Markdown with `{{placeholder}}` slots. [`Prompt::render`] fails on a missing or
//! an unused placeholder, so a prompt and its caller cannot drift apart silently.
//! [`Prompt::version`] is a short hash of the text: caches record it, so editing a prompt
//! invalidates exactly the stages built with it. This module holds no prompt text itself.

use std::collections::BTreeSet;

/// A prompt template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prompt {
    /// File stem under `prompts/`.
    pub name: &'static str,
    /// Template text.
    pub text: &'static str,
}

/// Why a prompt could not be rendered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PromptError {
    /// The template has a slot the caller gave no value for.
    #[error("prompt `{prompt}` needs a value for placeholder: {placeholder}")]
    Missing {
        /// Prompt name.
        prompt: &'static str,
        /// Placeholder name.
        placeholder: String,
    },
    /// The caller gave a value the template never uses.
    #[error("prompt `{prompt}` has no placeholder named: {placeholder}")]
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
        crate::text::short_hash(self.text.as_bytes(), 6)
    }

    /// Placeholder names used in the template, sorted.
    pub fn placeholders(&self) -> BTreeSet<&'static str> {
        slots_in(self.text)
    }

    /// Fill every placeholder; fails on a missing or unused one.
    pub fn render(&self, vars: &[(&str, &str)]) -> Result<String, PromptError> {
        let wanted = self.placeholders();
        for (name, _) in vars {
            if !wanted.contains(name) {
                return Err(PromptError::Unused {
                    prompt: self.name,
                    placeholder: (*name).to_string(),
                });
            }
        }
        let mut out = self.text.to_string();
        for name in wanted {
            let Some((_, value)) = vars.iter().find(|(given, _)| *given == name) else {
                return Err(PromptError::Missing {
                    prompt: self.name,
                    placeholder: name.to_string(),
                });
            };
            out = out.replace(&format!("{{{{{name}}}}}"), value);
        }
        Ok(out)
    }
}

macro_rules! prompt {
    ($ident:ident, $name:literal) => {
        #[doc = concat!("`prompts/", $name, ".md`")]
        pub const $ident: Prompt = Prompt {
            name: $name,
            text: include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/prompts/", $name, ".md")),
        };
    };
}

prompt!(PING, "ping");
prompt!(STRUCTURED_REASK, "structured_reask");
prompt!(REWRITE, "rewrite");
prompt!(KEYWORDS, "keywords");
prompt!(STAGE_REASK, "stage_reask");
prompt!(REWRITE_MISSING, "rewrite_missing");
prompt!(KEYWORDS_MISSING, "keywords_missing");
prompt!(MEMGAS_GRANULES, "memgas_granules");
prompt!(QUESTION_KEYWORDS, "question_keywords");
prompt!(RERANK, "rerank");
prompt!(ANSWER_TAG_SCORES, "answer_tag_scores");
prompt!(ANSWER_SYSTEM, "answer_system");
prompt!(ANSWER_RULES_LONGMEMEVAL, "answer_rules_longmemeval");
prompt!(ANSWER_FINAL, "answer_final");
prompt!(ANSWER_SINGLE, "answer_single");
prompt!(ANSWER_TIME_NUDGE, "answer_time_nudge");
prompt!(ANSWER_NUDGE, "answer_nudge");
prompt!(ANSWER_REASK, "answer_reask");
prompt!(ANSWER_MULTI_HOP, "answer_multi_hop");
prompt!(ANSWER_OPEN_DOMAIN, "answer_open_domain");
prompt!(ANSWER_TEMPORAL, "answer_temporal");
prompt!(ANSWER_ADVERSARIAL, "answer_adversarial");
prompt!(ANSWER_TOOLS, "answer_tools");
prompt!(ANSWER_META_RULES, "answer_meta_rules");
prompt!(LEARN_SUMMARY, "learn_summary");
prompt!(LEARN_PROPOSE, "learn_propose");
prompt!(LEARN_CONSOLIDATE, "learn_consolidate");
prompt!(FACT_CONFLICTS, "fact_conflicts");
prompt!(JUDGE_LOCOMO, "judge_locomo");
prompt!(JUDGE_LOCOMO_STRICT, "judge_locomo_strict");
prompt!(JUDGE_LONGMEMEVAL, "judge_longmemeval");
prompt!(JUDGE_LONGMEMEVAL_TEMPORAL, "judge_longmemeval_temporal");
prompt!(JUDGE_LONGMEMEVAL_KNOWLEDGE_UPDATE, "judge_longmemeval_knowledge_update");
prompt!(JUDGE_LONGMEMEVAL_PREFERENCE, "judge_longmemeval_preference");
prompt!(JUDGE_LONGMEMEVAL_ABSTENTION, "judge_longmemeval_abstention");

/// Every prompt, for listing and snapshot tests.
pub const ALL: &[Prompt] = &[
    PING,
    STRUCTURED_REASK,
    REWRITE,
    KEYWORDS,
    STAGE_REASK,
    REWRITE_MISSING,
    KEYWORDS_MISSING,
    MEMGAS_GRANULES,
    QUESTION_KEYWORDS,
    RERANK,
    ANSWER_TAG_SCORES,
    ANSWER_SYSTEM,
    ANSWER_RULES_LONGMEMEVAL,
    ANSWER_FINAL,
    ANSWER_SINGLE,
    ANSWER_TIME_NUDGE,
    ANSWER_NUDGE,
    ANSWER_REASK,
    ANSWER_MULTI_HOP,
    ANSWER_OPEN_DOMAIN,
    ANSWER_TEMPORAL,
    ANSWER_ADVERSARIAL,
    ANSWER_TOOLS,
    ANSWER_META_RULES,
    LEARN_SUMMARY,
    LEARN_PROPOSE,
    LEARN_CONSOLIDATE,
    FACT_CONFLICTS,
    JUDGE_LOCOMO,
    JUDGE_LOCOMO_STRICT,
    JUDGE_LONGMEMEVAL,
    JUDGE_LONGMEMEVAL_TEMPORAL,
    JUDGE_LONGMEMEVAL_KNOWLEDGE_UPDATE,
    JUDGE_LONGMEMEVAL_PREFERENCE,
    JUDGE_LONGMEMEVAL_ABSTENTION,
];

/// The `{{name}}` slots of a template (names of ASCII letters, digits and `_`), sorted; used for
/// the compiled-in prompts and for a user's prompt file alike.
pub fn slots_in(text: &str) -> BTreeSet<&str> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else { break };
        let name = &after[..end];
        if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            names.insert(name);
        }
        rest = &after[end + 2..];
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: Prompt =
        Prompt { name: "sample", text: "Hello {{name}}, today is {{date}}. {{name}}!" };

    #[test]
    fn render_fills_every_slot() {
        let text = SAMPLE.render(&[("name", "Ana"), ("date", "2023-05-08")]).unwrap();
        assert_eq!(text, "Hello Ana, today is 2023-05-08. Ana!");
    }

    #[test]
    fn render_rejects_missing_and_unused_placeholders() {
        assert_eq!(
            SAMPLE.render(&[("name", "Ana")]),
            Err(PromptError::Missing { prompt: "sample", placeholder: "date".into() })
        );
        assert_eq!(
            SAMPLE.render(&[("name", "Ana"), ("date", "x"), ("extra", "y")]),
            Err(PromptError::Unused { prompt: "sample", placeholder: "extra".into() })
        );
    }

    #[test]
    fn json_braces_are_not_placeholders() {
        let prompt = Prompt { name: "json", text: "Return {\"a\": {\"b\": 1}} for {{x}}" };
        assert_eq!(prompt.placeholders().into_iter().collect::<Vec<_>>(), vec!["x"]);
    }

    #[test]
    fn version_changes_with_text() {
        let other = Prompt { name: "sample", text: "Hello {{name}}" };
        assert_eq!(SAMPLE.version().len(), 12);
        assert_ne!(SAMPLE.version(), other.version());
    }

    #[test]
    fn every_shipped_prompt_has_a_stable_version() {
        for prompt in ALL {
            assert_eq!(prompt.version(), prompt.version());
            assert!(!prompt.text.trim().is_empty(), "{} is empty", prompt.name);
        }
    }
}
