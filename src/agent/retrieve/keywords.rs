//! Step 1: the model extracts the question's keywords (with alternatives) and an optional date
//! window; the keywords are matched fuzzily against the graph's keys.

use std::collections::BTreeSet;

use serde::Deserialize;
use serde_json::json;

use super::ask::{ask_json, quoted_question};
use super::input::{RetrieveError, RetrieveInput};
use super::time::{TimeWindow, parse_time_window};
use crate::agent::trace::{TraceEvent, TraceWriter};
use crate::dataset::DatasetKind;
use crate::llm::{ChatModel, JsonSchemaSpec, Usage};
use crate::memory::normalize_key;
use crate::memory::query::{self, KeywordMatches, QueryKeyword};
use crate::prompts;

/// The model's question analysis.
#[derive(Debug, Clone, PartialEq, Deserialize)]
struct QuestionKeywords {
    question_time: String,
    keywords: Vec<QueryKeyword>,
}

fn keywords_schema() -> JsonSchemaSpec {
    JsonSchemaSpec {
        name: "question_keywords".into(),
        schema: json!({
            "type": "object",
            "properties": {
                "question_time": { "type": "string" },
                "keywords": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "id": { "type": "string", "minLength": 1 },
                            "alternatives": { "type": "array", "items": { "type": "string" } }
                        },
                        "required": ["id", "alternatives"],
                        "additionalProperties": false
                    }
                }
            },
            "required": ["question_time", "keywords"],
            "additionalProperties": false
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
pub(super) async fn analyse_question<M: ChatModel>(
    model: &M,
    input: &RetrieveInput<'_>,
    trace: &mut TraceWriter,
    usage: &mut Usage,
) -> Result<Analysis, RetrieveError> {
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
    let analysis: QuestionKeywords = serde_json::from_value(value?).map_err(|error| {
        crate::llm::Error::Decode { message: format!("question keywords: {error}") }
    })?;
    let window = parse_time_window(&analysis.question_time);
    let matches = match input.dataset {
        DatasetKind::Locomo => query::match_keywords(input.graph, &analysis.keywords),
        DatasetKind::LongMemEval => {
            query::match_keywords(input.graph, &with_user_keyword(&analysis.keywords))
        }
    };
    trace.record(TraceEvent::Retrieval {
        step: "keywords".into(),
        detail: json!({
            "question_time": analysis.question_time,
            "window": window.map(|window| format!("{window:?}")),
            "matched_keys": matches.keys,
            "full_matches": matches.full.len(),
            "partial_matches": matches.partial.len(),
        }),
    });
    Ok(Analysis { keywords: analysis.keywords, window, matches })
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
