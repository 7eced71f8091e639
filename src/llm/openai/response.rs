//! Responses as providers actually send them: lenient structs parsed with `create_byot`, and
//! their conversion into a [`ChatResponse`].

use serde::{Deserialize, Deserializer};
use serde_json::Value;

use super::errors::WireError;
use super::transport::Transport;
use crate::llm::retry::unusable_reason;
use crate::llm::{ChatMessage, ChatResponse, Error, Role, ToolCall, Usage};

impl Transport {
    pub(super) fn chat_response(&self, wire: WireChatResponse) -> Result<ChatResponse, Error> {
        let WireChatResponse { choices, usage, error } = wire;
        let usage = usage.map(Usage::from).unwrap_or_default();
        let Some(choice) = choices.into_iter().next() else {
            return Err(match error {
                Some(error) => self.errors.embedded_error(error),
                None => Error::BadReply {
                    reason: "the response has no choices".to_owned(),
                    attempts: 1,
                    usage,
                },
            });
        };
        let tool_calls = choice
            .message
            .tool_calls
            .into_iter()
            .enumerate()
            .map(|(index, call)| ToolCall {
                id: if call.id.is_empty() { format!("call_{index}") } else { call.id },
                name: call.function.name,
                arguments: match call.function.arguments {
                    Value::String(text) => text,
                    Value::Null => String::new(),
                    other => other.to_string(),
                },
            })
            .collect();
        let message = ChatMessage {
            role: Role::Assistant,
            content: choice.message.content.map(WireContent::into_text),
            tool_calls,
            tool_call_id: None,
        };
        // A well-formed reply can still be unusable (`finish_reason: "error"`, nothing in
        // it): a transient fault the retry layer retries, with its tokens counted.
        let response = ChatResponse::new(message, choice.finish_reason, usage);
        match unusable_reason(&response) {
            Some(reason) => Err(Error::BadReply { reason, attempts: 1, usage }),
            None => Ok(response),
        }
    }
}

/// `null` where a collection or default is expected is read as the default.
fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// A chat completion as providers actually send it: everything optional.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct WireChatResponse {
    #[serde(deserialize_with = "null_as_default")]
    choices: Vec<WireChoice>,
    usage: Option<WireUsage>,
    error: Option<WireError>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireChoice {
    #[serde(deserialize_with = "null_as_default")]
    message: WireMessage,
    /// Free string: providers send values outside OpenAI's set (`error`, `""`, ...).
    finish_reason: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireMessage {
    content: Option<WireContent>,
    #[serde(deserialize_with = "null_as_default")]
    tool_calls: Vec<WireToolCall>,
}

/// A chat message's content: a string, or a list of parts whose texts are joined.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum WireContent {
    Text(String),
    Parts(Vec<WirePart>),
}

impl WireContent {
    fn into_text(self) -> String {
        match self {
            WireContent::Text(text) => text,
            WireContent::Parts(parts) => parts.into_iter().filter_map(|part| part.text).collect(),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WirePart {
    text: Option<String>,
}

/// A tool call; `type` may be missing (some providers omit it) and is ignored.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireToolCall {
    #[serde(deserialize_with = "null_as_default")]
    id: String,
    #[serde(deserialize_with = "null_as_default")]
    function: WireFunction,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireFunction {
    #[serde(deserialize_with = "null_as_default")]
    name: String,
    /// Normally a JSON string; some providers send the object itself.
    arguments: Value,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct WireUsage {
    #[serde(deserialize_with = "null_as_default")]
    prompt_tokens: u64,
    #[serde(deserialize_with = "null_as_default")]
    completion_tokens: u64,
}

impl From<WireUsage> for Usage {
    fn from(usage: WireUsage) -> Self {
        Usage { prompt_tokens: usage.prompt_tokens, completion_tokens: usage.completion_tokens }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct WireEmbeddingResponse {
    #[serde(deserialize_with = "null_as_default")]
    pub(super) data: Vec<WireEmbedding>,
    pub(super) usage: Option<WireUsage>,
    pub(super) error: Option<WireError>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct WireEmbedding {
    pub(super) index: Option<usize>,
    #[serde(deserialize_with = "null_as_default")]
    pub(super) embedding: Vec<f32>,
}
