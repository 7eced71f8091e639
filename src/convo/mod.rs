//! Your own conversations: the documented message format (JSON or JSONL) and the placement of
//! messages into sessions (`split`).
//!
//! A message is an object with a speaker (`speaker`, or OpenAI-style `name` / `role`), a text
//! (`text` or `content`; OpenAI content-part arrays are joined), an optional timestamp
//! (`timestamp`, `time`, `date` or `created_at`: RFC 3339, `YYYY-MM-DD HH:MM[:SS]` taken as UTC,
//! or a bare date) and an optional session id (`session` or `session_id`, string or integer).
//! Other fields are ignored. A file is a JSON array of messages, an object with a `messages`
//! array, or JSONL (one message object per line; blank lines are skipped).
//!
//! Parsing is all or nothing: the first bad message is reported with its line (JSONL) or index
//! (JSON) and field, and nothing is returned, so a bad file never half-reaches the store.
//! No IO beyond reading the input, no model, no async.

mod split;

use crate::dataset::json_kind as kind;
use chrono::{DateTime, Datelike as _, NaiveDate, NaiveDateTime, SecondsFormat, Utc};
use serde_json::{Map, Value};

pub(crate) use split::effective_times;
pub use split::{DEFAULT_SESSION_GAP, NewSession, Placement, SessionSpan, place_messages};

/// Why a conversation file cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// The input is neither a JSON document of messages nor JSONL.
    #[error("{location}: invalid JSON: {problem}")]
    Json {
        /// `line 3`, or `document` for a whole-file JSON error.
        location: String,
        /// The parser's message.
        problem: String,
    },
    /// One message is malformed.
    #[error("{location}: field `{field}`: {problem}")]
    Field {
        /// `line 3` (JSONL) or `messages[2]` (JSON).
        location: String,
        /// The offending field.
        field: String,
        /// What is wrong.
        problem: String,
    },
    /// The input holds no message at all.
    #[error("no messages in the input")]
    Empty,
}

impl Error {
    /// The field an error is about (`messages` for document-level problems), for HTTP errors.
    pub fn field(&self) -> &str {
        match self {
            Error::Field { field, .. } => field,
            Error::Json { .. } | Error::Empty => "messages",
        }
    }
}

/// When a message was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timestamp {
    /// A point in time (RFC 3339, or a naive date-time taken as UTC).
    Instant(DateTime<Utc>),
    /// Only a calendar day.
    Date(NaiveDate),
}

impl Timestamp {
    /// Parses RFC 3339, `YYYY-MM-DD HH:MM[:SS]` / `YYYY-MM-DDTHH:MM[:SS]` (UTC) or `YYYY-MM-DD`.
    /// Only years 0000 to 9999 (in UTC), the range of RFC 3339: the [`canonical`] text, which
    /// the store keeps, must read back.
    ///
    /// [`canonical`]: Timestamp::canonical
    pub fn parse(text: &str) -> Option<Timestamp> {
        Self::parse_any_year(text).filter(|stamp| (0..=9999).contains(&stamp.date().year()))
    }

    fn parse_any_year(text: &str) -> Option<Timestamp> {
        let text = text.trim();
        if let Ok(instant) = DateTime::parse_from_rfc3339(text) {
            return Some(Timestamp::Instant(instant.with_timezone(&Utc)));
        }
        for format in ["%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M"]
        {
            if let Ok(naive) = NaiveDateTime::parse_from_str(text, format) {
                return Some(Timestamp::Instant(naive.and_utc()));
            }
        }
        NaiveDate::parse_from_str(text, "%Y-%m-%d").ok().map(Timestamp::Date)
    }

    /// The instant used for ordering: a bare date counts as its midnight UTC.
    pub fn instant(self) -> DateTime<Utc> {
        match self {
            Timestamp::Instant(instant) => instant,
            Timestamp::Date(date) => date.and_time(chrono::NaiveTime::MIN).and_utc(),
        }
    }

