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
//!
//! Layout: this file holds the chat client; `embeddings.rs` the embeddings client;
//! `transport.rs` the HTTP attempt (async-openai client, status-aware service, timeout);
//! `errors.rs` the mapping of transport failures and error bodies to [`Error`];
//! `request.rs` and `response.rs` the wire shapes.

mod embeddings;
mod errors;
mod request;
mod response;
mod transport;

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use async_openai::types::chat::CreateChatCompletionRequest;

pub use embeddings::OpenAiEmbedder;
pub use request::is_strict_compatible;
use request::to_wire_request;
use response::WireChatResponse;
use transport::Transport;

use super::config::LlmConfig;
use super::usage::UsageMeter;
use super::{ChatModel, ChatRequest, ChatResponse, Error};

/// One OpenAI-compatible chat endpoint, one HTTP attempt per [`ChatModel::chat`] call.
#[derive(Clone)]
pub struct OpenAiChat {
    transport: Transport,
    /// Whether a request's `response_format` is sent (some models reject `json_schema`).
    structured_output: bool,
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

impl fmt::Debug for OpenAiChat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiChat")
            .field("base_url", &self.transport.base_url)
            .field("timeout", &self.transport.errors.timeout)
            .field("structured_output", &self.structured_output)
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
        let step = request.step;
        async move {
            let started = Instant::now();
            let result: Result<WireChatResponse, Error> = self
                .transport
                .send(step, |client| async move { client.chat().create_byot(wire).await })
                .await;
            let response = result.and_then(|wire| self.transport.chat_response(wire));
            match &response {
                Ok(response) => {
                    self.transport.meter.record_usage(step, response.usage);
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
                    self.transport.meter.record_failure(step);
                    self.transport.meter.record_usage(step, error.usage());
                    tracing::debug!(model = %model, error = %error, "chat attempt failed");
                }
            }
            response
        }
    }
}

#[cfg(test)]
mod tests;
