//! The model's re-rank of similarity-ordered candidate lines down to at most `k2`.
//!
//! Fix over the reference (§17 item 9): a re-rank that returns nothing usable falls back to the
//! similarity order, so the context is never empty when candidates exist.

use std::collections::BTreeSet;

use serde_json::json;

use super::ask::ask_json;
use super::input::RetrieveInput;
use crate::agent::ids::{line_id, line_id_of_dated};
use crate::agent::trace::{TraceEvent, TraceWriter};
use crate::llm::{ChatModel, JsonSchemaSpec, Usage};
use crate::prompts;

fn rerank_schema() -> JsonSchemaSpec {
    JsonSchemaSpec {
        name: "rerank".into(),
        schema: json!({
            "type": "object",
            "properties": {
                "mode": { "type": ["string", "null"] },
                "events": {
                    "type": ["array", "string"],
                    "items": { "type": ["string", "number"] }
                }
            },
            "required": ["events"]
        }),
    }
}

/// The model's pick of at most `k2` lines; the similarity order when its reply is unusable.
pub(super) async fn rerank<M: ChatModel>(
    model: &M,
    input: &RetrieveInput<'_>,
    lines: Vec<String>,
    trace: &mut TraceWriter,
) -> (Vec<String>, Usage) {
    let limit = input.settings.k2;
    let system = prompts::RERANK
        .render(&[("limit", &limit.to_string())])
        .unwrap_or_else(|_| prompts::RERANK.text.to_string());
    let user =
        json!({ "question": input.question.search_text, "similar_sentence": lines }).to_string();
    let (value, usage) =
        ask_json(model, &input.call, "rerank", system, user, &rerank_schema(), trace).await;
    let ids: Vec<String> =
        lines.iter().map(|line| line_id(line_id_of_dated(line)).to_string()).collect();
    let (returned, failure) = match &value {
        Ok(value) => (returned_ids(value), None),
        Err(error) => (Vec::new(), Some(error.to_string())),
    };
    let picked = map_reranked(&returned, &ids, limit);
    trace.record(TraceEvent::Retrieval {
        step: "rerank".into(),
        detail: json!({ "returned": returned.len(), "kept": picked.as_ref().map_or(0, Vec::len), "fallback": picked.is_none() }),
    });
    let kept = match picked {
        Some(positions) => positions.into_iter().map(|index| lines[index].clone()).collect(),
        None => {
            let reason = failure.unwrap_or_else(|| {
                format!("none of the {} returned ids is a candidate", returned.len())
            });
            trace.record(TraceEvent::Fallback {
                step: "rerank".into(),
                reason: format!("{reason}; kept the similarity order"),
            });
            lines.into_iter().take(limit).collect()
        }
    };
    (kept, usage)
}

/// The ids of a re-rank reply: `events` as a list (numbers as text) or one string.
fn returned_ids(value: &serde_json::Value) -> Vec<String> {
    let text = |item: &serde_json::Value| match item {
        serde_json::Value::String(text) => Some(text.clone()),
        serde_json::Value::Number(number) => Some(number.to_string()),
        _ => None,
    };
    match value.get("events") {
        Some(serde_json::Value::Array(items)) => items.iter().filter_map(text).collect(),
        Some(other) => text(other).into_iter().collect(),
        None => Vec::new(),
    }
}

/// Maps ids returned by the re-rank to candidate positions: an id matches a candidate with the
/// same id or whose id starts with `<id>-` (a turn id picks its first event). Unknown and
/// repeated ids are dropped; at most `limit` positions are kept. Returns `None` when nothing
/// usable came back, so the caller falls back to the similarity order.
pub fn map_reranked(
    returned: &[String],
    candidate_ids: &[String],
    limit: usize,
) -> Option<Vec<usize>> {
    let mut picked = Vec::new();
    let mut seen = BTreeSet::new();
    for id in returned {
        let id = id.trim();
        // Tolerate `D1:3-1:Caroline: ...` echoes of the whole candidate line.
        let id = id.split_once(": ").map_or(id, |(head, _)| head);
        let prefix = format!("{id}-");
        let position = candidate_ids
            .iter()
            .position(|candidate| candidate == id)
            .or_else(|| candidate_ids.iter().position(|candidate| candidate.starts_with(&prefix)));
        if let Some(position) = position
            && seen.insert(position)
        {
            picked.push(position);
            if picked.len() == limit {
                break;
            }
        }
    }
    (!picked.is_empty()).then_some(picked)
}
