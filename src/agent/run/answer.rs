//! The final answer: its JSON contract, and reading an attempt from assistant text.

use std::collections::BTreeSet;
use std::sync::LazyLock;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::agent::ids::origin_of;

/// The model's final answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FinalAnswer {
    /// Short answer text.
    pub answer: String,
    /// Event or turn ids the answer rests on, as the model gave them.
    pub supports: Vec<String>,
    /// Self-reported confidence in `[0, 1]`.
    pub confidence: f64,
}

impl FinalAnswer {
    /// `supports` reduced to dialogue turns (`D1:3-2` → `D1:3`), first occurrence kept.
    pub fn support_turns(&self) -> Vec<String> {
        let mut seen = BTreeSet::new();
        self.supports
            .iter()
            .map(|id| origin_of(id).to_string())
            .filter(|origin| seen.insert(origin.clone()))
            .collect()
    }
}

/// The answer JSON contract: `{answer, supports, confidence}` (`mode` optional).
pub fn answer_schema() -> &'static Value {
    static SCHEMA: LazyLock<Value> = LazyLock::new(|| {
        json!({
            "type": "object",
            "properties": {
                "answer": { "type": "string", "minLength": 1 },
                "supports": { "type": "array", "items": { "type": "string" } },
                "confidence": { "type": "number", "minimum": 0, "maximum": 1 }
            },
            "required": ["answer", "supports", "confidence"],
            "additionalProperties": false
        })
    });
    &SCHEMA
}

/// Reads an answer attempt from assistant text. `None`: the text holds no JSON object with an
/// `answer` key (so it is not an answer attempt). `Some(Err)`: an attempt that breaks the schema,
/// with the reason the model is told.
pub fn parse_answer(content: &str) -> Option<Result<FinalAnswer, String>> {
    let mut value = crate::llm::structured::extract_json(content).ok()?;
    let object = value.as_object_mut()?;
    if !object.contains_key("answer") {
        return None;
    }
    object.remove("mode");
    object.remove("reason");
    // Models often write a bare number or a list of strings as the answer; keep their text.
    match object.get("answer") {
        Some(Value::Number(number)) => {
            let text = number.to_string();
            object.insert("answer".into(), Value::String(text));
        }
        Some(Value::Bool(flag)) => {
            let text = if *flag { "Yes" } else { "No" };
            object.insert("answer".into(), Value::String(text.into()));
        }
        Some(Value::Array(items)) if items.iter().all(Value::is_string) => {
            let text = items.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", ");
            object.insert("answer".into(), Value::String(text));
        }
        _ => {}
    }
    if let Some(Value::String(confidence)) = object.get("confidence")
        && let Ok(number) = confidence.trim().parse::<f64>()
        && let Some(number) = serde_json::Number::from_f64(number)
    {
        object.insert("confidence".into(), Value::Number(number));
    }
    if let Err(error) = validate_answer(&value) {
        return Some(Err(error));
    }
    Some(serde_json::from_value::<FinalAnswer>(value).map_err(|error| error.to_string()))
}

fn validate_answer(value: &Value) -> Result<(), String> {
    static VALIDATOR: LazyLock<Option<jsonschema::Validator>> =
        LazyLock::new(|| jsonschema::validator_for(answer_schema()).ok());
    let Some(validator) = VALIDATOR.as_ref() else {
        return Err("the answer schema failed to compile".into());
    };
    match validator.iter_errors(value).next() {
        None => Ok(()),
        Some(error) => {
            let path = error.instance_path().to_string();
            let at = if path.is_empty() { String::new() } else { format!(" at `{path}`") };
            Err(format!("the answer JSON does not match the schema{at}: {error}"))
        }
    }
}
