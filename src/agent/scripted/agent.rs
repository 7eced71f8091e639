//! The scripted answering agent: faults, telling the answer-stage requests apart, and the
//! question-keyword, re-rank and tag-score replies.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::{Value, json};

use super::loop_reply::loop_reply;
use super::words::{
    cue_words, event_id_of, message_text, overlap, question_words, quoted_question,
};
use crate::llm::scripted::{RecordedRequest, ScriptedReply};
use crate::prompts;
use crate::retrieval::dates::MONTHS;

/// A fault the scripted agent injects for questions whose text contains a marker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// The first loop request of the question gets this HTTP status (then normal replies).
    StatusOnce(u16),
    /// Every loop request of the question gets 503: the question fails after the retries.
    AlwaysUnavailable,
    /// The first loop request gets a 429 with `Retry-After: 1`.
    RateLimitedOnce,
    /// The first loop request is answered after this delay (longer than the client timeout).
    SlowOnce(Duration),
    /// The first loop request gets a truncated JSON body.
    MalformedOnce,
    /// The first loop reply calls a tool with arguments that are not JSON, and another with
    /// arguments that miss a field.
    InvalidToolArguments,
    /// The re-rank returns ids that are not among the candidates.
    BadRerank,
}

/// Options of the scripted agent.
#[derive(Debug, Clone, Default)]
pub struct AgentScript {
    /// Faults by marker: a question whose text contains the marker gets the fault.
    pub faults: Vec<(String, Fault)>,
    /// Delay added to every reply (to model endpoint latency in benchmarks).
    pub latency: Duration,
}

/// The kinds of answer-stage requests, told apart by their system prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ask {
    Keywords,
    Rerank,
    TagScores,
    Loop,
}

/// Whether a request belongs to the answer stage (an embedding, a question-keyword, re-rank or
/// tag-score prompt, or a loop request offering tools), so that tests can route other prompts
/// (the build stages') to another responder.
pub fn is_answer_request(request: &RecordedRequest) -> bool {
    if request.is_embeddings() || request.body.get("tools").is_some() {
        return true;
    }
    let system = message_text(request, 0);
    system == prompts::QUESTION_KEYWORDS.text
        || system == prompts::ANSWER_TAG_SCORES.text
        || system.starts_with(prompts::RERANK.text.lines().next().unwrap_or_default())
        || system.starts_with(prompts::ANSWER_SYSTEM.text.lines().next().unwrap_or_default())
        || system.starts_with(prompts::ANSWER_SINGLE.text.lines().next().unwrap_or_default())
}

/// A responder for `ScriptedServer::with_responder` playing the answering agent.
pub fn plausible_agent(
    script: AgentScript,
) -> impl Fn(&RecordedRequest) -> ScriptedReply + Send + Sync + 'static {
    // Replies already given per (question, fault), for the "once" faults.
    let counts: Arc<Mutex<BTreeMap<String, u32>>> = Arc::default();
    move |request: &RecordedRequest| {
        let reply = respond(&script, &counts, request);
        if script.latency.is_zero() { reply } else { reply.delayed(script.latency) }
    }
}

