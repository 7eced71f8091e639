//! Dataset loaders: counts on the shipped LoCoMo file and the LongMemEval fixture, error
//! messages that name file, sample and field, sample selection and `--ca` filtering.

use std::path::{Path, PathBuf};

use mragent::dataset::{
    self, Category, Conversation, DatasetKind, Error, LoadOptions, LongMemEvalType, default_path,
    load, load_locomo, parse_locomo, parse_longmemeval,
};
use serde_json::{Value, json};

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn locomo_path() -> PathBuf {
    default_path(&repo_root(), DatasetKind::Locomo)
}

fn lm_fixture() -> PathBuf {
    repo_root().join("tests/fixtures/longmemeval_tiny.json")
}

fn n_turns(conversations: &[Conversation]) -> usize {
    conversations.iter().flat_map(|c| &c.sessions).map(|s| s.turns.len()).sum()
}

fn n_sessions(conversations: &[Conversation]) -> usize {
    conversations.iter().map(|c| c.sessions.len()).sum()
}

fn ids(conversations: &[Conversation]) -> Vec<&str> {
    conversations.iter().map(|c| c.sample_id.as_str()).collect()
}

#[test]
fn default_paths_follow_the_dataset_names() {
    let root = Path::new("/repo");
    assert_eq!(
        default_path(root, DatasetKind::Locomo),
        Path::new("/repo/data/dataset_locomo.json")
    );
    assert_eq!(
        default_path(root, DatasetKind::LongMemEval),
        Path::new("/repo/data/dataset_LM.json")
    );
}

#[test]
fn shipped_locomo_file_has_the_published_counts() {
    let conversations = load_locomo(&locomo_path()).unwrap();
    assert_eq!(
        ids(&conversations),
        [
            "conv-26", "conv-30", "conv-41", "conv-42", "conv-43", "conv-44", "conv-47", "conv-48",
            "conv-49", "conv-50"
        ]
    );
    assert_eq!(n_sessions(&conversations), 272);
    assert_eq!(n_turns(&conversations), 5_882);
    let questions: Vec<_> = conversations.iter().flat_map(|c| &c.questions).collect();
    assert_eq!(questions.len(), 1_986);

    let per_category: Vec<usize> = (1..=5)
        .map(|n| questions.iter().filter(|q| q.category == Category::Locomo(n)).count())
        .collect();
    assert_eq!(per_category, [282, 321, 96, 841, 446]);
    // Category 5: distractor always present, gold answer only on 2 items.
    let adversarial: Vec<_> =
        questions.iter().filter(|q| q.category == Category::Locomo(5)).collect();
    assert!(adversarial.iter().all(|q| q.adversarial_answer.is_some()));
    assert_eq!(adversarial.iter().filter(|q| q.answer.is_some()).count(), 2);
    assert!(
        questions.iter().filter(|q| q.category != Category::Locomo(5)).all(|q| q.answer.is_some())
    );

    let captions = conversations
        .iter()
        .flat_map(|c| &c.sessions)
        .flat_map(|s| &s.turns)
        .filter(|t| t.blip_caption.is_some())
        .count();
    assert_eq!(captions, 1_226);
    // Every session of the shipped file has a date the parser understands.
    assert!(conversations.iter().flat_map(|c| &c.sessions).all(|s| s.date.is_some()));
}

