//! The real transport: [`OpenAiChat`] and [`OpenAiEmbedder`] talk to any OpenAI-compatible
//! endpoint (OpenRouter, OpenAI, vLLM, Ollama, llama.cpp, the scripted test server) through
//! async-openai. Each call is exactly one HTTP attempt; retries and rate limits are decorators.
//!
//! How async-openai is used, and why:
//! - Requests are built with its typed request structs (so the wire shape is the one the
//!   crate maintains), but responses are parsed with `create_byot` into this module's lenient
//!   structs: providers send finish reasons, service tiers, integer error codes and tool calls
//!   without `type` that the crate's closed enums reject.
//! - Its built-in retry layer is replaced via `Client::with_http_service` by
//!   [`StatusAwareService`], which performs no retries and turns every non-2xx response into
//!   an error that keeps the raw status, `Retry-After` and body. The built-in layer parses 429
//!   bodies with a string `code` and gives up on OpenRouter's integer `code` (see
//!   `rust-stack.md` §1.4), and its total backoff (~0.7 s) is far too short for per-minute
//!   limits; `retry.rs` does the retrying instead.
//! - The per-attempt timeout is a `tokio::time::timeout` around the whole call (headers and
//!   body), so a stalled stream counts as a timeout.
//!
//! The API key is held as a [`Secret`]; text echoed by the server is scrubbed of it before it
//! is put into an error.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use async_openai::config::OpenAIConfig;
use async_openai::error::OpenAIError;
use async_openai::middleware::HttpRequestFactory;
use async_openai::types::chat::{
    ChatCompletionMessageToolCall, ChatCompletionMessageToolCalls, ChatCompletionNamedToolChoice,
    ChatCompletionRequestAssistantMessage, ChatCompletionRequestAssistantMessageContent,
    ChatCompletionRequestMessage, ChatCompletionRequestSystemMessage,
    ChatCompletionRequestSystemMessageContent, ChatCompletionRequestToolMessage,
    ChatCompletionRequestToolMessageContent, ChatCompletionRequestUserMessage,
    ChatCompletionRequestUserMessageContent, ChatCompletionTool, ChatCompletionToolChoiceOption,
    ChatCompletionTools, CreateChatCompletionRequest, FunctionCall, FunctionName, FunctionObject,
    ResponseFormat, ResponseFormatJsonSchema, ToolChoiceOptions,
};
use async_openai::types::embeddings::{CreateEmbeddingRequest, EmbeddingInput};
use reqwest::header::{AUTHORIZATION, HeaderName, RETRY_AFTER};
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use super::retry::{error_for_status, parse_retry_after, unusable_reason};
use super::secret::Secret;
use super::stack::LlmConfig;
use super::usage::UsageMeter;
use super::{
    ChatModel, ChatRequest, ChatResponse, Embedder, Embeddings, Error, JsonSchemaSpec, Message,
    Role, ToolCall, ToolChoice, Usage,
};

/// Longest body excerpt kept in an error message (bytes, cut at a character boundary).
const BODY_EXCERPT: usize = 2000;

/// One OpenAI-compatible chat endpoint, one HTTP attempt per [`ChatModel::chat`] call.
#[derive(Clone)]
pub struct OpenAiChat {
    transport: Transport,
    /// Whether a request's `response_format` is sent (some models reject `json_schema`).
    structured_output: bool,
}

/// One OpenAI-compatible embeddings endpoint; each [`Embedder::embed`] call is one HTTP
/// request with all the given texts (batching is done above it, in `EmbedClient`).
#[derive(Clone)]
pub struct OpenAiEmbedder {
    transport: Transport,
    model: String,
    name: String,
}

/// What chat and embeddings share: the async-openai client, the key (for scrubbing), the
/// per-attempt timeout and the run's usage meter.
#[derive(Clone)]
struct Transport {
    client: async_openai::Client<OpenAIConfig>,
    base_url: String,
    api_key: Secret,
    timeout: Duration,
    meter: Arc<UsageMeter>,
}