    /// The calendar day.
    pub fn date(self) -> NaiveDate {
        self.instant().date_naive()
    }

    /// Canonical text: RFC 3339 in UTC with seconds, or `YYYY-MM-DD`.
    pub fn canonical(self) -> String {
        match self {
            Timestamp::Instant(instant) => instant.to_rfc3339_opts(SecondsFormat::Secs, true),
            Timestamp::Date(date) => date.to_string(),
        }
    }
}

/// One incoming message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Who said it.
    pub speaker: String,
    /// What was said (trimmed, never empty).
    pub text: String,
    /// When, if given.
    pub timestamp: Option<Timestamp>,
    /// The caller's session id, if given.
    pub session: Option<String>,
}

impl Message {
    /// Content hash: speaker, text, canonical timestamp, session id and `occurrence` (how many
    /// identical messages came before it in the same input), so that re-adding the same input
    /// is a no-op while a genuinely repeated "ok" is kept.
    pub fn content_hash(&self, occurrence: u32) -> String {
        let canonical = serde_json::json!([
            self.speaker,
            self.text,
            self.timestamp.map(Timestamp::canonical),
            self.session,
            occurrence
        ]);
        crate::text::short_hash(canonical.to_string().as_bytes(), 16)
    }
}

/// Parses a session gap: a number with a unit, `s`, `m`, `h` or `d` (`90m`, `4h`, `2d`).
pub fn parse_gap(text: &str) -> Result<chrono::TimeDelta, String> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: i64 =
        number.parse().map_err(|_| format!("{text:?}: expected e.g. 90m, 4h or 2d"))?;
    let delta = match unit {
        "s" => chrono::TimeDelta::try_seconds(number),
        "m" => chrono::TimeDelta::try_minutes(number),
        "h" => chrono::TimeDelta::try_hours(number),
        "d" => chrono::TimeDelta::try_days(number),
        _ => None,
    };
    delta.filter(|delta| *delta > chrono::TimeDelta::zero()).ok_or_else(|| {
        format!("{text:?}: expected a positive number with a unit s, m, h or d (e.g. 4h)")
    })
}

/// Parses a conversation file (JSON or JSONL, detected from the content).
pub fn parse(input: &str) -> Result<Vec<Message>, Error> {
    let trimmed = input.trim_start();
    let whole = serde_json::from_str::<Value>(input);
    let messages = match whole {
        Ok(Value::Array(items)) => parse_items(items, "messages")?,
        Ok(Value::Object(mut map)) if map.contains_key("messages") => {
            match map.remove("messages").unwrap_or(Value::Null) {
                Value::Array(items) => parse_items(items, "messages")?,
                other => {
                    return Err(Error::Field {
                        location: "document".into(),
                        field: "messages".into(),
                        problem: format!("expected an array, found {}", kind(&other)),
                    });
                }
            }
        }
        Ok(Value::Object(map)) => vec![parse_message(map, "line 1")?],
        Ok(other) => {
            return Err(Error::Json {
                location: "document".into(),
                problem: format!("expected messages, found {}", kind(&other)),
            });
        }
        Err(error) if trimmed.starts_with('[') => {
            return Err(Error::Json { location: "document".into(), problem: error.to_string() });
        }
        Err(_) => parse_jsonl(input)?,
    };
    if messages.is_empty() { Err(Error::Empty) } else { Ok(messages) }
}

/// Parses messages already decoded from JSON (the HTTP API's `messages` array).
pub fn parse_values(items: Vec<Value>) -> Result<Vec<Message>, Error> {
    let messages = parse_items(items, "messages")?;
    if messages.is_empty() { Err(Error::Empty) } else { Ok(messages) }
}

