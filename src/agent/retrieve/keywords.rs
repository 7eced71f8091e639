//! Step 1: the model extracts the question's keywords (with alternatives) and an optional date
//! window; the keywords are matched fuzzily against the graph's keys.
//!
//! The reply is read the way the reference reads it, with defaults: `question_time` may be
//! missing or `null` (no window), a keyword may be a bare string, `alternatives` may be missing,
//! `null` or one string. When the step fails anyway (transport error, or no usable reply after
//! its re-asks), the question goes on with deterministic keywords (the question's content
//! words, normalised like the memory keys) and a `fallback` mark in the trace.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::ask::{ask_json, quoted_question};
use super::input::RetrieveInput;
use super::time::{TimeWindow, parse_time_window};
use crate::agent::trace::{TraceEvent, TraceWriter};
use crate::dataset::DatasetKind;
use crate::llm::{ChatModel, JsonSchemaSpec, Usage};
use crate::memory::normalize_key;
use crate::memory::query::{self, KeywordMatches, QueryKeyword};
use crate::prompts;
use crate::text::stop_words::KEYWORD_QUESTION_WORDS;

fn keywords_schema() -> JsonSchemaSpec {
    let text = json!({ "type": ["string", "number"] });
    JsonSchemaSpec {
        name: "question_keywords".into(),
        schema: json!({
            "type": "object",
            "properties": {
                "question_time": { "type": ["string", "null"] },
                "keywords": {
                    "type": "array",
                    "items": {
                        "type": ["object", "string"],
                        "properties": {
                            "id": text,
                            "alternatives": {
                                "type": ["array", "string", "null"],
                                "items": text
                            }
                        },
                        "required": ["id"]
                    }
                }
            },
            "required": ["keywords"]
        }),
    }
}

/// The question's keywords, its date window and the graph keys they reach.
pub(super) struct Analysis {
    /// Keywords with alternatives, as the model gave them.
    pub keywords: Vec<QueryKeyword>,
    /// The date window, when the model named a valid one.
    pub window: Option<TimeWindow>,
    /// Events reached by the keywords.
    pub matches: KeywordMatches,
}

impl Analysis {
    /// Normalised keys of the question keywords (they count as shown).
    pub(super) fn seen_keys(&self) -> BTreeSet<String> {
        self.keywords
            .iter()
            .map(|keyword| normalize_key(&keyword.id))
            .filter(|key| !key.is_empty())
            .collect()
    }
}

/// Asks the model for the question's keywords and window, and matches them against the graph.
/// Never fails: without a usable reply the keywords are the question's content words.
pub(super) async fn analyse_question<M: ChatModel>(
    model: &M,
    input: &RetrieveInput<'_>,
    trace: &mut TraceWriter,
    usage: &mut Usage,
) -> Analysis {
    let (value, cost) = ask_json(
        model,
        &input.call,
        "question_keywords",
        prompts::QUESTION_KEYWORDS.text.to_string(),
        quoted_question(&input.question.search_text),
        &keywords_schema(),
        trace,
    )
    .await;
    *usage += cost;
    let read = value.map_err(|error| error.to_string()).and_then(|value| read_keywords(&value));
    let (question_time, keywords) = match read {
        Ok(read) => read,
        Err(reason) => {
            trace.record(TraceEvent::Fallback {
                step: "question_keywords".into(),
                reason: format!("{reason}; using the question's content words"),
            });
            (None, fallback_keywords(&input.question.search_text))
        }
    };
    let window = question_time.as_deref().and_then(parse_time_window);
    let matches = match input.dataset {
        DatasetKind::Locomo | DatasetKind::Own => query::match_keywords(input.graph, &keywords),
        DatasetKind::LongMemEval => {
            query::match_keywords(input.graph, &with_user_keyword(&keywords))
        }
    };
    trace.record(TraceEvent::Retrieval {
        step: "keywords".into(),
        detail: json!({
            "question_time": question_time,
            "window": window.map(|window| format!("{window:?}")),
            "matched_keys": matches.keys,
            "full_matches": matches.full.len(),
            "partial_matches": matches.partial.len(),
        }),
    });
    Analysis { keywords, window, matches }
}

