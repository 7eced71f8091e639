//! Meta-memory rules (MetaMem): short, learned guidelines on *how* to use the memory and its
//! tools, pasted as one block at the end of the answer loop's system prompt.
//!
//! `mragent learn` writes rule sets; `run`, `ask` and `serve` read one with `--meta-rules FILE`.
//! The block is the same bytes in every request of a run (the system prompt is the shared
//! prefix, so providers' prompt caches still hit), and its hash ([`RuleSet::hash`]) goes into
//! the manifest and every result line: resume treats lines answered under another rule set as
//! stale. An empty rule set adds nothing, so the prompt is then exactly the one without rules.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::prompts;

/// Version of the rules file format.
pub const FORMAT: u32 = 1;

/// The most words a rule may have.
pub const MAX_RULE_WORDS: usize = 30;

/// The most rules a file may hold (`learn` caps its own sets lower, with `--max-rules`).
pub const MAX_RULES: usize = 100;

/// Where in a `learn` run a rule was added or last changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepRef {
    /// Fold index (from 0).
    pub fold: u32,
    /// Step index within the fold (step 0 is the empty rule set; the first learned step is 1).
    pub step: u32,
}

/// A training question (and which of its sampled attempts) a rule was distilled from.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RuleSource {
    /// Question id.
    pub question_id: String,
    /// Attempt (sample) indexes, from 0.
    pub attempts: Vec<u32>,
}

/// One rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rule {
    /// `M0`, `M1`, … (renumbered after every learning step).
    pub id: String,
    /// The rule: one sentence of at most [`MAX_RULE_WORDS`] words.
    pub text: String,
    /// The questions and attempts it came from (empty for a hand-written rule).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<RuleSource>,
    /// When it was added.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub added: Option<StepRef>,
    /// When its text last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed: Option<StepRef>,
}

/// A rule set: what `--meta-rules FILE` reads and `learn` writes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleSet {
    /// [`FORMAT`].
    pub format: u32,
    /// The rules, in prompt order.
    pub rules: Vec<Rule>,
}

/// Why a rules file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum RulesError {
    /// The file cannot be read.
    #[error("cannot read the rules file {path}: {message}")]
    Read {
        /// The file.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// The file is not a rule set.
    #[error(
        "{path} is not a rules file (expected {{\"format\": 1, \"rules\": [{{\"id\", \"text\"}}]}}): {message}"
    )]
    Parse {
        /// The file.
        path: String,
        /// The parser's message.
        message: String,
    },
    /// A rule breaks a limit.
    #[error("rule {id}: {problem}")]
    Invalid {
        /// The rule's id.
        id: String,
        /// What is wrong with it.
        problem: String,
    },
    /// The set as a whole breaks a limit.
    #[error("{0}")]
    Set(String),
}

impl RuleSet {
    /// A set of these rules.
    pub fn new(rules: Vec<Rule>) -> Self {
        Self { format: FORMAT, rules }
    }

    /// Reads and checks a rules file.
    pub fn load(path: &Path) -> Result<Self, RulesError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|error| RulesError::Read {
            path: shown.clone(),
            message: error.to_string(),
        })?;
        let set: RuleSet = serde_json::from_str(&text).map_err(|error| RulesError::Parse {
            path: shown.clone(),
            message: error.to_string(),
        })?;
        set.check()?;
        Ok(set)
    }

    /// Checks the format, the rule count, unique ids, and every rule's text.
    pub fn check(&self) -> Result<(), RulesError> {
        if self.format != FORMAT {
            return Err(RulesError::Set(format!(
                "rules file format {} is not supported (this build reads format {FORMAT})",
                self.format
            )));
        }
        if self.rules.len() > MAX_RULES {
            return Err(RulesError::Set(format!(
                "{} rules: at most {MAX_RULES} are accepted",
                self.rules.len()
            )));
        }
        let mut ids = std::collections::BTreeSet::new();
        for rule in &self.rules {
            let id_ok = !rule.id.is_empty()
                && rule.id.len() <= 16
                && rule.id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
            if !id_ok {
                return Err(RulesError::Invalid {
                    id: rule.id.escape_debug().to_string(),
                    problem: "an id is 1-16 ASCII letters, digits, - or _".into(),
                });
            }
            if !ids.insert(rule.id.as_str()) {
                return Err(RulesError::Invalid {
                    id: rule.id.clone(),
                    problem: "duplicate id".into(),
                });
            }
            if let Some(problem) = text_problem(&rule.text) {
                return Err(RulesError::Invalid { id: rule.id.clone(), problem });
            }
        }
        Ok(())
    }

    /// Whether the set has no rules.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The block appended to the answer loop's system prompt; `None` for an empty set.
    pub fn block(&self) -> Option<String> {
        if self.rules.is_empty() {
            return None;
        }
        let lines: Vec<String> =
            self.rules.iter().map(|rule| format!("- {}: {}", rule.id, rule.text.trim())).collect();
        let rules = lines.join("\n");
        // The template has exactly the one slot (the prompt tests check it); the fallback is
        // the same text without the heading.
        let block = prompts::ANSWER_META_RULES
            .render(&[("rules", &rules)])
            .unwrap_or_else(|_| rules.clone());
        Some(block.trim_end().to_string())
    }

    /// Short hash of what the model sees ([`RuleSet::block`]); empty for an empty set, so a
    /// run without rules and one with an empty file are the same run.
    pub fn hash(&self) -> String {
        match self.block() {
            Some(block) => crate::text::short_hash(block.as_bytes(), 8),
            None => String::new(),
        }
    }

    /// `system` with the block appended (unchanged for an empty set).
    pub fn extend_system(&self, system: &str) -> String {
        match self.block() {
            Some(block) => format!("{system}\n\n{block}"),
            None => system.to_string(),
        }
    }
}

