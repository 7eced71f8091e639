//! The scripted agent's replies in the tool loop: two rounds of tool calls (all seven graph tools
//! get used across questions, and `query_memgas` when offered), then an answer with the event
//! that best overlaps the question.

use serde_json::{Value, json};

use super::words::{capitalised_name, event_id_of, message_text, overlap, question_words};
use crate::llm::ToolCall;
use crate::llm::scripted::{RecordedRequest, ScriptedReply};

/// The reply to one loop request; with `invalid_arguments`, the first round also makes two calls
/// with bad arguments.
pub(super) fn loop_reply(
    request: &RecordedRequest,
    question: &str,
    invalid_arguments: bool,
) -> ScriptedReply {
    // The final round sends no tools (older clients sent them with `tool_choice: none`).
    let final_round = request.body.get("tools").is_none()
        || request.body.get("tool_choice").and_then(Value::as_str) == Some("none");
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
        let calls = first_round_calls(
            request,
            question,
            &payload,
            best_id.as_deref(),
            asks_when,
            invalid_arguments,
        );
        if !calls.is_empty() {
            return ScriptedReply::ToolCalls { content: None, calls };
        }
    }
    if !final_round && tool_rounds == 1 {
        let calls = second_round_calls(&results, best_id.as_deref());
        if !calls.is_empty() {
            return ScriptedReply::ToolCalls { content: None, calls };
        }
    }
    final_answer(best.as_deref(), best_id, &results, asks_when, final_round)
}

/// First round: the best line's context (and date for "when" questions), the first key
/// candidate's first tag, the first topic, the person named, and MemGAS when offered.
fn first_round_calls(
    request: &RecordedRequest,
    question: &str,
    payload: &Value,
    best_id: Option<&str>,
    asks_when: bool,
    invalid_arguments: bool,
) -> Vec<ToolCall> {
    let mut calls = Vec::new();
    if invalid_arguments {
        calls.push(call("edges_by_tag", r#"{"key": "pixel", "tag": "#.to_string()));
        calls.push(call("query_personal_aspect", json!({ "person": "Lena" }).to_string()));
    }
    if let Some(id) = best_id {
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
    calls
}

/// Second round: an aspect of the person found, and the best event's keywords.
fn second_round_calls(results: &[Value], best_id: Option<&str>) -> Vec<ToolCall> {
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
    if let Some(id) = best_id {
        calls.push(call("query_event_keywords", json!({ "event_id": id }).to_string()));
    }
    calls
}

/// The answer: the date found for "when" questions, else the start of the best line.
fn final_answer(
    best: Option<&str>,
    best_id: Option<String>,
    results: &[Value],
    asks_when: bool,
    final_round: bool,
) -> ScriptedReply {
    let date = results.iter().find_map(|result| {
        result.get("conversation_time").and_then(Value::as_str).map(str::to_string)
    });
    let answer = match (best, date) {
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

fn call(name: &str, arguments: String) -> ToolCall {
    ToolCall { id: String::new(), name: name.to_string(), arguments }
}
