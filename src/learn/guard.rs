//! The leakage guard: a learned rule must say how to use memory, never what the training
//! conversations or their answers hold. A proposed rule is refused when it has more than
//! [`MAX_RULE_WORDS`](crate::agent::rules::MAX_RULE_WORDS) words, a number (any digit), a date
//! word (a month or weekday name), a name from the training conversations (a speaker, or a
//! word written capitalised inside sentences more often than not), or a training gold answer
//! of two words or more. Refusals are counted and listed by the caller, never dropped silently.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::agent::rules::text_problem;
use crate::dataset::{Conversation, Question};
use crate::retrieval::dates::MONTHS;
use crate::text::stop_words::ENGLISH_STOP_WORDS;

/// Weekday names: with the month names of [`MONTHS`] (and their three-letter abbreviations, and
/// "sept"), the words that make a date.
const WEEKDAYS: &[&str] =
    &["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"];

/// Whether a lower-cased word names a month or a weekday ("may" aside: see [`MAY`]).
fn is_date_word(word: &str) -> bool {
    word != "may"
        && (WEEKDAYS.contains(&word)
            || word == "sept"
            || MONTHS.iter().any(|month| *month == word || month.get(..3) == Some(word)))
}

/// "May" is a date only when capitalised inside the sentence ("may" is also a verb).
const MAY: &str = "May";

/// Speaker names that are roles, not people (LongMemEval).
const ROLE_NAMES: &[&str] = &["user", "assistant", "system"];

/// Why a proposed rule was refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "reason", content = "detail", rename_all = "snake_case")]
pub enum Refusal {
    /// Empty, too long, or not one line.
    #[error("malformed: {0}")]
    Malformed(String),
    /// Holds a number.
    #[error("holds a number: {0}")]
    Number(String),
    /// Holds a date word.
    #[error("holds a date word: {0}")]
    Date(String),
    /// Holds a name from the training conversations.
    #[error("names a training entity: {0}")]
    Name(String),
    /// Holds a training gold answer.
    #[error("holds a training answer: {0}")]
    Answer(String),
    /// Would take the rule count over the cap.
    #[error("over the cap of {0} rules")]
    OverCap(usize),
    /// Names a rule id that does not exist.
    #[error("no rule {0}")]
    UnknownRule(String),
}

/// What the guard knows about the training part of a fold.
#[derive(Debug, Clone, Default)]
pub struct LeakGuard {
    /// Lower-cased names.
    names: BTreeSet<String>,
    /// Lower-cased gold answers of two words or more, words joined by one space.
    answers: BTreeSet<String>,
}

impl LeakGuard {
    /// The guard for these training conversations and training questions.
    pub fn new<'a>(
        conversations: impl IntoIterator<Item = &'a Conversation>,
        questions: impl IntoIterator<Item = &'a Question>,
    ) -> Self {
        let mut guard = Self::default();
        // word → (capitalised inside a sentence, written in lower case)
        let mut seen: BTreeMap<String, (usize, usize)> = BTreeMap::new();
        for conversation in conversations {
            for speaker in &conversation.speakers {
                for word in words(speaker) {
                    let lower = word.to_lowercase();
                    if !ROLE_NAMES.contains(&lower.as_str()) {
                        guard.names.insert(lower);
                    }
                }
            }
            for turn in conversation.sessions.iter().flat_map(|session| &session.turns) {
                count_case(&turn.text, &mut seen);
            }
        }
        for question in questions {
            let Some(answer) = question.answer.as_deref() else { continue };
            count_case(answer, &mut seen);
            // A capitalised word of an answer is a name whatever its position.
            for word in words(answer) {
                if word.chars().next().is_some_and(char::is_uppercase) && is_content(word) {
                    seen.entry(word.to_lowercase()).or_default().0 += 1;
                }
            }
            let joined = words(answer).map(str::to_lowercase).collect::<Vec<_>>().join(" ");
            if joined.contains(' ') {
                guard.answers.insert(joined);
            }
        }
        for (word, (capitalised, lower)) in seen {
            if capitalised > lower && is_content(&word) {
                guard.names.insert(word);
            }
        }
        guard
    }

    /// Whether `text` may become a rule.
    pub fn check(&self, text: &str) -> Result<(), Refusal> {
        if let Some(problem) = text_problem(text) {
            return Err(Refusal::Malformed(problem));
        }
        if let Some(number) = words(text).find(|word| word.chars().any(|c| c.is_ascii_digit())) {
            return Err(Refusal::Number(number.to_string()));
        }
        let lower: Vec<String> = words(text).map(str::to_lowercase).collect();
        if let Some(date) = lower.iter().find(|word| is_date_word(word)) {
            return Err(Refusal::Date(date.clone()));
        }
        if words(text).skip(1).any(|word| word == MAY) {
            return Err(Refusal::Date("may".into()));
        }
        if let Some(name) = lower.iter().find(|word| self.names.contains(*word)) {
            return Err(Refusal::Name(name.clone()));
        }
        let joined = format!(" {} ", lower.join(" "));
        if let Some(answer) =
            self.answers.iter().find(|answer| joined.contains(&format!(" {answer} ")))
        {
            return Err(Refusal::Answer(answer.clone()));
        }
        Ok(())
    }
}

