//! The rewrite answer gathered turn by turn ([`RewriteSalvage`]) and the record the rewrite
//! cache stores ([`RewriteRecord`]).
//!
//! A sentence is kept when its origin names a turn still missing and its text, tag and time are
//! usable; its `id` is ignored (ids are renumbered) and topic references that resolve to no
//! topic are dropped from it. A sentence that cites several turns (`"D1:2, D1:3"`,
//! `["D1:2", "D1:3"]`: the model merged them) is kept once for each, so it covers them all.
//! Topics and personal facts are kept when well-formed. Turns no reply covered enter memory
//! verbatim: the turn's own line as the sentence, its speaker as the tag, its session date.

use std::collections::BTreeSet;

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{RawPersonal, RawRewrite, RawSentence, normalise, parse_day};
use crate::ingest::repair::{Repair, Salvage, items_of, string_list, text_field};
use crate::ingest::unit::{Unit, render_dialogue, turn_line};
use crate::memory::input::SessionRewrite;
use crate::prompts::{self, PromptError};

/// One unit's rewrite as the cache stores it: the record the graph is built from, and how it
/// was put together.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RewriteRecord {
    /// The validated, normalised rewrite (verbatim turns included).
    #[serde(flatten)]
    pub rewrite: SessionRewrite,
    /// Re-asks, salvaged turns and turns entered verbatim (`fallback`), by dia_id.
    #[serde(default)]
    pub repair: Repair,
}

/// The rewrite of one unit, gathered over the replies.
#[derive(Debug)]
pub(crate) struct RewriteSalvage<'u, 'a> {
    unit: &'u Unit<'a>,
    sentences: Vec<RawSentence>,
    topics: IndexMap<String, String>,
    facts: Vec<RawPersonal>,
    covered: BTreeSet<String>,
}

impl<'u, 'a> RewriteSalvage<'u, 'a> {
    /// Nothing gathered yet.
    pub(crate) fn new(unit: &'u Unit<'a>) -> Self {
        Self {
            unit,
            sentences: Vec::new(),
            topics: IndexMap::new(),
            facts: Vec::new(),
            covered: BTreeSet::new(),
        }
    }

    /// The turns of `origin` (a string or a list citing one or more dia_ids) in this unit.
    fn origins(&self, origin: Option<&Value>) -> Vec<String> {
        let turns = self.unit.dia_id_set();
        let mut found = Vec::new();
        for text in string_list(origin) {
            for token in text.split(|c: char| !(c.is_ascii_alphanumeric() || c == ':')) {
                if turns.contains(token) && !found.iter().any(|known| known == token) {
                    found.push(token.to_string());
                }
            }
        }
        found
    }

    /// Keep one sentence item for the `wanted` turns it cites; a problem when it is unusable.
    fn absorb_sentence(&mut self, item: &Value, wanted: &BTreeSet<String>) -> Option<String> {
        let id = item.get("id").and_then(Value::as_str).unwrap_or("?");
        let label = format!("sentence `{id}`");
        let origins = self.origins(item.get("origin"));
        if origins.is_empty() {
            return Some(format!("{label} has no origin that is a dia_id of this dialogue"));
        }
        let (Some(text), Some(tag)) = (text_field(item, "text"), text_field(item, "tag")) else {
            return Some(format!("{label} needs a non-empty `text` and `tag`"));
        };
        let time = match item.get("time") {
            Some(Value::String(time)) if parse_day(time).is_none() => {
                return Some(format!("{label} has time `{time}`, which is not a YYYY-MM-DD date"));
            }
            Some(Value::String(time)) => Some(time.trim().to_string()),
            _ => None,
        };
        let topic = string_list(item.get("topic"));
        for origin in origins.into_iter().filter(|origin| wanted.contains(origin)) {
            self.covered.insert(origin.clone());
            let (text, tag, time, topic) = (text.clone(), tag.clone(), time.clone(), topic.clone());
            self.sentences.push(RawSentence { origin, text, tag, time, topic });
        }
        None
    }