/// Reads the step's reply with the reference's defaults: `question_time` absent or `null` is
/// unknown; a keyword is `{id, alternatives}` or a bare string; `alternatives` may be missing,
/// `null`, one string or a list. Keywords without text are dropped.
pub(super) fn read_keywords(value: &Value) -> Result<(Option<String>, Vec<QueryKeyword>), String> {
    let object = value.as_object().ok_or("question keywords: the reply is not a JSON object")?;
    let question_time = object.get("question_time").and_then(scalar_text);
    let items = match object.get("keywords") {
        Some(Value::Array(items)) => items.as_slice(),
        _ => return Err("question keywords: `keywords` is not a list".into()),
    };
    let keywords = items
        .iter()
        .filter_map(|item| {
            let (id, alternatives) = match item {
                Value::Object(fields) => (
                    fields.get("id").and_then(scalar_text)?,
                    match fields.get("alternatives") {
                        Some(Value::Array(list)) => list.iter().filter_map(scalar_text).collect(),
                        Some(other) => scalar_text(other).into_iter().collect(),
                        None => Vec::new(),
                    },
                ),
                other => (scalar_text(other)?, Vec::new()),
            };
            (!id.trim().is_empty()).then_some(QueryKeyword { id, alternatives })
        })
        .collect();
    Ok((question_time, keywords))
}

/// A string, or a number written as text; `None` for anything else.
fn scalar_text(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text.clone()),
        Value::Number(number) => Some(number.to_string()),
        _ => None,
    }
}

/// Deterministic keywords (no model): the question's words normalised like the memory keys,
/// without stop words and question words ([`KEYWORD_QUESTION_WORDS`]), in question order, each
/// once.
pub fn fallback_keywords(question: &str) -> Vec<QueryKeyword> {
    let asked = question.split_once('?').map_or(question, |(head, _)| head);
    let normalized = normalize_key(asked);
    let content = crate::memory::tokens(&normalized);
    let mut seen = BTreeSet::new();
    normalized
        .split(' ')
        .filter(|word| {
            word.chars().count() > 1
                && content.contains(word)
                && !KEYWORD_QUESTION_WORDS.contains(word)
                && seen.insert(*word)
        })
        .map(|word| QueryKeyword { id: word.to_string(), alternatives: Vec::new() })
        .collect()
}

/// LongMemEval: the question keywords plus a synthetic `user` keyword when none is `user`, as
/// the reference adds before graph matching (every LongMemEval event hangs off the `user` key).
/// Only matching sees it; the keywords the question asked for stay as they were.
fn with_user_keyword(keywords: &[QueryKeyword]) -> Vec<QueryKeyword> {
    let mut keywords = keywords.to_vec();
    if !keywords.iter().any(|keyword| normalize_key(&keyword.id) == USER_KEY) {
        keywords.push(QueryKeyword { id: USER_KEY.to_string(), alternatives: Vec::new() });
    }
    keywords
}

/// The key LongMemEval user turns are stored under.
const USER_KEY: &str = "user";

#[cfg(test)]
mod user_keyword_tests {
    use super::*;

    #[test]
    fn longmemeval_matching_adds_the_user_keyword_once() {
        let keyword = |id: &str| QueryKeyword { id: id.into(), alternatives: vec!["x".into()] };
        let added = with_user_keyword(&[keyword("dentist")]);
        let ids: Vec<&str> = added.iter().map(|keyword| keyword.id.as_str()).collect();
        assert_eq!(ids, ["dentist", "user"]);
        assert!(added[1].alternatives.is_empty());
        let kept = with_user_keyword(&[keyword("User"), keyword("dentist")]);
        assert_eq!(kept.len(), 2);
    }
}
