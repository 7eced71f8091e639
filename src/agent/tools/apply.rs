//! Running a tool against the question's memory, and the results the driver finishes.

use serde_json::{Value, json};

use super::{Applied, MEMGAS_TOOL, Tool, ToolContext, ToolError, ToolState};
use crate::memory::normalize_key;
use crate::memory::query::{self, EventHit, KeyTags};
use crate::retrieval::MemgasHits;
use crate::retrieval::vector::{dot, top_k};

impl Tool {
    /// Runs the tool against the memory. Unknown ids and names are errors the model reads.
    pub fn apply(
        &self,
        context: &ToolContext<'_>,
        state: &mut ToolState,
    ) -> Result<Applied, ToolError> {
        let graph = context.graph;
        let value = match self {
            Tool::EdgesByTag { key, tag } => edges_by_tag(context, key, tag)?,
            Tool::QueryConversationTime { event_id } => {
                let time = query::query_conversation_time(graph, event_id)?;
                json!({ "conversation_time": time.date.to_string() })
            }
            Tool::QueryEventKeywords { event_id } => {
                let keys = query::query_event_keywords(graph, event_id)?;
                let fresh: Vec<KeyTags> = keys
                    .into_iter()
                    .filter(|key| state.seen_keys.insert(normalize_key(&key.key)))
                    .collect();
                if fresh.iter().any(|key| key.tags.len() > context.tag_max) {
                    return Ok(Applied::ScoreTags { event_id: event_id.clone(), keys: fresh });
                }
                finish_event_keywords(fresh)
            }
            Tool::QueryEventContext { event_id } => {
                let turns: Vec<String> = query::query_event_context(graph, event_id)?
                    .iter()
                    .map(ToString::to_string)
                    .collect();
                json!({ "turns": turns })
            }
            Tool::QueryPersonalInformation { person } => {
                let found = query::query_personal_information(graph, person)?;
                json!({ "person": found.person, "aspects": found.aspects })
            }
            Tool::QueryPersonalAspect { person, aspect } => {
                let facts: Vec<String> = query::query_personal_aspect(graph, person, aspect)?
                    .iter()
                    .map(ToString::to_string)
                    .collect();
                json!({ "facts": facts })
            }
            Tool::QueryTopicEvents { topic } => {
                event_list(context, query::query_topic_events(graph, topic)?)
            }
            Tool::QueryMemgas { query, k } => {
                if !context.memgas {
                    return Err(ToolError::NotFound(format!(
                        "{MEMGAS_TOOL} is not available for this conversation (it has no MemGAS index)"
                    )));
                }
                return Ok(Applied::Memgas { query: query.clone(), k: *k });
            }
        };
        Ok(Applied::Done(value))
    }
}

/// The `query_event_keywords` result for keys whose tags are final.
pub fn finish_event_keywords(keys: Vec<KeyTags>) -> Value {
    if keys.is_empty() {
        return json!({ "keys": [], "note": "no keyword of this event leads anywhere new" });
    }
    let keys: Vec<Value> =
        keys.into_iter().map(|key| json!({ "key": key.key, "tags": key.tags })).collect();
    json!({ "keys": keys })
}

/// The `query_memgas` result: the top sessions (id, date) and turns (`<dia_id>:<text>`, with
/// the session date), best first.
pub fn memgas_result(hits: &MemgasHits) -> Value {
    let sessions: Vec<Value> = hits
        .sessions
        .iter()
        .map(|hit| json!({ "session": hit.session_id, "date": hit.date }))
        .collect();
    let turns: Vec<String> = hits
        .turns
        .iter()
        .map(|hit| match &hit.date {
            Some(date) => format!("{}:{} (session date: {date})", hit.dia_id, hit.text),
            None => format!("{}:{}", hit.dia_id, hit.text),
        })
        .collect();
    json!({ "sessions": sessions, "turns": turns })
}

/// The `edges_by_tag` result; a long list is cut to the events most similar to the question.
fn edges_by_tag(context: &ToolContext<'_>, key: &str, tag: &str) -> Result<Value, ToolError> {
    Ok(event_list(context, query::edges_by_tag(context.graph, key, tag)?))
}

/// `{"events": [...]}`: a list longer than `rerank_limit` is cut to the `keep` events most
/// similar to the question (best first), with how many were left out.
fn event_list(context: &ToolContext<'_>, hits: Vec<EventHit>) -> Value {
    let total = hits.len();
    let hits = if total > context.rerank_limit {
        let scores: Vec<f32> = hits
            .iter()
            .map(|hit| {
                context
                    .vectors
                    .sentences
                    .get(&hit.event_id)
                    .map_or(f32::MIN, |vector| dot(vector, context.question_vector))
            })
            .collect();
        top_k(&scores, context.keep).into_iter().map(|index| hits[index].clone()).collect()
    } else {
        hits
    };
    let events: Vec<String> = hits.iter().map(ToString::to_string).collect();
    let mut value = json!({ "events": events });
    if total > events.len() {
        value["omitted"] = json!(format!("{} less similar events", total - events.len()));
    }
    value
}
