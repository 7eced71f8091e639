//! Tag scoring: keys with more than `tag_max` tags get their tags scored by the model against the
//! question; the best-scored tags have their events fetched up front.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::ask::ask_json;
use super::input::{CallSettings, RetrieveInput, similarity};
use crate::agent::ids::origin_of;
use crate::agent::trace::{TraceEvent, TraceWriter};
use crate::llm::{ChatModel, JsonSchemaSpec, Usage};
use crate::memory::query::{self, KeyTags, QueryKeyword};
use crate::memory::{MemoryGraph, normalize_key};
use crate::prompts;
use crate::retrieval::vector::top_k;

fn tag_scores_schema() -> JsonSchemaSpec {
    JsonSchemaSpec {
        name: "tag_scores".into(),
        schema: json!({
            "type": "object",
            "properties": {
                "tag_scores": {
                    "type": "object",
                    "additionalProperties": {
                        "type": "object",
                        "additionalProperties": { "type": ["number", "string", "null"] }
                    }
                }
            },
            "required": ["tag_scores"]
        }),
    }
}

/// The model's scores for the tags of several `keys` with respect to `question`, all in one
/// request (no request when `keys` is empty): one result per key, in order, each the kept
/// tags, best first, at most `tag_limit`. A key whose scores are missing or unusable gets
/// `None` (the caller keeps its first tags) and a [`TraceEvent::Fallback`] saying why. Used for
/// the question's own keys and by `query_event_keywords` in the loop.
pub async fn score_keys_tags<M: ChatModel>(
    model: &M,
    call: &CallSettings<'_>,
    tag_limit: usize,
    question: &str,
    keys: &[(&str, &[String])],
    trace: &mut TraceWriter,
) -> (Vec<Option<Vec<(String, f64)>>>, Usage) {
    if keys.is_empty() {
        return (Vec::new(), Usage::default());
    }
    let keywords: serde_json::Map<String, Value> =
        keys.iter().map(|(key, tags)| ((*key).to_string(), json!(tags))).collect();
    let user = json!({ "question": question, "keywords": keywords }).to_string();
    let system = prompts::ANSWER_TAG_SCORES.text.to_string();
    let names: Vec<&str> = keys.iter().map(|(key, _)| *key).collect();
    let purpose = format!("tag_scores {}", names.join(", "));
    let (value, usage) =
        ask_json(model, call, &purpose, system, user, &tag_scores_schema(), trace).await;
    let scores = value.as_ref().ok().and_then(|value| value.get("tag_scores"));
    let results = keys
        .iter()
        .map(|&(key, tags)| {
            let selected = match (&value, scores) {
                (Err(error), _) => Err(error.to_string()),
                (Ok(_), scores) => key_scores(scores, key, keys.len())
                    .and_then(|scores| select_tags(scores, tags, tag_limit))
                    .ok_or_else(|| "no listed tag got a positive score".to_string()),
            };
            selected
                .map_err(|reason| {
                    trace.record(TraceEvent::Fallback {
                        step: format!("tag_scores {key}"),
                        reason: format!("{reason}; kept the first {tag_limit} tags"),
                    });
                })
                .ok()
        })
        .collect();
    (results, usage)
}

/// The scores of `key` in a reply's `tag_scores`: under the key (any spelling that normalises
/// alike), or, when only one key was asked about, the flat `{tag: score}` object some models
/// reply with.
fn key_scores<'a>(
    scores: Option<&'a Value>,
    key: &str,
    asked: usize,
) -> Option<&'a serde_json::Map<String, Value>> {
    let scores = scores?.as_object()?;
    let wanted = normalize_key(key);
    let nested = scores
        .get(key)
        .or_else(|| scores.iter().find(|(name, _)| normalize_key(name) == wanted).map(|(_, v)| v))
        .and_then(Value::as_object);
    match nested {
        Some(nested) => Some(nested),
        None if asked == 1 && scores.values().all(|value| !value.is_object()) => Some(scores),
        None => None,
    }
}

/// The tags of `key` that lead to at least one event not in `shown` (ids of the event and turn
/// lines the model has already seen in full; a shown turn shows its events): a tag whose events
/// were all shown leads nowhere new.
pub fn unshown_tags(
    graph: &MemoryGraph,
    key: &str,
    tags: &[String],
    shown: &BTreeSet<String>,
) -> Vec<String> {
    tags.iter()
        .filter(|tag| {
            query::edges_by_tag(graph, key, tag).map_or(true, |hits| {
                hits.iter().any(|hit| {
                    !shown.contains(&hit.event_id) && !shown.contains(origin_of(&hit.event_id))
                })
            })
        })
        .cloned()
        .collect()
}

