//! The final answer: its JSON contract, and reading an attempt from assistant text.
//!
//! The reply is read the way the reference reads it, with defaults, so that no reply a lenient
//! reader accepts is re-asked: only `answer` is required; `supports` defaults to `[]` and
//! `confidence` to [`DEFAULT_CONFIDENCE`]; other keys are ignored; unambiguous types are
//! coerced (a number or boolean as the answer text, a list of strings as one comma-separated
//! answer, one string or a comma-separated string as `supports`, `"0.8"` as 0.8, a percentage
//! as a fraction).

use std::collections::BTreeSet;
use std::sync::LazyLock;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::agent::ids::origin_of;

/// `confidence` of an answer that gives none (or none that reads as a number): "unknown".
pub const DEFAULT_CONFIDENCE: f64 = 0.5;

/// The model's final answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FinalAnswer {
    /// Short answer text.
    pub answer: String,
    /// Event or turn ids the answer rests on, as the model gave them (`[]` when absent).
    pub supports: Vec<String>,
    /// Self-reported confidence in `[0, 1]` ([`DEFAULT_CONFIDENCE`] when absent).
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

/// The answer JSON contract as sent to providers with structured output:
/// `{answer, supports, confidence}`, only `answer` required.
pub fn answer_schema() -> &'static Value {
    static SCHEMA: LazyLock<Value> = LazyLock::new(|| {
        json!({
            "type": "object",
            "properties": {
                "answer": { "type": "string", "minLength": 1 },
                "supports": { "type": "array", "items": { "type": "string" } },
                "confidence": { "type": "number", "minimum": 0, "maximum": 1 }
            },
            "required": ["answer"]
        })
    });
    &SCHEMA
}

/// Reads an answer attempt from assistant text. `None`: the text holds no JSON object with an
/// `answer` key (so it is not an answer attempt). `Some(Err)`: an attempt without usable answer
/// text, with the reason the model is told.
pub fn parse_answer(content: &str) -> Option<Result<FinalAnswer, String>> {
    let value = crate::llm::structured::extract_json(content).ok()?;
    let object = value.as_object()?;
    let answer = object.get("answer")?;
    let answer = match answer_text(answer) {
        Some(text) if !text.trim().is_empty() => text.trim().to_string(),
        Some(_) => return Some(Err("`answer` is empty".into())),
        None => {
            return Some(Err(
                "`answer` must be a short text (a string), not an object or null".into()
            ));
        }
    };
    let supports = object.get("supports").map(support_ids).unwrap_or_default();
    let confidence = object.get("confidence").and_then(confidence_of).unwrap_or(DEFAULT_CONFIDENCE);
    Some(Ok(FinalAnswer { answer, supports, confidence }))
}

/// The answer as text: a string; a number or boolean as written (`true` → `Yes`); a list of
/// scalars joined with `, `. `None` for objects, `null` and nested lists.
fn answer_text(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text.clone()),
        Value::Number(number) => Some(number.to_string()),
        Value::Bool(flag) => Some(if *flag { "Yes" } else { "No" }.to_string()),
        Value::Array(items) => {
            let texts: Option<Vec<String>> = items
                .iter()
                .map(|item| match item {
                    Value::Array(_) | Value::Object(_) | Value::Null => None,
                    scalar => answer_text(scalar),
                })
                .collect();
            texts.map(|texts| texts.join(", "))
        }
        Value::Object(_) | Value::Null => None,
    }
}

/// `supports` as ids: a list (numbers as text, other items skipped), or one string holding
/// one or more comma-separated ids; anything else is no support.
fn support_ids(value: &Value) -> Vec<String> {
    let split = |text: &str| -> Vec<String> {
        text.split([',', ';'])
            .map(str::trim)
            .filter(|id| !id.is_empty())
            .map(str::to_string)
            .collect()
    };
    match value {
        Value::Array(items) => items
            .iter()
            .filter_map(|item| match item {
                Value::String(text) => Some(split(text)),
                Value::Number(number) => Some(vec![number.to_string()]),
                _ => None,
            })
            .flatten()
            .collect(),
        Value::String(text) => split(text),
        _ => Vec::new(),
    }
}

/// A confidence in `[0, 1]`: a number or a string holding one; a value in `(1, 100]` is read as
/// a percentage; anything else out of range is clamped. `None` when it is not a number.
fn confidence_of(value: &Value) -> Option<f64> {
    let number = match value {
        Value::Number(number) => number.as_f64()?,
        Value::String(text) => text.trim().trim_end_matches('%').trim().parse::<f64>().ok()?,
        _ => return None,
    };
    if !number.is_finite() {
        return None;
    }
    Some(if number > 1.0 && number <= 100.0 { number / 100.0 } else { number.clamp(0.0, 1.0) })
}
