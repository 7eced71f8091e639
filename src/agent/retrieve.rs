//! Pre-loop retrieval for one question (spec §9.1–§9.5, §9.7): what the model sees before its
//! first tool call.
//!
//! Steps: the model extracts the question's keywords (with alternatives) and an optional date
//! window; the keywords are matched fuzzily against the graph's keys; a valid date window routes
//! through the timeline; otherwise candidate events are ranked by embedding similarity to the
//! question and re-ranked by the model to at most `k2`; keywords whose keys carry more than
//! `tag_max` tags get their tags scored by the model; the `topic_k` nearest topics are added.
//!
//! Fixes over the reference (§17): a re-rank that returns nothing usable falls back to the
//! similarity order, so the context is never empty when candidates exist (item 9); an empty or
//! `''` time constraint means "no window" instead of an error (item 6); a month-day window that
//! wraps past New Year covers both halves (item 7); ties are broken by candidate order, never by
//! hash order (item 21).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;
use std::time::Instant;

use chrono::{Datelike, NaiveDate};
use regex::Regex;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::agent::question::PreparedQuestion;
use crate::agent::run::origin_of;
use crate::agent::trace::{TraceEvent, TraceWriter};
use crate::dataset::DatasetKind;
use crate::ingest::SampleEmbeddings;
use crate::llm::structured::chat_json;
use crate::llm::{ChatModel, ChatRequest, JsonSchemaSpec, Message, Usage};
use crate::memory::query::{self, EventMatch, QueryKeyword};
use crate::memory::{MemoryGraph, normalize_key};
use crate::prompts;
use crate::retrieval::vector::{dot, top_k};

/// Numeric knobs of retrieval (spec §16).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RetrievalSettings {
    /// Coarse cap: candidates kept by embedding similarity before the re-rank (`K1`).
    pub k1: usize,
    /// Fine cap: events kept after the re-rank (`K2`); also the `edges_by_tag` cut.
    pub k2: usize,
    /// Topics shown (`TOPIC_K`).
    pub topic_k: usize,
    /// Keys with more tags than this get their tags scored by the model (`TAG_MAX`).
    pub tag_max: usize,
    /// Tags kept after scoring (`TAG_LIMIT`).
    pub tag_limit: usize,
    /// Scored tags at or above this have their events fetched up front.
    pub tag_fetch_threshold: f64,
    /// A date window with fewer events than this is shown whole (`TIME_EVENT_LIMIT`).
    pub time_event_limit: usize,
    /// Partial keyword matches need at least this many matched question keywords (main route).
    pub min_matched_keys: usize,
    /// Re-asks allowed for each structured retrieval call.
    pub max_reasks: u32,
}

impl Default for RetrievalSettings {
    fn default() -> Self {
        Self {
            k1: 80,
            k2: 20,
            topic_k: 8,
            tag_max: 15,
            tag_limit: 10,
            tag_fetch_threshold: 0.7,
            time_event_limit: 50,
            min_matched_keys: 2,
            max_reasks: 2,
        }
    }
}

/// Everything retrieval reads for one question.
#[derive(Debug, Clone, Copy)]
pub struct RetrieveInput<'a> {
    /// The conversation's memory.
    pub graph: &'a MemoryGraph,
    /// Its embeddings.
    pub vectors: &'a SampleEmbeddings,
    /// The question's embedding.
    pub question_vector: &'a [f32],
    /// The prepared question.
    pub question: &'a PreparedQuestion,
    /// Dataset (selects the temporal route).
    pub dataset: DatasetKind,
    /// Knobs.
    pub settings: &'a RetrievalSettings,
    /// How the retrieval calls are made.
    pub call: CallSettings<'a>,
}

/// How the structured model calls of the answer stage are made.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CallSettings<'a> {
    /// Model id.
    pub model: &'a str,
    /// Sampling temperature.
    pub temperature: Option<f32>,
    /// Provider seed.
    pub seed: Option<i64>,
    /// Re-asks allowed when the reply breaks its schema.
    pub max_reasks: u32,
}

/// What retrieval hands to the loop.
#[derive(Debug, Clone, PartialEq)]
pub struct Retrieved {
    /// The user message of the loop (`question`, `key_sentences`, `keys_candidates`, ...).
    pub payload: Value,
    /// Normalised keys already shown (question keywords and key candidates).
    pub seen_keys: BTreeSet<String>,
    /// Tokens of the retrieval calls.
    pub usage: Usage,
}

