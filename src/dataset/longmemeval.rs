//! LongMemEval loader for the official files (`longmemeval_s_cleaned.json`,
//! `longmemeval_m_cleaned.json`, `longmemeval_oracle.json`; all share one schema).
//!
//! Each question becomes one [`Conversation`] whose sample id is the `question_id`:
//! * session N is the N-th entry of `haystack_sessions` (file order; `_s`/`_m` are sorted by time,
//!   the oracle file is not), dated by `haystack_dates[N-1]` (`2023/05/20 (Sat) 02:21`);
//! * turn M of session N gets dia_id `D<N>:<M>` by its position (1-based), speaker `user` or
//!   `assistant` (the `role`), and keeps `has_answer`;
//! * the one question keeps its `question_type` string as category, `question_date`, and as
//!   evidence the dia_ids of the turns marked `has_answer` (turn level, like LoCoMo evidence;
//!   empty when no turn is marked, e.g. for most abstention items). The session-level
//!   `answer_session_ids` are checked for shape but not stored.
//!
//! Assistant turns are kept here; [`super::LoadOptions::drop_assistant_turns`] removes them.

use std::path::Path;

use chrono::{NaiveDate, NaiveDateTime};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::json::{self, FieldError};
use super::{Category, Conversation, DatasetKind, Error, Question, Session, Turn};

/// Speaker name of user turns.
pub(crate) const USER: &str = "user";
/// Speaker name of assistant turns.
const ASSISTANT: &str = "assistant";

/// A LongMemEval question type. The `--ca` index order is the Python reference's:
/// 0 multi-session, 1 single-session-user, 2 temporal-reasoning, 3 single-session-preference,
/// 4 knowledge-update, 5 single-session-assistant ([`LongMemEvalType::CA_ORDER`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LongMemEvalType {
    /// `multi-session` (`--ca 0`).
    MultiSession,
    /// `single-session-user` (`--ca 1`).
    SingleSessionUser,
    /// `temporal-reasoning` (`--ca 2`).
    TemporalReasoning,
    /// `knowledge-update` (`--ca 4`).
    KnowledgeUpdate,
    /// `single-session-assistant` (`--ca 5`).
    SingleSessionAssistant,
    /// `single-session-preference` (`--ca 3`).
    SingleSessionPreference,
}

impl LongMemEvalType {
    /// The types in `--ca` index order, as the Python reference numbers them.
    pub const CA_ORDER: [LongMemEvalType; 6] = [
        LongMemEvalType::MultiSession,
        LongMemEvalType::SingleSessionUser,
        LongMemEvalType::TemporalReasoning,
        LongMemEvalType::SingleSessionPreference,
        LongMemEvalType::KnowledgeUpdate,
        LongMemEvalType::SingleSessionAssistant,
    ];

    /// All types, in the order error messages list them.
    pub const ALL: [LongMemEvalType; 6] = [
        LongMemEvalType::MultiSession,
        LongMemEvalType::SingleSessionUser,
        LongMemEvalType::TemporalReasoning,
        LongMemEvalType::KnowledgeUpdate,
        LongMemEvalType::SingleSessionAssistant,
        LongMemEvalType::SingleSessionPreference,
    ];

    /// The type selected by `--ca <index>`.
    pub fn from_ca_index(index: u8) -> Result<Self, Error> {
        Self::CA_ORDER.get(usize::from(index)).copied().ok_or(Error::UnknownQuestionType(index))
    }

    /// The `question_type` string used in the dataset.
    pub fn as_str(self) -> &'static str {
        match self {
            LongMemEvalType::MultiSession => "multi-session",
            LongMemEvalType::SingleSessionUser => "single-session-user",
            LongMemEvalType::TemporalReasoning => "temporal-reasoning",
            LongMemEvalType::KnowledgeUpdate => "knowledge-update",
            LongMemEvalType::SingleSessionAssistant => "single-session-assistant",
            LongMemEvalType::SingleSessionPreference => "single-session-preference",
        }
    }

    /// Parses a `question_type` string.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.as_str() == text)
    }
}

