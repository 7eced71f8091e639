//! Test support for the answer engine: a memory built mechanically from a conversation (no
//! model), and a responder for the scripted endpoint (`llm::scripted`) that plays a plausible
//! answering agent, with fault injection.
//!
//! Used by the integration tests, the `run` benchmark and offline demos; nothing in the
//! pipeline calls it. The mechanical memory stands in for the three LLM build stages: one
//! sentence per turn (dated with its session), one topic per session, one personal fact per
//! turn, keywords = the turn's content words, hashed bag-of-words embeddings (the same vectors
//! the scripted endpoint returns for `/v1/embeddings`). The agent answers every answer-stage
//! prompt by content: question keywords from the question's words, a re-rank that keeps the
//! candidates sharing most words with the question, tag scores, and a loop that calls tools for
//! two rounds (all seven tools get used across questions) and then answers with the event that
//! best overlaps the question.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use indexmap::IndexMap;
use serde_json::{Value, json};

use crate::agent::SampleMemory;
use crate::dataset::Conversation;
use crate::ingest::SampleEmbeddings;
use crate::llm::ToolCall;
use crate::llm::scripted::{HASH_EMBEDDING_DIM, RecordedRequest, ScriptedReply, hashed_embedding};
use crate::memory::input::{
    PersonalFact, RewrittenSentence, SentenceKeywords, SessionKeywords, SessionRewrite, TopicInput,
};
use crate::memory::{self, build_graph};
use crate::prompts;
use crate::retrieval::dates::MONTHS;

/// Words never used as keywords or tags by the mechanical memory and the scripted agent.
const STOP_WORDS: &[&str] = &[
    "about",
    "after",
    "also",
    "been",
    "being",
    "could",
    "did",
    "does",
    "doing",
    "from",
    "have",
    "into",
    "just",
    "like",
    "more",
    "much",
    "that",
    "their",
    "them",
    "then",
    "there",
    "they",
    "this",
    "what",
    "when",
    "where",
    "which",
    "while",
    "will",
    "with",
    "would",
    "your",
    "yours",
    "were",
    "with",
    "who",
    "whom",
    "whose",
    "how",
    "why",
    "the",
    "and",
    "for",
    "you",
    "are",
    "was",
    "she",
    "her",
    "his",
    "him",
    "our",
    "its",
    "not",
    "but",
    "has",
    "had",
    "any",
    "all",
    "can",
    "one",
    "too",
    "very",
    "some",
    "said",
    "answer",
    "choose",
    "these",
    "those",
    "mentioned",
    "conversation",
    "likely",
    "enjoy",
];

/// The content words of a text: lowercase alphanumeric words of at least four characters that
/// are not stop words, in order, without repeats.
pub fn content_words(text: &str) -> Vec<String> {
    let mut seen = BTreeSet::new();
    text.split(|c: char| !c.is_alphanumeric())
        .map(str::to_lowercase)
        .filter(|word| word.chars().count() >= 4 && !STOP_WORDS.contains(&word.as_str()))
        .filter(|word| seen.insert(word.clone()))
        .collect()
}

