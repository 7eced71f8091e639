//! Configuration of the LLM layer: [`LlmConfig`] (one OpenAI-compatible endpoint: URL, key,
//! limits, retries) and [`EmbedderConfig`] (what is specific to the embeddings endpoint).
//!
//! Both the transport (`openai`) and the stack assembly (`stack`) read these types; they live
//! here so that neither of those modules imports the other's.

use std::num::NonZeroU32;
use std::time::Duration;

use super::rate_limit::RateLimits;
use super::retry::RetryPolicy;
use super::secret::Secret;

/// Everything needed to talk to one OpenAI-compatible endpoint. `Debug` never shows the key.
#[derive(Debug, Clone)]
pub struct LlmConfig {
    /// API base including the version path, e.g. `https://openrouter.ai/api/v1`.
    pub base_url: String,
    /// Bearer token.
    pub api_key: Secret,
    /// Default chat model id (aliases already resolved); callers put it into requests.
    pub model: String,
    /// Requests per minute over all workers (`None`: unlimited).
    pub requests_per_minute: Option<NonZeroU32>,
    /// Estimated prompt tokens per minute over all workers (`None`: unlimited).
    pub tokens_per_minute: Option<NonZeroU32>,
    /// How much of the per-minute budget may be spent at once (see [`RateLimits::new`]).
    pub burst_window: Duration,
    /// Limit on each HTTP attempt (connect, send, wait, read).
    pub timeout: Duration,
    /// Retry policy for 429/5xx/timeouts/connection errors.
    pub retry: RetryPolicy,
    /// Send `response_format: json_schema` for structured calls (off by default: not every
    /// model behind a compatible API supports it; the output is validated locally anyway).
    pub structured_output: bool,
    /// Extra HTTP headers for every request (e.g. OpenRouter's `HTTP-Referer`, `X-Title`).
    pub extra_headers: Vec<(String, String)>,
}

impl LlmConfig {
    /// A configuration with the given endpoint, key and model and default limits: no client
    /// rate limits, 120 s per attempt, [`RetryPolicy::default`], structured output off.
    pub fn new(base_url: impl Into<String>, api_key: Secret, model: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            api_key,
            model: model.into(),
            requests_per_minute: None,
            tokens_per_minute: None,
            burst_window: Duration::from_secs(10),
            timeout: Duration::from_secs(120),
            retry: RetryPolicy::default(),
            structured_output: false,
            extra_headers: Vec::new(),
        }
    }

    /// The shared limiters this configuration asks for.
    pub fn rate_limits(&self) -> RateLimits {
        RateLimits::new(self.requests_per_minute, self.tokens_per_minute, self.burst_window)
    }
}

/// What is specific to the embedding endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbedderConfig {
    /// Embedding model id, e.g. `openai/text-embedding-3-small`.
    pub model: String,
    /// Texts per HTTP request.
    pub batch_size: usize,
}