impl std::fmt::Display for LongMemEvalType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Loads a LongMemEval file: one conversation per question, assistant turns included.
pub fn load_longmemeval(path: &Path) -> Result<Vec<Conversation>, Error> {
    let text = super::read_file(path)?;
    parse_longmemeval(path, &text)
}

/// Parses LongMemEval JSON text; `file` is only used in error messages.
pub fn parse_longmemeval(file: &Path, text: &str) -> Result<Vec<Conversation>, Error> {
    let mut conversations: Vec<Conversation> = Vec::new();
    let mut seen_ids = std::collections::BTreeSet::new();
    json::for_each_element(file, text, |position, value| {
        let conversation = parse_item(file, position, value)?;
        if !seen_ids.insert(conversation.sample_id.clone()) {
            return Err(FieldError::new("question_id", "duplicate question id")
                .in_sample(file, &conversation.sample_id));
        }
        conversations.push(conversation);
        Ok(())
    })?;
    Ok(conversations)
}

/// Parses a LongMemEval date such as `2023/05/20 (Sat) 02:21`.
pub fn parse_longmemeval_date(text: &str) -> Option<NaiveDate> {
    let text = text.trim();
    NaiveDateTime::parse_from_str(text, "%Y/%m/%d (%a) %H:%M")
        .map(|moment| moment.date())
        .or_else(|_| {
            NaiveDate::parse_from_str(text.split_whitespace().next().unwrap_or(""), "%Y/%m/%d")
        })
        .ok()
}

fn parse_item(file: &Path, position: usize, value: Value) -> Result<Conversation, Error> {
    let unnamed = format!("[{position}]");
    let mut item = json::into_object(value, "")
        .map_err(|error| FieldError::new("(sample)", error.problem).in_sample(file, &unnamed))?;
    let question_id = json::take_string(&mut item, "question_id", "")
        .map_err(|error| error.in_sample(file, &unnamed))?;
    parse_item_body(&question_id, item).map_err(|error| error.in_sample(file, &question_id))
}

fn parse_item_body(
    question_id: &str,
    mut item: Map<String, Value>,
) -> Result<Conversation, FieldError> {
    let question_type = json::take_string(&mut item, "question_type", "")?;
    if LongMemEvalType::parse(&question_type).is_none() {
        let valid: Vec<&str> = LongMemEvalType::ALL.iter().map(|kind| kind.as_str()).collect();
        return Err(FieldError::new(
            "question_type",
            format!("unknown type {question_type:?}; expected one of {}", valid.join(", ")),
        ));
    }
    let question = json::take_string(&mut item, "question", "")?;
    let answer = json::take_opt_text_or_number(&mut item, "answer", "")?
        .ok_or_else(|| FieldError::new("answer", "missing"))?;
    let question_date = json::take_opt_string(&mut item, "question_date", "")?;
    json::take_string_array(&mut item, "answer_session_ids", "")?;
    let dates = json::take_array(&mut item, "haystack_dates", "")?;
    let session_values = json::take_array(&mut item, "haystack_sessions", "")?;
    if dates.len() != session_values.len() {
        return Err(FieldError::new(
            "haystack_dates",
            format!(
                "has {} entries but haystack_sessions has {}",
                dates.len(),
                session_values.len()
            ),
        ));
    }
    if let Some(Value::Array(ids)) = item.get("haystack_session_ids")
        && ids.len() != session_values.len()
    {
        return Err(FieldError::new(
            "haystack_session_ids",
            format!("has {} entries but haystack_sessions has {}", ids.len(), session_values.len()),
        ));
    }

    let mut sessions = Vec::with_capacity(session_values.len());
    let mut empty_sessions = Vec::new();
    let mut evidence = Vec::new();
    for (position, (date_value, session_value)) in dates.into_iter().zip(session_values).enumerate()
    {
        match parse_session(question_id, position, date_value, session_value, &mut evidence)? {
            Some(session) => sessions.push(session),
            None => empty_sessions.push(json::index("haystack_sessions", position)),
        }
    }

    Ok(Conversation {
        sample_id: question_id.to_string(),
        dataset: DatasetKind::LongMemEval,
        speakers: super::speakers_of(&sessions),
        sessions,
        empty_sessions,
        questions: vec![Question {
            id: question_id.to_string(),
            sample_id: question_id.to_string(),
            question,
            answer: Some(answer),
            adversarial_answer: None,
            category: Category::LongMemEval(question_type),
            evidence,
            question_date,
        }],
    })
}