/// A memory for `conversation` built without any model (see the module doc). With
/// `embed_questions`, question vectors are included; without, the pipeline embeds each question
/// through the embedder.
pub fn mechanical_memory(
    conversation: &Conversation,
    embed_questions: bool,
) -> Result<SampleMemory, memory::Error> {
    let dims = HASH_EMBEDDING_DIM;
    let mut rewrites = Vec::new();
    let mut keywords = Vec::new();
    let mut embeddings =
        SampleEmbeddings { embedder: "hashed".into(), dims, ..SampleEmbeddings::default() };
    for session in &conversation.sessions {
        let session_id = session.id();
        let mut sentences = Vec::new();
        let mut facts = Vec::new();
        let mut items = Vec::new();
        let mut session_words = Vec::new();
        for (index, turn) in session.turns.iter().enumerate() {
            let text = turn.display();
            let words = content_words(&text);
            let tag = tag_of(&words);
            let sentence_id = format!("{}-1", turn.dia_id);
            embeddings.sentences.insert(sentence_id.clone(), hashed_embedding(&text, dims));
            sentences.push(RewrittenSentence {
                id: sentence_id.clone(),
                origin: turn.dia_id.clone(),
                text: text.clone(),
                date: session.date,
                tag: tag.clone(),
                topic_ids: vec![format!("{session_id}:t1")],
            });
            facts.push(PersonalFact {
                id: format!("{session_id}:p{}", index + 1),
                person: turn.speaker.clone(),
                aspect: tag,
                fact: turn.text.clone(),
                origins: vec![turn.dia_id.clone()],
            });
            session_words.extend(words.iter().take(3).cloned());
            items.push(SentenceKeywords { sentence_id, keywords: words });
        }
        let topic_text = format!("Session {} talk: {}", session.index, session_words.join(", "));
        embeddings.topics.insert(format!("{session_id}:t1"), hashed_embedding(&topic_text, dims));
        rewrites.push(SessionRewrite {
            session: session_id.clone(),
            conversation_time: session.date,
            sentences,
            topics: vec![TopicInput { id: format!("{session_id}:t1"), text: topic_text }],
            personal_facts: facts,
        });
        keywords.push(SessionKeywords { session: session_id, sentences: items });
    }
    if embed_questions {
        let questions: IndexMap<String, Vec<f32>> = conversation
            .questions
            .iter()
            .map(|question| (question.id.clone(), hashed_embedding(&question.question, dims)))
            .collect();
        embeddings.questions = questions;
    }
    let graph = build_graph(conversation, &rewrites, &keywords)?;
    Ok(SampleMemory { conversation: conversation.clone(), graph, embeddings, memgas: None })
}

/// The longest content word, capitalised (first on ties); `Chat` when there is none.
fn tag_of(words: &[String]) -> String {
    let longest = words.iter().fold(None::<&String>, |best, word| match best {
        Some(best) if best.chars().count() >= word.chars().count() => Some(best),
        _ => Some(word),
    });
    match longest {
        Some(word) => {
            let mut chars = word.chars();
            chars
                .next()
                .map(|first| first.to_uppercase().chain(chars).collect())
                .unwrap_or_default()
        }
        None => "Chat".into(),
    }
}

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

