use serde_json::json;

use super::*;

fn check(text: &str, expected: Value) {
    assert_eq!(extract_json(text), Ok(expected), "{text}");
}

#[test]
fn extracts_from_fences_prose_and_plain_json() {
    check(r#"{"a": 1}"#, json!({"a": 1}));
    check("```json\n{\"a\": 1}\n```", json!({"a": 1}));
    check("Here you go:\n```\n[1, 2]\n```\nthanks", json!([1, 2]));
    check(r#"Sure! {"answer": "x"} Hope that helps."#, json!({"answer": "x"}));
    check(r#"assistantfinal{"k": ["a", "b"]}"#, json!({"k": ["a", "b"]}));
    check("42", json!(42));
}

#[test]
fn braces_inside_strings_do_not_confuse_the_scanner() {
    check(
        r#"note: {"text": "a } tricky { one", "q": "say \"}\""} end"#,
        json!({"text": "a } tricky { one", "q": "say \"}\""}),
    );
    check(r#"x {'t': 'it\'s } here'} y"#, json!({"t": "it's } here"}));
    check("x {a: 1, // a } comment\n b: 2} y", json!({"a": 1, "b": 2}));
}

#[test]
fn skips_unparsable_spans_to_a_later_valid_one() {
    check(r#"{not json} then {"ok": true}"#, json!({"ok": true}));
}

#[test]
fn reports_when_nothing_is_there() {
    assert!(extract_json("").is_err());
    assert!(extract_json("no json here").unwrap_err().contains("no JSON value"));
    assert!(extract_json(r#"{"unclosed": 1"#).is_err());
}

#[test]
fn reask_message_quotes_path_and_reason() {
    let message = reask_message(
        "facts",
        &Rejection { path: "/items/0".into(), message: "\"x\" is not of type \"integer\"".into() },
    );
    assert!(message.contains("`facts`"));
    assert!(message.contains("/items/0"));
    assert!(message.contains("is not of type"));
    assert!(!message.contains("{{"));
}

#[test]
fn excerpt_cuts_at_a_char_boundary() {
    assert_eq!(excerpt("short", 10), "short");
    assert_eq!(excerpt("ééé", 3), "é…");
}

/// The answer contract as a caller would relax it: only `answer` required.
fn answer_schema() -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["answer"],
        "properties": {
            "answer": {"type": "string"},
            "confidence": {"type": "number", "minimum": 0, "maximum": 1},
            "supports": {"type": "array", "items": {"type": "string"}},
            "date": {"type": ["string", "null"]}
        }
    })
}

/// What a reply should come to: the value read, or a rejection whose message contains the
/// given text (and whose path is the given pointer).
enum Expect {
    Value(Value),
    Rejected { path: &'static str, contains: &'static str },
}

fn rejected(path: &'static str, contains: &'static str) -> Expect {
    Expect::Rejected { path, contains }
}

fn value(value: Value) -> Expect {
    Expect::Value(value)
}

/// Real-world reply shapes (seen from OpenAI, Gemini, Qwen, Llama, gpt-oss and small local
/// models) and what the lenient reader makes of each.
fn accepted_shapes() -> Vec<(&'static str, &'static str, Expect)> {
    let paris = || json!({"answer": "Paris"});
    vec![
        ("plain json", r#"{"answer": "Paris"}"#, value(paris())),
        ("json fence", "```json\n{\"answer\": \"Paris\"}\n```", value(paris())),
        ("bare fence", "```\n{\"answer\": \"Paris\"}\n```", value(paris())),
        ("unclosed fence", "```json\n{\"answer\": \"Paris\"}", value(paris())),
        (
            "prose around",
            "Sure! Here it is: {\"answer\": \"Paris\"}. Hope it helps.",
            value(paris()),
        ),
        ("channel prefix", r#"assistantfinal{"answer": "Paris"}"#, value(paris())),
        (
            "think block",
            "<think>maybe {x} or [y]?</think>\n{\"answer\": \"Paris\"}",
            value(paris()),
        ),
        (
            "trailing comma",
            r#"{"answer": "Paris", "supports": ["D1:3",],}"#,
            value(json!({"answer": "Paris", "supports": ["D1:3"]})),
        ),
        (
            "single quotes",
            "{'answer': 'Paris', 'confidence': 0.9}",
            value(json!({"answer": "Paris", "confidence": 0.9})),
        ),
        (
            "unquoted keys",
            "{answer: \"Paris\", confidence: .5}",
            value(json!({"answer": "Paris", "confidence": 0.5})),
        ),
        ("line comment", "{\n  \"answer\": \"Paris\" // the capital\n}", value(paris())),
        ("block comment", "{/* final */ \"answer\": \"Paris\"}", value(paris())),
        (
            "json5 in a fence with prose",
            "Answer below.\n```json5\n{answer: 'Paris',}\n```\nDone.",
            value(paris()),
        ),
        (
            "number as string",
            r#"{"answer": "Paris", "confidence": "0.8"}"#,
            value(json!({"answer": "Paris", "confidence": 0.8})),
        ),
        (
            "string for a list",
            r#"{"answer": "Paris", "supports": "D1:3"}"#,
            value(json!({"answer": "Paris", "supports": ["D1:3"]})),
        ),
        ("numeric answer", r#"{"answer": 1987}"#, value(json!({"answer": "1987"}))),
        ("boolean answer", r#"{"answer": true}"#, value(json!({"answer": "true"}))),
        ("list for a string", r#"{"answer": ["Paris"]}"#, value(paris())),
        ("null confidence", r#"{"answer": "Paris", "confidence": null}"#, value(paris())),
        ("null list", r#"{"answer": "Paris", "supports": null}"#, value(paris())),
        (
            "null date allowed",
            r#"{"answer": "Paris", "date": null}"#,
            value(json!({"answer": "Paris", "date": null})),
        ),
        (
            "extra keys",
            r#"{"answer": "Paris", "reasoning": "capital", "source": 3}"#,
            value(paris()),
        ),
        (
            "same json twice",
            "{\"answer\": \"Paris\"}\n\nFinal: {\"answer\": \"Paris\"}",
            value(paris()),
        ),
        ("citation brackets after", "{\"answer\": \"Paris\"} [1] [2]", value(paris())),
    ]
}

/// Real-world reply shapes the reader must reject, each with its reason.
fn rejected_shapes() -> Vec<(&'static str, &'static str, Expect)> {
    vec![
        (
            "example then answer differ",
            "Format: {\"answer\": \"...\"}\nMine: {\"answer\": \"Paris\"}",
            rejected("", "2 different JSON values"),
        ),
        ("empty reply", "   ", rejected("", "empty")),
        ("prose only", "The answer is Paris.", rejected("", "no JSON value")),
        ("truncated", r#"{"answer": "Par"#, rejected("", "no JSON value")),
        (
            "python literals",
            "{'answer': 'Paris', 'sure': True, 'date': None}",
            rejected("", "no JSON value"),
        ),
        (
            "smart quotes",
            "{\u{201c}answer\u{201d}: \u{201c}Paris\u{201d}}",
            rejected("", "no JSON value"),
        ),
        (
            "missing answer",
            r#"{"confidence": 0.9}"#,
            rejected("", "\"answer\" is a required property"),
        ),
        ("null answer", r#"{"answer": null}"#, rejected("", "\"answer\" is a required property")),
        (
            "word confidence",
            r#"{"answer": "Paris", "confidence": "high"}"#,
            rejected("/confidence", "is not of type \"number\""),
        ),
        (
            "confidence out of range",
            r#"{"answer": "Paris", "confidence": 85}"#,
            rejected("/confidence", "maximum of 1"),
        ),
        ("array at the top", r#"["Paris"]"#, rejected("", "is not of type \"object\"")),
        (
            "double-encoded",
            r#""{\"answer\": \"Paris\"}""#,
            rejected("", "is not of type \"object\""),
        ),
    ]
}

#[test]
fn real_world_reply_shapes_table() {
    let schema = answer_schema();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let mut cases = accepted_shapes();
    cases.extend(rejected_shapes());
    assert!(cases.len() >= 25, "{} cases", cases.len());
    for (name, text, expected) in cases {
        let outcome = read_reply(text, &schema, &validator);
        match expected {
            Expect::Value(value) => assert_eq!(outcome, Ok(value), "{name}: {text}"),
            Expect::Rejected { path, contains } => match outcome {
                Err(rejection) => {
                    assert_eq!(rejection.path, path, "{name}: {rejection:?}");
                    assert!(rejection.message.contains(contains), "{name}: {rejection:?}");
                }
                Ok(value) => panic!("{name}: accepted {value} from {text}"),
            },
        }
    }
}
