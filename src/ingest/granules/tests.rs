use std::path::Path;

use super::*;
use crate::ingest::unit::tests::conversation;

#[test]
fn the_cache_path_follows_the_stage_layout() {
    let settings = BuildSettings::new("/p/data", DatasetKind::Locomo, "openai/gpt-4o-mini", "x/y");
    assert_eq!(
        settings.granules_path("conv-26"),
        Path::new("/p/data/locomo/memgas_openai_gpt-4o-mini/conv-26_granules.json")
    );
}

#[test]
fn answers_are_trimmed_split_and_deduplicated() {
    let answer = json!({
        "summary": "  Ana told Bo about her paintings.\n",
        "keywords": ["Ana", " paintings ; Bo", "ana", "", "  ", "line\nbreak"]
    });
    let granules = check(&answer, "D2").unwrap();
    assert_eq!(granules.session_id, "D2");
    assert_eq!(granules.summary, "Ana told Bo about her paintings.");
    assert_eq!(granules.keywords, ["Ana", "paintings", "Bo", "line", "break"]);
    assert_eq!(granules.keyword_text(), "Ana; paintings; Bo; line; break");
}

#[test]
fn blank_or_overlong_answers_are_problems() {
    let problems = check(&json!({"summary": "  ", "keywords": [" ", ";"]}), "D1").unwrap_err();
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(problems[0].contains("`summary` is blank"));
    assert!(problems[1].contains("`keywords`"));
    let long = "word ".repeat(500);
    let problems = check(&json!({"summary": long, "keywords": ["a"]}), "D1").unwrap_err();
    assert!(problems[0].contains("2499 characters"), "{problems:?}");
}

#[test]
fn keywords_are_capped() {
    let many: Vec<String> = (0..50).map(|n| format!("k{n}")).collect();
    let granules = check(&json!({"summary": "s", "keywords": many}), "D1").unwrap();
    assert_eq!(granules.keywords.len(), MAX_KEYWORDS);
    assert_eq!(granules.keywords[0], "k0");
}

#[test]
fn the_schema_wants_both_fields() {
    let validator = jsonschema::validator_for(&schema().schema).unwrap();
    assert!(validator.is_valid(&json!({"summary": "s", "keywords": ["a"]})));
    assert!(!validator.is_valid(&json!({"summary": "s"})));
    assert!(!validator.is_valid(&json!({"summary": "s", "keywords": []})));
    assert!(!validator.is_valid(&json!({"summary": "", "keywords": ["a"]})));
    assert!(!validator.is_valid(&json!({"summary": "s", "keywords": "a; b"})));
}

#[test]
fn the_prompt_names_the_speakers_and_shows_the_dated_session() {
    let conversation = conversation(2, 2);
    let units = plan_units(&conversation, 1);
    let prompt = render_prompt(&conversation, &units[1]).unwrap();
    assert!(prompt.contains("conversation between Ana and Bo,"), "{prompt}");
    assert!(prompt.contains("Session D2, date: 10:00 am on 2 May, 2023 (2023-05-02)\n[D2:1] Ana: line 1 of session 2"), "{prompt}");
    assert!(prompt.trim_end().ends_with("[D2:2] Bo: line 2 of session 2"), "{prompt}");
    let mut lm = conversation.clone();
    lm.dataset = DatasetKind::LongMemEval;
    assert!(render_prompt(&lm, &units[1]).unwrap().contains("between a user and an AI assistant"));
}

#[test]
fn the_input_hash_follows_the_session_text() {
    let conversation = conversation(2, 2);
    let mut changed = conversation.clone();
    changed.sessions[1].turns[0].text = "something else".into();
    let (a, b) = (plan_sessions(&conversation).unwrap(), plan_sessions(&changed).unwrap());
    assert_eq!(a[0].planned, b[0].planned);
    assert_ne!(a[1].planned.input_hash, b[1].planned.input_hash);
    assert_eq!(a[1].planned.key, "session_2");
}
