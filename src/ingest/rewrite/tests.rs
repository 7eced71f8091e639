use serde_json::Value;

use super::*;
use crate::ingest::repair::{Repair, Salvage};
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

/// Absorb `replies` into a fresh salvage of the first unit of a 1×3 conversation; the
/// problems of each reply, what is missing, and the record with the missing turns verbatim.
fn salvage(replies: Vec<Result<Value, String>>) -> (Vec<Vec<String>>, Vec<String>, RewriteRecord) {
    let conversation = conversation(1, 3);
    let units = plan_units(&conversation, 1);
    let mut state = RewriteSalvage::new(&units[0]);
    let problems = replies.into_iter().map(|reply| state.absorb(reply)).collect();
    let missing = state.missing();
    let repair = Repair { fallback: missing.clone(), ..Repair::default() };
    (problems, missing, state.into_record(repair))
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
    let mut state = RewriteSalvage::new(&units[1]);
    assert!(state.absorb(Ok(value)).is_empty());
    assert!(state.missing().is_empty());
    let record = state.into_record(Repair::default()).rewrite;
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
fn a_skipped_turn_is_missing_and_the_rest_is_kept() {
    let mut value = valid(3);
    value["sentence"].as_array_mut().unwrap().remove(1);
    let (problems, missing, record) = salvage(vec![Ok(value)]);
    assert!(problems[0].is_empty(), "{problems:?}");
    assert_eq!(missing, ["D1:2"]);
    let texts: Vec<&str> = record.rewrite.sentences.iter().map(|s| s.text.as_str()).collect();
    assert_eq!(texts, ["Ana said line 1", "Bo: line 2 of session 1", "Ana said line 3"]);
}

#[test]
fn a_missing_turn_enters_verbatim_with_its_speaker_and_session_date() {
    let (problems, missing, record) = salvage(vec![Err("no JSON value found".into())]);
    assert_eq!(problems[0], ["no JSON object found in the reply: no JSON value found"]);
    assert_eq!(missing, ["D1:1", "D1:2", "D1:3"]);
    let second = &record.rewrite.sentences[1];
    assert_eq!((second.id.as_str(), second.origin.as_str()), ("D1:2-1", "D1:2"));
    assert_eq!(second.text, "Bo: line 2 of session 1");
    assert_eq!(second.tag, "Bo");
    assert_eq!(second.date, NaiveDate::from_ymd_opt(2023, 5, 1));
    assert!(second.topic_ids.is_empty());
    assert_eq!(record.repair.fallback, ["D1:1", "D1:2", "D1:3"]);
    assert_eq!(record.rewrite.conversation_time, NaiveDate::from_ymd_opt(2023, 5, 1));
}

#[test]
fn a_merged_sentence_covers_every_turn_it_cites() {
    let mut value = valid(3);
    let sentences = value["sentence"].as_array_mut().unwrap();
    sentences.truncate(1);
    sentences.push(json!({"id": "D1:2-1", "origin": "D1:2, D1:3", "text": "Bo and Ana agreed", "tag": "Plans", "time": "2023-05-01", "topic": ["t1"]}));
    let (_, missing, record) = salvage(vec![Ok(value.clone())]);
    assert!(missing.is_empty());
    let origins: Vec<&str> = record.rewrite.sentences.iter().map(|s| s.origin.as_str()).collect();
    assert_eq!(origins, ["D1:1", "D1:2", "D1:3"]);
    assert_eq!(record.rewrite.sentences[2].text, "Bo and Ana agreed");
    value["sentence"][1]["origin"] = json!(["D1:3", "D1:2"]);
    assert!(salvage(vec![Ok(value)]).1.is_empty(), "a list of origins counts too");
}

#[test]
fn broken_sentences_are_dropped_with_a_reason_and_their_turns_stay_missing() {
    let mut value = valid(3);
    value["sentence"][0]["origin"] = json!("D9:1");
    value["sentence"][1]["time"] = json!("2023-02-30");
    value["sentence"][2]["tag"] = json!("  ");
    let (problems, missing, _) = salvage(vec![Ok(value)]);
    assert_eq!(missing, ["D1:1", "D1:2", "D1:3"]);
    let joined = problems[0].join("\n");
    assert!(joined.contains("sentence `D1:1-1` has no origin that is a dia_id"), "{joined}");
    assert!(joined.contains("time `2023-02-30`, which is not a YYYY-MM-DD date"), "{joined}");
    assert!(joined.contains("sentence `D1:3-1` needs a non-empty `text` and `tag`"), "{joined}");
}

#[test]
fn a_re_ask_answer_fills_only_the_missing_turns() {
    let mut first = valid(3);
    first["sentence"].as_array_mut().unwrap().remove(1);
    let mut second = valid(3);
    second["sentence"][0]["text"] = json!("a second version of turn 1");
    second["sentence"][1]["text"] = json!("the missing turn");
    second["sentence"][1]["topic"] = json!(["t1", "t9"]);
    second["topics"] = json!({"t1": "another text for t1", "t2": "a new topic"});
    let (_, missing, record) = salvage(vec![Ok(first), Ok(second)]);
    assert!(missing.is_empty());
    let texts: Vec<&str> = record.rewrite.sentences.iter().map(|s| s.text.as_str()).collect();
    assert_eq!(texts, ["Ana said line 1", "the missing turn", "Ana said line 3"]);
    assert_eq!(record.rewrite.sentences[1].topic_ids, ["D1:t1"], "unknown topic refs dropped");
    let topics: Vec<&str> = record.rewrite.topics.iter().map(|t| t.text.as_str()).collect();
    assert_eq!(topics, ["Ana and Bo talk about lines", "a new topic"]);
    assert_eq!(record.rewrite.personal_facts.len(), 1, "the same fact is kept once");
}

#[test]
fn null_dates_fall_back_to_the_session_date() {
    let mut conversation = conversation(1, 1);
    let units = plan_units(&conversation, 1);
    let mut value = valid(1);
    value["sentence"][0]["time"] = Value::Null;
    let mut state = RewriteSalvage::new(&units[0]);
    state.absorb(Ok(value.clone()));
    let record = state.into_record(Repair::default());
    assert_eq!(record.rewrite.sentences[0].date, NaiveDate::from_ymd_opt(2023, 5, 1));
    conversation.sessions[0].date = None;
    conversation.sessions[0].date_time = None;
    let units = plan_units(&conversation, 1);
    let mut state = RewriteSalvage::new(&units[0]);
    state.absorb(Ok(value));
    assert_eq!(state.into_record(Repair::default()).rewrite.sentences[0].date, None);
    assert!(units[0].dialogue.starts_with("Session D1, date: unknown\n"));
}

#[test]
fn the_re_ask_lists_only_the_missing_turns() {
    let conversation = conversation(2, 3);
    let units = plan_units(&conversation, 2);
    let mut state = RewriteSalvage::new(&units[0]);
    let prompt = state.reask(&["D1:2".into(), "D2:3".into()], "these turns are missing").unwrap();
    assert!(prompt.contains("[D1:2] Bo: line 2 of session 1"), "{prompt}");
    assert!(prompt.contains("[D2:3] Ana: line 3 of session 2"), "{prompt}");
    assert!(prompt.contains("Session D2, date: 10:00 am on 2 May, 2023 (2023-05-02)"));
    assert_eq!(prompt.matches("\n[D").count(), 2, "{prompt}");
    assert!(prompt.contains("topic ids you already gave (none yet)"), "{prompt}");
    state.absorb(Ok(valid(3)));
    let prompt = state.reask(&["D2:1".into()], "x").unwrap();
    assert!(prompt.contains("topic ids you already gave (t1)"), "{prompt}");
    assert!(!prompt.contains("{{"));
}

#[test]
fn the_schema_accepts_a_valid_answer_and_rejects_a_broken_one() {
    let validator = jsonschema::validator_for(&schema().schema).unwrap();
    assert!(validator.is_valid(&valid(3)));
    let mut broken = valid(3);
    broken.as_object_mut().unwrap().remove("topics");
    assert!(!validator.is_valid(&broken));
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
