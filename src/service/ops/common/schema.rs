//! The pieces every operation's schema is made of (utoipa's builders: the constraints come
//! from the shared limits in [`crate::names`] and must use those constants), the path and query
//! parameters, and [`Validator`]: an operation holds its body to the very schema the OpenAPI
//! document publishes for it, so the document and the checks cannot disagree.

use serde_json::{Value, json};
use utoipa::openapi::RefOr;
use utoipa::openapi::path::{Parameter, ParameterBuilder, ParameterIn};
use utoipa::openapi::schema::{
    AllOfBuilder, AnyOfBuilder, ArrayBuilder, ObjectBuilder, Schema, SchemaType, Type,
};
use utoipa::{PartialSchema, ToSchema};

use crate::names::{MAX_MESSAGE_CHARS, MAX_NAME_CHARS, NAME_PATTERN};
use crate::service::ops::{ApiError, Body};

/// A string that is not all whitespace: one character outside Rust's `char::is_whitespace` (the
/// Unicode `White_Space` set, which `str::trim` removes). Spelled as `\uXXXX` escapes so that
/// ECMA 262, Python and Rust regular expressions read it alike (their `\s` differ).
pub(crate) const NON_BLANK_PATTERN: &str = "[^\\u0009-\\u000D\\u0020\\u0085\\u00A0\\u1680\\u2000-\\u200A\\u2028\\u2029\\u202F\\u205F\\u3000]";

/// A calendar date `YYYY-MM-DD` that exists (leap years included), its year matching `$year`
/// and, on 29 February, its century year (`YY00`, leap when `YY` is a multiple of 4) `$century`.
macro_rules! date_pattern {
    ($year:literal, $century:literal) => {
        concat!(
            "(?:",
            $year,
            "-(?:(?:0[1-9]|1[0-2])-(?:0[1-9]|1[0-9]|2[0-8])",
            "|(?:0[13-9]|1[0-2])-(?:29|30)|(?:0[13578]|1[02])-31)",
            "|(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|",
            $century,
            "00)-02-29)"
        )
    };
}

/// Hours, minutes, seconds and an optional fraction.
macro_rules! time_pattern {
    () => {
        "T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]{1,9})?"
    };
}

/// A message timestamp `convo::Timestamp::parse` takes: a date; a date and `HH:MM[:SS]` (`T` or
/// a space between, UTC); RFC 3339 with seconds, optional fraction and `Z`; or RFC 3339 with an
/// offset, in the years 0001 to 9998 only (in 0000 or 9999 an offset can move the time out of
/// the four-digit years, which the service refuses).
pub(crate) const TIMESTAMP_PATTERN: &str = concat!(
    "^(?:",
    date_pattern!("[0-9]{4}", "(?:[02468][048]|[13579][26])"),
    "(?:[T ](?:[01][0-9]|2[0-3]):[0-5][0-9](?::[0-5][0-9])?|",
    time_pattern!(),
    "Z)?|",
    date_pattern!(
        "(?:000[1-9]|00[1-9][0-9]|0[1-9][0-9]{2}|[1-8][0-9]{3}|9[0-8][0-9]{2}|99[0-8][0-9]|999[0-8])",
        "(?:0[48]|[2468][048]|[13579][26])"
    ),
    time_pattern!(),
    "[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])$"
);

pub(crate) fn string(description: &str) -> ObjectBuilder {
    ObjectBuilder::new().schema_type(Type::String).description(Some(description))
}

/// A string with a non-whitespace character.
pub(crate) fn non_blank(description: &str) -> ObjectBuilder {
    string(description).min_length(Some(1)).pattern(Some(NON_BLANK_PATTERN))
}

fn message_text() -> RefOr<Schema> {
    let text = || non_blank("what was said").max_length(Some(MAX_MESSAGE_CHARS));
    let part = ObjectBuilder::new()
        .description(Some("an OpenAI-style text content part"))
        .property("type", string("`text`").enum_values(Some(["text"])))
        .property("text", text())
        .required("text");
    let parts = ArrayBuilder::new()
        .description(Some("OpenAI-style content parts: one text part"))
        .items(part)
        .min_items(Some(1))
        .max_items(Some(1));
    AnyOfBuilder::new().item(text()).item(parts).into()
}

fn one_of_required(keys: &[&str]) -> RefOr<Schema> {
    keys.iter()
        .fold(AnyOfBuilder::new(), |any, key| any.item(ObjectBuilder::new().required(*key)))
        .into()
}

/// One message of an add (the `convo` format: see `data/examples/README.md`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Message;

