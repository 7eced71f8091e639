//! Coercions for the shapes real models write instead of the declared type, when the intended
//! value is unambiguous: a string where a list is expected becomes a one-element list, `"0.8"`
//! where a number is expected becomes `0.8`, a number or boolean where text is expected
//! becomes its text, a one-element list where a scalar is expected becomes that element, and
//! `null` for a property that does not allow it means the property is absent.
//!
//! The helpers work on single values for callers that read fields by hand; [`to_schema`]
//! applies them along a JSON Schema, and `structured::chat_json` runs it on every reply
//! before validating, so such replies are accepted without a re-ask. A value that already
//! has a declared type is never changed.

use serde_json::{Map, Number, Value};

/// A list: an array as it is, `null` as empty, anything else as a one-element list.
pub fn to_list(value: Value) -> Vec<Value> {
    match value {
        Value::Array(items) => items,
        Value::Null => Vec::new(),
        other => vec![other],
    }
}

/// A number: a JSON number, or a string holding one (`" 0.8 "`); `None` otherwise.
pub fn to_f64(value: &Value) -> Option<f64> {
    match value {
        Value::Number(number) => number.as_f64(),
        Value::String(text) => text.trim().parse::<f64>().ok().filter(|number| number.is_finite()),
        _ => None,
    }
}

/// Text: a string as it is, a number or boolean as written; `None` for `null`, lists and
/// objects.
pub fn to_text(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text.clone()),
        Value::Number(number) => Some(number.to_string()),
        Value::Bool(flag) => Some(flag.to_string()),
        _ => None,
    }
}

/// A boolean: `true`/`false`, or a string saying so (`"True"`, `" false "`).
pub fn to_bool(value: &Value) -> Option<bool> {
    match value {
        Value::Bool(flag) => Some(*flag),
        Value::String(text) => match text.trim().to_ascii_lowercase().as_str() {
            "true" => Some(true),
            "false" => Some(false),
            _ => None,
        },
        _ => None,
    }
}

/// Remove the keys whose value is `null` (a `null` means "absent").
pub fn drop_nulls(object: &mut Map<String, Value>) {
    object.retain(|_, value| !value.is_null());
}

/// `value` coerced along `schema`: where the value's type is not among the declared ones and
/// one of the coercions above yields a declared type, it is applied; objects lose properties
/// that are `null` where the schema does not allow `null`, and properties the schema closes
/// out (`additionalProperties: false`); arrays and objects are coerced element by element.
/// Schemas combined with `anyOf`/`oneOf`/`allOf` are left to the validator.
pub fn to_schema(value: Value, schema: &Value) -> Value {
    let Some(schema) = schema.as_object() else { return value };
    let types = declared_types(schema);
    let value = if types.is_empty() || types.iter().any(|kind| fits(kind, &value)) {
        value
    } else {
        types.iter().find_map(|kind| convert(kind, &value)).unwrap_or(value)
    };
    match value {
        Value::Object(object) => Value::Object(object_to_schema(object, schema)),
        Value::Array(items) => match schema.get("items") {
            Some(item_schema) => {
                Value::Array(items.into_iter().map(|item| to_schema(item, item_schema)).collect())
            }
            None => Value::Array(items),
        },
        other => other,
    }
}

fn object_to_schema(
    mut object: Map<String, Value>,
    schema: &Map<String, Value>,
) -> Map<String, Value> {
    let properties = schema.get("properties").and_then(Value::as_object);
    let closed = schema.get("additionalProperties") == Some(&Value::Bool(false));
    if closed && let Some(properties) = properties {
        object.retain(|key, _| properties.contains_key(key));
    }
    let Some(properties) = properties else { return object };
    object
        .into_iter()
        .filter_map(|(key, value)| match properties.get(&key) {
            Some(property) if value.is_null() && !allows_null(property) => None,
            Some(property) => Some((key, to_schema(value, property))),
            None => Some((key, value)),
        })
        .collect()
}

/// The `type` keyword as a list (`"properties"` without a type implies an object).
fn declared_types(schema: &Map<String, Value>) -> Vec<&str> {
    match schema.get("type") {
        Some(Value::String(kind)) => vec![kind.as_str()],
        Some(Value::Array(kinds)) => kinds.iter().filter_map(Value::as_str).collect(),
        _ if schema.contains_key("properties") => vec!["object"],
        _ => Vec::new(),
    }
}