/// How many tags of a key the model is asked to score at most: twice the tags it keeps.
pub fn tag_candidates(tag_limit: usize) -> usize {
    tag_limit.saturating_mul(2).max(1)
}

/// The tags of `key` the model is asked to score: all of them when they are `cap` or fewer,
/// else the `cap` tags whose most similar event (`similarity` of an event id to the question)
/// is most similar, best first (ties in tag order): a coarse cut before the model's fine one,
/// as for the re-rank's candidates.
pub fn closest_tags(
    graph: &MemoryGraph,
    key: &str,
    tags: &[String],
    cap: usize,
    similarity: impl Fn(&str) -> f32,
) -> Vec<String> {
    if tags.len() <= cap {
        return tags.to_vec();
    }
    let best: Vec<f32> = tags
        .iter()
        .map(|tag| {
            query::edges_by_tag(graph, key, tag).map_or(f32::MIN, |hits| {
                hits.iter().map(|hit| similarity(&hit.event_id)).fold(f32::MIN, f32::max)
            })
        })
        .collect();
    top_k(&best, cap).into_iter().map(|index| tags[index].clone()).collect()
}

/// Tags to keep from a model's scores: scored tags that exist, score > 0 (a number, or a
/// string holding one), best first (ties in the key's tag order), at most `limit`. `None` when
/// no usable score came back.
pub fn select_tags(
    scores: &serde_json::Map<String, serde_json::Value>,
    tags: &[String],
    limit: usize,
) -> Option<Vec<(String, f64)>> {
    let number = |value: &Value| match value {
        Value::Number(number) => number.as_f64(),
        Value::String(text) => text.trim().parse::<f64>().ok().filter(|score| score.is_finite()),
        _ => None,
    };
    let mut scored: Vec<(usize, f64)> = tags
        .iter()
        .enumerate()
        .filter_map(|(index, tag)| {
            let score = scores.get(tag).and_then(number)?;
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

/// The keys of the question keywords, with their tags, before scoring.
#[derive(Debug, Default)]
pub(super) struct KeyPlan {
    keys: Vec<KeyTags>,
}

/// Step 4a: the keys of the question keywords (each once); they join `seen_keys`.
pub(super) fn plan_keys(
    input: &RetrieveInput<'_>,
    keywords: &[QueryKeyword],
    seen_keys: &mut BTreeSet<String>,
) -> KeyPlan {
    let mut plan = KeyPlan::default();
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
        plan.keys.push(key);
    }
    plan
}

/// Step 4b: the model scores the tags of the keys with more than `tag_max` tags (at most
/// [`tag_candidates`] of each, see [`closest_tags`]), all keys in one request; `None` for keys
/// that need no scoring or whose scoring fell back.
pub(super) async fn score_plan<M: ChatModel>(
    model: &M,
    input: &RetrieveInput<'_>,
    plan: &KeyPlan,
    trace: &mut TraceWriter,
) -> (Vec<Option<Vec<(String, f64)>>>, Usage) {
    let settings = input.settings;
    let cap = tag_candidates(settings.tag_limit);
    let cut: Vec<(&str, Vec<String>)> = plan
        .keys
        .iter()
        .filter(|key| key.tags.len() > settings.tag_max)
        .map(|key| {
            let tags =
                closest_tags(input.graph, &key.key, &key.tags, cap, |id| similarity(input, id));
            (key.key.as_str(), tags)
        })
        .collect();
    let wide: Vec<(&str, &[String])> =
        cut.iter().map(|(key, tags)| (*key, tags.as_slice())).collect();
    let (mut scored, usage) = score_keys_tags(
        model,
        &input.call,
        settings.tag_limit,
        &input.question.search_text,
        &wide,
        trace,
    )
    .await;
    scored.reverse();
    let all = plan
        .keys
        .iter()
        .map(|key| if key.tags.len() > settings.tag_max { scored.pop().flatten() } else { None })
        .collect();
    (all, usage)
}

/// Step 4c: the payload's key candidates from the plan and its scores; events of well-scored
/// tags are fetched, leaving out turns in `shown_origins` (which they join).
pub(super) fn key_candidates(
    input: &RetrieveInput<'_>,
    plan: KeyPlan,
    scores: Vec<Option<Vec<(String, f64)>>>,
    shown_origins: &mut BTreeSet<String>,
) -> KeyCandidates {
    let settings = input.settings;
    let mut found = KeyCandidates::default();
    for (key, scored) in plan.keys.into_iter().zip(scores) {
        if key.tags.len() <= settings.tag_max {
            found.candidates.push(json!({ "key": key.key, "tags": key.tags }));
            continue;
        }
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