impl PartialSchema for Message {
    fn schema() -> RefOr<Schema> {
        let speaker = || non_blank("who said it");
        let timestamp = || {
            string("RFC 3339 (2024-05-03T14:00:00Z), YYYY-MM-DD HH:MM[:SS] (UTC) or YYYY-MM-DD")
                .pattern(Some(TIMESTAMP_PATTERN))
        };
        let session = || {
            AnyOfBuilder::new()
                .description(Some("the caller's session id"))
                .item(non_blank("a session id"))
                .item(ObjectBuilder::new().schema_type(Type::Number))
        };
        let fields = ObjectBuilder::new()
            .property("speaker", speaker())
            .property("name", speaker())
            .property("role", speaker())
            .property("text", message_text())
            .property("content", message_text())
            .property("timestamp", timestamp())
            .property("time", timestamp())
            .property("date", timestamp())
            .property("created_at", timestamp())
            .property("session", session())
            .property("session_id", session());
        AllOfBuilder::new()
            .description(Some(
                "a speaker (`speaker`, `name` or `role`), a text (`text` or `content`), \
                 optionally a timestamp (`timestamp`, `time`, `date` or `created_at`) and a \
                 session id (`session` or `session_id`); where two names are given the first \
                 listed is used",
            ))
            .item(fields)
            .item(one_of_required(&["speaker", "name", "role"]))
            .item(one_of_required(&["text", "content"]))
            .into()
    }
}

impl ToSchema for Message {}

/// A name ([`crate::names::check_name`]'s rule).
pub(crate) fn name_schema(description: &str) -> ObjectBuilder {
    string(description)
        .min_length(Some(1))
        .max_length(Some(MAX_NAME_CHARS))
        .pattern(Some(NAME_PATTERN))
}

/// Largest number of tags on one add or one search.
pub(crate) const MAX_TAGS: usize = 32;

/// Free key/value tags: names to names.
pub(crate) fn tags_schema(description: &str) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .description(Some(description))
        .property_names(Some(name_schema("a tag key")))
        .additional_properties(Some(name_schema("a tag value")))
        .max_properties(Some(MAX_TAGS))
}

/// A time in the timestamp formats messages take.
pub(crate) fn time_schema(description: &str) -> ObjectBuilder {
    string(description).pattern(Some(TIMESTAMP_PATTERN))
}

/// The `wait` flag of an add.
pub(crate) fn wait_schema() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::Boolean, Type::Null]))
        .description(Some(
            "true (the default): answer when the new sessions are built; false: store the \
             messages, answer 202 with a job at once, and build in the background \
             (`GET /v1/jobs/{job}`)",
        ))
}

/// A nullable flag.
pub(crate) fn flag_schema(description: &str) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::Boolean, Type::Null]))
        .description(Some(description))
}

/// A path parameter.
pub(crate) fn path_parameter(name: &str, description: &str, schema: ObjectBuilder) -> Parameter {
    ParameterBuilder::new()
        .name(name)
        .parameter_in(ParameterIn::Path)
        .required(utoipa::openapi::Required::True)
        .description(Some(description))
        .schema(Some(schema))
        .build()
}

/// A path parameter holding a name ([`crate::names::check_name`]'s rule).
pub(crate) fn name_parameter(name: &str, description: &str) -> Parameter {
    let schema = ObjectBuilder::new()
        .schema_type(Type::String)
        .min_length(Some(1))
        .max_length(Some(MAX_NAME_CHARS))
        .pattern(Some(NAME_PATTERN));
    let description = format!(
        "{description}: ASCII letters, digits and . _ - : @ +, starting with a letter or digit, \
         no `..`"
    );
    path_parameter(name, &description, schema)
}

/// A numeric id (`{fact}`, `{edit}`, `{job}`): a whole number from 1.
pub(crate) fn id_number() -> ObjectBuilder {
    ObjectBuilder::new().schema_type(Type::Integer).minimum(Some(1)).maximum(Some(i64::MAX as f64))
}

/// An optional query parameter.
pub(crate) fn query_parameter(name: &str, description: &str, schema: ObjectBuilder) -> Parameter {
    ParameterBuilder::new()
        .name(name)
        .parameter_in(ParameterIn::Query)
        .required(utoipa::openapi::Required::False)
        .description(Some(description))
        .schema(Some(schema))
        .build()
}

/// A `true`/`false` query parameter's schema.
pub(crate) fn query_flag() -> ObjectBuilder {
    ObjectBuilder::new().schema_type(Type::String).enum_values(Some(["true", "false"]))
}

/// The compiled schema of one request body, as the document publishes it.
pub(crate) struct Validator(Result<jsonschema::Validator, String>);

