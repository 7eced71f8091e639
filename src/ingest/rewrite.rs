//! Stage 1 — rewrite: one unit of dialogue → self-contained, dated sentences, topics and
//! personal facts (behaviour of §4 of the reference, with its validation gaps closed).
//!
//! The model's JSON is checked twice: by a JSON Schema (through `llm::structured::chat_json`,
//! which re-asks on a schema violation) and then semantically here: every sentence comes from a
//! real turn of this unit, every turn is covered, dates are real `YYYY-MM-DD` days consistent
//! with the session date, topic references resolve, personal facts are well-formed. A semantic
//! problem is sent back to the model (bounded re-asks, see `ask.rs`); a unit that stays invalid
//! is reported as failed, never stored as if it were valid.
//!
//! Valid output is normalised: sentence ids are renumbered `<origin>-<k>` in order of
//! appearance, local topic and fact ids (`t1`, `p1`) become conversation-wide (`D<n>:t1`,
//! `D<n>:p1`, with `n` the unit's first session), and each sentence gets a parsed date.

use std::collections::{BTreeMap, BTreeSet};

use chrono::NaiveDate;
use indexmap::IndexMap;
use serde::Deserialize;
use serde_json::{Value, json};

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

/// The model's answer as the schema shapes it.
#[derive(Debug, Deserialize)]
struct RawRewrite {
    conversation_time: Option<String>,
    sentence: Vec<RawSentence>,
    topics: IndexMap<String, String>,
    personal_sentences: Vec<RawPersonal>,
}

#[derive(Debug, Deserialize)]
struct RawSentence {
    id: String,
    origin: String,
    text: String,
    tag: String,
    time: Option<String>,
    topic: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct RawPersonal {
    id: String,
    person: String,
    tag: String,
    text: String,
    origin: String,
}

/// Semantic check of a schema-valid answer; on success, the normalised record.
///
/// On failure, every problem found (so one re-ask can fix them all), each naming the offending
/// item.
pub(crate) fn check(value: &Value, unit: &Unit<'_>) -> Result<SessionRewrite, Vec<String>> {
    let raw: RawRewrite = serde_json::from_value(value.clone())
        .map_err(|error| vec![format!("the JSON does not have the expected shape: {error}")])?;
    let mut problems = Vec::new();
    let conversation_time = check_conversation_time(&raw, unit, &mut problems);
    check_sentences(&raw, unit, &mut problems);
    for (id, text) in &raw.topics {
        if text.trim().is_empty() {
            problems.push(format!("topic `{id}` has an empty text"));
        }
    }
    check_personal(&raw, unit, &mut problems);
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(normalise(raw, unit, conversation_time))
}

/// The answer's `conversation_time`, when it is a real date that agrees with the known one.
fn check_conversation_time(
    raw: &RawRewrite,
    unit: &Unit<'_>,
    problems: &mut Vec<String>,
) -> Option<NaiveDate> {
    match (&raw.conversation_time, unit.first_date()) {
        (Some(text), known) => match parse_day(text) {
            None => {
                problems.push(format!("conversation_time `{text}` is not a real YYYY-MM-DD date"));
                None
            }
            Some(date) if known.is_some_and(|known| known != date) => {
                problems.push(format!(
                    "conversation_time is {date}, but the session took place on {}",
                    known.map(|day| day.to_string()).unwrap_or_default()
                ));
                None
            }
            Some(date) => Some(date),
        },
        (None, Some(known)) => {
            problems
                .push(format!("conversation_time is null, but the session date is known: {known}"));
            None
        }
        (None, None) => None,
    }
}

/// Every sentence's origin, id, text, tag, time and topics, and that every turn is covered.
fn check_sentences(raw: &RawRewrite, unit: &Unit<'_>, problems: &mut Vec<String>) {
    let turns = unit.dia_id_set();
    let mut covered = BTreeSet::new();
    for sentence in &raw.sentence {
        let label = format!("sentence `{}`", sentence.id);
        if !turns.contains(sentence.origin.as_str()) {
            problems.push(format!(
                "{label} has origin `{}`, which is not a dia_id of this dialogue",
                sentence.origin
            ));
        } else {
            covered.insert(sentence.origin.as_str());
        }
        if sentence.id.split('-').next() != Some(sentence.origin.as_str()) {
            problems.push(format!("{label} must start with its origin `{}`", sentence.origin));
        }
        if sentence.text.trim().is_empty() {
            problems.push(format!("{label} has an empty text"));
        }
        if sentence.tag.trim().is_empty() {
            problems.push(format!("{label} has an empty tag"));
        }
        match &sentence.time {
            Some(time) if parse_day(time).is_none() => {
                problems.push(format!(
                    "{label} has time `{time}`, which is not a real YYYY-MM-DD date"
                ));
            }
            Some(_) => {}
            None if unit.date_of(&sentence.origin).is_some() => {
                problems.push(format!("{label} has time null, but its session date is known"));
            }
            None => {}
        }
        for topic in &sentence.topic {
            if !raw.topics.contains_key(topic) {
                problems.push(format!("{label} lists topic `{topic}`, which is not in `topics`"));
            }
        }
    }
    let missing: Vec<&str> =
        unit.dia_ids.iter().map(String::as_str).filter(|id| !covered.contains(id)).collect();
    if !missing.is_empty() {
        problems.push(format!(
            "these turns have no sentence (every turn needs at least one): {}",
            missing.join(", ")
        ));
    }
}

/// Every personal sentence: unique id, a real origin, no empty field.
fn check_personal(raw: &RawRewrite, unit: &Unit<'_>, problems: &mut Vec<String>) {
    let turns = unit.dia_id_set();
    let mut fact_ids = BTreeSet::new();
    for fact in &raw.personal_sentences {
        let label = format!("personal sentence `{}`", fact.id);
        if !fact_ids.insert(fact.id.as_str()) {
            problems.push(format!("{label} appears more than once; number them p1, p2, ..."));
        }
        if !turns.contains(fact.origin.as_str()) {
            problems.push(format!(
                "{label} has origin `{}`, which is not a dia_id of this dialogue",
                fact.origin
            ));
        }
        for (field, value) in [("person", &fact.person), ("tag", &fact.tag), ("text", &fact.text)] {
            if value.trim().is_empty() {
                problems.push(format!("{label} has an empty {field}"));
            }
        }
    }
}

/// Renumber and globalise ids and attach dates; `raw` has passed [`check`].
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
mod tests {
    use super::*;
    use crate::ingest::unit::plan_units;
    use crate::ingest::unit::tests::conversation;