fn message_text(request: &RecordedRequest, index: usize) -> String {
    request
        .messages()
        .get(index)
        .and_then(|message| message.get("content"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// The question inside `QUESTION: <<<"…">>>`.
fn quoted_question(user: &str) -> String {
    let inner = user
        .split_once("<<<")
        .and_then(|(_, rest)| rest.rsplit_once(">>>"))
        .map(|(inner, _)| inner);
    inner.and_then(|inner| serde_json::from_str::<String>(inner).ok()).unwrap_or_default()
}

fn keywords_reply(question: &str) -> Value {
    // The question as asked, without the category instructions appended to it.
    let asked = question.split_once('?').map_or(question, |(head, _)| head);
    let keywords: Vec<Value> = content_words(asked)
        .into_iter()
        .map(|word| {
            let alternative =
                word.strip_suffix('s').map_or_else(|| format!("{word}s"), str::to_string);
            json!({ "id": word, "alternatives": [alternative] })
        })
        .collect();
    // "in May 2023" → the whole month.
    let lower = asked.to_lowercase();
    let words: Vec<&str> =
        lower.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).collect();
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
    let tags: Vec<String> = input
        .get("tags")
        .and_then(Value::as_array)
        .map(|tags| tags.iter().filter_map(Value::as_str).map(str::to_string).collect())
        .unwrap_or_default();
    let scores: serde_json::Map<String, Value> = tags
        .iter()
        .enumerate()
        .map(|(index, tag)| {
            (
                tag.clone(),
                json!(if index == 0 {
                    0.9
                } else if index < 4 {
                    0.5
                } else {
                    0.0
                }),
            )
        })
        .collect();
    json!({ "keyword": input.get("keyword").cloned().unwrap_or_default(), "tag_scores": scores })
}

/// Word overlap between the question and a line, comparing five-letter stems (so `adopt` meets
/// `adopted` and `kitten` meets `kittens`).
fn overlap(question_stems: &BTreeSet<String>, line: &str) -> usize {
    let line_stems: BTreeSet<String> = content_words(line).iter().map(|word| stem(word)).collect();
    line_stems.intersection(question_stems).count()
}

fn stem(word: &str) -> String {
    word.chars().take(5).collect()
}

/// Stems of the question as asked (the category instructions after the `?` left out).
fn question_words(question: &str) -> BTreeSet<String> {
    let asked = question.split_once('?').map_or(question, |(head, _)| head);
    content_words(asked).iter().map(|word| stem(word)).collect()
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

/// `D1:2-1` from `D1:2-1:Speaker: text` or `Time:2023-05-06 D1:2-1:Speaker: text`.
fn event_id_of(line: &str) -> String {
    let line = line
        .strip_prefix("Time:")
        .and_then(|rest| rest.split_once(' '))
        .map_or(line, |(_, tail)| tail);
    let mut parts = line.splitn(3, ':');
    match (parts.next(), parts.next()) {
        (Some(session), Some(turn)) => format!("{session}:{turn}"),
        _ => line.to_string(),
    }
}

/// Every `id:text` line the agent has seen: the payload's sentences and the tool results.
fn seen_lines(request: &RecordedRequest) -> Vec<String> {
    let mut lines = Vec::new();
    let mut collect = |value: &Value| {
        for key in ["key_sentences", "similar_sentence", "events", "turns"] {
            // (`query_memgas` turns are `<dia_id>:<text> (session date: …)` lines, like context turns.)
            if let Some(items) = value.get(key).and_then(Value::as_array) {
                lines.extend(items.iter().filter_map(Value::as_str).map(str::to_string));
            }
        }
        if let Some(groups) = value.get("key_tag_sentences").and_then(Value::as_array) {
            for group in groups {
                if let Some(items) = group.get("events").and_then(Value::as_array) {
                    lines.extend(items.iter().filter_map(Value::as_str).map(str::to_string));
                }
            }
        }
    };
    for message in request.messages() {
        let role = message.get("role").and_then(Value::as_str).unwrap_or_default();
        if role != "user" && role != "tool" {
            continue;
        }
        if let Some(value) = message
            .get("content")
            .and_then(Value::as_str)
            .and_then(|text| serde_json::from_str::<Value>(text).ok())
        {
            collect(&value);
        }
    }
    lines
}

fn tool_results(request: &RecordedRequest) -> Vec<Value> {
    request
        .messages()
        .iter()
        .filter(|message| message.get("role").and_then(Value::as_str) == Some("tool"))
        .filter_map(|message| message.get("content").and_then(Value::as_str))
        .filter_map(|text| serde_json::from_str(text).ok())
        .collect()
}

fn loop_reply(request: &RecordedRequest, question: &str, invalid_arguments: bool) -> ScriptedReply {
    let final_round = request.body.get("tool_choice").and_then(Value::as_str) == Some("none");
    let tool_rounds = request
        .messages()
        .iter()
        .filter(|message| {
            message
                .get("tool_calls")
                .and_then(Value::as_array)
                .is_some_and(|calls| !calls.is_empty())
        })
        .count();
    let words = question_words(question);
    let lines = seen_lines(request);
    let best = lines
        .iter()
        .enumerate()
        .max_by(|a, b| overlap(&words, a.1).cmp(&overlap(&words, b.1)).then(b.0.cmp(&a.0)))
        .map(|(_, line)| line.clone());
    let best_id = best.as_deref().map(event_id_of);
    let payload: Value = serde_json::from_str(&message_text(request, 1)).unwrap_or_default();
    let results = tool_results(request);
    let asks_when = question.to_lowercase().starts_with("when");

    if !final_round && tool_rounds == 0 {
        let mut calls = Vec::new();
        if invalid_arguments {
            calls.push(call("edges_by_tag", r#"{"key": "pixel", "tag": "#.to_string()));
            calls.push(call("query_personal_aspect", json!({ "person": "Lena" }).to_string()));
        }
        if let Some(id) = &best_id {
            calls.push(call("query_event_context", json!({ "event_id": id }).to_string()));
            if asks_when {
                calls.push(call("query_conversation_time", json!({ "event_id": id }).to_string()));
            }
        }
        if let Some(candidate) =
            payload.get("keys_candidates").and_then(Value::as_array).and_then(|keys| keys.first())
            && let (Some(key), Some(tag)) = (
                candidate.get("key").and_then(Value::as_str),
                candidate
                    .get("tags")
                    .and_then(Value::as_array)
                    .and_then(|tags| tags.first())
                    .and_then(Value::as_str),
            )
        {
            calls.push(call(
                "edges_by_tag",
                json!({ "key": key, "tag": tag, "note": "follow the cue" }).to_string(),
            ));
        }
        if let Some(topic) = payload
            .get("similar_topic")
            .and_then(Value::as_array)
            .and_then(|topics| topics.first())
            .and_then(Value::as_str)
        {
            let id = event_id_of(topic);
            calls.push(call("query_topic_events", json!({ "topic": id }).to_string()));
        }
        if let Some(person) = capitalised_name(question) {
            calls.push(call("query_personal_information", json!({ "person": person }).to_string()));
        }
        let offers_memgas =
            request.body.get("tools").and_then(Value::as_array).is_some_and(|tools| {
                tools.iter().any(|tool| tool["function"]["name"] == "query_memgas")
            });
        if offers_memgas {
            let asked = question.split_once('?').map_or(question, |(head, _)| head);
            calls.push(call("query_memgas", json!({ "query": asked, "k": 3 }).to_string()));
        }
        if !calls.is_empty() {
            return ScriptedReply::ToolCalls { content: None, calls };
        }
    }
    if !final_round && tool_rounds == 1 {
        let mut calls = Vec::new();
        if let Some(info) = results.iter().find(|result| result.get("aspects").is_some())
            && let (Some(person), Some(aspect)) = (
                info.get("person").and_then(Value::as_str),
                info.get("aspects")
                    .and_then(Value::as_array)
                    .and_then(|aspects| aspects.first())
                    .and_then(Value::as_str),
            )
        {
            calls.push(call(
                "query_personal_aspect",
                json!({ "person": person, "aspect": aspect }).to_string(),
            ));
        }
        if let Some(id) = &best_id {
            calls.push(call("query_event_keywords", json!({ "event_id": id }).to_string()));
        }
        if !calls.is_empty() {
            return ScriptedReply::ToolCalls { content: None, calls };
        }
    }
    let date = results.iter().find_map(|result| {
        result.get("conversation_time").and_then(Value::as_str).map(str::to_string)
    });
    let answer = match (&best, date) {
        (_, Some(date)) if asks_when => date,
        (Some(line), _) => {
            let text = line.splitn(3, ':').nth(2).unwrap_or(line);
            let text = text.split_once(": ").map_or(text, |(_, said)| said);
            text.split_whitespace().take(12).collect::<Vec<_>>().join(" ")
        }
        (None, _) => "No information available".to_string(),
    };
    let supports: Vec<String> = best_id.into_iter().collect();
    let mode = if final_round { json!(null) } else { json!("answer") };
    let mut reply = json!({ "answer": answer, "supports": supports, "confidence": 0.7 });
    if !mode.is_null() {
        reply["mode"] = mode;
    }
    ScriptedReply::json(&reply)
}

fn call(name: &str, arguments: String) -> ToolCall {
    ToolCall { id: String::new(), name: name.to_string(), arguments }
}

/// The first capitalised word of the question after its first word, without a possessive.
fn capitalised_name(question: &str) -> Option<String> {
    question
        .split_whitespace()
        .skip(1)
        .map(|word| {
            word.trim_matches(|c: char| !c.is_alphanumeric()).trim_end_matches("'s").to_string()
        })
        .find(|word| {
            word.chars().next().is_some_and(char::is_uppercase) && word.chars().count() > 1
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers() {
        assert_eq!(
            content_words("Lena adopted a grey kitten called Pixel, the kitten!"),
            ["lena", "adopted", "grey", "kitten", "called", "pixel"]
        );
        assert_eq!(event_id_of("Time:2023-05-06 D1:2-1:Lena: hi"), "D1:2-1");
        assert_eq!(event_id_of("D1:t1:Session 1"), "D1:t1");
        assert_eq!(capitalised_name("Where did Lena's kitten sleep?").as_deref(), Some("Lena"));
        assert_eq!(quoted_question(r#"QUESTION: <<<"What \"is\" it?">>>"#), r#"What "is" it?"#);
        let reply = keywords_reply("What did Lena do in May 2023?");
        assert_eq!(reply["question_time"], "2023-05-01, 2023-05-31");
    }
}
