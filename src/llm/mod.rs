//! The LLM layer: the only module that knows HTTP, async-openai, API keys or rate limits.
//!
//! Everything above this module talks to models through the provider-neutral types defined here
//! ([`ChatRequest`], [`ChatResponse`], [`Message`], [`ToolSpec`]) and the two traits
//! [`ChatModel`] and [`Embedder`]. Wire formats stay at the edge (`openai.rs`).
//!
//! The real stack, assembled only by [`build_chat_model`] / [`build_embedder`], is
//! `Retrying<RateLimited<OpenAiChat>>`: every HTTP attempt first waits on the shared `governor`
//! limiters, the retry layer sees each attempt's raw status and `Retry-After`, and one
//! [`UsageMeter`] counts every request and token. `scripted.rs` is the OpenAI-compatible
//! loopback server tests and offline demos talk to.

pub mod config;
pub mod models;
pub mod openai;
pub mod rate_limit;
pub mod retry;
#[cfg(any(test, feature = "test-support"))]
pub mod scripted;
pub mod secret;
pub mod stack;
pub mod structured;
pub mod usage;

pub use config::{EmbedderConfig, LlmConfig};
pub use models::{estimate_cost_usd, resolve_model_alias};
pub use secret::Secret;
pub use stack::{Client, EmbedClient, build_chat_model, build_embedder};
pub use structured::{StructuredResponse, chat_json};
pub use usage::{UsageMeter, UsageTotals};

use std::future::Future;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Who wrote a message in a chat transcript.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions.
    System,
    /// The user (our pipeline).
    User,
    /// The model.
    Assistant,
    /// The result of a tool call, answering an assistant's `tool_calls` entry.
    Tool,
}

/// One tool call requested by the model. `arguments` is the raw JSON text the model produced:
/// it may be malformed, and the caller decides what to do about that.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Provider-assigned id; the matching tool message must echo it.
    pub id: String,
    /// Function name.
    pub name: String,
    /// Raw JSON arguments as sent by the model.
    pub arguments: String,
}

/// One chat message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Author.
    pub role: Role,
    /// Text content (absent for an assistant message that only calls tools).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// Tool calls of an assistant message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For `Role::Tool`: the id of the call this message answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl Message {
    /// A system message.
    pub fn system(text: impl Into<String>) -> Self {
        Self {
            role: Role::System,
            content: Some(text.into()),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }
    /// A user message.
    pub fn user(text: impl Into<String>) -> Self {
        Self {
            role: Role::User,
            content: Some(text.into()),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }
    /// An assistant text message.
    pub fn assistant(text: impl Into<String>) -> Self {
        Self {
            role: Role::Assistant,
            content: Some(text.into()),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }
    /// A tool result answering the call `tool_call_id`.
    pub fn tool(tool_call_id: impl Into<String>, text: impl Into<String>) -> Self {
        Self {
            role: Role::Tool,
            content: Some(text.into()),
            tool_calls: Vec::new(),
            tool_call_id: Some(tool_call_id.into()),
        }
    }
}

/// A function the model may call: name, description and JSON Schema of its arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// Function name.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: Value,
}

/// How the model may use the tools offered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    /// The model decides.
    Auto,
    /// No tool calls allowed (used for the final-answer round).
    None,
    /// At least one tool call.
    Required,
    /// This one function must be called.
    Function(String),
}

/// A JSON Schema the response must satisfy, sent as `response_format: json_schema` when the
/// model supports it and always validated locally.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JsonSchemaSpec {
    /// Schema name (also used in error messages).
    pub name: String,
    /// The schema itself.
    pub schema: Value,
}

/// A provider-neutral chat completion request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    /// Model id as the endpoint knows it (aliases already resolved).
    pub model: String,
    /// Transcript.
    pub messages: Vec<Message>,
    /// Tools offered (empty: none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolSpec>,
    /// Tool choice; `None` leaves it to the provider default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
    /// Whether the model may emit several tool calls in one message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_tool_calls: Option<bool>,
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// Completion token cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Provider seed, where supported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
    /// Structured-output schema sent as `response_format` (only when enabled by settings).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_format: Option<JsonSchemaSpec>,
}

impl ChatRequest {
    /// A request with just a model and messages; everything else at provider defaults.
    pub fn new(model: impl Into<String>, messages: Vec<Message>) -> Self {
        Self {
            model: model.into(),
            messages,
            tools: Vec::new(),
            tool_choice: None,
            parallel_tool_calls: None,
            temperature: None,
            max_tokens: None,
            seed: None,
            response_format: None,
        }
    }
}

/// Token usage of one or more calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt (input) tokens.
    pub prompt_tokens: u64,
    /// Completion (output) tokens.
    pub completion_tokens: u64,
}