#[test]
fn locomo_details_of_conv_26() {
    let conversations = load_locomo(&locomo_path()).unwrap();
    let conv = &conversations[0];
    // conv-26 has 35 date keys but only 19 session lists.
    assert_eq!(conv.sessions.len(), 19);
    assert_eq!(
        conv.sessions.iter().map(|s| s.index).collect::<Vec<_>>(),
        (1..=19).collect::<Vec<_>>()
    );
    assert_eq!(conv.speakers, ["Caroline", "Melanie"]);
    let first = &conv.sessions[0];
    assert_eq!(first.id(), "D1");
    assert_eq!(first.date_time.as_deref(), Some("1:56 pm on 8 May, 2023"));
    assert_eq!(first.date.map(|d| d.to_string()).as_deref(), Some("2023-05-08"));
    assert_eq!(first.turns[0].dia_id, "D1:1");
    assert_eq!(first.turns[0].speaker, "Caroline");

    // Integer answer becomes text; ids are 1-based positions in the qa list.
    let q2 = &conv.questions[1];
    assert_eq!(q2.id, "conv-26:q2");
    assert_eq!(q2.question, "When did Melanie paint a sunrise?");
    assert_eq!(q2.answer.as_deref(), Some("2022"));
    assert_eq!(q2.evidence, ["D1:12"]);
    let last = conv.questions.last().unwrap();
    assert_eq!(last.id, format!("conv-26:q{}", conv.questions.len()));
    assert!(conv.questions.iter().all(|q| q.sample_id == "conv-26" && q.question_date.is_none()));

    // A turn with an image: the caption is kept and shown the way the official prompt does.
    let with_image =
        conv.sessions.iter().flat_map(|s| &s.turns).find(|t| t.blip_caption.is_some()).unwrap();
    assert!(with_image.display().contains(" and shared "));
}

#[test]
fn sample_selection_accepts_number_and_full_id() {
    let path = locomo_path();
    for wanted in ["26", "conv-26", " 26 "] {
        let options = LoadOptions { samples: vec![wanted.to_string()], ..LoadOptions::default() };
        let conversations = load(DatasetKind::Locomo, &path, &options).unwrap();
        assert_eq!(ids(&conversations), ["conv-26"], "{wanted}");
    }
    // Several samples keep file order.
    let options =
        LoadOptions { samples: vec!["50".into(), "conv-30".into()], ..LoadOptions::default() };
    assert_eq!(ids(&load(DatasetKind::Locomo, &path, &options).unwrap()), ["conv-30", "conv-50"]);
}

#[test]
fn unknown_sample_lists_the_valid_ids() {
    let options = LoadOptions { samples: vec!["27".into()], ..LoadOptions::default() };
    let error = load(DatasetKind::Locomo, &locomo_path(), &options).unwrap_err();
    assert!(
        matches!(&error, Error::UnknownSample { requested, valid } if requested == "27" && valid.len() == 10)
    );
    let message = error.to_string();
    assert!(
        message.starts_with("unknown sample \"27\"; valid ids: conv-26, conv-30, conv-41"),
        "{message}"
    );
    assert!(message.ends_with("conv-50"), "{message}");
}

/// A minimal well-formed LoCoMo sample, edited by the malformed-input cases.
fn locomo_sample() -> Value {
    json!({
        "sample_id": "conv-26",
        "conversation": {
            "speaker_a": "Ann", "speaker_b": "Bob",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ann", "dia_id": "D1:1", "text": "Hi Bob!"},
                {"speaker": "Bob", "dia_id": "D1:2", "text": "Hi Ann, look.", "blip_caption": "a photo of a dog"}
            ],
            "session_2_date_time": "9:00 am on 10 May, 2023",
            "session_3_date_time": "9:00 am on 12 May, 2023",
            "session_3": [
                {"speaker": "Bob", "dia_id": "D3:1", "text": "Back again."}
            ]
        },
        "qa": [
            {"question": "When?", "answer": 2022, "evidence": ["D1:1"], "category": 2},
            {"question": "Who?", "evidence": [], "category": 5, "adversarial_answer": "Bob"}
        ]
    })
}

fn parse_locomo_value(value: &Value) -> Result<Vec<Conversation>, Error> {
    parse_locomo(Path::new("data/x.json"), &value.to_string())
}

#[test]
fn small_locomo_sample_parses() {
    let conversations = parse_locomo_value(&json!([locomo_sample()])).unwrap();
    let conv = &conversations[0];
    assert_eq!(conv.dataset, DatasetKind::Locomo);
    // session_2 has a date but no turns list: not a session.
    assert_eq!(conv.sessions.iter().map(|s| s.id()).collect::<Vec<_>>(), ["D1", "D3"]);
    assert_eq!(conv.sessions[1].date.map(|d| d.to_string()).as_deref(), Some("2023-05-12"));
    assert_eq!(
        conv.sessions[0].turns[1].display(),
        "Bob: Hi Ann, look. and shared a photo of a dog"
    );
    assert_eq!(conv.questions[0].answer.as_deref(), Some("2022"));
    assert_eq!(conv.questions[1].answer, None);
    assert_eq!(conv.questions[1].adversarial_answer.as_deref(), Some("Bob"));
    assert_eq!(conv.questions[1].id, "conv-26:q2");
}