/// Why retrieval failed (the question is recorded as failed and retried on the next run).
#[derive(Debug, thiserror::Error)]
#[error("question keyword extraction failed: {0}")]
pub struct RetrieveError(#[from] crate::llm::Error);

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

fn rerank_schema() -> JsonSchemaSpec {
    JsonSchemaSpec {
        name: "rerank".into(),
        schema: json!({
            "type": "object",
            "properties": {
                "mode": { "type": "string" },
                "events": { "type": "array", "items": { "type": "string" } }
            },
            "required": ["mode", "events"],
            "additionalProperties": false
        }),
    }
}

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

/// One structured call of the answer stage, traced; the usage counts every attempt that
/// returned.
async fn ask_json<M: ChatModel>(
    model: &M,
    call: &CallSettings<'_>,
    purpose: &str,
    system: String,
    user: String,
    schema: &JsonSchemaSpec,
    trace: &mut TraceWriter,
) -> (Result<Value, crate::llm::Error>, Usage) {
    let mut request =
        ChatRequest::new(call.model, vec![Message::system(system), Message::user(user)]);
    request.temperature = call.temperature;
    request.seed = call.seed;
    let messages = request.messages.clone();
    let started = Instant::now();
    let result = chat_json(model, request, schema, call.max_reasks).await;
    let ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let (value, error, attempts, usage) = match &result {
        Ok(response) => (Some(response.value.clone()), None, response.attempts, response.usage),
        Err(error) => (None, Some(error.to_string()), attempts_of(error), Usage::default()),
    };
    trace.record(TraceEvent::Llm {
        purpose: purpose.into(),
        messages,
        value,
        error,
        attempts,
        usage,
        ms,
    });
    (result.map(|response| response.value), usage)
}

fn attempts_of(error: &crate::llm::Error) -> u32 {
    match error {
        crate::llm::Error::RateLimited { attempts, .. }
        | crate::llm::Error::Api { attempts, .. }
        | crate::llm::Error::Timeout { attempts, .. }
        | crate::llm::Error::Connection { attempts, .. }
        | crate::llm::Error::SchemaInvalid { attempts, .. } => *attempts,
        _ => 1,
    }
}

/// The payload's `question` wrapped for the retrieval prompts.
fn quoted_question(text: &str) -> String {
    format!("QUESTION: <<<{}>>>", Value::String(text.to_string()))
}

/// Runs the whole pre-loop retrieval for one question.
pub async fn retrieve<M: ChatModel>(
    model: &M,
    input: &RetrieveInput<'_>,
    trace: &mut TraceWriter,
) -> Result<Retrieved, RetrieveError> {
    let settings = input.settings;
    let mut usage = Usage::default();
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
    usage += cost;
    let analysis: QuestionKeywords = serde_json::from_value(value?).map_err(|error| {
        crate::llm::Error::Decode { message: format!("question keywords: {error}") }
    })?;
    let window = parse_time_window(&analysis.question_time);
    let matches = query::match_keywords(input.graph, &analysis.keywords);
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
    let mut seen_keys: BTreeSet<String> = analysis
        .keywords
        .iter()
        .map(|keyword| normalize_key(&keyword.id))
        .filter(|key| !key.is_empty())
        .collect();

    let mut payload = serde_json::Map::new();
    payload.insert("question".into(), json!(input.question.text));
    if let Some(window) = window {
        let routed = time_route(input, &window, &matches);
        trace.record(TraceEvent::Retrieval {
            step: "time_route".into(),
            detail: json!({ "window_events": routed.window_events, "shown": routed.sentences.len() }),
        });
        if !routed.sentences.is_empty() {
            match input.dataset {
                DatasetKind::Locomo => {
                    payload.insert("similar_sentence".into(), json!(routed.sentences));
                }
                DatasetKind::LongMemEval | DatasetKind::Own => {
                    let sentences = if routed.sentences.len() > settings.k2 && !routed.whole_window
                    {
                        let (kept, cost) = rerank(model, input, routed.sentences, trace).await;
                        usage += cost;
                        kept
                    } else {
                        routed.sentences
                    };
                    payload.insert("key_sentences".into(), json!(sentences));
                }
            }
            if let Some(date) = &input.question.current_date {
                payload.insert("current_date".into(), json!(date));
            }
            return Ok(Retrieved { payload: Value::Object(payload), seen_keys, usage });
        }
    }

    // Main route: keyword candidates ranked by similarity, then re-ranked by the model.
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
        usage += cost;
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
    let mut shown_origins: BTreeSet<String> =
        key_sentences.iter().map(|line| origin_of(line_id(line)).to_string()).collect();

    // Keys of the question keywords, with their tags (scored when there are too many).
    let mut keys_candidates = Vec::new();
    let mut key_tag_sentences = Vec::new();
    let mut listed = BTreeSet::new();
    for keyword in &analysis.keywords {
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
            keys_candidates.push(json!({ "key": key.key, "tags": key.tags }));
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
        usage += cost;
        let tags: Vec<String> = match &scored {
            Some(scored) => scored.iter().map(|(tag, _)| tag.clone()).collect(),
            None => key.tags.iter().take(settings.tag_limit).cloned().collect(),
        };
        keys_candidates.push(json!({ "key": key.key, "tags": tags }));
        for (tag, score) in scored.unwrap_or_default() {
            if score < settings.tag_fetch_threshold {
                continue;
            }
            let Ok(hits) = query::edges_by_tag(input.graph, &key.key, &tag) else { continue };
            let scores: Vec<f32> =
                hits.iter().map(|hit| similarity(input, &hit.event_id)).collect();
            let events: Vec<String> = top_k(&scores, settings.k2)
                .into_iter()
                .map(|index| &hits[index])
                .filter(|hit| shown_origins.insert(origin_of(&hit.event_id).to_string()))
                .map(ToString::to_string)
                .collect();
            if !events.is_empty() {
                key_tag_sentences.push(json!({ "key": key.key, "tag": tag, "events": events }));
            }
        }
    }

    // The nearest topics.
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
    let similar_topic: Vec<String> = top_k(&topic_scores, settings.topic_k)
        .into_iter()
        .map(|index| format!("{}:{}", topics[index].0, topics[index].1))
        .collect();

    payload.insert("key_sentences".into(), json!(key_sentences));
    payload.insert("keys_candidates".into(), json!(keys_candidates));
    payload.insert("key_tag_sentences".into(), json!(key_tag_sentences));
    payload.insert("similar_topic".into(), json!(similar_topic));
    if let Some(date) = &input.question.current_date {
        payload.insert("current_date".into(), json!(date));
    }
    Ok(Retrieved { payload: Value::Object(payload), seen_keys, usage })
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

/// The id part of an `id:text` line.
fn line_id(line: &str) -> &str {
    // Ids look like `D3:5-1`: the second `:` starts the text.
    let mut colons = line.match_indices(':').map(|(index, _)| index);
    match (colons.next(), colons.next()) {
        (Some(_), Some(second)) => &line[..second],
        _ => line,
    }
}

fn similarity(input: &RetrieveInput<'_>, event_id: &str) -> f32 {
    input
        .vectors
        .sentences
        .get(event_id)
        .map_or(f32::MIN, |vector| dot(vector, input.question_vector))
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

/// The date-window route's events.
struct TimeRouted {
    /// `Time:<date> <id>:<text>` lines.
    sentences: Vec<String>,
    /// Events in the window.
    window_events: usize,
    /// Whether the whole window is shown (it was small).
    whole_window: bool,
}

fn time_route(
    input: &RetrieveInput<'_>,
    window: &TimeWindow,
    matches: &query::KeywordMatches,
) -> TimeRouted {
    let settings = input.settings;
    let years = years_of(input.graph.episodes().filter_map(|episode| episode.date));
    let mut events = Vec::new();
    let mut origins = BTreeSet::new();
    for (from, to) in window.ranges(&years) {
        for event in query::events_between(input.graph, from, to) {
            if origins.insert(origin_of(&event.event_id).to_string()) {
                events.push(event);
            }
        }
    }
    let limit = match input.dataset {
        DatasetKind::Locomo => settings.time_event_limit,
        DatasetKind::LongMemEval | DatasetKind::Own => settings.k2,
    };
    let dates: BTreeMap<String, NaiveDate> =
        events.iter().map(|event| (origin_of(&event.event_id).to_string(), event.date)).collect();
    let window_events = events.len();
    if events.len() < limit {
        let sentences = events
            .iter()
            .map(|event| format!("Time:{} {}:{}", event.date, event.event_id, event.text))
            .collect();
        return TimeRouted { sentences, window_events, whole_window: true };
    }
    // A busy window: keep the events some question keyword reaches.
    let mut shown = BTreeSet::new();
    let mut reached: Vec<&EventMatch> = matches
        .full
        .iter()
        .chain(&matches.partial)
        .filter(|found| dates.contains_key(&found.origin) && shown.insert(found.origin.clone()))
        .collect();
    if input.dataset == DatasetKind::LongMemEval {
        let ids: Vec<(usize, f32)> = reached
            .iter()
            .enumerate()
            .map(|(index, found)| (index, similarity(input, &found.event_id)))
            .collect();
        let mut order: Vec<(usize, f32)> = ids;
        order.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        order.truncate(settings.k1);
        reached = order.into_iter().map(|(index, _)| reached[index]).collect();
    }
    let sentences = reached
        .iter()
        .map(|found| {
            let date = dates.get(&found.origin).map(ToString::to_string).unwrap_or_default();
            format!("Time:{date} {}:{}", found.event_id, found.text)
        })
        .collect();
    TimeRouted { sentences, window_events, whole_window: false }
}

/// The model's pick of at most `k2` lines; the similarity order when its reply is unusable.
async fn rerank<M: ChatModel>(
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
    let returned: Vec<String> = value
        .ok()
        .and_then(|value| value.get("events").cloned())
        .and_then(|events| serde_json::from_value(events).ok())
        .unwrap_or_default();
    let picked = map_reranked(&returned, &ids, limit);
    trace.record(TraceEvent::Retrieval {
        step: "rerank".into(),
        detail: json!({ "returned": returned.len(), "kept": picked.as_ref().map_or(0, Vec::len), "fallback": picked.is_none() }),
    });
    let kept = match picked {
        Some(positions) => positions.into_iter().map(|index| lines[index].clone()).collect(),
        None => lines.into_iter().take(limit).collect(),
    };
    (kept, usage)
}

/// For `Time:<date> <id>:<text>` lines, the part from the id on.
fn line_id_of_dated(line: &str) -> &str {
    match line.strip_prefix("Time:") {
        Some(rest) => rest.split_once(' ').map_or(rest, |(_, tail)| tail),
        None => line,
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

/// A date constraint extracted from a question.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeWindow {
    /// Inclusive full-date range.
    Dates(NaiveDate, NaiveDate),
    /// Inclusive month-day range in an unknown year: applied to every year of the timeline.
    MonthDays((u32, u32), (u32, u32)),
}

static FULL_RANGE: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(
        r"^(\d{4})-(\d{1,2})-(\d{1,2})(?:\s*(?:,|to|~|–|—|/)\s*(\d{4})-(\d{1,2})-(\d{1,2}))?$",
    )
    .ok()
});
static MONTH_DAY_RANGE: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"^(\d{1,2})-(\d{1,2})(?:\s*(?:,|to|~|–|—|/)\s*(\d{1,2})-(\d{1,2}))?$").ok()
});

