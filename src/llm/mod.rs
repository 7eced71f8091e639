//! The LLM layer: the only module that knows HTTP, async-openai, API keys or rate limits.
//!
//! Everything above this module talks to models through the provider-neutral types defined here
//! ([`ChatRequest`], [`ChatResponse`], [`ChatMessage`], [`ToolSpec`]) and the two traits
//! [`ChatModel`] and [`Embedder`]. Wire formats stay at the edge (`openai.rs`).
//!
//! The real stack, assembled only by [`build_chat_model`] / [`build_embedder`], is
//! `Retrying<RateLimited<OpenAiChat>>`: every HTTP attempt first waits on the shared `governor`
//! limiters, the retry layer sees each attempt's raw status and `Retry-After`, and one
//! [`UsageMeter`] counts every request and token. `scripted.rs` is the OpenAI-compatible
//! loopback server tests and offline demos talk to.

pub mod adaptive;
pub mod budget;
pub mod coerce;
pub mod config;
mod error;
pub mod fatal;
mod forward;
pub mod hedge;
pub mod models;
pub mod openai;
pub mod rate_limit;
pub mod retry;
#[cfg(any(test, feature = "test-support"))]
pub mod scripted;
pub mod secret;
pub mod stack;
pub mod structured;
pub mod tape;
pub mod usage;

pub use budget::{Step, TokenBudget};
pub use config::{EmbedderConfig, LlmConfig};
pub use error::Error;
pub use models::{estimate_cost_usd, resolve_model_alias};
pub use secret::Secret;
pub use stack::{Client, EmbedClient, build_chat_model, build_embedder};
pub use structured::{StructuredResponse, chat_json};
pub use usage::{UsageMeter, UsageTotals};

use std::future::Future;

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
pub struct ChatMessage {
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

impl ChatMessage {
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
    pub messages: Vec<ChatMessage>,
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
    /// The step the request belongs to, set with [`ChatRequest::for_step`]: never sent nor
    /// recorded (so not part of a recorded call's key), only counted per step by the
    /// [`UsageMeter`].
    #[serde(skip)]
    pub step: Option<Step>,
}

impl ChatRequest {
    /// A request with just a model and messages; everything else at provider defaults.
    pub fn new(model: impl Into<String>, messages: Vec<ChatMessage>) -> Self {
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
            step: None,
        }
    }

    /// Makes this a request of `step` (`None`: of no known step): its `max_tokens` is the
    /// step's budget on `model` ([`ChatModel::max_tokens`]) and the meter counts it under the
    /// step.
    pub fn for_step(&mut self, step: Option<Step>, model: &impl ChatModel) {
        self.step = step;
        self.max_tokens = step.and_then(|step| model.max_tokens(step));
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
    pub message: ChatMessage,
    /// Provider finish reason, kept as a free string (providers disagree on the set).
    pub finish_reason: Option<String>,
    /// Tokens of this call: the reply plus every failed attempt of it whose body carried a
    /// usage block (an empty answer, `finish_reason: "error"`), so retries are paid for here.
    pub usage: Usage,
    /// How the reply was obtained: attempts, retries with their reasons, hedges. Put it into
    /// traces; empty for responses that did not come through the retry layer.
    #[serde(default)]
    pub calls: CallLog,
}

impl ChatResponse {
    /// A response obtained in one attempt (no retries, no hedge recorded).
    pub fn new(message: ChatMessage, finish_reason: Option<String>, usage: Usage) -> Self {
        Self { message, finish_reason, usage, calls: CallLog::default() }
    }
}

/// What it took to get one reply: filled in by the retry and hedging layers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallLog {
    /// Attempts made by the retry layer (1: the first attempt succeeded; 0: not recorded).
    #[serde(default)]
    pub attempts: u32,
    /// Every failed attempt before the reply, in order, with the reason and the wait after it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retries: Vec<RetryRecord>,
    /// Attempts on which a second, hedging request was sent because the first was slow.
    #[serde(default)]
    pub hedges: u32,
    /// Whether the reply came from the hedging request (the first one was cancelled).
    #[serde(default)]
    pub hedge_won: bool,
}

/// One retried attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryRecord {
    /// Attempt number (1-based) that failed.
    pub attempt: u32,
    /// Why it failed (the error's message, key scrubbed like every error text).
    pub reason: String,
    /// How long the retry layer waited before the next attempt, in milliseconds.
    pub wait_ms: u64,
}

/// Embeddings of a batch of texts, in input order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Embeddings {
    /// One vector per input text.
    pub vectors: Vec<Vec<f32>>,
    /// Tokens billed (zero for local models).
    pub usage: Usage,
}

/// A chat model. Implementations: the real client stack (`openai.rs` behind retry and rate
/// limits) and whatever tests wrap around the scripted endpoint.
pub trait ChatModel: Send + Sync {
    /// Send one chat completion request.
    fn chat(
        &self,
        request: &ChatRequest,
    ) -> impl Future<Output = Result<ChatResponse, Error>> + Send;

    /// The `max_tokens` to put into a request of `step` (the configured [`TokenBudget`] for
    /// the real client, the defaults otherwise).
    fn max_tokens(&self, step: Step) -> Option<u32> {
        TokenBudget::default().get(step)
    }
}

/// A text embedder. Implementations: the API embedder and the local MiniLM embedder.
pub trait Embedder: Send + Sync {
    /// A short, path-safe name identifying model and provider (used in cache paths).
    fn name(&self) -> &str;
    /// Embed a batch of texts; one vector per text, in order.
    fn embed(&self, texts: &[String]) -> impl Future<Output = Result<Embeddings, Error>> + Send;
}
