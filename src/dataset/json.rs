//! The lenient raw layer shared by the loaders: serde parses the file into `serde_json::Value`s
//! one sample at a time, and the helpers here check each field explicitly so that a problem is
//! reported with its path (`conversation.session_3[4].dia_id`) instead of a panic or a bare
//! serde message.
//!
//! Values are taken out of the tree (`Value::take`) rather than cloned, so the large text fields
//! of LongMemEval haystacks are moved, not copied.

use std::fmt;
use std::path::Path;

use serde::de::{DeserializeSeed, Deserializer, Error as _, SeqAccess, Visitor};
use serde_json::{Map, Value};

use super::Error;

/// A problem with one field, before the file and sample are known.
#[derive(Debug)]
pub(crate) struct FieldError {
    /// Path of the field inside the sample, e.g. `qa[3].answer`.
    pub(crate) field: String,
    /// What is wrong, e.g. `expected a string, found null`.
    pub(crate) problem: String,
}

impl FieldError {
    pub(crate) fn new(field: impl Into<String>, problem: impl Into<String>) -> Self {
        Self { field: field.into(), problem: problem.into() }
    }

    /// Attaches the file and the sample label to make a [`Error::Malformed`].
    pub(crate) fn in_sample(self, file: &Path, sample: &str) -> Error {
        Error::Malformed {
            file: file.to_path_buf(),
            sample: Some(sample.to_string()),
            field: self.field,
            problem: self.problem,
        }
    }
}

/// `parent.key`, or `key` at the top of a sample.
pub(crate) fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() { key.to_string() } else { format!("{parent}.{key}") }
}

/// `parent[index]`.
pub(crate) fn index(parent: &str, position: usize) -> String {
    format!("{parent}[{position}]")
}

/// The JSON kind of a value, for messages.
pub(crate) fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn expected(path: &str, what: &str, found: &Value) -> FieldError {
    FieldError::new(path, format!("expected {what}, found {}", kind(found)))
}

/// Turns a value into an object.
pub(crate) fn into_object(value: Value, path: &str) -> Result<Map<String, Value>, FieldError> {
    match value {
        Value::Object(map) => Ok(map),
        other => Err(expected(path, "an object", &other)),
    }
}

/// Takes a required string field.
pub(crate) fn take_string(
    map: &mut Map<String, Value>,
    key: &str,
    parent: &str,
) -> Result<String, FieldError> {
    let path = join(parent, key);
    match map.get_mut(key).map(Value::take) {
        Some(Value::String(text)) => Ok(text),
        Some(other) => Err(expected(&path, "a string", &other)),
        None => Err(FieldError::new(path, "missing")),
    }
}

/// Takes an optional string field; `null` counts as absent.
pub(crate) fn take_opt_string(
    map: &mut Map<String, Value>,
    key: &str,
    parent: &str,
) -> Result<Option<String>, FieldError> {
    match map.get_mut(key).map(Value::take) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text)),
        Some(other) => Err(expected(&join(parent, key), "a string", &other)),
    }
}

/// Takes an optional answer field that may be a string or a number (LoCoMo has six integer
/// answers, LongMemEval 32); numbers become their decimal text. `null` counts as absent.
pub(crate) fn take_opt_text_or_number(
    map: &mut Map<String, Value>,
    key: &str,
    parent: &str,
) -> Result<Option<String>, FieldError> {
    match map.get_mut(key).map(Value::take) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text)),
        Some(Value::Number(number)) => Ok(Some(number.to_string())),
        Some(other) => Err(expected(&join(parent, key), "a string or a number", &other)),
    }
}

/// Takes a required array field.
pub(crate) fn take_array(
    map: &mut Map<String, Value>,
    key: &str,
    parent: &str,
) -> Result<Vec<Value>, FieldError> {
    let path = join(parent, key);
    match map.get_mut(key).map(Value::take) {
        Some(Value::Array(items)) => Ok(items),
        Some(other) => Err(expected(&path, "an array", &other)),
        None => Err(FieldError::new(path, "missing")),
    }
}

/// Takes a required array of strings.
pub(crate) fn take_string_array(
    map: &mut Map<String, Value>,
    key: &str,
    parent: &str,
) -> Result<Vec<String>, FieldError> {
    let path = join(parent, key);
    take_array(map, key, parent)?
        .into_iter()
        .enumerate()
        .map(|(position, item)| match item {
            Value::String(text) => Ok(text),
            other => Err(expected(&index(&path, position), "a string", &other)),
        })
        .collect()
}

/// Takes an optional boolean; `null` counts as absent.
pub(crate) fn take_opt_bool(
    map: &mut Map<String, Value>,
    key: &str,
    parent: &str,
) -> Result<Option<bool>, FieldError> {
    match map.get_mut(key).map(Value::take) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(flag)) => Ok(Some(flag)),
        Some(other) => Err(expected(&join(parent, key), "a boolean", &other)),
    }
}

/// Parses `text` as a JSON array and hands each element to `visit` in order, without holding
/// the whole parsed tree in memory (the LongMemEval `_m` file is several gigabytes).
///
/// Syntax errors and a top level that is not an array become [`Error::Json`]; errors returned by
/// `visit` are passed through unchanged.
pub(crate) fn for_each_element<F>(file: &Path, text: &str, visit: F) -> Result<(), Error>
where
    F: FnMut(usize, Value) -> Result<(), Error>,
{
    let mut seed = ElementsSeed { visit, failure: None };
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let outcome = (&mut seed).deserialize(&mut deserializer).and_then(|()| deserializer.end());
    if let Some(failure) = seed.failure {
        return Err(failure);
    }
    outcome.map_err(|error| Error::Json { file: file.to_path_buf(), error })
}

/// Hand-written serde seed because serde_json has no callback-per-element API for arrays; the
/// loader's own error is stashed in `failure` and a placeholder serde error stops parsing.
struct ElementsSeed<F> {
    visit: F,
    failure: Option<Error>,
}

impl<'de, F> DeserializeSeed<'de> for &mut ElementsSeed<F>
where
    F: FnMut(usize, Value) -> Result<(), Error>,
{
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de, F> Visitor<'de> for &mut ElementsSeed<F>
where
    F: FnMut(usize, Value) -> Result<(), Error>,
{
    type Value = ();

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a JSON array of samples")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut position = 0;
        while let Some(element) = seq.next_element::<Value>()? {
            if let Err(failure) = (self.visit)(position, element) {
                self.failure = Some(failure);
                return Err(A::Error::custom("stopped at a malformed sample"));
            }
            position += 1;
        }
        Ok(())
    }
}
