//! LoCoMo loader (`locomo10.json` schema, shipped as `data/dataset_locomo.json`).
//!
//! Each sample becomes one [`Conversation`]. Sessions are the `conversation.session_<N>` keys
//! whose value is an array, sorted by N; a `session_<N>_date_time` key without a session is
//! ignored (conv-26 has 35 date keys but 19 sessions). Extra keys (`event_summary`,
//! `observation`, `session_summary`, `speaker_a/_b`, image URLs) are ignored. Every field that is
//! used is checked, and a wrong one is reported as [`Error::Malformed`] with its path.

use std::collections::BTreeSet;
use std::path::Path;

use chrono::{NaiveDate, NaiveDateTime};
use serde_json::{Map, Value};

use super::json::{self, FieldError};
use super::{Category, Conversation, DatasetKind, Error, Question, Session, Turn};

/// Loads a LoCoMo file: every sample, every non-empty session, every question.
pub fn load_locomo(path: &Path) -> Result<Vec<Conversation>, Error> {
    let text = super::read_file(path)?;
    parse_locomo(path, &text)
}

/// Parses LoCoMo JSON text; `file` is only used in error messages.
pub fn parse_locomo(file: &Path, text: &str) -> Result<Vec<Conversation>, Error> {
    let mut conversations: Vec<Conversation> = Vec::new();
    json::for_each_element(file, text, |position, value| {
        let conversation = parse_sample(file, position, value)?;
        if conversations.iter().any(|seen| seen.sample_id == conversation.sample_id) {
            return Err(FieldError::new("sample_id", "duplicate sample id")
                .in_sample(file, &conversation.sample_id));
        }
        conversations.push(conversation);
        Ok(())
    })?;
    Ok(conversations)
}

/// Parses a LoCoMo session date such as `1:56 pm on 8 May, 2023`.
pub fn parse_locomo_date(text: &str) -> Option<NaiveDate> {
    NaiveDateTime::parse_from_str(text.trim(), "%I:%M %p on %d %B, %Y")
        .ok()
        .map(|moment| moment.date())
}

fn parse_sample(file: &Path, position: usize, value: Value) -> Result<Conversation, Error> {
    let unnamed = format!("[{position}]");
    let mut sample = json::into_object(value, "")
        .map_err(|error| FieldError::new("(sample)", error.problem).in_sample(file, &unnamed))?;
    let sample_id = json::take_string(&mut sample, "sample_id", "")
        .map_err(|error| error.in_sample(file, &unnamed))?;
    parse_sample_body(&sample_id, sample).map_err(|error| error.in_sample(file, &sample_id))
}

fn parse_sample_body(
    sample_id: &str,
    mut sample: Map<String, Value>,
) -> Result<Conversation, FieldError> {
    let conversation = match sample.get_mut("conversation").map(Value::take) {
        Some(value) => json::into_object(value, "conversation")?,
        None => return Err(FieldError::new("conversation", "missing")),
    };
    let (sessions, empty_sessions) = parse_sessions(conversation)?;
    let questions = json::take_array(&mut sample, "qa", "")?
        .into_iter()
        .enumerate()
        .map(|(position, value)| parse_question(sample_id, position, value))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Conversation {
        sample_id: sample_id.to_string(),
        dataset: DatasetKind::Locomo,
        speakers: super::speakers_of(&sessions),
        sessions,
        empty_sessions,
        questions,
    })
}

/// The sessions with turns, and the fields of those without.
fn parse_sessions(
    mut conversation: Map<String, Value>,
) -> Result<(Vec<Session>, Vec<String>), FieldError> {
    // Session keys are found by pattern and sorted numerically: `session_10` must follow
    // `session_9`, and the date keys share the prefix.
    let mut numbers: Vec<u32> = conversation
        .iter()
        .filter(|(_, value)| value.is_array())
        .filter_map(|(key, _)| {
            key.strip_prefix("session_").and_then(|rest| rest.parse::<u32>().ok())
        })
        .collect();
    numbers.sort_unstable();
    let mut seen_dia_ids: BTreeSet<String> = BTreeSet::new();
    let mut sessions = Vec::with_capacity(numbers.len());
    let mut empty = Vec::new();
    for number in numbers {
        let key = format!("session_{number}");
        let date_time =
            json::take_opt_string(&mut conversation, &format!("{key}_date_time"), "conversation")?;
        let path = json::join("conversation", &key);
        let items = json::take_array(&mut conversation, &key, "conversation")?;
        let mut turns = Vec::with_capacity(items.len());
        for (position, item) in items.into_iter().enumerate() {
            let turn_path = json::index(&path, position);
            if let Some(turn) = parse_turn(number, item, &turn_path)? {
                if !seen_dia_ids.insert(turn.dia_id.clone()) {
                    return Err(FieldError::new(
                        json::join(&turn_path, "dia_id"),
                        format!("duplicate dia_id {:?}", turn.dia_id),
                    ));
                }
                turns.push(turn);
            }
        }
        if turns.is_empty() {
            tracing::warn!(field = %path, "session has no turns; it adds nothing to the memory");
            empty.push(path);
            continue;
        }
        let date = date_time.as_deref().and_then(parse_locomo_date);
        if date.is_none() {
            tracing::warn!(session = %key, date_time = ?date_time, "session date not understood");
        }
        sessions.push(Session { index: number, date_time, date, turns });
    }
    Ok((sessions, empty))
}

