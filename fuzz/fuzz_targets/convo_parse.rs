//! Fuzzes the own-conversation message format: `convo::parse` on any text, `parse_values` on
//! any JSON array, and the session placement of whatever parses.
//!
//! An input whose first line is a session gap (`4h`, `90m`, …) is also read as that gap
//! followed by a document, so the fuzzer reaches the placement with unusual gaps too.

#![no_main]

use libfuzzer_sys::fuzz_target;
use mragent::convo::{self, DEFAULT_SESSION_GAP, Message, SessionSpan};
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    check_document(text, DEFAULT_SESSION_GAP);
    if let Some((first, rest)) = text.split_once('\n')
        && let Ok(gap) = convo::parse_gap(first)
    {
        check_document(rest, gap);
    }
    if let Ok(Value::Array(items)) = serde_json::from_str::<Value>(text)
        && let Ok(messages) = convo::parse_values(items)
    {
        check_messages(&messages, DEFAULT_SESSION_GAP);
    }
});

fn check_document(text: &str, gap: chrono::TimeDelta) {
    match convo::parse(text) {
        Ok(messages) => check_messages(&messages, gap),
        // Every error names where it is and renders.
        Err(error) => assert!(!error.to_string().is_empty() && !error.field().is_empty()),
    }
}

/// What holds for every accepted input: trimmed non-empty speakers and texts, canonical
/// timestamps that read back, and a placement for every message.
fn check_messages(messages: &[Message], gap: chrono::TimeDelta) {
    assert!(!messages.is_empty());
    for message in messages {
        assert!(!message.speaker.is_empty() && message.speaker.trim() == message.speaker);
        assert!(!message.text.is_empty() && message.text.trim() == message.text);
        if let Some(stamp) = message.timestamp {
            assert_eq!(convo::Timestamp::parse(&stamp.canonical()), Some(stamp));
            let _ = stamp.date();
        }
        assert_eq!(message.content_hash(0).len(), 32);
    }
    let (placements, new_sessions) = convo::place_messages(&[], messages, gap);
    assert_eq!(placements.len(), messages.len());
    // Again, with the first message's session already stored, as a second `add` would see it.
    let time = messages[0].timestamp.map(convo::Timestamp::instant);
    let existing = [SessionSpan {
        number: 1,
        key: messages[0].session.clone(),
        range: time.map(|time| (time, time)),
    }];
    let (again, _) = convo::place_messages(&existing, messages, gap);
    assert_eq!(again.len(), messages.len());
    assert!(new_sessions.len() <= messages.len());
}