/// One haystack session at `position`: its date and its non-empty turns (evidence turns are
/// added to `evidence`); `None` when every turn is empty.
fn parse_session(
    question_id: &str,
    position: usize,
    date_value: Value,
    session_value: Value,
    evidence: &mut Vec<String>,
) -> Result<Option<Session>, FieldError> {
    let number = u32::try_from(position + 1)
        .map_err(|_| FieldError::new("haystack_sessions", "too many sessions"))?;
    let date_time = match date_value {
        Value::String(text) => text,
        other => {
            return Err(FieldError::new(
                json::index("haystack_dates", position),
                format!("expected a string, found {}", json::kind(&other)),
            ));
        }
    };
    let date = parse_longmemeval_date(&date_time);
    if date.is_none() {
        tracing::warn!(question_id, session = number, %date_time, "session date not understood");
    }
    let path = json::index("haystack_sessions", position);
    let turn_values = match session_value {
        Value::Array(turns) => turns,
        other => {
            return Err(FieldError::new(
                path,
                format!("expected an array, found {}", json::kind(&other)),
            ));
        }
    };
    let mut turns = Vec::with_capacity(turn_values.len());
    for (turn_position, turn_value) in turn_values.into_iter().enumerate() {
        let turn_path = json::index(&path, turn_position);
        let dia_id = format!("D{number}:{}", turn_position + 1);
        if let Some(turn) = parse_turn(dia_id, turn_value, &turn_path)? {
            if turn.has_answer {
                evidence.push(turn.dia_id.clone());
            }
            turns.push(turn);
        }
    }
    if turns.is_empty() {
        tracing::warn!(field = %path, "session has no turns; it adds nothing to the memory");
        return Ok(None);
    }
    Ok(Some(Session { index: number, date_time: Some(date_time), date, turns }))
}

/// One turn; `None` for an empty turn (the reference drops empty turns). The dia_id is
/// assigned by position before that, so later turns keep their numbers.
fn parse_turn(dia_id: String, value: Value, path: &str) -> Result<Option<Turn>, FieldError> {
    let mut turn = json::into_object(value, path)?;
    let role = json::take_string(&mut turn, "role", path)?;
    if role != USER && role != ASSISTANT {
        return Err(FieldError::new(
            json::join(path, "role"),
            format!("expected \"user\" or \"assistant\", found {role:?}"),
        ));
    }
    let text = json::take_string(&mut turn, "content", path)?;
    let has_answer = json::take_opt_bool(&mut turn, "has_answer", path)?.unwrap_or(false);
    if text.trim().is_empty() {
        return Ok(None);
    }
    Ok(Some(Turn { dia_id, speaker: role, text, blip_caption: None, has_answer }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_longmemeval_dates() {
        assert_eq!(
            parse_longmemeval_date("2023/05/20 (Sat) 02:21"),
            NaiveDate::from_ymd_opt(2023, 5, 20)
        );
        assert_eq!(parse_longmemeval_date("2023/05/30"), NaiveDate::from_ymd_opt(2023, 5, 30));
        assert_eq!(parse_longmemeval_date("May 20"), None);
    }

    #[test]
    fn ca_indices_follow_the_reference_order() {
        let names: Vec<&str> = (0..6)
            .map(|index| LongMemEvalType::from_ca_index(index).map(LongMemEvalType::as_str))
            .collect::<Result<_, _>>()
            .unwrap_or_default();
        assert_eq!(
            names,
            [
                "multi-session",
                "single-session-user",
                "temporal-reasoning",
                "single-session-preference",
                "knowledge-update",
                "single-session-assistant"
            ]
        );
        assert!(matches!(LongMemEvalType::from_ca_index(6), Err(Error::UnknownQuestionType(6))));
    }
}
