//! Stage 1 — rewrite: one unit of dialogue → self-contained, dated sentences, topics and
//! personal facts (behaviour of §4 of the reference, with its validation gaps closed).
//!
//! The model's JSON is read item by item (`salvage.rs`): every usable sentence is kept, turns
//! the reply missed or got wrong are re-asked alone (`ingest::repair`), and a turn no reply
//! covers enters memory verbatim, flagged in the [`RewriteRecord`]. So a unit's rewrite never
//! fails because of what the model wrote; only a failing endpoint fails it.
//!
//! Valid output is normalised: sentence ids are renumbered `<origin>-<k>` in order of
//! appearance, local topic and fact ids (`t1`, `p1`) become conversation-wide (`D<n>:t1`,
//! `D<n>:p1`, with `n` the unit's first session), and each sentence gets a parsed date.

use std::collections::BTreeMap;

use chrono::NaiveDate;
use indexmap::IndexMap;
use serde_json::json;

mod salvage;

pub use self::salvage::RewriteRecord;
pub(crate) use self::salvage::RewriteSalvage;
use crate::ingest::unit::Unit;
use crate::llm::JsonSchemaSpec;
use crate::memory::input::{PersonalFact, RewrittenSentence, SessionRewrite, TopicInput};
use crate::prompts::{self, PromptError};

/// The rewrite prompt filled with the unit's dialogue.
pub(crate) fn render_prompt(unit: &Unit<'_>) -> Result<String, PromptError> {
    prompts::REWRITE.render(&[("dialogue", unit.dialogue.trim_end())])
}

/// JSON Schema of the model's answer (the contract of §4).
pub(crate) fn schema() -> JsonSchemaSpec {
    let date_or_null =
        json!({"type": ["string", "null"], "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"});
    let text = json!({"type": "string", "minLength": 1});
    JsonSchemaSpec {
        name: "rewrite".into(),
        schema: json!({
            "type": "object",
            "required": ["conversation_time", "sentence", "topics", "personal_sentences"],
            "properties": {
                "conversation_time": date_or_null,
                "sentence": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "required": ["id", "origin", "text", "tag", "time", "topic"],
                        "properties": {
                            "id": {"type": "string", "pattern": "^D[0-9]+:[0-9]+-[0-9]+$"},
                            "origin": {"type": "string", "pattern": "^D[0-9]+:[0-9]+$"},
                            "text": text,
                            "tag": text,
                            "time": date_or_null,
                            "topic": {"type": "array", "items": {"type": "string"}}
                        }
                    }
                },
                "topics": {
                    "type": "object",
                    "propertyNames": {"pattern": "^t[0-9]+$"},
                    "additionalProperties": text
                },
                "personal_sentences": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["id", "person", "tag", "text", "origin"],
                        "properties": {
                            "id": {"type": "string", "pattern": "^p[0-9]+$"},
                            "person": text,
                            "tag": text,
                            "text": text,
                            "origin": {"type": "string", "pattern": "^D[0-9]+:[0-9]+$"}
                        }
                    }
                }
            }
        }),
    }
}

/// The checked items of the model's answers (the schema's shape, ids still local).
#[derive(Debug)]
struct RawRewrite {
    sentence: Vec<RawSentence>,
    topics: IndexMap<String, String>,
    personal_sentences: Vec<RawPersonal>,
}

#[derive(Debug)]
struct RawSentence {
    origin: String,
    text: String,
    tag: String,
    time: Option<String>,
    topic: Vec<String>,
}

#[derive(Debug)]
struct RawPersonal {
    id: String,
    person: String,
    tag: String,
    text: String,
    origin: String,
}

/// Renumber and globalise ids and attach dates; `raw` holds only checked items.
fn normalise(
    raw: RawRewrite,
    unit: &Unit<'_>,
    conversation_time: Option<NaiveDate>,
) -> SessionRewrite {
    let prefix = format!("D{}:", unit.first_session);
    let mut per_origin: BTreeMap<String, u32> = BTreeMap::new();
    let sentences = raw
        .sentence
        .into_iter()
        .map(|sentence| {
            let counter = per_origin.entry(sentence.origin.clone()).or_insert(0);
            *counter += 1;
            let date = sentence
                .time
                .as_deref()
                .and_then(parse_day)
                .or_else(|| unit.date_of(&sentence.origin));
            let mut topic_ids: Vec<String> = Vec::new();
            for topic in sentence.topic {
                let id = format!("{prefix}{topic}");
                if !topic_ids.contains(&id) {
                    topic_ids.push(id);
                }
            }
            RewrittenSentence {
                id: format!("{}-{counter}", sentence.origin),
                origin: sentence.origin,
                text: sentence.text.trim().to_string(),
                date,
                tag: sentence.tag.trim().to_string(),
                topic_ids,
            }
        })
        .collect();
    let topics = raw
        .topics
        .into_iter()
        .map(|(id, text)| TopicInput { id: format!("{prefix}{id}"), text: text.trim().to_string() })
        .collect();
    let personal_facts = raw
        .personal_sentences
        .into_iter()
        .map(|fact| PersonalFact {
            id: format!("{prefix}{}", fact.id),
            person: fact.person.trim().to_string(),
            aspect: fact.tag.trim().to_string(),
            fact: fact.text.trim().to_string(),
            origins: vec![fact.origin],
        })
        .collect();
    SessionRewrite { session: unit.label(), conversation_time, sentences, topics, personal_facts }
}

/// A `YYYY-MM-DD` string that names a real day.
pub(crate) fn parse_day(text: &str) -> Option<NaiveDate> {
    let text = text.trim();
    let shaped = text.len() == 10
        && text
            .char_indices()
            .all(|(at, c)| if at == 4 || at == 7 { c == '-' } else { c.is_ascii_digit() });
    if !shaped {
        return None;
    }
    NaiveDate::parse_from_str(text, "%Y-%m-%d").ok()
}

#[cfg(test)]
mod tests;
