//! The build stages played by the scripted endpoint, for benchmarks: answers generated
//! mechanically from the prompt (one sentence per turn, one topic per session, keywords = the
//! capitalised words) and hashed embeddings of `dims` dimensions.

use mragent::llm::scripted::{RecordedRequest, ScriptedReply, hashed_embedding};
use regex::Regex;
use serde_json::{Value, json};

/// The prompt's turn lines (`[D3:2] Ann: text`).
pub(crate) const TURN: &str = r"(?m)^\[(D\d+:\d+)\] ([^:]+): (.*)$";
/// The prompt's session headers.
pub(crate) const SESSION: &str = r"(?m)^Session (D\d+), date: .*?(?:\((\d{4}-\d{2}-\d{2})\))?$";

/// Answer a chat request from its prompt: a rewrite with one sentence per `[dia_id]` line, or
/// keywords (capitalised words) for the sentence list of a keyword prompt.
pub(crate) fn answer(
    request: &RecordedRequest,
    turn: &Regex,
    session: &Regex,
    dims: usize,
) -> ScriptedReply {
    if request.is_embeddings() {
        let vectors =
            request.embedding_inputs().iter().map(|text| hashed_embedding(text, dims)).collect();
        return ScriptedReply::Embeddings(vectors);
    }
    let prompt = request.messages()[0]["content"].as_str().unwrap_or_default();
    let sessions: Vec<(String, Option<String>)> = session
        .captures_iter(prompt)
        .map(|c| (c[1].to_string(), c.get(2).map(|m| m.as_str().to_string())))
        .collect();
    if !sessions.is_empty() {
        let date = sessions[0].1.clone();
        let sentences: Vec<Value> = turn
            .captures_iter(prompt)
            .map(|c| {
                json!({"id": format!("{}-1", &c[1]), "origin": &c[1], "text": format!("{} said: {}", &c[2], &c[3]),
                       "tag": "Chat", "time": date, "topic": ["t1"]})
            })
            .collect();
        let first = sentences.first().map(|s| s["origin"].clone()).unwrap_or_default();
        return ScriptedReply::json(&json!({
            "conversation_time": date, "sentence": sentences, "topics": {"t1": "What was said in this session"},
            "personal_sentences": [{"id": "p1", "person": "someone", "tag": "Talk", "text": "someone talked", "origin": first}]
        }));
    }
    let line = prompt.lines().find(|line| line.starts_with("[{\"id\"")).unwrap_or("[]");
    let items: Vec<Value> = serde_json::from_str(line).unwrap_or_default();
    let keywords: Vec<Value> = items
        .iter()
        .map(|item| {
            let text = item["text"].as_str().unwrap_or_default();
            let words: Vec<&str> = text
                .split(|c: char| !c.is_alphanumeric())
                .filter(|word| word.chars().next().is_some_and(char::is_uppercase))
                .collect();
            json!({"sentence_id": item["id"], "keyword": words})
        })
        .collect();
    ScriptedReply::json(&json!({"sentence": keywords}))
}
