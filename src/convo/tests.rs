use super::*;
use chrono::TimeDelta;

fn at(text: &str) -> DateTime<Utc> {
    Timestamp::parse(text).unwrap().instant()
}

fn message(speaker: &str, text: &str, time: Option<&str>, session: Option<&str>) -> Message {
    Message {
        speaker: speaker.into(),
        text: text.into(),
        timestamp: time.map(|time| Timestamp::parse(time).unwrap()),
        session: session.map(str::to_string),
    }
}

#[test]
fn json_array_object_and_jsonl_parse_to_the_same_messages() {
    let array = r#"[{"speaker": "Ann", "text": "Hi", "timestamp": "2024-05-03T10:00:00+02:00"},
                    {"role": "assistant", "content": "Hello", "session": 7}]"#;
    let object = format!(r#"{{"messages": {array}}}"#);
    let jsonl = "{\"speaker\": \"Ann\", \"text\": \"Hi\", \"timestamp\": \"2024-05-03T10:00:00+02:00\"}\n\n{\"role\": \"assistant\", \"content\": \"Hello\", \"session\": 7}\n";
    let expected = vec![
        message("Ann", "Hi", Some("2024-05-03T08:00:00Z"), None),
        message("assistant", "Hello", None, Some("7")),
    ];
    assert_eq!(parse(array).unwrap(), expected);
    assert_eq!(parse(&object).unwrap(), expected);
    assert_eq!(parse(jsonl).unwrap(), expected);
}

#[test]
fn openai_style_name_wins_over_role_and_content_parts_are_joined() {
    let input = r#"[{"role": "user", "name": "Bob", "content": [{"type": "text", "text": "a"}, {"type": "image_url"}, {"type": "text", "text": "b"}]}]"#;
    let messages = parse(input).unwrap();
    assert_eq!(messages[0].speaker, "Bob");
    assert_eq!(messages[0].text, "a\nb");
}

#[test]
fn timestamps_accept_rfc3339_naive_times_and_dates() {
    assert_eq!(Timestamp::parse("2024-05-03").unwrap().canonical(), "2024-05-03");
    assert_eq!(Timestamp::parse("2024-05-03 14:05").unwrap().canonical(), "2024-05-03T14:05:00Z");
    assert_eq!(
        Timestamp::parse("2024-05-03T23:30:00-02:00").unwrap().canonical(),
        "2024-05-04T01:30:00Z"
    );
    assert_eq!(
        Timestamp::parse("2024-05-03T23:30:00-02:00").unwrap().date().to_string(),
        "2024-05-04"
    );
    assert!(Timestamp::parse("yesterday").is_none());
    assert!(Timestamp::parse("2024-13-01").is_none());
}

#[test]
fn errors_name_the_line_or_index_and_the_field() {
    let jsonl = "{\"speaker\": \"A\", \"text\": \"ok\"}\n{\"speaker\": \"B\", \"text\": \"  \"}\n";
    assert_eq!(parse(jsonl).unwrap_err().to_string(), "line 2: field `text`: empty message");
    let bad_time =
        r#"[{"speaker": "A", "text": "x"}, {"speaker": "A", "text": "y", "time": "next tuesday"}]"#;
    let error = parse(bad_time).unwrap_err();
    assert!(
        error.to_string().starts_with("messages[1]: field `time`: malformed timestamp"),
        "{error}"
    );
    assert_eq!(error.field(), "time");
    let no_speaker = "{\"text\": \"x\"}";
    assert_eq!(
        parse(no_speaker).unwrap_err().to_string(),
        "line 1: field `speaker`: missing (also accepted: name, role)"
    );
    let broken = "{\"speaker\": \"A\", \"text\": \"x\"}\n{\"speaker\": ";
    assert!(parse(broken).unwrap_err().to_string().starts_with("line 2: invalid JSON"));
    assert_eq!(parse("[]").unwrap_err(), Error::Empty);
    assert_eq!(parse("").unwrap_err(), Error::Empty);
    let number_text = r#"[{"speaker": "A", "text": 3}]"#;
    assert_eq!(
        parse(number_text).unwrap_err().to_string(),
        "messages[0]: field `text`: expected a string, found a number"
    );
}

#[test]
fn content_hash_separates_repeats_and_ignores_nothing_that_matters() {
    let a = message("A", "ok", Some("2024-01-01"), None);
    assert_eq!(a.content_hash(0), a.content_hash(0));
    assert_ne!(a.content_hash(0), a.content_hash(1));
    let b = message("B", "ok", Some("2024-01-01"), None);
    assert_ne!(a.content_hash(0), b.content_hash(0));
}

