//! The main route: keyword candidates ranked by embedding similarity to the question, then
//! re-ranked by the model; and the nearest topics.
//!
//! Ties are broken by candidate order, never by hash order (§17 item 21).

use std::collections::BTreeMap;

use serde_json::json;

use super::input::{RetrieveInput, similarity};
use super::rerank::rerank;
use crate::agent::ids::{line_id, origin_of};
use crate::agent::trace::{TraceEvent, TraceWriter};
use crate::llm::structured::excerpt;
use crate::llm::{ChatModel, Usage};
use crate::memory::query::{EventMatch, KeywordMatches};
use crate::retrieval::vector::{dot, top_k};

/// Step 3 of the main route: the `key_sentences` of the payload, at most `k2` lines. When no
/// keyword reaches an event, every event is ranked (the dense fallback).
pub(super) async fn key_sentences<M: ChatModel>(
    model: &M,
    input: &RetrieveInput<'_>,
    matches: &KeywordMatches,
    trace: &mut TraceWriter,
    usage: &mut Usage,
) -> Vec<String> {
    let settings = input.settings;
    let candidates: Vec<&EventMatch> = matches
        .full
        .iter()
        .chain(
            matches
                .partial
                .iter()
                .filter(|found| found.matched_keywords.len() >= settings.min_matched_keys),
        )
        .collect();
    let dense_fallback = candidates.is_empty();
    let all_episodes: Vec<(String, String)>;
    let lines: Vec<Candidate> = if dense_fallback {
        // No keyword reached an event: rank every event by similarity, so the model never
        // starts from an empty context.
        all_episodes = input
            .graph
            .episodes()
            .map(|episode| (episode.id.clone(), episode.text.clone()))
            .collect();
        rank_candidates(input, all_episodes.iter().map(|(id, text)| (id.as_str(), text.as_str())))
    } else {
        rank_candidates(
            input,
            candidates.iter().map(|found| (found.event_id.as_str(), found.text.as_str())),
        )
    };
    let ranked: Vec<String> = lines.iter().take(settings.k1).map(Candidate::line).collect();
    let key_sentences = if ranked.len() > settings.k2 {
        let (kept, cost) = rerank(model, input, ranked.clone(), trace).await;
        *usage += cost;
        kept
    } else {
        ranked.clone()
    };
    trace.record(TraceEvent::Retrieval {
        step: "candidates".into(),
        detail: json!({
            "keyword_candidates": if dense_fallback { 0 } else { lines.len() },
            "dense_fallback": dense_fallback,
            "after_similarity": ranked.len(),
            "key_sentences": key_sentences.iter().map(|line| line_id(line)).collect::<Vec<_>>(),
        }),
    });
    key_sentences
}

/// Bytes of a topic's summary shown in the payload. A topic line is a pointer for
/// `query_topic_events`; the build writes one short sentence per topic, so the cut only bites
/// on summaries that are not (a run-on keyword list, say) and keeps them from crowding out the
/// payload that every request of the question re-sends.
const TOPIC_CHARS: usize = 160;

/// Step 5: the `topic_k` topics nearest to the question, as `id:text` lines (the text cut to
/// [`TOPIC_CHARS`]).
pub(super) fn nearest_topics(input: &RetrieveInput<'_>) -> Vec<String> {
    let topics: Vec<(String, String)> =
        input.graph.topics().map(|topic| (topic.id.clone(), topic.text.clone())).collect();
    let topic_scores: Vec<f32> = topics
        .iter()
        .map(|(id, _)| {
            input
                .vectors
                .topics
                .get(id)
                .map_or(f32::MIN, |vector| dot(vector, input.question_vector))
        })
        .collect();
    top_k(&topic_scores, input.settings.topic_k)
        .into_iter()
        .map(|index| format!("{}:{}", topics[index].0, excerpt(&topics[index].1, TOPIC_CHARS)))
        .collect()
}

/// A candidate event with its similarity to the question.
#[derive(Debug, Clone)]
struct Candidate {
    id: String,
    text: String,
}

impl Candidate {
    fn line(&self) -> String {
        format!("{}:{}", self.id, self.text)
    }
}

/// Candidates sorted by similarity (best first, input order on ties), one per origin (its most
/// similar event).
fn rank_candidates<'a>(
    input: &RetrieveInput<'_>,
    events: impl Iterator<Item = (&'a str, &'a str)>,
) -> Vec<Candidate> {
    let mut best: BTreeMap<String, (usize, f32, Candidate)> = BTreeMap::new();
    for (position, (id, text)) in events.enumerate() {
        let score = similarity(input, id);
        let origin = origin_of(id).to_string();
        let better = best.get(&origin).is_none_or(|(_, kept, _)| score > *kept);
        if better {
            let first = best.get(&origin).map_or(position, |(first, _, _)| *first);
            best.insert(
                origin,
                (first, score, Candidate { id: id.to_string(), text: text.to_string() }),
            );
        }
    }
    let mut ranked: Vec<(usize, f32, Candidate)> = best.into_values().collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    ranked.into_iter().map(|(_, _, candidate)| candidate).collect()
}