impl OpenAiChat {
    /// A chat client for `config.base_url`, counting every attempt in `meter`.
    pub fn new(config: &LlmConfig, meter: Arc<UsageMeter>) -> Result<Self, Error> {
        Ok(Self {
            transport: Transport::new(config, meter)?,
            structured_output: config.structured_output,
        })
    }

    /// The meter this client records into.
    pub fn meter(&self) -> &Arc<UsageMeter> {
        &self.transport.meter
    }

    /// The request as async-openai's typed request (what goes on the wire).
    pub fn wire_request(&self, request: &ChatRequest) -> CreateChatCompletionRequest {
        to_wire_request(request, self.structured_output)
    }
}

impl OpenAiEmbedder {
    /// An embedder for `model` at `config.base_url`, counting every attempt in `meter`.
    pub fn new(config: &LlmConfig, model: &str, meter: Arc<UsageMeter>) -> Result<Self, Error> {
        let name = format!("api-{}", crate::fsutil::safe_name(model, '-'));
        Ok(Self { transport: Transport::new(config, meter)?, model: model.to_owned(), name })
    }

    /// The meter this embedder records into.
    pub fn meter(&self) -> &Arc<UsageMeter> {
        &self.transport.meter
    }
}

impl fmt::Debug for OpenAiChat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiChat")
            .field("base_url", &self.transport.base_url)
            .field("timeout", &self.transport.timeout)
            .field("structured_output", &self.structured_output)
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for OpenAiEmbedder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiEmbedder")
            .field("base_url", &self.transport.base_url)
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

impl ChatModel for OpenAiChat {
    fn chat(
        &self,
        request: &ChatRequest,
    ) -> impl Future<Output = Result<ChatResponse, Error>> + Send {
        let wire = to_wire_request(request, self.structured_output);
        let model = request.model.clone();
        async move {
            let started = Instant::now();
            let result: Result<WireChatResponse, Error> = self
                .transport
                .send(|client| async move { client.chat().create_byot(wire).await })
                .await;
            let response = result.and_then(|wire| self.transport.chat_response(wire));
            match &response {
                Ok(response) => {
                    self.transport.meter.record_usage(response.usage);
                    tracing::debug!(
                        model = %model,
                        prompt_tokens = response.usage.prompt_tokens,
                        completion_tokens = response.usage.completion_tokens,
                        tool_calls = response.message.tool_calls.len(),
                        finish_reason = response.finish_reason.as_deref().unwrap_or(""),
                        elapsed_ms = started.elapsed().as_millis() as u64,
                        "chat completion"
                    );
                    tracing::trace!(
                        content = response.message.content.as_deref().unwrap_or(""),
                        "chat response"
                    );
                }
                Err(error) => {
                    self.transport.meter.record_failure();
                    self.transport.meter.record_usage(error.usage());
                    tracing::debug!(model = %model, error = %error, "chat attempt failed");
                }
            }
            response
        }
    }
}

impl Embedder for OpenAiEmbedder {
    fn name(&self) -> &str {
        &self.name
    }

    fn embed(&self, texts: &[String]) -> impl Future<Output = Result<Embeddings, Error>> + Send {
        let request = CreateEmbeddingRequest {
            model: self.model.clone(),
            input: EmbeddingInput::StringArray(texts.to_vec()),
            ..CreateEmbeddingRequest::default()
        };
        let expected = texts.len();
        async move {
            if expected == 0 {
                return Ok(Embeddings { vectors: Vec::new(), usage: Usage::default() });
            }
            let result: Result<WireEmbeddingResponse, Error> = self
                .transport
                .send(|client| async move { client.embeddings().create_byot(request).await })
                .await;
            let embeddings = result.and_then(|wire| self.transport.embeddings(wire, expected));
            match &embeddings {
                Ok(embeddings) => {
                    self.transport.meter.record_usage(embeddings.usage);
                    tracing::debug!(model = %self.model, texts = expected, "embeddings");
                }
                Err(error) => {
                    self.transport.meter.record_failure();
                    tracing::debug!(model = %self.model, error = %error, "embedding attempt failed");
                }
            }
            embeddings
        }
    }
}

