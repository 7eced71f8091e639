//! Pre-loop retrieval for one question (spec §9.1–§9.5, §9.7): what the model sees before its
//! first tool call.
//!
//! Steps: the model extracts the question's keywords (with alternatives) and an optional date
//! window; the keywords are matched fuzzily against the graph's keys; a valid date window routes
//! through the timeline; otherwise candidate events are ranked by embedding similarity to the
//! question and re-ranked by the model to at most `k2`; keywords whose keys carry more than
//! `tag_max` tags get their tags scored by the model; the `topic_k` nearest topics are added.
//!
//! Fixes over the reference (§17): no step fails the question. Question keywords without a
//! usable reply fall back to the question's content words; a re-rank that returns nothing
//! usable falls back to the similarity order, so the context is never empty when candidates
//! exist (item 9); tag scoring keeps the first tags. Every fallback is a `fallback` trace record
//! with its reason, counted per question and per run. An empty or
//! `''` time constraint means "no window" instead of an error (item 6); a month-day window that
//! wraps past New Year covers both halves (item 7); ties are broken by candidate order, never by
//! hash order (item 21).
//!
//! Layout: `input` (knobs, input, result, similarity), `ask` (one traced structured call),
//! `keywords` (step 1), `time` (the date-window route), `candidates` (similarity ranking and
//! topics), `rerank` (the model's re-rank), `tags` (tag scoring and key candidates). This module
//! runs the steps (the re-rank and the tag scoring concurrently) and assembles the payload.

mod ask;
mod candidates;
mod input;
mod keywords;
mod rerank;
mod tags;
#[cfg(test)]
mod tests;
mod time;

use std::collections::BTreeSet;

use serde_json::{Value, json};

pub use self::input::{CallSettings, RetrievalSettings, RetrieveInput, Retrieved};
pub use self::keywords::fallback_keywords;
pub use self::rerank::map_reranked;
pub use self::tags::{closest_tags, score_keys_tags, select_tags, tag_candidates, unshown_tags};
pub use self::time::{TimeWindow, parse_time_window, years_of};
use crate::agent::ids::{line_id, origin_of};
use crate::agent::trace::TraceWriter;
use crate::llm::{ChatModel, Usage};

/// Runs the whole pre-loop retrieval for one question. Never fails: a step without a usable
/// model reply falls back (see [`TraceEvent::Fallback`](crate::agent::trace::TraceEvent)).
/// The re-rank and the tag scoring run concurrently; their trace records are kept in that
/// order.
pub async fn retrieve<M: ChatModel>(
    model: &M,
    input: &RetrieveInput<'_>,
    trace: &mut TraceWriter,
) -> Retrieved {
    let mut usage = Usage::default();
    let analysis = keywords::analyse_question(model, input, trace, &mut usage).await;
    let mut seen_keys = analysis.seen_keys();

    let mut payload = serde_json::Map::new();
    payload.insert("question".into(), json!(input.question.text));
    if let Some(window) = &analysis.window
        && let Some((key, sentences)) =
            time::route_by_window(model, input, window, &analysis.matches, trace, &mut usage).await
    {
        payload.insert(key.into(), json!(sentences));
        insert_current_date(input, &mut payload);
        return Retrieved { payload: Value::Object(payload), seen_keys, usage };
    }

    // Main route: keyword candidates ranked by similarity and re-ranked by the model, while
    // the model scores the tags of the question's wide keys.
    let plan = tags::plan_keys(input, &analysis.keywords, &mut seen_keys);
    let (mut rerank_trace, mut tags_trace) = (trace.branch(), trace.branch());
    let mut rerank_usage = Usage::default();
    let ranked = candidates::key_sentences(
        model,
        input,
        &analysis.matches,
        &mut rerank_trace,
        &mut rerank_usage,
    );
    let scored = tags::score_plan(model, input, &plan, &mut tags_trace);
    let (key_sentences, (scores, tags_usage)) = futures::join!(ranked, scored);
    trace.merge(rerank_trace);
    trace.merge(tags_trace);
    usage += rerank_usage + tags_usage;
    let mut shown_origins: BTreeSet<String> =
        key_sentences.iter().map(|line| origin_of(line_id(line)).to_string()).collect();
    let keys = tags::key_candidates(input, plan, scores, &mut shown_origins);
    let similar_topic = candidates::nearest_topics(input);

    payload.insert("key_sentences".into(), json!(key_sentences));
    payload.insert("keys_candidates".into(), json!(keys.candidates));
    payload.insert("key_tag_sentences".into(), json!(keys.tag_sentences));
    payload.insert("similar_topic".into(), json!(similar_topic));
    insert_current_date(input, &mut payload);
    Retrieved { payload: Value::Object(payload), seen_keys, usage }
}

/// The question's `current_date` (LongMemEval), when it has one.
fn insert_current_date(input: &RetrieveInput<'_>, payload: &mut serde_json::Map<String, Value>) {
    if let Some(date) = &input.question.current_date {
        payload.insert("current_date".into(), json!(date));
    }
}
