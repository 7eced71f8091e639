//! Reading the optional fields the scoped requests share, each checked on its own so that an
//! error names the field: names (users, agents, conversations), key/value tags and times.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::schema::MAX_TAGS;
use crate::names::{NameKind, check_name};
use crate::service::ops::ApiError;

/// An optional name field, checked against the one id rule.
pub(crate) fn name(
    map: &Map<String, Value>,
    field: &str,
    kind: NameKind,
) -> Result<Option<String>, ApiError> {
    match map.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => {
            check_name(kind, text).map_err(|error| ApiError::bad(field, error.to_string()))?;
            Ok(Some(text.clone()))
        }
        Some(_) => Err(ApiError::bad(field, "expected a string")),
    }
}

/// An optional string field with a non-whitespace character, at most `max` characters.
pub(crate) fn text(
    map: &Map<String, Value>,
    field: &str,
    max: usize,
) -> Result<Option<String>, ApiError> {
    match map.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) if text.trim().is_empty() => {
            Err(ApiError::bad(field, "must not be empty"))
        }
        Some(Value::String(text)) if text.chars().count() > max => {
            Err(ApiError::bad(field, format!("over {max} characters")))
        }
        Some(Value::String(text)) => Ok(Some(text.clone())),
        Some(_) => Err(ApiError::bad(field, "expected a string")),
    }
}

/// An optional `tags` object of names to names.
pub(crate) fn tags(map: &Map<String, Value>) -> Result<BTreeMap<String, String>, ApiError> {
    let object = match map.get("tags") {
        None | Some(Value::Null) => return Ok(BTreeMap::new()),
        Some(Value::Object(object)) => object,
        Some(_) => return Err(ApiError::bad("tags", "expected an object of tag keys to values")),
    };
    if object.len() > MAX_TAGS {
        return Err(ApiError::bad(
            "tags",
            format!("{} tags; the limit is {MAX_TAGS}", object.len()),
        ));
    }
    let mut tags = BTreeMap::new();
    for (key, value) in object {
        check_name(NameKind::Tag, key).map_err(|error| ApiError::bad("tags", error.to_string()))?;
        let Value::String(value) = value else {
            return Err(ApiError::bad("tags", format!("tag {key:?}: expected a string value")));
        };
        check_name(NameKind::Tag, value)
            .map_err(|error| ApiError::bad("tags", error.to_string()))?;
        tags.insert(key.clone(), value.clone());
    }
    Ok(tags)
}

/// An optional time field as a bound (RFC 3339 UTC; a date is its first second, or its last
/// with `end`).
pub(crate) fn time(
    map: &Map<String, Value>,
    field: &str,
    end: bool,
) -> Result<Option<String>, ApiError> {
    match map.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => {
            crate::service::time_bound(text, end).map(Some).ok_or_else(|| {
                ApiError::bad(field, "expected RFC 3339, YYYY-MM-DD HH:MM[:SS] or YYYY-MM-DD")
            })
        }
        Some(_) => Err(ApiError::bad(field, "expected a string")),
    }
}

/// An optional boolean field.
pub(crate) fn flag(map: &Map<String, Value>, field: &str) -> Result<Option<bool>, ApiError> {
    match map.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(value)) => Ok(Some(*value)),
        Some(_) => Err(ApiError::bad(field, "expected true or false")),
    }
}
