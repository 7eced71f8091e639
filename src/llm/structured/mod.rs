//! Structured output: [`chat_json`] asks for a JSON value that must satisfy a named JSON Schema,
//! reads it leniently from the reply, validates it locally with `jsonschema`, and re-asks the
//! model with the validator's complaint a bounded number of times.
//!
//! Lenient reading ([`read_reply`]): the JSON may sit in a code fence or in prose, and may use
//! the JSON5-isms real models write (trailing commas, single quotes, unquoted keys, comments;
//! parsed by the `json5` crate, see `structured/scan.rs`). Mistyped but unambiguous values are
//! coerced along the schema (`coerce::to_schema`: `"0.8"` → 0.8, a string → a one-element
//! list, numbers → text, `null` → absent, undeclared keys of a closed object dropped). A reply
//! is accepted without a re-ask when exactly one distinct value in it then passes the schema;
//! two different passing values are ambiguous and re-asked.
//!
//! The schema is also attached to the request as `response_format`; the transport only sends
//! it when the structured-output setting is on (`LlmConfig::structured_output`), so callers
//! never need to know which models support it. Local validation happens either way.
//!
//! Schemas must be self-contained (no remote `$ref`): they are compiled inside the async
//! runtime, where fetching a remote reference is not allowed.

mod scan;
#[cfg(test)]
mod tests;

use serde_json::Value;

pub use scan::balanced_end;

use super::{ChatMessage, ChatModel, ChatRequest, Error, JsonSchemaSpec, Usage};

/// Longest rejected reply kept in [`Error::SchemaInvalid`] (bytes, cut at a char boundary).
pub const REJECTED_EXCERPT: usize = 2000;

/// A validated JSON answer and what it took to get it.
#[derive(Debug, Clone, PartialEq)]
pub struct StructuredResponse {
    /// The value, valid against the schema (after coercion).
    pub value: Value,
    /// Tokens of all attempts (the first ask and every re-ask, and their retries).
    pub usage: Usage,
    /// Model calls made (1 = valid at the first try).
    pub attempts: u32,
}

/// Why one reply was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// JSON pointer of the failing location (`""`: root, or no JSON found at all).
    pub path: String,
    /// Human-readable reason (the validator's message or why no JSON was found).
    pub message: String,
}

/// Ask `model` for a JSON value satisfying `schema`; on an unreadable or invalid reply append
/// the model's reply and a user message quoting the problem and its path, and ask again, at
/// most `max_reasks` times. Transport errors are returned at once; a reply still invalid after
/// the last re-ask gives [`Error::SchemaInvalid`] naming the schema, path and validator
/// message, with the tokens of every attempt and the last reply.
pub async fn chat_json<M: ChatModel>(
    model: &M,
    mut request: ChatRequest,
    schema: &JsonSchemaSpec,
    max_reasks: u32,
) -> Result<StructuredResponse, Error> {
    let validator = jsonschema::validator_for(&schema.schema).map_err(|error| {
        Error::Config(format!("invalid json schema `{}`: {error}", schema.name))
    })?;
    if request.response_format.is_none() {
        request.response_format = Some(schema.clone());
    }
    let mut usage = Usage::default();
    let mut attempts = 0;
    loop {
        attempts += 1;
        let response = model.chat(&request).await?;
        usage += response.usage;
        let text = response.message.content.unwrap_or_default();
        let rejection = match read_reply(&text, &schema.schema, &validator) {
            Ok(value) => return Ok(StructuredResponse { value, usage, attempts }),
            Err(rejection) => rejection,
        };
        if attempts > max_reasks {
            return Err(Error::SchemaInvalid {
                schema: schema.name.clone(),
                path: rejection.path,
                message: rejection.message,
                attempts,
                usage,
                reply: excerpt(&text, REJECTED_EXCERPT),
            });
        }
        tracing::debug!(schema = %schema.name, path = %rejection.path, reason = %rejection.message, attempts, "re-asking for valid json");
        request.messages.push(ChatMessage::assistant(text));
        request.messages.push(ChatMessage::user(reask_message(&schema.name, &rejection)));
    }
}

/// Read a reply against `schema` (compiled as `validator`): every JSON value found in it
/// (see [`json_candidates`]), coerced along the schema; the one distinct value that passes is
/// the answer. Otherwise the rejection of the first candidate, or why the reply holds no JSON
/// or is ambiguous.
pub fn read_reply(
    text: &str,
    schema: &Value,
    validator: &jsonschema::Validator,
) -> Result<Value, Rejection> {
    let candidates =
        json_candidates(text).map_err(|message| Rejection { path: String::new(), message })?;
    let mut passing: Vec<Value> = Vec::new();
    let mut first_rejection = None;
    for candidate in candidates {
        let value = super::coerce::to_schema(candidate, schema);
        let rejection = validator.iter_errors(&value).next().map(|error| Rejection {
            path: error.instance_path().as_str().to_owned(),
            message: error.to_string(),
        });
        match rejection {
            None if !passing.contains(&value) => passing.push(value),
            None => {}
            Some(rejection) => {
                first_rejection.get_or_insert(rejection);
            }
        }
    }
    match passing.len() {
        1 => Ok(passing.remove(0)),
        0 => Err(first_rejection.unwrap_or_else(|| Rejection {
            path: String::new(),
            message: "no JSON value found in the reply".to_owned(),
        })),
        count => Err(Rejection {
            path: String::new(),
            message: format!(
                "the reply holds {count} different JSON values that fit the schema; reply with exactly one"
            ),
        }),
    }
}

fn reask_message(schema: &str, rejection: &Rejection) -> String {
    let path = if rejection.path.is_empty() { "/" } else { rejection.path.as_str() };
    let vars = [("schema", schema), ("path", path), ("message", rejection.message.as_str())];
    match crate::prompts::STRUCTURED_REASK.render(&vars) {
        Ok(text) => text.trim_end().to_owned(),
        // The template's slots are fixed and pinned by the prompts tests; this arm only guards
        // against an edited prompt file and still tells the model what was wrong.
        Err(error) => format!("{error}. Problem at `{path}`: {}", rejection.message),
    }
}

/// Every JSON value in a model reply, read leniently (strict JSON, else JSON5), in order and
/// without duplicates: the bodies of code fences, else the whole text, else every top-level
/// balanced `{…}`/`[…]` span that parses. The error says why nothing was found.
pub fn json_candidates(text: &str) -> Result<Vec<Value>, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("the reply is empty; expected a JSON value".to_owned());
    }
    let found = scan::candidates(text);
    if found.is_empty() {
        let detail = match serde_json::from_str::<Value>(text) {
            Err(error) => format!(" ({error})"),
            Ok(_) => String::new(),
        };
        return Err(format!("no JSON value found in the reply{detail}"));
    }
    Ok(found)
}

/// The JSON value in a model reply: the first of [`json_candidates`].
pub fn extract_json(text: &str) -> Result<Value, String> {
    json_candidates(text).map(|mut found| found.remove(0))
}

/// `text` cut to at most `limit` bytes at a character boundary, with `…` when cut.
pub fn excerpt(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.to_owned();
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}