fn respond(
    script: &AgentScript,
    counts: &Mutex<BTreeMap<String, u32>>,
    request: &RecordedRequest,
) -> ScriptedReply {
    if request.is_embeddings() {
        return ScriptedReply::HashEmbeddings;
    }
    let system = message_text(request, 0);
    let ask = if system == prompts::QUESTION_KEYWORDS.text {
        Ask::Keywords
    } else if system == prompts::ANSWER_TAG_SCORES.text {
        Ask::TagScores
    } else if system.starts_with(prompts::RERANK.text.lines().next().unwrap_or_default()) {
        Ask::Rerank
    } else {
        Ask::Loop
    };
    let user = message_text(request, 1);
    let question = match ask {
        Ask::Keywords => quoted_question(&user),
        _ => serde_json::from_str::<Value>(&user)
            .ok()
            .and_then(|value| value.get("question").and_then(Value::as_str).map(str::to_string))
            .unwrap_or_default(),
    };
    let fault = script
        .faults
        .iter()
        .find(|(marker, _)| question.contains(marker.as_str()))
        .map(|(_, fault)| fault);
    let seen = |kind: &str| -> u32 {
        let mut counts = counts.lock().unwrap_or_else(PoisonError::into_inner);
        let count = counts.entry(format!("{question}\u{0}{kind}")).or_insert(0);
        *count += 1;
        *count
    };
    match ask {
        Ask::Keywords => ScriptedReply::json(&keywords_reply(&question)),
        Ask::TagScores => ScriptedReply::json(&tag_scores_reply(&user)),
        Ask::Rerank => {
            ScriptedReply::json(&rerank_reply(&question, &user, fault == Some(&Fault::BadRerank)))
        }
        Ask::Loop => {
            let first = seen("loop") == 1;
            match fault {
                Some(Fault::StatusOnce(status)) if first => ScriptedReply::server_error(*status),
                Some(Fault::AlwaysUnavailable) => ScriptedReply::server_error(503),
                Some(Fault::RateLimitedOnce) if first => ScriptedReply::rate_limited(1),
                Some(Fault::SlowOnce(delay)) if first => {
                    loop_reply(request, &question, false).delayed(*delay)
                }
                Some(Fault::MalformedOnce) if first => ScriptedReply::MalformedJson,
                Some(Fault::InvalidToolArguments) if first => loop_reply(request, &question, true),
                _ => loop_reply(request, &question, false),
            }
        }
    }
}

pub(super) fn keywords_reply(question: &str) -> Value {
    // The question as asked, without the category instructions appended to it.
    let asked = question.split_once('?').map_or(question, |(head, _)| head);
    let keywords: Vec<Value> = cue_words(asked)
        .into_iter()
        .map(|word| {
            let alternative =
                word.strip_suffix('s').map_or_else(|| format!("{word}s"), str::to_string);
            json!({ "id": word, "alternatives": [alternative] })
        })
        .collect();
    // "in May 2023" → the whole month.
    let lower = asked.to_lowercase();
    let words: Vec<&str> = crate::text::alphanumeric_runs(&lower).collect();
    let mut question_time = String::new();
    for pair in words.windows(2) {
        if let Some(month) = MONTHS.iter().position(|name| *name == pair[0])
            && let Ok(year) = pair[1].parse::<i32>()
            && (1900..2100).contains(&year)
        {
            let start = chrono::NaiveDate::from_ymd_opt(year, month as u32 + 1, 1);
            let end = start
                .and_then(|start| start.checked_add_months(chrono::Months::new(1)))
                .and_then(|next| next.pred_opt());
            if let (Some(start), Some(end)) = (start, end) {
                question_time = format!("{start}, {end}");
            }
        }
    }
    json!({ "question_time": question_time, "keywords": keywords })
}

fn tag_scores_reply(user: &str) -> Value {
    let input: Value = serde_json::from_str(user).unwrap_or_default();
    let keywords = input.get("keywords").and_then(Value::as_object).cloned().unwrap_or_default();
    let scores: serde_json::Map<String, Value> = keywords
        .iter()
        .map(|(keyword, tags)| {
            let tags = tags.as_array().map(Vec::as_slice).unwrap_or_default();
            let scored: serde_json::Map<String, Value> = tags
                .iter()
                .filter_map(Value::as_str)
                .enumerate()
                .map(|(index, tag)| {
                    let score = match index {
                        0 => 0.9,
                        1..4 => 0.5,
                        _ => 0.0,
                    };
                    (tag.to_string(), json!(score))
                })
                .collect();
            (keyword.clone(), Value::Object(scored))
        })
        .collect();
    json!({ "tag_scores": scores })
}

fn rerank_reply(question: &str, user: &str, garbage: bool) -> Value {
    if garbage {
        return json!({ "mode": "sort", "events": ["D999:1-1", "not an id"] });
    }
    let input: Value = serde_json::from_str(user).unwrap_or_default();
    let lines: Vec<String> = input
        .get("similar_sentence")
        .and_then(Value::as_array)
        .map(|lines| lines.iter().filter_map(Value::as_str).map(str::to_string).collect())
        .unwrap_or_default();
    let words = question_words(question);
    let mut scored: Vec<(usize, usize, String)> = lines
        .iter()
        .enumerate()
        .map(|(index, line)| (overlap(&words, line), index, event_id_of(line)))
        .collect();
    scored.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let events: Vec<String> = scored.into_iter().take(10).map(|(_, _, id)| id).collect();
    json!({ "mode": "sort", "events": events })
}