#[test]
fn sessions_without_turns_are_listed_not_dropped_silently() {
    let mut sample = locomo_sample();
    let conversation = sample["conversation"].as_object_mut().unwrap();
    conversation.insert("session_4".into(), json!([]));
    conversation
        .insert("session_5".into(), json!([{"speaker": "Ann", "dia_id": "D5:1", "text": "  "}]));
    let conversations = parse_locomo_value(&json!([sample])).unwrap();
    let conv = &conversations[0];
    assert_eq!(conv.sessions.iter().map(|s| s.id()).collect::<Vec<_>>(), ["D1", "D3"]);
    // A date without a session list is no session at all; empty lists are sessions without
    // turns, and they are named.
    assert_eq!(conv.empty_sessions, ["conversation.session_4", "conversation.session_5"]);
    let whole = parse_locomo_value(&json!([locomo_sample()])).unwrap();
    assert!(whole[0].empty_sessions.is_empty());
}

/// Applies `edit` to the sample and returns the loader's error message.
fn locomo_error(edit: impl FnOnce(&mut Value)) -> String {
    let mut sample = locomo_sample();
    edit(&mut sample);
    let error = parse_locomo_value(&json!([sample])).unwrap_err();
    assert!(matches!(error, Error::Malformed { .. } | Error::Json { .. }), "{error:?}");
    error.to_string()
}

#[test]
fn malformed_locomo_names_file_sample_and_field() {
    let check = |expected: &str, edit: &dyn Fn(&mut Value)| {
        assert_eq!(locomo_error(edit), expected);
    };
    check(
        "data/x.json: sample conv-26: conversation.session_3[0].dia_id: expected a string, found a number",
        &|s| s["conversation"]["session_3"][0]["dia_id"] = json!(4),
    );
    check("data/x.json: sample conv-26: conversation.session_1[1].text: missing", &|s| {
        s["conversation"]["session_1"][1].as_object_mut().unwrap().remove("text");
    });
    check(
        "data/x.json: sample conv-26: conversation.session_3[0].dia_id: expected D3:<turn>, found \"D4:1\"",
        &|s| s["conversation"]["session_3"][0]["dia_id"] = json!("D4:1"),
    );
    check(
        "data/x.json: sample conv-26: conversation.session_1[1].dia_id: duplicate dia_id \"D1:1\"",
        &|s| s["conversation"]["session_1"][1]["dia_id"] = json!("D1:1"),
    );
    check(
        "data/x.json: sample conv-26: conversation.session_1[0]: expected an object, found a string",
        &|s| s["conversation"]["session_1"][0] = json!("hello"),
    );
    check("data/x.json: sample conv-26: qa[0].answer: missing", &|s| {
        s["qa"][0].as_object_mut().unwrap().remove("answer");
    });
    check("data/x.json: sample conv-26: qa[1].category: expected 1 to 5, found 7", &|s| {
        s["qa"][1]["category"] = json!(7)
    });
    check(
        "data/x.json: sample conv-26: qa[0].evidence[0]: expected a string, found a number",
        &|s| s["qa"][0]["evidence"] = json!([3]),
    );
    check("data/x.json: sample conv-26: qa: expected an array, found an object", &|s| {
        s["qa"] = json!({})
    });
    check("data/x.json: sample conv-26: conversation: missing", &|s| {
        s.as_object_mut().unwrap().remove("conversation");
    });
    check("data/x.json: sample [0]: sample_id: expected a string, found null", &|s| {
        s["sample_id"] = Value::Null
    });
}

