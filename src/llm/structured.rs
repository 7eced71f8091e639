//! Structured output: [`chat_json`] asks for a JSON value that must satisfy a named JSON Schema,
//! extracts it leniently from the reply, validates it locally with `jsonschema`, and re-asks
//! the model with the validator's complaint a bounded number of times.
//!
//! The schema is also attached to the request as `response_format`; the transport only sends
//! it when the structured-output setting is on (`LlmConfig::structured_output`), so callers
//! never need to know which models support it. Local validation happens either way.
//!
//! Schemas must be self-contained (no remote `$ref`): they are compiled inside the async
//! runtime, where fetching a remote reference is not allowed.

use serde_json::Value;

use super::{ChatModel, ChatRequest, Error, JsonSchemaSpec, Message, Usage};

/// A validated JSON answer and what it took to get it.
#[derive(Debug, Clone, PartialEq)]
pub struct StructuredResponse {
    /// The value, valid against the schema.
    pub value: Value,
    /// Tokens of all attempts (the first ask and every re-ask).
    pub usage: Usage,
    /// Model calls made (1 = valid at the first try).
    pub attempts: u32,
}

/// Why one reply was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rejection {
    /// JSON pointer of the failing location (`""`: root, or no JSON found at all).
    path: String,
    /// Human-readable reason (the validator's message or the parse error).
    message: String,
}

/// Ask `model` for a JSON value satisfying `schema`; on invalid output append the model's reply
/// and a user message quoting the problem and its path, and ask again, at most `max_reasks`
/// times. Transport errors are returned at once; a reply still invalid after the last re-ask
/// gives [`Error::SchemaInvalid`] naming the schema, path and validator message.
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
        let rejection = match extract_json(&text) {
            Ok(value) => {
                let first_error = validator.iter_errors(&value).next().map(|error| Rejection {
                    path: error.instance_path().as_str().to_owned(),
                    message: error.to_string(),
                });
                match first_error {
                    None => return Ok(StructuredResponse { value, usage, attempts }),
                    Some(rejection) => rejection,
                }
            }
            Err(message) => Rejection { path: String::new(), message },
        };
        if attempts > max_reasks {
            return Err(Error::SchemaInvalid {
                schema: schema.name.clone(),
                path: rejection.path,
                message: rejection.message,
                attempts,
            });
        }
        tracing::debug!(schema = %schema.name, path = %rejection.path, reason = %rejection.message, attempts, "re-asking for valid json");
        request.messages.push(Message::assistant(text));
        request.messages.push(Message::user(reask_message(&schema.name, &rejection)));
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

/// Find the JSON value in a model reply: the body of the first code fence if it parses, else
/// the whole text, else the first balanced top-level object or array that parses (braces
/// inside strings are skipped). The error says why nothing was found.
pub fn extract_json(text: &str) -> Result<Value, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("the reply is empty; expected a JSON value".to_owned());
    }
    if let Some(fenced) = fenced_block(text)
        && let Ok(value) = serde_json::from_str(fenced.trim())
    {
        return Ok(value);
    }
    let whole_error = match serde_json::from_str(text) {
        Ok(value) => return Ok(value),
        Err(error) => error,
    };
    let mut search_from = 0;
    while let Some(offset) = text[search_from..].find(['{', '[']) {
        let start = search_from + offset;
        if let Some(end) = balanced_end(&text[start..])
            && let Ok(value) = serde_json::from_str(&text[start..start + end])
        {
            return Ok(value);
        }
        search_from = start + 1;
    }
    Err(format!("no JSON value found in the reply ({whole_error})"))
}

/// The inside of the first ```` ``` ```` fence (an info string such as `json` on the opening
/// line is skipped); an unclosed fence runs to the end.
fn fenced_block(text: &str) -> Option<&str> {
    let open = text.find("```")?;
    let after = &text[open + 3..];
    let body_start = after.find('\n').map_or(after.len(), |newline| newline + 1);
    let body = &after[body_start..];
    Some(body.find("```").map_or(body, |close| &body[..close]))
}

/// Length of the balanced `{…}`/`[…]` starting at `text[0]`, counting brackets outside JSON
/// strings only; `None` if it never closes.
pub fn balanced_end(text: &str) -> Option<usize> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for (index, byte) in text.bytes().enumerate() {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(index + 1);
                }
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
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
            &Rejection {
                path: "/items/0".into(),
                message: "\"x\" is not of type \"integer\"".into(),
            },
        );
        assert!(message.contains("`facts`"));
        assert!(message.contains("/items/0"));
        assert!(message.contains("is not of type"));
        assert!(!message.contains("{{"));
    }
}
