//! The `{"events": [...]}` result of `edges_by_tag` and `query_topic_events`: a long list is cut
//! to the events most similar to the question.

use serde_json::{Value, json};

use super::ToolContext;
use crate::memory::query::EventHit;
use crate::retrieval::vector::{dot, top_k};

/// `{"events": [...]}`: a list longer than `rerank_limit` is cut to the `keep` events most
/// similar to the question (best first), with how many were left out.
pub(super) fn event_list(context: &ToolContext<'_>, hits: Vec<EventHit>) -> Value {
    let total = hits.len();
    let hits = if total > context.rerank_limit {
        let scores: Vec<f32> = hits.iter().map(|hit| context.similarity(&hit.event_id)).collect();
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

impl ToolContext<'_> {
    /// The question's similarity to an event (`f32::MIN` when the event has no vector).
    pub(super) fn similarity(&self, event_id: &str) -> f32 {
        self.vectors
            .sentences
            .get(event_id)
            .map_or(f32::MIN, |vector| dot(vector, self.question_vector))
    }
}
