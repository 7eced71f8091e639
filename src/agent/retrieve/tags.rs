//! Tag scoring: keys with more than `tag_max` tags get their tags scored by the model against the
//! question; the best-scored tags have their events fetched up front.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::ask::ask_json;
use super::input::{CallSettings, RetrieveInput, similarity};
use crate::agent::ids::origin_of;
use crate::agent::trace::TraceWriter;
use crate::llm::{ChatModel, JsonSchemaSpec, Usage};
use crate::memory::normalize_key;
use crate::memory::query::{self, QueryKeyword};
use crate::prompts;
use crate::retrieval::vector::top_k;

fn tag_scores_schema() -> JsonSchemaSpec {
    JsonSchemaSpec {
        name: "tag_scores".into(),
        schema: json!({
            "type": "object",
            "properties": {
                "keyword": { "type": "string" },
                "tag_scores": { "type": "object", "additionalProperties": { "type": "number" } }
            },
            "required": ["keyword", "tag_scores"],
            "additionalProperties": false
        }),
    }
}

/// The model's scores for the `tags` of `key` with respect to `question`: the kept tags, best
/// first, at most `tag_limit`; `None` when the reply is unusable (the caller keeps the first
/// tags). Used for the question's own keys and by `query_event_keywords` in the loop.
pub async fn score_key_tags<M: ChatModel>(
    model: &M,
    call: &CallSettings<'_>,
    tag_limit: usize,
    question: &str,
    key: &str,
    tags: &[String],
    trace: &mut TraceWriter,
) -> (Option<Vec<(String, f64)>>, Usage) {
    let user = json!({ "question": question, "keyword": key, "tags": tags }).to_string();
    let system = prompts::ANSWER_TAG_SCORES.text.to_string();
    let purpose = format!("tag_scores {key}");
    let (value, usage) =
        ask_json(model, call, &purpose, system, user, &tag_scores_schema(), trace).await;
    let selected = value
        .ok()
        .as_ref()
        .and_then(|value| value.get("tag_scores"))
        .and_then(Value::as_object)
        .and_then(|scores| select_tags(scores, tags, tag_limit));
    (selected, usage)
}

/// Tags to keep from a model's scores: scored tags that exist, score > 0, best first (ties in the
/// key's tag order), at most `limit`. `None` when no usable score came back.
pub fn select_tags(
    scores: &serde_json::Map<String, serde_json::Value>,
    tags: &[String],
    limit: usize,
) -> Option<Vec<(String, f64)>> {
    let mut scored: Vec<(usize, f64)> = tags
        .iter()
        .enumerate()
        .filter_map(|(index, tag)| {
            let score = scores.get(tag).and_then(serde_json::Value::as_f64)?;
            (score > 0.0).then_some((index, score))
        })
        .collect();
    if scored.is_empty() {
        return None;
    }
    scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    scored.truncate(limit);
    Some(scored.into_iter().map(|(index, score)| (tags[index].clone(), score)).collect())
}

/// The `keys_candidates` and `key_tag_sentences` of the payload.
#[derive(Debug, Default)]
pub(super) struct KeyCandidates {
    /// `{key, tags}` of each question keyword's key (tags scored when there are too many).
    pub candidates: Vec<Value>,
    /// `{key, tag, events}` of the best-scored tags, events not shown yet.
    pub tag_sentences: Vec<Value>,
}

/// Step 4: the keys of the question keywords, with their tags (scored when there are too
/// many). Their keys join `seen_keys`; fetched events join `shown_origins`.
pub(super) async fn key_candidates<M: ChatModel>(
    model: &M,
    input: &RetrieveInput<'_>,
    keywords: &[QueryKeyword],
    seen_keys: &mut BTreeSet<String>,
    shown_origins: &mut BTreeSet<String>,
    trace: &mut TraceWriter,
    usage: &mut Usage,
) -> KeyCandidates {
    let settings = input.settings;
    let mut found = KeyCandidates::default();
    let mut listed = BTreeSet::new();
    for keyword in keywords {
        let Some(key) = std::iter::once(&keyword.id)
            .chain(&keyword.alternatives)
            .find_map(|phrase| query::key_tags(input.graph, phrase))
        else {
            continue;
        };
        if key.tags.is_empty() || !listed.insert(key.key.clone()) {
            continue;
        }
        seen_keys.insert(normalize_key(&key.key));
        if key.tags.len() <= settings.tag_max {
            found.candidates.push(json!({ "key": key.key, "tags": key.tags }));
            continue;
        }
        let (scored, cost) = score_key_tags(
            model,
            &input.call,
            settings.tag_limit,
            &input.question.search_text,
            &key.key,
            &key.tags,
            trace,
        )
        .await;
        *usage += cost;
        let tags: Vec<String> = match &scored {
            Some(scored) => scored.iter().map(|(tag, _)| tag.clone()).collect(),
            None => key.tags.iter().take(settings.tag_limit).cloned().collect(),
        };
        found.candidates.push(json!({ "key": key.key, "tags": tags }));
        for (tag, score) in scored.unwrap_or_default() {
            if score < settings.tag_fetch_threshold {
                continue;
            }
            let events = tag_events(input, &key.key, &tag, shown_origins);
            if !events.is_empty() {
                found.tag_sentences.push(json!({ "key": key.key, "tag": tag, "events": events }));
            }
        }
    }
    found
}

/// The events under `key`/`tag` most similar to the question (at most `k2`), leaving out turns
/// already shown.
fn tag_events(
    input: &RetrieveInput<'_>,
    key: &str,
    tag: &str,
    shown_origins: &mut BTreeSet<String>,
) -> Vec<String> {
    let Ok(hits) = query::edges_by_tag(input.graph, key, tag) else { return Vec::new() };
    let scores: Vec<f32> = hits.iter().map(|hit| similarity(input, &hit.event_id)).collect();
    top_k(&scores, input.settings.k2)
        .into_iter()
        .map(|index| &hits[index])
        .filter(|hit| shown_origins.insert(origin_of(&hit.event_id).to_string()))
        .map(ToString::to_string)
        .collect()
}