#[test]
fn a_time_gap_starts_a_new_session() {
    let messages = vec![
        message("A", "1", Some("2024-05-03T10:00:00Z"), None),
        message("B", "2", Some("2024-05-03T11:00:00Z"), None),
        message("A", "3", Some("2024-05-03T18:00:00Z"), None),
        message("B", "4", None, None),
    ];
    let (placements, new) = place_messages(&[], &messages, DEFAULT_SESSION_GAP);
    assert_eq!(new.len(), 2);
    assert_eq!(
        placements,
        vec![Placement::New(0), Placement::New(0), Placement::New(1), Placement::New(1)]
    );
    let (placements, new) = place_messages(&[], &messages, TimeDelta::hours(12));
    assert_eq!(new.len(), 1);
    assert!(placements.iter().all(|placement| *placement == Placement::New(0)));
}

#[test]
fn late_messages_join_the_session_of_their_time_and_ids_win() {
    let existing = vec![
        SessionSpan {
            number: 1,
            key: None,
            range: Some((at("2024-05-01T10:00:00Z"), at("2024-05-01T11:00:00Z"))),
        },
        SessionSpan {
            number: 2,
            key: None,
            range: Some((at("2024-05-08T10:00:00Z"), at("2024-05-08T11:00:00Z"))),
        },
        SessionSpan { number: 3, key: Some("trip".into()), range: None },
    ];
    let messages = vec![
        message("A", "late", Some("2024-05-01T12:30:00Z"), None),
        message("A", "new", Some("2024-05-04T12:00:00Z"), None),
        message("A", "keyed", Some("2024-05-01T10:30:00Z"), Some("trip")),
        message("A", "other", None, Some("x")),
    ];
    let (placements, new) = place_messages(&existing, &messages, DEFAULT_SESSION_GAP);
    assert_eq!(
        placements,
        vec![Placement::Existing(1), Placement::New(1), Placement::Existing(3), Placement::New(0)]
    );
    assert_eq!(new, vec![Some("x".to_string()), None]);
}

#[test]
fn an_input_without_times_is_one_session() {
    let messages = vec![message("A", "1", None, None), message("B", "2", None, None)];
    let (placements, new) = place_messages(&[], &messages, DEFAULT_SESSION_GAP);
    assert_eq!(new, vec![None]);
    assert_eq!(placements, vec![Placement::New(0), Placement::New(0)]);
}

#[test]
fn gaps_parse_with_units() {
    assert_eq!(parse_gap("90m").unwrap(), TimeDelta::minutes(90));
    assert_eq!(parse_gap("4h").unwrap(), TimeDelta::hours(4));
    assert_eq!(parse_gap("2d").unwrap(), TimeDelta::days(2));
    assert!(parse_gap("0h").is_err());
    assert!(parse_gap("4").is_err());
    assert!(parse_gap("h").is_err());
}

/// Found by fuzzing (fuzz/corpus/convo_parse/crash-negative-year): a year outside RFC 3339's
/// 0000-9999 parsed, and its canonical text (`-0012-…`), which the store keeps, did not read back.
#[test]
fn timestamps_outside_years_0000_to_9999_are_refused() {
    for text in ["-012-05-03 14:05", "+12345-01-01", "0000-01-01T00:30:00+01:00", "10000-01-01"] {
        assert_eq!(Timestamp::parse(text), None, "{text}");
    }
    for text in ["0000-01-01T00:00:00Z", "9999-12-31T23:59:59Z", "0000-01-01", "9999-12-31"] {
        let stamp = Timestamp::parse(text).unwrap();
        assert_eq!(Timestamp::parse(&stamp.canonical()), Some(stamp), "{text}");
    }
    let error = parse(r#"{"speaker": "Ann", "text": "hi", "date": "-012-05-03"}"#).unwrap_err();
    assert!(error.to_string().contains("years 0000 to 9999"), "{error}");
}

/// A gap reaching past the representable times (`--session-gap 100000000d`) is no bound
/// instead of an overflow panic.
#[test]
fn a_gap_past_the_representable_times_puts_every_timed_message_in_one_session() {
    let gap = parse_gap("100000000d").unwrap();
    let messages = vec![
        message("Ann", "a", Some("0001-01-01T00:00:00Z"), None),
        message("Bob", "b", Some("9999-12-31T00:00:00Z"), None),
    ];
    let (placements, new_sessions) = place_messages(&[], &messages, gap);
    assert_eq!(placements, vec![Placement::New(0), Placement::New(0)]);
    assert_eq!(new_sessions, vec![None]);
}