impl Usage {
    /// Sum of prompt and completion tokens.
    pub fn total(&self) -> u64 {
        self.prompt_tokens + self.completion_tokens
    }
}

impl std::ops::Add for Usage {
    type Output = Usage;
    fn add(self, other: Usage) -> Usage {
        Usage {
            prompt_tokens: self.prompt_tokens + other.prompt_tokens,
            completion_tokens: self.completion_tokens + other.completion_tokens,
        }
    }
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, other: Usage) {
        *self = *self + other;
    }
}

/// A chat completion: the assistant message, why it stopped, and what it cost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatResponse {
    /// The assistant message (text and/or tool calls).
    pub message: Message,
    /// Provider finish reason, kept as a free string (providers disagree on the set).
    pub finish_reason: Option<String>,
    /// Tokens of this call (all attempts that returned a usage block are summed by the caller).
    pub usage: Usage,
}

/// Embeddings of a batch of texts, in input order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Embeddings {
    /// One vector per input text.
    pub vectors: Vec<Vec<f32>>,
    /// Tokens billed (zero for local models).
    pub usage: Usage,
}

/// Errors of the LLM layer. Callers branch on the kind: retry decisions, context-length
/// handling, and per-question error reporting all depend on it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// HTTP 429 after all retries.
    #[error("rate limited by the endpoint after {attempts} attempts (status 429): {body}")]
    RateLimited {
        /// Attempts made.
        attempts: u32,
        /// Response body excerpt.
        body: String,
        /// The wait the endpoint asked for (`Retry-After`), if it sent one.
        retry_after: Option<Duration>,
    },
    /// A non-success HTTP status that is not retryable, or still failing after all retries.
    #[error("endpoint returned status {status} after {attempts} attempts: {body}")]
    Api {
        /// HTTP status.
        status: u16,
        /// Attempts made.
        attempts: u32,
        /// Response body excerpt.
        body: String,
        /// The wait the endpoint asked for (`Retry-After`), if it sent one.
        retry_after: Option<Duration>,
    },
    /// The prompt does not fit the model's context window (a 400 saying so).
    #[error("prompt exceeds the model's context length: {body}")]
    ContextLength {
        /// Response body excerpt.
        body: String,
    },
    /// The request timed out on every attempt.
    #[error("request timed out after {attempts} attempts ({timeout:?} each)")]
    Timeout {
        /// Attempts made.
        attempts: u32,
        /// Per-attempt timeout.
        timeout: Duration,
    },
    /// The connection failed on every attempt.
    #[error("connection to the endpoint failed after {attempts} attempts: {message}")]
    Connection {
        /// Attempts made.
        attempts: u32,
        /// Underlying error text.
        message: String,
    },
    /// The endpoint answered 2xx but the body could not be understood.
    #[error("could not decode the endpoint's response: {message}")]
    Decode {
        /// What went wrong, with a body excerpt.
        message: String,
    },
    /// Structured output still invalid after the allowed re-asks.
    #[error(
        "model output does not match schema `{schema}` at `{path}` after {attempts} attempts: {message}"
    )]
    SchemaInvalid {
        /// Schema name.
        schema: String,
        /// JSON pointer of the first failing location (`""` for the root or unparsable JSON).
        path: String,
        /// Validator message.
        message: String,
        /// Attempts made.
        attempts: u32,
    },
    /// Configuration problem (missing key, bad URL).
    #[error("{0}")]
    Config(String),
}

/// A chat model. Implementations: the real client stack (`openai.rs` behind retry and rate
/// limits) and whatever tests wrap around the scripted endpoint.
pub trait ChatModel: Send + Sync {
    /// Send one chat completion request.
    fn chat(
        &self,
        request: &ChatRequest,
    ) -> impl Future<Output = Result<ChatResponse, Error>> + Send;
}

/// A text embedder. Implementations: the API embedder and the local MiniLM embedder.
pub trait Embedder: Send + Sync {
    /// A short, path-safe name identifying model and provider (used in cache paths).
    fn name(&self) -> &str;
    /// Embed a batch of texts; one vector per text, in order.
    fn embed(&self, texts: &[String]) -> impl Future<Output = Result<Embeddings, Error>> + Send;
}

impl<M: ChatModel> ChatModel for std::sync::Arc<M> {
    fn chat(
        &self,
        request: &ChatRequest,
    ) -> impl Future<Output = Result<ChatResponse, Error>> + Send {
        (**self).chat(request)
    }
}

impl<E: Embedder> Embedder for std::sync::Arc<E> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn embed(&self, texts: &[String]) -> impl Future<Output = Result<Embeddings, Error>> + Send {
        (**self).embed(texts)
    }
}