impl Transport {
    fn new(config: &LlmConfig, meter: Arc<UsageMeter>) -> Result<Self, Error> {
        let base_url = config.base_url.trim_end_matches('/').to_owned();
        if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
            return Err(Error::Config(format!(
                "base url must start with http:// or https://: {base_url}"
            )));
        }
        let mut openai_config = OpenAIConfig::new()
            .with_api_base(base_url.clone())
            .with_api_key(config.api_key.expose());
        for (name, value) in &config.extra_headers {
            let header = HeaderName::from_bytes(name.as_bytes())
                .map_err(|error| Error::Config(format!("invalid header name `{name}`: {error}")))?;
            openai_config = openai_config.with_header(header, value.as_str()).map_err(|error| {
                Error::Config(format!("invalid value for header `{name}`: {error}"))
            })?;
        }
        let http = reqwest::Client::builder()
            .connect_timeout(config.timeout.min(Duration::from_secs(30)))
            .build()
            .map_err(|error| Error::Config(format!("cannot build the http client: {error}")))?;
        let client = async_openai::Client::with_config(openai_config)
            .with_http_service(StatusAwareService { http });
        Ok(Self {
            client,
            base_url,
            api_key: config.api_key.clone(),
            timeout: config.timeout,
            meter,
        })
    }

    /// Run one request under the per-attempt timeout, mapping every failure to a typed error.
    async fn send<T, F, Fut>(&self, call: F) -> Result<T, Error>
    where
        F: FnOnce(async_openai::Client<OpenAIConfig>) -> Fut,
        Fut: Future<Output = Result<T, OpenAIError>>,
    {
        self.meter.record_request();
        match tokio::time::timeout(self.timeout, call(self.client.clone())).await {
            Err(_elapsed) => Err(Error::Timeout { attempts: 1, timeout: self.timeout }),
            Ok(Err(error)) => Err(self.map_error(error)),
            Ok(Ok(value)) => Ok(value),
        }
    }

    fn map_error(&self, error: OpenAIError) -> Error {
        match error {
            OpenAIError::Boxed(boxed) => match boxed.downcast::<HttpStatusError>() {
                Ok(status) => {
                    error_for_status(status.status, status.retry_after, self.excerpt(&status.body))
                }
                Err(other) => Error::Connection {
                    attempts: 1,
                    message: self.api_key.scrub(&error_chain(&*other)),
                },
            },
            OpenAIError::Reqwest(error) if error.is_timeout() => {
                Error::Timeout { attempts: 1, timeout: self.timeout }
            }
            OpenAIError::Reqwest(error) => {
                Error::Connection { attempts: 1, message: self.api_key.scrub(&error_chain(&error)) }
            }
            OpenAIError::JSONDeserialize(error, body) => {
                Error::Decode { message: format!("{error}: {}", self.excerpt(&body)) }
            }
            OpenAIError::ApiError(api) => Error::Api {
                status: api.status_code.as_u16(),
                attempts: 1,
                body: self.excerpt(&api.api_error.to_string()),
                retry_after: None,
            },
            other => Error::Config(self.api_key.scrub(&other.to_string())),
        }
    }

    /// A scrubbed, bounded excerpt of server text.
    fn excerpt(&self, text: &str) -> String {
        let scrubbed = self.api_key.scrub(text.trim());
        if scrubbed.len() <= BODY_EXCERPT {
            return scrubbed;
        }
        let mut end = BODY_EXCERPT;
        while !scrubbed.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}…", &scrubbed[..end])
    }

    fn chat_response(&self, wire: WireChatResponse) -> Result<ChatResponse, Error> {
        let WireChatResponse { choices, usage, error } = wire;
        let usage = usage.map(Usage::from).unwrap_or_default();
        let Some(choice) = choices.into_iter().next() else {
            return Err(match error {
                Some(error) => self.embedded_error(error),
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
        let message = Message {
            role: Role::Assistant,
            content: choice.message.content.map(WireContent::into_text),
            tool_calls,
            tool_call_id: None,
        };
        let response = ChatResponse::new(message, choice.finish_reason, usage);
        match unusable_reason(&response) {
            Some(reason) => Err(Error::BadReply { reason, attempts: 1, usage }),
            None => Ok(response),
        }
    }

    fn embeddings(
        &self,
        wire: WireEmbeddingResponse,
        expected: usize,
    ) -> Result<Embeddings, Error> {
        let WireEmbeddingResponse { mut data, usage, error } = wire;
        if data.is_empty()
            && let Some(error) = error
        {
            return Err(self.embedded_error(error));
        }
        if data.len() != expected {
            return Err(Error::Decode {
                message: format!("expected {expected} embeddings, got {}", data.len()),
            });
        }
        if data.iter().all(|item| item.index.is_some()) {
            data.sort_by_key(|item| item.index);
        }
        let vectors = data.into_iter().map(|item| item.embedding).collect();
        Ok(Embeddings { vectors, usage: usage.map(Usage::from).unwrap_or_default() })
    }

    /// An error object inside a 2xx body (OpenRouter does this when the upstream provider
    /// fails mid-request). A numeric `code` that is an HTTP status is used as such; anything
    /// else counts as a 502 from the upstream, which is retryable.
    fn embedded_error(&self, error: WireError) -> Error {
        let status = match &error.code {
            Some(Value::Number(number)) => number.as_u64(),
            Some(Value::String(text)) => text.parse().ok(),
            _ => None,
        }
        .and_then(|code| u16::try_from(code).ok())
        .filter(|code| (400..600).contains(code))
        .unwrap_or(502);
        let body = serde_json::json!({ "error": { "message": error.message, "code": error.code } })
            .to_string();
        error_for_status(status, None, self.excerpt(&body))
    }
}

/// The HTTP service installed into async-openai instead of its retrying default: sends each
/// request once and turns a non-2xx response into an [`HttpStatusError`] (boxed into
/// `OpenAIError::Boxed`) carrying the raw status, `Retry-After` and body.
#[derive(Clone, Debug)]
struct StatusAwareService {
    http: reqwest::Client,
}

/// A non-success response, captured before async-openai tries to parse its body.
#[derive(Debug, thiserror::Error)]
#[error("endpoint returned status {status}")]
struct HttpStatusError {
    status: u16,
    retry_after: Option<Duration>,
    body: String,
}

type ResponseFuture = Pin<Box<dyn Future<Output = Result<reqwest::Response, OpenAIError>> + Send>>;

impl tower::Service<HttpRequestFactory> for StatusAwareService {
    type Response = reqwest::Response;
    type Error = OpenAIError;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, _context: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, factory: HttpRequestFactory) -> Self::Future {
        let http = self.http.clone();
        Box::pin(async move {
            let mut request = factory.build().await?;
            // Marked sensitive so that no Debug rendering of the request (ours, reqwest's or
            // hyper's) can print the key.
            if let Some(value) = request.headers_mut().get_mut(AUTHORIZATION) {
                value.set_sensitive(true);
            }
            let response = http.execute(request).await.map_err(OpenAIError::Reqwest)?;
            let status = response.status();
            if status.is_success() {
                return Ok(response);
            }
            let retry_after = response
                .headers()
                .get(RETRY_AFTER)
                .and_then(|value| value.to_str().ok())
                .and_then(parse_retry_after);
            let body = response.text().await.unwrap_or_default();
            Err(OpenAIError::Boxed(Box::new(HttpStatusError {
                status: status.as_u16(),
                retry_after,
                body,
            })))
        })
    }
}

/// Our request in async-openai's typed form. `response_format` is only sent when
/// `structured_output` is on.
#[allow(deprecated)] // `max_tokens` and `seed`: deprecated by OpenAI, still what compatible servers read.
fn to_wire_request(request: &ChatRequest, structured_output: bool) -> CreateChatCompletionRequest {
    let tools = (!request.tools.is_empty()).then(|| {
        request
            .tools
            .iter()
            .map(|tool| {
                ChatCompletionTools::Function(ChatCompletionTool {
                    function: FunctionObject {
                        name: tool.name.clone(),
                        description: Some(tool.description.clone()),
                        parameters: Some(tool.parameters.clone()),
                        strict: None,
                    },
                })
            })
            .collect()
    });
    let tool_choice = request.tool_choice.as_ref().map(|choice| match choice {
        ToolChoice::Auto => ChatCompletionToolChoiceOption::Mode(ToolChoiceOptions::Auto),
        ToolChoice::None => ChatCompletionToolChoiceOption::Mode(ToolChoiceOptions::None),
        ToolChoice::Required => ChatCompletionToolChoiceOption::Mode(ToolChoiceOptions::Required),
        ToolChoice::Function(name) => {
            ChatCompletionToolChoiceOption::Function(ChatCompletionNamedToolChoice {
                function: FunctionName { name: name.clone() },
            })
        }
    });
    let response_format =
        request.response_format.as_ref().filter(|_| structured_output).map(response_format);
    CreateChatCompletionRequest {
        model: request.model.clone(),
        messages: request.messages.iter().map(wire_message).collect(),
        tools,
        tool_choice,
        parallel_tool_calls: request.parallel_tool_calls,
        temperature: request.temperature,
        max_tokens: request.max_tokens,
        seed: request.seed,
        response_format,
        ..CreateChatCompletionRequest::default()
    }
}

#[allow(deprecated)] // `function_call` is filled by `Default` only.
fn wire_message(message: &Message) -> ChatCompletionRequestMessage {
    let text = message.content.clone().unwrap_or_default();
    match message.role {
        Role::System => ChatCompletionRequestMessage::System(ChatCompletionRequestSystemMessage {
            content: ChatCompletionRequestSystemMessageContent::Text(text),
            name: None,
        }),
        Role::User => ChatCompletionRequestMessage::User(ChatCompletionRequestUserMessage {
            content: ChatCompletionRequestUserMessageContent::Text(text),
            name: None,
        }),
        Role::Assistant => {
            ChatCompletionRequestMessage::Assistant(ChatCompletionRequestAssistantMessage {
                content: message
                    .content
                    .clone()
                    .map(ChatCompletionRequestAssistantMessageContent::Text),
                tool_calls: (!message.tool_calls.is_empty()).then(|| {
                    message
                        .tool_calls
                        .iter()
                        .map(|call| {
                            ChatCompletionMessageToolCalls::Function(
                                ChatCompletionMessageToolCall {
                                    id: call.id.clone(),
                                    function: FunctionCall {
                                        name: call.name.clone(),
                                        arguments: call.arguments.clone(),
                                    },
                                },
                            )
                        })
                        .collect()
                }),
                ..ChatCompletionRequestAssistantMessage::default()
            })
        }
        Role::Tool => ChatCompletionRequestMessage::Tool(ChatCompletionRequestToolMessage {
            content: ChatCompletionRequestToolMessageContent::Text(text),
            tool_call_id: message.tool_call_id.clone().unwrap_or_default(),
        }),
    }
}

/// `response_format: {type: json_schema, ...}`. `strict` is requested only when the schema is
/// within OpenAI's strict subset (every object closed and all its properties required);
/// otherwise strict mode would make the provider reject the request.
fn response_format(spec: &JsonSchemaSpec) -> ResponseFormat {
    let name: String = spec
        .name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' })
        .take(64)
        .collect();
    ResponseFormat::JsonSchema {
        json_schema: ResponseFormatJsonSchema {
            description: None,
            name,
            schema: spec.schema.clone(),
            strict: Some(is_strict_compatible(&spec.schema)),
        },
    }
}

/// Whether every object schema inside `schema` sets `additionalProperties: false` and requires
/// all of its properties.
pub fn is_strict_compatible(schema: &Value) -> bool {
    match schema {
        Value::Object(map) => {
            let is_object = map.get("type").is_some_and(|kind| {
                kind == "object"
                    || kind.as_array().is_some_and(|kinds| kinds.iter().any(|k| k == "object"))
            }) || map.contains_key("properties");
            if is_object {
                let closed = map.get("additionalProperties") == Some(&Value::Bool(false));
                let properties = map.get("properties").and_then(Value::as_object);
                let required: Vec<&str> = map
                    .get("required")
                    .and_then(Value::as_array)
                    .map(|names| names.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                let all_required = properties
                    .is_none_or(|props| props.keys().all(|key| required.contains(&key.as_str())));
                if !closed || !all_required {
                    return false;
                }
            }
            map.values().all(is_strict_compatible)
        }
        Value::Array(items) => items.iter().all(is_strict_compatible),
        _ => true,
    }
}

/// An error and its sources on one line (reqwest puts the interesting part, e.g. "connection
/// refused", in the source chain).
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
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
struct WireChatResponse {
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

/// Message content: a string, or a list of parts whose texts are joined.
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
struct WireUsage {
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

/// An error object; `code` may be an integer (OpenRouter) or a string (OpenAI).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireError {
    message: Option<String>,
    code: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireEmbeddingResponse {
    #[serde(deserialize_with = "null_as_default")]
    data: Vec<WireEmbedding>,
    usage: Option<WireUsage>,
    error: Option<WireError>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireEmbedding {
    index: Option<usize>,
    #[serde(deserialize_with = "null_as_default")]
    embedding: Vec<f32>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::{ToolSpec, stack::LlmConfig};
    use super::*;

    fn transport() -> Transport {
        Transport::new(
            &LlmConfig::new("http://127.0.0.1:9/v1", Secret::new("sk-unit"), "m"),
            Arc::default(),
        )
        .unwrap()
    }

    #[test]
    fn lenient_response_parsing() {
        let body = json!({
            "id": "x", "provider": "Somebody", "service_tier": "on_demand",
            "choices": [{
                "finish_reason": "tool_calls", "native_finish_reason": "weird",
                "message": {"role": "assistant", "content": null, "refusal": null, "reasoning": "hmm",
                    "tool_calls": [
                        {"id": "c1", "function": {"name": "lookup", "arguments": "{\"q\":1}"}, "index": 0},
                        {"function": {"name": "other", "arguments": {"a": 2}}}
                    ]}
            }],
            "usage": {"prompt_tokens": 12, "completion_tokens": null, "cost": 0.1}
        });
        let wire: WireChatResponse = serde_json::from_value(body).unwrap();
        let response = transport().chat_response(wire).unwrap();
        assert_eq!(response.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(response.message.content, None);
        assert_eq!(response.usage, Usage { prompt_tokens: 12, completion_tokens: 0 });
        assert_eq!(
            response.message.tool_calls[0],
            ToolCall { id: "c1".into(), name: "lookup".into(), arguments: "{\"q\":1}".into() }
        );
        assert_eq!(response.message.tool_calls[1].id, "call_1");
        assert_eq!(response.message.tool_calls[1].arguments, "{\"a\":2}");
    }

    #[test]
    fn unusable_replies_are_bad_replies_with_their_usage() {
        let usage = json!({"prompt_tokens": 9, "completion_tokens": 2});
        for body in [
            json!({"choices": [], "usage": usage}),
            json!({"choices": [{"finish_reason": "error", "message": {"content": "partial"}}], "usage": usage}),
            json!({"choices": [{"finish_reason": "stop", "message": {"content": "  \n"}}], "usage": usage}),
            json!({"choices": [{"finish_reason": "length", "message": {"content": null}}], "usage": usage}),
        ] {
            let wire: WireChatResponse = serde_json::from_value(body.clone()).unwrap();
            let error = transport().chat_response(wire).unwrap_err();
            assert!(
                matches!(error, Error::BadReply { attempts: 1, usage: Usage { prompt_tokens: 9, completion_tokens: 2 }, .. }),
                "{body}: {error:?}"
            );
        }
    }

    #[test]
    fn content_parts_are_joined() {
        let wire: WireChatResponse = serde_json::from_value(json!({
            "choices": [{"message": {"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}}]
        }))
        .unwrap();
        assert_eq!(transport().chat_response(wire).unwrap().message.content.as_deref(), Some("ab"));
    }

    #[test]
    fn error_inside_a_200_body_keeps_its_integer_status() {
        let wire: WireChatResponse =
            serde_json::from_value(json!({"error": {"message": "slow down", "code": 429}}))
                .unwrap();
        assert!(matches!(transport().chat_response(wire), Err(Error::RateLimited { .. })));
        let wire: WireChatResponse = serde_json::from_value(
            json!({"error": {"message": "upstream", "code": "provider_down"}}),
        )
        .unwrap();
        assert!(matches!(transport().chat_response(wire), Err(Error::Api { status: 502, .. })));
    }

    #[test]
    fn request_shape_with_tools_and_response_format() {
        let mut request = ChatRequest::new("m", vec![Message::system("s"), Message::user("u")]);
        request.tools = vec![ToolSpec {
            name: "f".into(),
            description: "d".into(),
            parameters: json!({"type": "object"}),
        }];
        request.tool_choice = Some(ToolChoice::Function("f".into()));
        request.response_format = Some(JsonSchemaSpec {
            name: "answer schema".into(),
            schema: json!({"type": "object"}),
        });
        let on = serde_json::to_value(to_wire_request(&request, true)).unwrap();
        assert_eq!(on["tool_choice"], json!({"type": "function", "function": {"name": "f"}}));
        assert_eq!(on["tools"][0]["type"], "function");
        assert_eq!(on["response_format"]["type"], "json_schema");
        assert_eq!(on["response_format"]["json_schema"]["name"], "answer_schema");
        assert_eq!(on["response_format"]["json_schema"]["strict"], false);
        let off = serde_json::to_value(to_wire_request(&request, false)).unwrap();
        assert!(off.get("response_format").is_none());
    }

    #[test]
    fn strict_subset_detection() {
        assert!(is_strict_compatible(&json!({
            "type": "object", "additionalProperties": false, "required": ["a"],
            "properties": {"a": {"type": "array", "items": {"type": "object", "additionalProperties": false,
                "required": ["b"], "properties": {"b": {"type": "string"}}}}}
        })));
        assert!(!is_strict_compatible(
            &json!({"type": "object", "properties": {"a": {"type": "string"}}})
        ));
        assert!(!is_strict_compatible(&json!({
            "type": "object", "additionalProperties": false, "required": [], "properties": {"a": {}}
        })));
    }

    #[test]
    fn bodies_are_scrubbed_and_bounded() {
        let transport = transport();
        assert_eq!(transport.excerpt("bad key sk-unit"), "bad key ***");
        let long = "é".repeat(3000);
        assert!(transport.excerpt(&long).len() <= BODY_EXCERPT + "…".len());
    }

    #[test]
    fn bad_base_url_is_a_config_error() {
        let config = LlmConfig::new("localhost:8000", Secret::new("k"), "m");
        assert!(matches!(OpenAiChat::new(&config, Arc::default()), Err(Error::Config(_))));
    }
}
