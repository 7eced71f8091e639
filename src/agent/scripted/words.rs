//! Text helpers of the scripted agent: content words, stems, ids in lines, request texts.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::llm::scripted::RecordedRequest;

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

/// Word overlap between the question and a line, comparing five-letter stems (so `adopt` meets
/// `adopted` and `kitten` meets `kittens`).
pub(super) fn overlap(question_stems: &BTreeSet<String>, line: &str) -> usize {
    let line_stems: BTreeSet<String> = content_words(line).iter().map(|word| stem(word)).collect();
    line_stems.intersection(question_stems).count()
}

fn stem(word: &str) -> String {
    word.chars().take(5).collect()
}

/// Stems of the question as asked (the category instructions after the `?` left out).
pub(super) fn question_words(question: &str) -> BTreeSet<String> {
    let asked = question.split_once('?').map_or(question, |(head, _)| head);
    content_words(asked).iter().map(|word| stem(word)).collect()
}

/// `D1:2-1` from `D1:2-1:Speaker: text` or `Time:2023-05-06 D1:2-1:Speaker: text`.
pub(super) fn event_id_of(line: &str) -> String {
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

pub(super) fn message_text(request: &RecordedRequest, index: usize) -> String {
    request
        .messages()
        .get(index)
        .and_then(|message| message.get("content"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// The question inside `QUESTION: <<<"…">>>`.
pub(super) fn quoted_question(user: &str) -> String {
    let inner = user
        .split_once("<<<")
        .and_then(|(_, rest)| rest.rsplit_once(">>>"))
        .map(|(inner, _)| inner);
    inner.and_then(|inner| serde_json::from_str::<String>(inner).ok()).unwrap_or_default()
}

/// The first capitalised word of the question after its first word, without a possessive.
pub(super) fn capitalised_name(question: &str) -> Option<String> {
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