fn parse_items(items: Vec<Value>, parent: &str) -> Result<Vec<Message>, Error> {
    items
        .into_iter()
        .enumerate()
        .map(|(index, item)| {
            let location = format!("{parent}[{index}]");
            match item {
                Value::Object(map) => parse_message(map, &location),
                other => Err(Error::Field {
                    location,
                    field: "message".into(),
                    problem: format!("expected an object, found {}", kind(&other)),
                }),
            }
        })
        .collect()
}

fn parse_jsonl(input: &str) -> Result<Vec<Message>, Error> {
    let mut messages = Vec::new();
    for (number, line) in input.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let location = format!("line {}", number + 1);
        match serde_json::from_str::<Value>(line) {
            Ok(Value::Object(map)) => messages.push(parse_message(map, &location)?),
            Ok(other) => {
                return Err(Error::Field {
                    location,
                    field: "message".into(),
                    problem: format!("expected an object, found {}", kind(&other)),
                });
            }
            Err(error) => return Err(Error::Json { location, problem: error.to_string() }),
        }
    }
    Ok(messages)
}

/// The first of `keys` present (and not null) in `map`, with its key.
fn first_of<'a>(
    map: &'a Map<String, Value>,
    keys: &[&'static str],
) -> Option<(&'static str, &'a Value)> {
    keys.iter().find_map(|key| map.get(*key).filter(|value| !value.is_null()).map(|v| (*key, v)))
}

fn parse_message(map: Map<String, Value>, location: &str) -> Result<Message, Error> {
    let field_error = |field: &str, problem: String| Error::Field {
        location: location.to_string(),
        field: field.to_string(),
        problem,
    };
    let speaker = match first_of(&map, &["speaker", "name", "role"]) {
        Some((_, Value::String(text))) if !text.trim().is_empty() => text.trim().to_string(),
        Some((key, Value::String(_))) => return Err(field_error(key, "empty speaker".into())),
        Some((key, other)) => {
            return Err(field_error(key, format!("expected a string, found {}", kind(other))));
        }
        None => return Err(field_error("speaker", "missing (also accepted: name, role)".into())),
    };
    let text = match first_of(&map, &["text", "content"]) {
        Some((key, value)) => {
            let text = content_text(value).ok_or_else(|| {
                field_error(key, format!("expected a string, found {}", kind(value)))
            })?;
            if text.trim().is_empty() {
                return Err(field_error(key, "empty message".into()));
            }
            text.trim().to_string()
        }
        None => return Err(field_error("text", "missing (also accepted: content)".into())),
    };
    let timestamp = match first_of(&map, &["timestamp", "time", "date", "created_at"]) {
        Some((key, Value::String(text))) => Some(Timestamp::parse(text).ok_or_else(|| {
            field_error(
                key,
                format!("malformed timestamp {text:?}: expected RFC 3339 (2024-05-03T14:00:00Z) or a date (2024-05-03), years 0000 to 9999"),
            )
        })?),
        Some((key, other)) => {
            return Err(field_error(key, format!("expected a string, found {}", kind(other))));
        }
        None => None,
    };
    let session = match first_of(&map, &["session", "session_id"]) {
        Some((_, Value::String(text))) if !text.trim().is_empty() => Some(text.trim().to_string()),
        Some((_, Value::Number(number))) => Some(number.to_string()),
        Some((key, other)) => {
            return Err(field_error(
                key,
                format!("expected a non-empty string or an integer, found {}", kind(other)),
            ));
        }
        None => None,
    };
    Ok(Message { speaker, text, timestamp, session })
}

/// A string, or OpenAI content parts (`[{"type": "text", "text": …}]`) joined by newlines.
fn content_text(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text.clone()),
        Value::Array(parts) => {
            let texts: Option<Vec<&str>> = parts
                .iter()
                .filter(|part| part.get("type").and_then(Value::as_str).unwrap_or("text") == "text")
                .map(|part| part.get("text").and_then(Value::as_str))
                .collect();
            texts.map(|texts| texts.join("\n"))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests;
