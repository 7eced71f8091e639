//! Text helpers of the scripted agent: cue words, stems, ids in lines, request texts.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::llm::scripted::RecordedRequest;
use crate::text::stop_words::SCRIPTED_STOP_WORDS;
use crate::text::words;

/// The cue words of a text, what the scripted agent uses as keywords and tags: its lowercase
/// alphanumeric words ([`words`]) of at least four characters that are not
/// [`SCRIPTED_STOP_WORDS`], in order, without repeats.
pub fn cue_words(text: &str) -> Vec<String> {
    let mut seen = BTreeSet::new();
    words(text)
        .filter(|word| word.chars().count() >= 4 && !SCRIPTED_STOP_WORDS.contains(&word.as_str()))
        .filter(|word| seen.insert(word.clone()))
        .collect()
}

/// Word overlap between the question and a line, comparing five-letter stems (so `adopt` meets
/// `adopted` and `kitten` meets `kittens`).
pub(super) fn overlap(question_stems: &BTreeSet<String>, line: &str) -> usize {
    let line_stems: BTreeSet<String> = cue_words(line).iter().map(|word| stem(word)).collect();
    line_stems.intersection(question_stems).count()
}

fn stem(word: &str) -> String {
    word.chars().take(5).collect()
}

/// Stems of the question as asked (the category instructions after the `?` left out).
pub(super) fn question_words(question: &str) -> BTreeSet<String> {
    let asked = question.split_once('?').map_or(question, |(head, _)| head);
    cue_words(asked).iter().map(|word| stem(word)).collect()
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