    /// A valid answer for a one-session unit of `turns` turns dated 2023-05-01.
    fn valid(turns: u32) -> Value {
        let sentences: Vec<Value> = (1..=turns)
            .map(|turn| {
                json!({"id": format!("D1:{turn}-1"), "origin": format!("D1:{turn}"), "text": format!("Ana said line {turn}"),
                       "tag": "Lines", "time": "2023-05-01", "topic": ["t1"]})
            })
            .collect();
        json!({
            "conversation_time": "2023-05-01",
            "sentence": sentences,
            "topics": {"t1": "Ana and Bo talk about lines"},
            "personal_sentences": [{"id": "p1", "person": "Ana", "tag": "Hobby", "text": "Ana writes lines", "origin": "D1:1"}]
        })
    }

    fn check_problems(value: Value) -> Vec<String> {
        let conversation = conversation(1, 3);
        let units = plan_units(&conversation, 1);
        check(&value, &units[0]).expect_err("should be rejected")
    }

    fn assert_problem(value: Value, expected: &str) {
        let problems = check_problems(value);
        assert!(
            problems.iter().any(|problem| problem.contains(expected)),
            "expected `{expected}` in {problems:?}"
        );
    }

    #[test]
    fn a_valid_answer_is_normalised() {
        let conversation = conversation(2, 3);
        let units = plan_units(&conversation, 1);
        let mut value = valid(3);
        // Second unit: shift everything to session 2 and give turn 2 two sentences with odd ids.
        let text = value.to_string().replace("D1:", "D2:").replace("2023-05-01", "2023-05-02");
        value = serde_json::from_str(&text).unwrap();
        value["sentence"].as_array_mut().unwrap().insert(
            2,
            json!({"id": "D2:2-7", "origin": "D2:2", "text": " second part ", "tag": " Lines ", "time": "2023-04-30", "topic": ["t1", "t1"]}),
        );
        let record = check(&value, &units[1]).unwrap();
        let ids: Vec<_> = record.sentences.iter().map(|sentence| sentence.id.as_str()).collect();
        assert_eq!(ids, ["D2:1-1", "D2:2-1", "D2:2-2", "D2:3-1"]);
        assert_eq!(record.sentences[2].text, "second part");
        assert_eq!(record.sentences[2].tag, "Lines");
        assert_eq!(record.sentences[2].date, NaiveDate::from_ymd_opt(2023, 4, 30));
        assert_eq!(record.sentences[2].topic_ids, ["D2:t1"]);
        assert_eq!(
            record.topics,
            [TopicInput { id: "D2:t1".into(), text: "Ana and Bo talk about lines".into() }]
        );
        assert_eq!(record.personal_facts[0].id, "D2:p1");
        assert_eq!(record.personal_facts[0].aspect, "Hobby");
        assert_eq!(record.personal_facts[0].origins, ["D2:1"]);
        assert_eq!(record.conversation_time, NaiveDate::from_ymd_opt(2023, 5, 2));
        assert_eq!(record.session, "D2");
    }