    /// Keep one personal-fact item; a problem when it is unusable.
    fn absorb_fact(&mut self, item: &Value) -> Option<String> {
        let id = item.get("id").and_then(Value::as_str).unwrap_or("?");
        let origin = self.origins(item.get("origin")).into_iter().next();
        let fields =
            (text_field(item, "person"), text_field(item, "tag"), text_field(item, "text"));
        let (Some(origin), (Some(person), Some(tag), Some(text))) = (origin, fields) else {
            return Some(format!(
                "personal sentence `{id}` needs a dia_id `origin` and non-empty `person`, `tag`, `text`"
            ));
        };
        let known = self.facts.iter().any(|fact| fact.person == person && fact.text == text);
        if !known {
            self.facts.push(RawPersonal { id: String::new(), person, tag, text, origin });
        }
        None
    }

    /// The finished record: missing turns verbatim, sentences in dialogue order, ids
    /// renumbered, topic references resolved.
    pub(crate) fn into_record(self, repair: Repair) -> RewriteRecord {
        let unit = self.unit;
        let mut sentences = self.sentences;
        for dia_id in &repair.fallback {
            let Some(turn) = unit.turn(dia_id) else { continue };
            sentences.push(RawSentence {
                origin: dia_id.clone(),
                text: turn_line(turn),
                tag: turn.speaker.trim().to_string(),
                time: unit.date_of(dia_id).map(|date| date.to_string()),
                topic: Vec::new(),
            });
        }
        let position = |origin: &str| unit.dia_ids.iter().position(|id| id == origin);
        sentences.sort_by_key(|sentence| position(&sentence.origin));
        for sentence in &mut sentences {
            sentence.topic.retain(|topic| self.topics.contains_key(topic));
        }
        let mut facts = self.facts;
        for (number, fact) in facts.iter_mut().enumerate() {
            fact.id = format!("p{}", number + 1);
        }
        let raw =
            RawRewrite { sentence: sentences, topics: self.topics, personal_sentences: facts };
        RewriteRecord { rewrite: normalise(raw, unit, unit.first_date()), repair }
    }
}

impl Salvage for RewriteSalvage<'_, '_> {
    fn absorb(&mut self, reply: Result<Value, String>) -> Vec<String> {
        let value = match reply {
            Ok(value) => value,
            Err(error) => return vec![format!("no JSON object found in the reply: {error}")],
        };
        let wanted: BTreeSet<String> = self.missing().into_iter().collect();
        let mut problems = Vec::new();
        if let Some(topics) = value.get("topics").and_then(Value::as_object) {
            for (id, text) in topics {
                let shaped = id
                    .strip_prefix('t')
                    .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()));
                match text.as_str().map(str::trim) {
                    Some(text) if shaped && !text.is_empty() => {
                        self.topics.entry(id.clone()).or_insert_with(|| text.to_string());
                    }
                    _ => problems.push(format!("topic `{id}` needs an id t<n> and a text")),
                }
            }
        }
        for item in &items_of(&value, "sentence") {
            problems.extend(self.absorb_sentence(item, &wanted));
        }
        let facts =
            value.get("personal_sentences").and_then(Value::as_array).cloned().unwrap_or_default();
        for item in &facts {
            problems.extend(self.absorb_fact(item));
        }
        problems
    }

    fn missing(&self) -> Vec<String> {
        self.unit.dia_ids.iter().filter(|id| !self.covered.contains(*id)).cloned().collect()
    }

    fn reask(&self, missing: &[String], reason: &str) -> Result<String, PromptError> {
        let wanted: BTreeSet<&str> = missing.iter().map(String::as_str).collect();
        let turns =
            render_dialogue(&self.unit.sessions, |turn| wanted.contains(turn.dia_id.as_str()));
        let topics: Vec<&str> = self.topics.keys().map(String::as_str).collect();
        let topics = if topics.is_empty() { "none yet".to_string() } else { topics.join(", ") };
        prompts::REWRITE_MISSING.render(&[
            ("reason", reason),
            ("turns", turns.trim_end()),
            ("topics", &topics),
        ])
    }
}