/// Words: runs of letters, digits and apostrophes.
fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '\'')).filter(|word| !word.is_empty())
}

fn is_content(word: &str) -> bool {
    word.chars().count() >= 3 && !ENGLISH_STOP_WORDS.contains(&word.to_lowercase().as_str())
}

/// Counts, per word, how often it is capitalised inside a sentence and how often it is written
/// in lower case (a word opening a sentence says nothing).
fn count_case(text: &str, seen: &mut BTreeMap<String, (usize, usize)>) {
    let mut sentence_start = true;
    for piece in text.split_inclusive(|c: char| !(c.is_alphanumeric() || c == '\'')) {
        let word: &str = piece.trim_end_matches(|c: char| !(c.is_alphanumeric() || c == '\''));
        if !word.is_empty() {
            let first = word.chars().next().unwrap_or_default();
            let entry = seen.entry(word.to_lowercase()).or_default();
            if first.is_uppercase() && !sentence_start {
                entry.0 += 1;
            } else if first.is_lowercase() {
                entry.1 += 1;
            }
            sentence_start = false;
        }
        if piece.ends_with(['.', '!', '?', '"', '\n']) {
            sentence_start = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::{Category, DatasetKind, Session, Turn};

    fn training() -> (Conversation, Question) {
        let turn = |text: &str| Turn {
            dia_id: "D1:1".into(),
            speaker: "Caroline".into(),
            text: text.into(),
            blip_caption: None,
            has_answer: false,
        };
        let conversation = Conversation {
            sample_id: "conv-1".into(),
            dataset: DatasetKind::Locomo,
            speakers: vec!["Caroline".into(), "Melanie Smith".into()],
            sessions: vec![Session {
                index: 1,
                date_time: None,
                date: None,
                turns: vec![
                    turn("I went to Paris with my sister. We saw the Louvre and ate well."),
                    turn("Check the map. Then we went to Paris again, to check the timeline."),
                ],
            }],
            empty_sessions: Vec::new(),
            questions: Vec::new(),
        };
        let question = Question {
            id: "conv-1:q1".into(),
            sample_id: "conv-1".into(),
            question: "What did Caroline paint?".into(),
            answer: Some("a lake sunrise".into()),
            adversarial_answer: None,
            category: Category::Locomo(1),
            evidence: Vec::new(),
            question_date: None,
        };
        (conversation, question)
    }

    #[test]
    fn names_numbers_dates_and_answers_are_refused_and_method_rules_pass() {
        let (conversation, question) = training();
        let guard = LeakGuard::new([&conversation], [&question]);
        let refused = |text: &str| guard.check(text).unwrap_err();
        assert_eq!(refused("Ask what Caroline said first."), Refusal::Name("caroline".into()));
        assert_eq!(refused("Look for smith in the persons tool."), Refusal::Name("smith".into()));
        assert_eq!(refused("Trips to paris are in session dates."), Refusal::Name("paris".into()));
        assert_eq!(refused("Prefer the 2 latest sessions."), Refusal::Number("2".into()));
        assert_eq!(refused("Events in May need the timeline."), Refusal::Date("may".into()));
        assert_eq!(
            refused("Paintings are often a lake sunrise."),
            Refusal::Answer("a lake sunrise".into())
        );
        assert!(matches!(refused(&vec!["word"; 31].join(" ")), Refusal::Malformed(_)));
        // Method words pass, even ones the conversation capitalises at a sentence start.
        for fine in [
            "For a when-question, check the timeline before answering.",
            "Prefer the most recent value when facts conflict.",
            "Check whether a contradiction comes from different session dates.",
            "An answer may rest on two sessions; read both before answering.",
        ] {
            assert_eq!(guard.check(fine), Ok(()), "{fine}");
        }
    }
}