/// Reads the model's `question_time`: `YYYY-MM-DD, YYYY-MM-DD`, `MM-DD, MM-DD`, or a single date
/// of either form (a one-day window). Empty, quoted-empty or malformed text means no window; a
/// reversed range is put in order.
pub fn parse_time_window(text: &str) -> Option<TimeWindow> {
    let text = text.trim().trim_matches(|c| c == '\'' || c == '"').trim();
    if text.is_empty() {
        return None;
    }
    let number = |captures: &regex::Captures<'_>, index: usize| -> Option<u32> {
        captures.get(index).and_then(|group| group.as_str().parse().ok())
    };
    if let Some(captures) = FULL_RANGE.as_ref().and_then(|regex| regex.captures(text)) {
        let year = |index| number(&captures, index).and_then(|year| i32::try_from(year).ok());
        let start =
            NaiveDate::from_ymd_opt(year(1)?, number(&captures, 2)?, number(&captures, 3)?)?;
        let end = if captures.get(4).is_some() {
            NaiveDate::from_ymd_opt(year(4)?, number(&captures, 5)?, number(&captures, 6)?)?
        } else {
            start
        };
        return Some(TimeWindow::Dates(start.min(end), start.max(end)));
    }
    if let Some(captures) = MONTH_DAY_RANGE.as_ref().and_then(|regex| regex.captures(text)) {
        let start = (number(&captures, 1)?, number(&captures, 2)?);
        let end = if captures.get(3).is_some() {
            (number(&captures, 3)?, number(&captures, 4)?)
        } else {
            start
        };
        // Validate against a leap year so that 02-29 is accepted.
        NaiveDate::from_ymd_opt(2024, start.0, start.1)?;
        NaiveDate::from_ymd_opt(2024, end.0, end.1)?;
        return Some(TimeWindow::MonthDays(start, end));
    }
    None
}