/// One turn; `None` for a turn with neither text nor image caption (the reference drops
/// empty turns).
fn parse_turn(session: u32, value: Value, path: &str) -> Result<Option<Turn>, FieldError> {
    let mut turn = json::into_object(value, path)?;
    let speaker = json::take_string(&mut turn, "speaker", path)?;
    let dia_id = json::take_string(&mut turn, "dia_id", path)?;
    check_dia_id(&dia_id, session, &json::join(path, "dia_id"))?;
    let text = json::take_string(&mut turn, "text", path)?;
    let blip_caption = json::take_opt_string(&mut turn, "blip_caption", path)?;
    if text.trim().is_empty() && blip_caption.is_none() {
        return Ok(None);
    }
    Ok(Some(Turn { dia_id, speaker, text, blip_caption, has_answer: false }))
}

/// A LoCoMo dia_id must be `D<session>:<turn>` with the session number of its list: the whole
/// pipeline keys turns, sentences and topics by it.
fn check_dia_id(dia_id: &str, session: u32, path: &str) -> Result<(), FieldError> {
    let well_formed = dia_id.strip_prefix('D').and_then(|rest| rest.split_once(':')).is_some_and(
        |(session_part, turn_part)| {
            session_part.parse::<u32>() == Ok(session)
                && !turn_part.is_empty()
                && turn_part.bytes().all(|byte| byte.is_ascii_digit())
        },
    );
    if well_formed {
        Ok(())
    } else {
        Err(FieldError::new(path, format!("expected D{session}:<turn>, found {dia_id:?}")))
    }
}

fn parse_question(sample_id: &str, position: usize, value: Value) -> Result<Question, FieldError> {
    let path = json::index("qa", position);
    let mut item = json::into_object(value, &path)?;
    let question = json::take_string(&mut item, "question", &path)?;
    let category = match item.get("category") {
        Some(Value::Number(number)) => number
            .as_u64()
            .filter(|category| (1..=5).contains(category))
            .and_then(|category| u8::try_from(category).ok())
            .ok_or_else(|| {
                FieldError::new(
                    json::join(&path, "category"),
                    format!("expected 1 to 5, found {number}"),
                )
            })?,
        Some(other) => {
            return Err(FieldError::new(
                json::join(&path, "category"),
                format!("expected an integer, found {}", json::kind(other)),
            ));
        }
        None => return Err(FieldError::new(json::join(&path, "category"), "missing")),
    };
    let answer = json::take_opt_text_or_number(&mut item, "answer", &path)?;
    let adversarial_answer = json::take_opt_text_or_number(&mut item, "adversarial_answer", &path)?;
    // Category 5 (adversarial) items have no gold answer, only the distractor; every other
    // category must have one.
    if answer.is_none() && category != 5 {
        return Err(FieldError::new(json::join(&path, "answer"), "missing"));
    }
    let evidence = match item.get("evidence") {
        None | Some(Value::Null) => Vec::new(),
        Some(_) => json::take_string_array(&mut item, "evidence", &path)?,
    };
    Ok(Question {
        id: format!("{sample_id}:q{}", position + 1),
        sample_id: sample_id.to_string(),
        question,
        answer,
        adversarial_answer,
        category: Category::Locomo(category),
        evidence,
        question_date: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_locomo_dates() {
        let check = |text: &str, expected: Option<(i32, u32, u32)>| {
            let expected =
                expected.and_then(|(year, month, day)| NaiveDate::from_ymd_opt(year, month, day));
            assert_eq!(parse_locomo_date(text), expected, "{text}");
        };
        check("1:56 pm on 8 May, 2023", Some((2023, 5, 8)));
        check("11:01 am on 17 December, 2022", Some((2022, 12, 17)));
        check(" 7:31 pm on 21 January, 2022 ", Some((2022, 1, 21)));
        check("8 May 2023", None);
        check("", None);
    }

    #[test]
    fn checks_dia_ids() {
        assert!(check_dia_id("D3:12", 3, "x").is_ok());
        assert!(check_dia_id("D4:1", 3, "x").is_err());
        assert!(check_dia_id("D3:", 3, "x").is_err());
        assert!(check_dia_id("D3:1a", 3, "x").is_err());
        assert!(check_dia_id("3:1", 3, "x").is_err());
    }
}