#[test]
fn malformed_locomo_file_level_errors() {
    let error = parse_locomo(Path::new("data/x.json"), "{\"sample_id\": 1}").unwrap_err();
    assert!(matches!(error, Error::Json { .. }));
    assert!(error.to_string().starts_with("data/x.json: invalid json: "), "{error}");

    let error = parse_locomo(Path::new("data/x.json"), "[{\"sample_id\": \"a\"").unwrap_err();
    assert!(matches!(error, Error::Json { .. }), "{error}");

    let error = parse_locomo_value(&json!([locomo_sample(), locomo_sample()])).unwrap_err();
    assert_eq!(error.to_string(), "data/x.json: sample conv-26: sample_id: duplicate sample id");

    let error = parse_locomo_value(&json!([locomo_sample(), 3])).unwrap_err();
    assert_eq!(
        error.to_string(),
        "data/x.json: sample [1]: (sample): expected an object, found a number"
    );

    let error = load_locomo(Path::new("/nonexistent/dataset_locomo.json")).unwrap_err();
    assert!(matches!(error, Error::Io { .. }));
    assert!(error.to_string().starts_with("reading /nonexistent/dataset_locomo.json: "), "{error}");
}

#[test]
fn longmemeval_fixture_counts_and_ids() {
    let conversations =
        load(DatasetKind::LongMemEval, &lm_fixture(), &LoadOptions::default()).unwrap();
    assert_eq!(
        ids(&conversations),
        ["e47becba", "0e5e2d1a", "00ca467f", "031748ae_abs", "08f4fc43"]
    );
    assert_eq!(n_sessions(&conversations), 12);
    assert_eq!(n_turns(&conversations), 46);
    assert!(
        conversations
            .iter()
            .all(|c| c.dataset == DatasetKind::LongMemEval && c.questions.len() == 1)
    );

    let first = &conversations[0];
    assert_eq!(first.speakers, ["user", "assistant"]);
    assert_eq!(first.sessions[1].date_time.as_deref(), Some("2023/05/30 (Tue) 17:27"));
    assert_eq!(first.sessions[1].date.map(|d| d.to_string()).as_deref(), Some("2023-05-30"));
    let turns: Vec<_> = first.sessions[1]
        .turns
        .iter()
        .map(|t| (t.dia_id.as_str(), t.speaker.as_str(), t.has_answer))
        .collect();
    assert_eq!(
        turns,
        [
            ("D2:1", "user", false),
            ("D2:2", "assistant", false),
            ("D2:3", "user", true),
            ("D2:4", "assistant", true)
        ]
    );

    let question = &first.questions[0];
    assert_eq!(question.id, "e47becba");
    assert_eq!(question.sample_id, "e47becba");
    assert_eq!(question.question, "What degree did I graduate with?");
    assert_eq!(question.answer.as_deref(), Some("Business Administration"));
    assert_eq!(question.category, Category::LongMemEval("single-session-user".into()));
    assert_eq!(question.question_date.as_deref(), Some("2023/05/30 (Tue) 23:40"));
    assert_eq!(question.evidence, ["D2:3", "D2:4"]);

    // Integer answer becomes text; evidence spans sessions; abstention item has none.
    assert_eq!(conversations[2].questions[0].answer.as_deref(), Some("2"));
    assert_eq!(conversations[2].questions[0].evidence, ["D1:1", "D3:1"]);
    assert!(conversations[3].questions[0].evidence.is_empty());
}

#[test]
fn longmemeval_ca_selects_question_type() {
    let check = |index: u8, expected: &[&str]| {
        let options = LoadOptions {
            question_type: Some(LongMemEvalType::from_ca_index(index).unwrap()),
            ..LoadOptions::default()
        };
        let conversations = load(DatasetKind::LongMemEval, &lm_fixture(), &options).unwrap();
        assert_eq!(ids(&conversations), expected, "--ca {index}");
    };
    check(0, &["00ca467f"]);
    check(1, &["e47becba"]);
    check(2, &["08f4fc43"]);
    // The reference's numbering: 3 single-session-preference, 4 knowledge-update,
    // 5 single-session-assistant.
    check(3, &[]);
    check(4, &["031748ae_abs"]);
    check(5, &["0e5e2d1a"]);
    assert!(
        LongMemEvalType::from_ca_index(6)
            .unwrap_err()
            .to_string()
            .contains("valid: 0 multi-session")
    );
}