/// What is wrong with a rule's text, if anything: empty, over [`MAX_RULE_WORDS`] words, or
/// holding a line break or control character (a rule is one line of the block).
pub fn text_problem(text: &str) -> Option<String> {
    let words = text.split_whitespace().count();
    if words == 0 {
        Some("the text is empty".into())
    } else if words > MAX_RULE_WORDS {
        Some(format!("{words} words: a rule has at most {MAX_RULE_WORDS}"))
    } else if text.chars().any(char::is_control) {
        Some("a rule is one line without control characters".into())
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(id: &str, text: &str) -> Rule {
        Rule { id: id.into(), text: text.into(), sources: Vec::new(), added: None, changed: None }
    }

    #[test]
    fn the_block_lists_every_rule_once_and_the_hash_follows_it() {
        let set = RuleSet::new(vec![
            rule("M0", "For a when-question, check the session date first."),
            rule("M1", "Prefer the most recent value when facts conflict."),
        ]);
        let block = set.block().unwrap();
        assert_eq!(block.matches("- M0: ").count(), 1);
        assert_eq!(block.matches("- M1: ").count(), 1);
        let system = set.extend_system("SYSTEM");
        assert!(system.starts_with("SYSTEM\n\n") && system.ends_with("conflict."));
        assert_eq!(set.hash().len(), 16);
        let mut other = set.clone();
        other.rules[1].text = "Prefer the oldest value.".into();
        assert_ne!(set.hash(), other.hash());
        // Provenance does not change what the model sees, so it does not change the hash.
        let mut sourced = set.clone();
        sourced.rules[0].added = Some(StepRef { fold: 0, step: 1 });
        assert_eq!(set.hash(), sourced.hash());
    }

    #[test]
    fn an_empty_set_changes_nothing() {
        let empty = RuleSet::new(Vec::new());
        assert_eq!(empty.block(), None);
        assert_eq!(empty.hash(), "");
        assert_eq!(empty.extend_system("SYSTEM"), "SYSTEM");
    }

    #[test]
    fn bad_rules_are_refused_with_their_id() {
        let long = vec!["word"; 31].join(" ");
        for (set, expected) in [
            (RuleSet::new(vec![rule("M0", &long)]), "31 words"),
            (RuleSet::new(vec![rule("M0", "a"), rule("M0", "b")]), "duplicate id"),
            (RuleSet::new(vec![rule("M0", "  ")]), "empty"),
            (RuleSet::new(vec![rule("M0", "one\ntwo")]), "one line"),
            (RuleSet::new(vec![rule("../x", "fine")]), "an id is"),
            (RuleSet { format: 2, rules: Vec::new() }, "format 2"),
        ] {
            let error = set.check().unwrap_err().to_string();
            assert!(error.contains(expected), "{error}");
        }
    }

    #[test]
    fn a_file_round_trips_and_a_bad_file_says_what_is_expected() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rules.json");
        let set = RuleSet::new(vec![rule("M0", "Check the timeline before answering.")]);
        std::fs::write(&path, serde_json::to_string_pretty(&set).unwrap()).unwrap();
        assert_eq!(RuleSet::load(&path).unwrap(), set);
        std::fs::write(&path, "[1, 2]").unwrap();
        let error = RuleSet::load(&path).unwrap_err().to_string();
        assert!(error.contains("is not a rules file"), "{error}");
        let error = RuleSet::load(&dir.path().join("absent.json")).unwrap_err().to_string();
        assert!(error.contains("cannot read"), "{error}");
    }
}
