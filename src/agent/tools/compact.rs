//! Compact tool results: an event or turn line the model has already been shown in full (in the
//! retrieval payload or an earlier tool result of the same question) is sent again as its id
//! only, `<id>: (shown above)`. The model keeps every piece of information; the transcript,
//! which every later request re-sends, stops growing with repeats.
//!
//! The rule: a line is cut only when the very same text was shown before. `shown` holds whole
//! lines, not ids: a line that shares its id with one shown but says more or else (a fact's
//! "(earlier value, held from …, replaced on …)" mark, a corrected value, another date) is
//! always sent in full, since the model cannot know it otherwise.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::agent::ids::{line_id, line_id_of_dated};

/// What a repeated line becomes, after its id.
pub const SHOWN_ABOVE: &str = ": (shown above)";

/// Records every `<id>:<text>` line in `value` as shown (the whole line).
pub fn mark_shown(value: &Value, shown: &mut BTreeSet<String>) {
    match value {
        Value::String(text) if event_line_id(text).is_some() => {
            shown.insert(text.clone());
        }
        Value::Array(items) => items.iter().for_each(|item| mark_shown(item, shown)),
        Value::Object(fields) => fields.values().for_each(|field| mark_shown(field, shown)),
        _ => {}
    }
}

/// `result` (a tool message, JSON) with the lines already in `shown` cut to their id; the
/// other lines join `shown`. Text that is not JSON is returned as it is.
pub fn compact_result(result: String, shown: &mut BTreeSet<String>) -> String {
    let Ok(mut value) = serde_json::from_str::<Value>(&result) else { return result };
    let mut changed = false;
    compact_value(&mut value, shown, &mut changed);
    if changed { value.to_string() } else { result }
}

fn compact_value(value: &mut Value, shown: &mut BTreeSet<String>, changed: &mut bool) {
    match value {
        Value::String(text) => {
            let Some(id) = event_line_id(text).map(str::to_string) else { return };
            // Only the same text is cut (see the module doc); a dated line stays whole.
            let dated = text.starts_with("Time:");
            if !dated && text.len() > id.len() + SHOWN_ABOVE.len() && shown.contains(text.as_str())
            {
                *text = format!("{id}{SHOWN_ABOVE}");
                *changed = true;
            } else {
                shown.insert(text.clone());
            }
        }
        Value::Array(items) => {
            items.iter_mut().for_each(|item| compact_value(item, shown, changed));
        }
        Value::Object(fields) => {
            fields.values_mut().for_each(|field| compact_value(field, shown, changed));
        }
        _ => {}
    }
}

/// The id of an event or turn line (`D3:5-1:<text>`, `D3:5:<speaker>: <text>`, or either after
/// `Time:<date> `); `None` for other text.
fn event_line_id(text: &str) -> Option<&str> {
    let line = line_id_of_dated(text);
    let id = line_id(line);
    if id.len() == line.len() {
        return None;
    }
    let (dialogue, turn) = id.split_once(':')?;
    let digits = |part: &str| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
    let turn_ok = match turn.split_once('-') {
        Some((turn, event)) => digits(turn) && digits(event),
        None => digits(turn),
    };
    (dialogue.strip_prefix('D').is_some_and(digits) && turn_ok).then_some(id)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn repeated_lines_shrink_to_their_id() {
        let mut shown = BTreeSet::new();
        mark_shown(
            &json!({"key_sentences": ["D1:3-1:Lena adopted a kitten named Miso"]}),
            &mut shown,
        );
        let result = json!({
            "topic": "D1:t1",
            "events": ["D1:3-1:Lena adopted a kitten named Miso", "D1:4-1:Omar ran a marathon"]
        })
        .to_string();
        let compacted: Value =
            serde_json::from_str(&compact_result(result, &mut shown)).unwrap_or_default();
        assert_eq!(
            compacted["events"],
            json!(["D1:3-1: (shown above)", "D1:4-1:Omar ran a marathon"])
        );
        assert_eq!(compacted["topic"], "D1:t1");
        // The new line counts as shown for the next result; turns and events are different ids;
        // a dated line stays whole.
        let again = json!({"turns": ["D1:4:Omar: I ran it", "D1:4-1:Omar ran a marathon", "Time:2023-05-01 D1:4-1:Omar ran a marathon"]});
        let compacted: Value = serde_json::from_str(&compact_result(again.to_string(), &mut shown))
            .unwrap_or_default();
        assert_eq!(
            compacted["turns"],
            json!([
                "D1:4:Omar: I ran it",
                "D1:4-1: (shown above)",
                "Time:2023-05-01 D1:4-1:Omar ran a marathon"
            ])
        );
        assert_eq!(compact_result("not json".into(), &mut shown), "not json");
    }

    #[test]
    fn a_line_sharing_a_shown_id_but_saying_more_is_sent_whole() {
        // The turn was shown first; then a fact drawn from it comes back marked as replaced.
        let mut shown = BTreeSet::new();
        mark_shown(&json!({"turns": ["D1:1:Carol lives in Paris"]}), &mut shown);
        let replaced = "D1:1:Carol lives in Paris (earlier value, held from 2024-01-05, replaced on 2024-03-10)";
        let result = json!({"facts": ["D2:1:Carol lives in Berlin", replaced]}).to_string();
        let sent: Value = serde_json::from_str(&compact_result(result, &mut shown)).unwrap();
        assert_eq!(sent["facts"][1], replaced, "the mark is never cut");
        // The same mark again is the same text: now it is cut.
        let again = json!({"facts": [replaced]}).to_string();
        let sent: Value = serde_json::from_str(&compact_result(again, &mut shown)).unwrap();
        assert_eq!(sent["facts"][0], "D1:1: (shown above)");
    }
}