impl TimeWindow {
    /// Inclusive date ranges of the window, given the years the timeline covers. A month-day
    /// window becomes one range per year; one that wraps past New Year (`12-20, 01-10`) runs
    /// into the next year. Invalid days in a year (Feb 29) are skipped.
    pub fn ranges(&self, years: &BTreeSet<i32>) -> Vec<(NaiveDate, NaiveDate)> {
        match *self {
            TimeWindow::Dates(start, end) => vec![(start, end)],
            TimeWindow::MonthDays(start, end) => {
                let wraps = start > end;
                years
                    .iter()
                    .filter_map(|&year| {
                        let from = NaiveDate::from_ymd_opt(year, start.0, start.1)?;
                        let to_year = if wraps { year + 1 } else { year };
                        let to = NaiveDate::from_ymd_opt(to_year, end.0, end.1)?;
                        Some((from, to))
                    })
                    .collect()
            }
        }
    }
}

/// Years present in a set of dates.
pub fn years_of(dates: impl IntoIterator<Item = NaiveDate>) -> BTreeSet<i32> {
    dates.into_iter().map(|date| date.year()).collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn date(text: &str) -> NaiveDate {
        NaiveDate::parse_from_str(text, "%Y-%m-%d").unwrap_or_default()
    }

    #[test]
    fn time_windows() {
        let check = |text: &str, expected: Option<TimeWindow>| {
            assert_eq!(parse_time_window(text), expected, "{text}")
        };
        check("", None);
        check("''", None);
        check("sometime in spring", None);
        check(
            "2023-05-01, 2023-05-31",
            Some(TimeWindow::Dates(date("2023-05-01"), date("2023-05-31"))),
        );
        check(
            "2023-05-31 to 2023-05-01",
            Some(TimeWindow::Dates(date("2023-05-01"), date("2023-05-31"))),
        );
        check("2023-05-07", Some(TimeWindow::Dates(date("2023-05-07"), date("2023-05-07"))));
        check("2023-02-30, 2023-03-01", None);
        check("05-01, 05-31", Some(TimeWindow::MonthDays((5, 1), (5, 31))));
        check("13-01, 13-05", None);
    }

    #[test]
    fn month_day_windows_cover_every_year_and_wrap() {
        let years = years_of([date("2022-06-01"), date("2023-01-05")]);
        let window = TimeWindow::MonthDays((12, 20), (1, 10));
        assert_eq!(
            window.ranges(&years),
            vec![
                (date("2022-12-20"), date("2023-01-10")),
                (date("2023-12-20"), date("2024-01-10"))
            ]
        );
        let leap = TimeWindow::MonthDays((2, 29), (3, 1));
        assert_eq!(
            leap.ranges(&years_of([date("2023-01-01"), date("2024-01-01")])),
            vec![(date("2024-02-29"), date("2024-03-01"))]
        );
    }

    #[test]
    fn ranking_helpers_are_stable() {
        let ids: Vec<String> =
            ["D1:1-1", "D1:2-1", "D1:2-2", "D2:5-1"].iter().map(|s| s.to_string()).collect();
        let returned: Vec<String> = ["D2:5-1", "D1:2", "D9:9-1", "D2:5-1", "D1:1-1: Caroline: hi"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(map_reranked(&returned, &ids, 20), Some(vec![3, 1, 0]));
        assert_eq!(map_reranked(&returned, &ids, 2), Some(vec![3, 1]));
        assert_eq!(map_reranked(&["D7:7".to_string()], &ids, 20), None);
        assert_eq!(map_reranked(&[], &ids, 20), None);
        let tags: Vec<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
        let scores = serde_json::json!({"c": 0.9, "a": 0.9, "b": 0, "zzz": 1.0});
        let selected =
            select_tags(scores.as_object().unwrap_or(&serde_json::Map::new()), &tags, 10);
        assert_eq!(selected, Some(vec![("a".to_string(), 0.9), ("c".to_string(), 0.9)]));
    }
}
