//! `query_event_keywords`: the keywords (with their tags) linked to an event, leaving out those
//! the question has already been shown.
//!
//! A key with more than `tag_max` tags has its tags scored before it is shown: [`apply`] hands
//! such keys back as [`Applied::ScoreTags`], and the driver calls [`score_tags`], which keeps
//! the tags that lead to events not shown yet and has the model score them when they are still
//! too many (the reference scored them against the event's own text, §17 item 13; we score
//! against the question).

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::args::{ArgSpec, ArgType, event_id};
use super::{Applied, Tool, ToolContext, ToolError, ToolState};
use crate::agent::retrieve::{
    CallSettings, closest_tags, score_keys_tags, tag_candidates, unshown_tags,
};
use crate::agent::trace::{TraceEvent, TraceWriter};
use crate::llm::{ChatModel, Usage};
use crate::memory::normalize_key;
use crate::memory::query::{self, KeyTags};

/// The tool's name.
pub(super) const NAME: &str = "query_event_keywords";

/// Its arguments, as offered to the model.
pub(super) const ARGUMENTS: &[ArgSpec] = &[("event_id", ArgType::String, true)];

/// The typed call.
pub(super) fn parse(value: Value) -> Result<Tool, ToolError> {
    Ok(Tool::QueryEventKeywords { event_id: event_id(NAME, value)? })
}

/// The event's keys not shown yet (they join `state.seen_keys`): the result, or
/// [`Applied::ScoreTags`] when a key has more than `tag_max` tags.
pub(super) fn apply(
    context: &ToolContext<'_>,
    state: &mut ToolState,
    event_id: &str,
) -> Result<Applied, ToolError> {
    let keys = query::query_event_keywords(context.graph, event_id)?;
    let fresh: Vec<KeyTags> =
        keys.into_iter().filter(|key| state.seen_keys.insert(normalize_key(&key.key))).collect();
    if fresh.iter().any(|key| key.tags.len() > context.tag_max) {
        return Ok(Applied::ScoreTags { event_id: event_id.to_string(), keys: fresh });
    }
    Ok(Applied::Done(finish_event_keywords(fresh)))
}

/// The `query_event_keywords` result for keys whose tags are final.
fn finish_event_keywords(keys: Vec<KeyTags>) -> Value {
    if keys.is_empty() {
        return json!({ "keys": [], "note": "no keyword of this event leads anywhere new" });
    }
    let keys: Vec<Value> =
        keys.into_iter().map(|key| json!({ "key": key.key, "tags": key.tags })).collect();
    json!({ "keys": keys })
}

/// The result for the keys of an [`Applied::ScoreTags`], and the tokens it took. A key with
/// more than `tag_max` tags keeps those that lead to events not in `shown` (it is left out when
/// none does); when they are still more than `tag_max`, the model scores the closest of them
/// (see `closest_tags`), every such key in one request; otherwise no request is needed, and a
/// `skipped` trace record says so.
pub(crate) async fn score_tags<M: ChatModel>(
    model: &M,
    call: &CallSettings<'_>,
    context: &ToolContext<'_>,
    shown: &BTreeSet<String>,
    mut keys: Vec<KeyTags>,
    trace: &mut TraceWriter,
) -> (Value, Usage) {
    let (tag_max, limit, graph) = (context.tag_max, context.tag_limit, context.graph);
    keys.retain_mut(|key| {
        if key.tags.len() <= tag_max {
            return true;
        }
        let all = key.tags.len();
        key.tags = unshown_tags(graph, &key.key, &key.tags, shown);
        if key.tags.len() <= tag_max {
            trace.record(TraceEvent::Skipped {
                step: format!("tag_scores {}", key.key),
                reason: format!(
                    "only {} of its {all} tags lead to events not shown yet",
                    key.tags.len()
                ),
            });
        }
        !key.tags.is_empty()
    });
    let similarity = |id: &str| context.similarity(id);
    let cap = tag_candidates(limit);
    let cut: Vec<(&str, Vec<String>)> = keys
        .iter()
        .filter(|key| key.tags.len() > tag_max)
        .map(|key| (key.key.as_str(), closest_tags(graph, &key.key, &key.tags, cap, similarity)))
        .collect();
    let wide: Vec<(&str, &[String])> =
        cut.iter().map(|(key, tags)| (*key, tags.as_slice())).collect();
    let (mut scored, usage) =
        score_keys_tags(model, call, limit, context.question, &wide, trace).await;
    scored.reverse();
    for key in keys.iter_mut().filter(|key| key.tags.len() > tag_max) {
        key.tags = match scored.pop().flatten() {
            Some(scored) => scored.into_iter().map(|(tag, _)| tag).collect(),
            None => key.tags.iter().take(limit).cloned().collect(),
        };
    }
    (finish_event_keywords(keys), usage)
}