#[test]
fn longmemeval_sample_selection_and_assistant_turns() {
    let options = LoadOptions { samples: vec!["0e5e2d1a".into()], ..LoadOptions::default() };
    let kept = load(DatasetKind::LongMemEval, &lm_fixture(), &options).unwrap();
    assert_eq!(ids(&kept), ["0e5e2d1a"]);
    assert_eq!(n_turns(&kept), 8);

    let options = LoadOptions { drop_assistant_turns: true, ..options };
    let users_only = load(DatasetKind::LongMemEval, &lm_fixture(), &options).unwrap();
    assert_eq!(users_only[0].speakers, ["user"]);
    let dia_ids: Vec<_> =
        users_only[0].sessions.iter().flat_map(|s| &s.turns).map(|t| t.dia_id.as_str()).collect();
    // Dia_ids are positional in the original session, so they are the same with or without
    // assistant turns.
    assert_eq!(dia_ids, ["D1:1", "D1:3", "D2:1", "D2:3"]);
    // The gold evidence is a property of the data and stays even when its turn is dropped.
    assert_eq!(users_only[0].questions[0].evidence, ["D2:4"]);

    let options = LoadOptions { samples: vec!["nope".into()], ..LoadOptions::default() };
    let error = load(DatasetKind::LongMemEval, &lm_fixture(), &options).unwrap_err();
    assert_eq!(
        error.to_string(),
        "unknown sample \"nope\"; valid ids: e47becba, 0e5e2d1a, 00ca467f, 031748ae_abs, 08f4fc43"
    );
}

fn lm_error(edit: impl FnOnce(&mut Value)) -> String {
    let text = std::fs::read_to_string(lm_fixture()).unwrap();
    let mut items: Value = serde_json::from_str(&text).unwrap();
    edit(&mut items[0]);
    parse_longmemeval(Path::new("data/dataset_LM.json"), &items.to_string())
        .unwrap_err()
        .to_string()
}

#[test]
fn malformed_longmemeval_names_the_field_path() {
    let check = |expected: &str, edit: &dyn Fn(&mut Value)| assert_eq!(lm_error(edit), expected);
    check(
        "data/dataset_LM.json: sample e47becba: haystack_sessions[1][2].content: expected a string, found a number",
        &|item| item["haystack_sessions"][1][2]["content"] = json!(5),
    );
    check(
        "data/dataset_LM.json: sample e47becba: haystack_sessions[0][1].role: expected \"user\" or \"assistant\", found \"system\"",
        &|item| item["haystack_sessions"][0][1]["role"] = json!("system"),
    );
    check(
        "data/dataset_LM.json: sample e47becba: haystack_sessions[1][0].has_answer: expected a boolean, found a string",
        &|item| item["haystack_sessions"][1][0]["has_answer"] = json!("yes"),
    );
    check(
        "data/dataset_LM.json: sample e47becba: haystack_dates: has 1 entries but haystack_sessions has 2",
        &|item| {
            item["haystack_dates"].as_array_mut().unwrap().pop();
        },
    );
    check("data/dataset_LM.json: sample e47becba: answer: missing", &|item| {
        item.as_object_mut().unwrap().remove("answer");
    });
    check(
        "data/dataset_LM.json: sample e47becba: question_type: unknown type \"chit-chat\"; expected one of multi-session, single-session-user, temporal-reasoning, knowledge-update, single-session-assistant, single-session-preference",
        &|item| item["question_type"] = json!("chit-chat"),
    );
    check("data/dataset_LM.json: sample [0]: question_id: missing", &|item| {
        item.as_object_mut().unwrap().remove("question_id");
    });
}

#[test]
fn dataset_error_is_a_std_error() {
    fn assert_error<E: std::error::Error + Send + Sync + 'static>() {}
    assert_error::<dataset::Error>();
}
