//! Fuzzes the lenient reading of model replies (`llm::structured`): code fences, JSON in
//! prose, JSON5, and the coercion along a schema, on any text.
//!
//! Two fixed schemas: the final-answer contract the agent uses, and one that exercises every
//! coercion (numbers, integers, booleans, text, lists, nullable and closed objects).

#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use mragent::llm::structured;
use serde_json::{Value, json};

static COERCION_SCHEMA: LazyLock<Value> = LazyLock::new(|| {
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["items"],
        "properties": {
            "items": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string", "minLength": 1},
                        "score": {"type": "number", "minimum": 0, "maximum": 1},
                        "count": {"type": "integer"},
                        "flag": {"type": "boolean"},
                        "note": {"type": ["string", "null"]},
                        "tags": {"type": "array", "items": {"type": "string"}}
                    }
                }
            },
            "kind": {"enum": ["a", "b", null]}
        }
    })
});

static SCHEMAS: LazyLock<Vec<(&'static Value, jsonschema::Validator)>> = LazyLock::new(|| {
    [mragent::agent::run::answer_schema(), &*COERCION_SCHEMA]
        .into_iter()
        .map(|schema| match jsonschema::validator_for(schema) {
            Ok(validator) => (schema, validator),
            Err(error) => panic!("fixed schema does not compile: {error}"),
        })
        .collect()
});

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let candidates = structured::json_candidates(&text);
    match &candidates {
        Ok(found) => assert!(!found.is_empty()),
        Err(message) => assert!(!message.is_empty()),
    }
    assert_eq!(
        structured::extract_json(&text).ok(),
        candidates.ok().map(|mut found| found.remove(0))
    );
    for (schema, validator) in SCHEMAS.iter() {
        match structured::read_reply(&text, schema, validator) {
            Ok(value) => assert!(validator.is_valid(&value)),
            Err(rejection) => assert!(!rejection.message.is_empty()),
        }
    }
    for (start, _) in text.match_indices(['{', '[']).take(8) {
        if let Some(end) = structured::balanced_end(&text[start..]) {
            assert!(text.is_char_boundary(start + end));
        }
    }
    let limit = text.len() / 2;
    let excerpt = structured::excerpt(&text, limit);
    assert!(excerpt.len() <= limit + '…'.len_utf8() || excerpt == *text);
});