impl Validator {
    /// Compiles `T`'s schema (JSON Schema 2020-12, as OpenAPI 3.1 reads it).
    pub(crate) fn of<T: ToSchema>() -> Self {
        let compiled = serde_json::to_value(T::schema())
            .map_err(|error| error.to_string())
            .and_then(|mut schema| {
                if let Value::Object(object) = &mut schema {
                    object.insert(
                        "$schema".into(),
                        json!("https://json-schema.org/draft/2020-12/schema"),
                    );
                }
                jsonschema::validator_for(&schema).map_err(|error| error.to_string())
            })
            .map_err(|message| format!("the schema of {} does not compile: {message}", T::name()));
        Self(compiled)
    }

    /// A body read by `parse` (field by field: errors name the field), then held whole to the
    /// schema.
    pub(crate) fn read<T>(
        &self,
        map: Body,
        parse: impl FnOnce(&Body) -> Result<T, ApiError>,
    ) -> Result<T, ApiError> {
        let request = parse(&map)?;
        self.check(&Value::Object(map))?;
        Ok(request)
    }

    /// Whether the schema compiled (its error otherwise: a bug in the operation's schema).
    pub(crate) fn compiled(&self) -> Result<(), String> {
        self.0.as_ref().map(|_| ()).map_err(Clone::clone)
    }

    /// 400 naming the innermost object field of the first violation (`body` for the body
    /// itself).
    pub(crate) fn check(&self, body: &Value) -> Result<(), ApiError> {
        let validator = self.0.as_ref().map_err(|message| {
            ApiError::from(crate::service::ServiceError::Other(anyhow::anyhow!("{message}")))
        })?;
        let Some(error) = validator.iter_errors(body).next() else {
            return Ok(());
        };
        let path = error.instance_path().as_str().to_owned();
        let field = path
            .rsplit('/')
            .find(|segment| {
                !segment.is_empty() && !segment.bytes().all(|byte| byte.is_ascii_digit())
            })
            .unwrap_or("body");
        let location = if path.is_empty() { String::new() } else { format!(" at {path}") };
        // The validator's message quotes the offending value, which may be megabytes long.
        let mut reason = error.to_string();
        if reason.chars().count() > MAX_REASON_CHARS {
            reason = reason.chars().take(MAX_REASON_CHARS).chain("…".chars()).collect();
        }
        Err(ApiError::bad(field, format!("does not match the API's schema{location}: {reason}")))
    }
}

/// Longest validator message an error quotes, in characters.
const MAX_REASON_CHARS: usize = 300;

/// The pieces of the MCP tools' input schemas. A model reads them, so they are lighter than the
/// document's: no timestamp or non-blank pattern (the operation's parser checks those and names
/// the field), every part inline (for clients that do not resolve references), descriptions
/// written for a model.
pub(crate) mod tool {
    use serde_json::{Map, Value, json};

    use crate::names::{MAX_NAME_CHARS, NAME_PATTERN};

    /// A tool's input schema: an object of `properties`, `required` ones listed.
    pub(crate) fn input(required: &[&str], properties: Value) -> Map<String, Value> {
        let mut schema = Map::new();
        schema.insert("$schema".into(), json!("https://json-schema.org/draft/2020-12/schema"));
        if !required.is_empty() {
            schema.insert("required".into(), json!(required));
        }
        schema.insert("properties".into(), properties);
        schema.insert("type".into(), json!("object"));
        schema
    }

    /// `schema` with `description` first.
    fn described(description: &str, schema: Value) -> Value {
        let mut described = Map::new();
        described.insert("description".into(), json!(description));
        if let Value::Object(fields) = schema {
            described.extend(fields);
        }
        Value::Object(described)
    }

    /// An id ([`crate::names::check_name`]'s rule), undescribed.
    fn bare_id() -> Value {
        json!({
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_NAME_CHARS,
            "pattern": NAME_PATTERN,
        })
    }

    /// An id.
    pub(crate) fn id(description: &str) -> Value {
        described(description, bare_id())
    }

    /// A text with a non-whitespace character.
    pub(crate) fn non_blank(description: &str) -> Value {
        described(description, json!({"type": "string", "minLength": 1}))
    }

    /// A text with a non-whitespace character, at most `max` characters.
    pub(crate) fn text(description: &str, max: usize) -> Value {
        described(description, json!({"type": "string", "minLength": 1, "maxLength": max}))
    }

    /// A time in the formats messages take.
    pub(crate) fn time(description: &str) -> Value {
        described(description, json!({"type": "string"}))
    }

    /// Key/value tags, ids to ids.
    pub(crate) fn tags(description: &str) -> Value {
        described(
            description,
            json!({
                "type": "object",
                "propertyNames": bare_id(),
                "additionalProperties": bare_id(),
                "maxProperties": super::MAX_TAGS,
            }),
        )
    }
}