    #[test]
    fn every_turn_must_be_covered() {
        let mut value = valid(3);
        value["sentence"].as_array_mut().unwrap().remove(1);
        assert_problem(value, "these turns have no sentence (every turn needs at least one): D1:2");
    }

    #[test]
    fn origins_must_be_turns_of_this_dialogue() {
        let mut value = valid(3);
        value["sentence"][0]["origin"] = json!("D9:1");
        value["sentence"][0]["id"] = json!("D9:1-1");
        assert_problem(value, "origin `D9:1`, which is not a dia_id of this dialogue");
    }

    #[test]
    fn ids_must_start_with_their_origin() {
        let mut value = valid(3);
        value["sentence"][0]["id"] = json!("D1:2-1");
        assert_problem(value, "sentence `D1:2-1` must start with its origin `D1:1`");
    }

    #[test]
    fn dates_must_be_real_days() {
        let mut value = valid(3);
        value["sentence"][1]["time"] = json!("2023-02-30");
        assert_problem(value.clone(), "time `2023-02-30`, which is not a real YYYY-MM-DD date");
        value["sentence"][1]["time"] = Value::Null;
        assert_problem(value, "has time null, but its session date is known");
    }

    #[test]
    fn conversation_time_must_match_the_session_date() {
        let mut value = valid(3);
        value["conversation_time"] = json!("2023-06-01");
        assert_problem(
            value.clone(),
            "conversation_time is 2023-06-01, but the session took place on 2023-05-01",
        );
        value["conversation_time"] = Value::Null;
        assert_problem(value, "conversation_time is null");
    }

    #[test]
    fn null_dates_are_fine_when_the_session_date_is_unknown() {
        let mut conversation = conversation(1, 1);
        conversation.sessions[0].date = None;
        conversation.sessions[0].date_time = None;
        let units = plan_units(&conversation, 1);
        let mut value = valid(1);
        value["conversation_time"] = Value::Null;
        value["sentence"][0]["time"] = Value::Null;
        let record = check(&value, &units[0]).unwrap();
        assert_eq!(record.sentences[0].date, None);
        assert!(units[0].dialogue.starts_with("Session D1, date: unknown\n"));
    }

    #[test]
    fn topic_references_must_resolve() {
        let mut value = valid(3);
        value["sentence"][2]["topic"] = json!(["t1", "t4"]);
        assert_problem(value, "sentence `D1:3-1` lists topic `t4`, which is not in `topics`");
    }

    #[test]
    fn personal_facts_must_be_well_formed() {
        let mut value = valid(3);
        let fact =
            json!({"id": "p1", "person": "  ", "tag": "Hobby", "text": "x", "origin": "D2:1"});
        value["personal_sentences"].as_array_mut().unwrap().push(fact);
        let problems = check_problems(value);
        let joined = problems.join("\n");
        assert!(joined.contains("personal sentence `p1` appears more than once"), "{joined}");
        assert!(joined.contains("personal sentence `p1` has origin `D2:1`"), "{joined}");
        assert!(joined.contains("personal sentence `p1` has an empty person"), "{joined}");
    }

    #[test]
    fn the_schema_accepts_a_valid_answer_and_rejects_a_broken_one() {
        let validator = jsonschema::validator_for(&schema().schema).unwrap();
        assert!(validator.is_valid(&valid(3)));
        let mut broken = valid(3);
        broken.as_object_mut().unwrap().remove("topics");
        assert!(!validator.is_valid(&broken));
        let mut bad_key = valid(3);
        bad_key["topics"]["topic1"] = json!("x");
        assert!(!validator.is_valid(&bad_key));
        let mut bad_time = valid(3);
        bad_time["sentence"][0]["time"] = json!("May 2023");
        assert!(!validator.is_valid(&bad_time));
    }

    #[test]
    fn parse_day_wants_exactly_yyyy_mm_dd() {
        assert_eq!(parse_day("2024-02-29"), NaiveDate::from_ymd_opt(2024, 2, 29));
        for bad in ["2023-02-29", "2023-5-8", "08-05-2023", "2023-05-08T10:00", ""] {
            assert_eq!(parse_day(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_prompt_carries_the_dialogue() {
        let conversation = conversation(1, 2);
        let units = plan_units(&conversation, 1);
        let prompt = render_prompt(&units[0]).unwrap();
        assert!(prompt.contains("[D1:2] Bo: line 2 of session 1"));
        assert!(!prompt.contains("{{"));
    }
}