/// Whether `schema` accepts `null` as far as its `type` and `enum` tell (a schema that says
/// neither is left to the validator: the `null` is kept).
fn allows_null(schema: &Value) -> bool {
    let Some(schema) = schema.as_object() else { return true };
    let types = declared_types(schema);
    if !types.is_empty() {
        return types.contains(&"null");
    }
    match schema.get("enum").and_then(Value::as_array) {
        Some(options) => options.contains(&Value::Null),
        None => true,
    }
}

fn fits(kind: &str, value: &Value) -> bool {
    match kind {
        "string" => value.is_string(),
        "number" => value.is_number(),
        "integer" => value.as_f64().is_some_and(|number| number.fract() == 0.0),
        "boolean" => value.is_boolean(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        "null" => value.is_null(),
        _ => true,
    }
}

fn convert(kind: &str, value: &Value) -> Option<Value> {
    if let Value::Array(items) = value
        && kind != "array"
        && let [single] = items.as_slice()
    {
        return if fits(kind, single) { Some(single.clone()) } else { convert(kind, single) };
    }
    match kind {
        "array" if !value.is_null() => Some(Value::Array(vec![value.clone()])),
        "number" => to_f64(value).and_then(Number::from_f64).map(Value::Number),
        "integer" => to_f64(value)
            .filter(|number| number.fract() == 0.0 && number.abs() < 9.0e15)
            .map(|number| Value::from(number as i64)),
        "string" if !value.is_string() => to_text(value).map(Value::String),
        "boolean" => to_bool(value).map(Value::Bool),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn single_value_helpers() {
        assert_eq!(to_list(json!("a")), vec![json!("a")]);
        assert_eq!(to_list(json!(["a", "b"])), vec![json!("a"), json!("b")]);
        assert!(to_list(Value::Null).is_empty());
        assert_eq!(to_f64(&json!(" 0.8 ")), Some(0.8));
        assert_eq!(to_f64(&json!(0.25)), Some(0.25));
        assert_eq!(to_f64(&json!("high")), None);
        assert_eq!(to_f64(&json!("NaN")), None);
        assert_eq!(to_text(&json!(42)), Some("42".to_owned()));
        assert_eq!(to_text(&json!(false)), Some("false".to_owned()));
        assert_eq!(to_text(&Value::Null), None);
        assert_eq!(to_bool(&json!("True")), Some(true));
        let mut object = json!({"a": null, "b": 1}).as_object().cloned().unwrap();
        drop_nulls(&mut object);
        assert_eq!(Value::Object(object), json!({"b": 1}));
    }

    #[test]
    fn schema_guided_coercion_changes_only_mistyped_values() {
        let schema = json!({
            "type": "object", "additionalProperties": false, "required": ["answer"],
            "properties": {
                "answer": {"type": "string"},
                "confidence": {"type": "number"},
                "count": {"type": "integer"},
                "supports": {"type": "array", "items": {"type": "string"}},
                "date": {"type": ["string", "null"]},
                "ok": {"type": "boolean"}
            }
        });
        let coerced = to_schema(
            json!({"answer": 1987, "confidence": "0.8", "count": "3", "supports": "D1:3",
                   "date": null, "ok": "false", "extra": "dropped"}),
            &schema,
        );
        assert_eq!(
            coerced,
            json!({"answer": "1987", "confidence": 0.8, "count": 3, "supports": ["D1:3"],
                   "date": null, "ok": false})
        );
        let nulls =
            to_schema(json!({"answer": ["Paris"], "confidence": null, "supports": [7]}), &schema);
        assert_eq!(nulls, json!({"answer": "Paris", "supports": ["7"]}));
        let untouched = json!({"answer": "x", "confidence": 0.5, "supports": ["a"]});
        assert_eq!(to_schema(untouched.clone(), &schema), untouched);
        // Not coercible: left for the validator to reject.
        assert_eq!(
            to_schema(json!({"confidence": "high"}), &schema),
            json!({"confidence": "high"})
        );
        assert_eq!(to_schema(json!({"count": "2.5"}), &schema), json!({"count": "2.5"}));
    }
}
