//! Assembly of the real client stack, in exactly one place: [`build_chat_model`] and
//! [`build_embedder`] turn an [`LlmConfig`] into
//! `Latched<Retrying<RateLimited<Hedged<OpenAiChat>>>>` (and the embedding equivalent,
//! without hedging), sharing one [`UsageMeter`], one set of
//! [`RateLimits`](super::rate_limit::RateLimits) and one fatal-error latch.
//!
//! Order matters: the latch sees final errors only; every retry waits for rate-limit permits
//! and a concurrency slot again; hedging sits below the limiter so that its deadline runs from
//! when the request is sent, not from when it started waiting for a slot.
//!
//! The returned [`Client`] / [`EmbedClient`] are cheap to clone; every clone shares the same
//! limiters, meter and latch, so hand one clone (or an `Arc`) to each worker. The meter counts
//! at every level what that level knows (see `usage`): attempts and tokens in the transport,
//! hedges and retries in their layers, and the calls that failed here, at the top.

use std::sync::Arc;

use super::budget::{Step, TokenBudget};
pub use super::config::{EmbedderConfig, LlmConfig};
use super::fatal::Latched;
use super::hedge::Hedged;
use super::openai::{OpenAiChat, OpenAiEmbedder};
use super::rate_limit::{RateLimited, RateLimits};
use super::retry::Retrying;
use super::usage::{UsageMeter, UsageTotals};
use super::{ChatModel, ChatRequest, ChatResponse, Embedder, Embeddings, Error, Usage};

/// The chat stack used by the pipeline (see the module docs) plus its meter and limits.
#[derive(Debug, Clone)]
pub struct Client {
    stack: Latched<Retrying<RateLimited<Hedged<OpenAiChat>>>>,
    meter: Arc<UsageMeter>,
    limits: Arc<RateLimits>,
    budget: TokenBudget,
    model: String,
}

/// The embedding stack: batches of `batch_size` texts, each through
/// `Latched<Retrying<RateLimited<OpenAiEmbedder>>>`.
#[derive(Debug, Clone)]
pub struct EmbedClient {
    stack: Latched<Retrying<RateLimited<OpenAiEmbedder>>>,
    meter: Arc<UsageMeter>,
    batch_size: usize,
}

/// Build the chat stack for `config`, with fresh limits, a fresh usage meter and latch.
pub fn build_chat_model(config: &LlmConfig) -> Result<Client, Error> {
    let meter = Arc::new(UsageMeter::new());
    let limits = Arc::new(config.rate_limits());
    let transport = OpenAiChat::new(config, Arc::clone(&meter))?;
    let hedged = Hedged::new(
        transport,
        config.hedge,
        config.timeout,
        Some(Arc::clone(&limits)),
        Some(Arc::clone(&meter)),
    );
    let retrying = Retrying::new(RateLimited::new(hedged, Arc::clone(&limits)), config.retry)
        .with_meter(Arc::clone(&meter));
    let stack = Latched::new(retrying, &config.key_variable);
    Ok(Client { stack, meter, limits, budget: config.budget, model: config.model.clone() })
}

/// Build the embedding stack for `config` (endpoint, key, limits, retries) and `embedder`
/// (model, batch size), with its own limits, meter and latch.
pub fn build_embedder(config: &LlmConfig, embedder: &EmbedderConfig) -> Result<EmbedClient, Error> {
    if embedder.batch_size == 0 {
        return Err(Error::Config("embedding batch size must be at least 1".to_owned()));
    }
    let meter = Arc::new(UsageMeter::new());
    let transport = OpenAiEmbedder::new(config, &embedder.model, Arc::clone(&meter))?;
    let retrying =
        Retrying::new(RateLimited::new(transport, Arc::new(config.rate_limits())), config.retry)
            .with_meter(Arc::clone(&meter));
    let stack = Latched::new(retrying, &config.key_variable).with_embed_model(&embedder.model);
    Ok(EmbedClient { stack, meter, batch_size: embedder.batch_size })
}

impl Client {
    /// The configured default model id.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// Requests and tokens so far, over all clones of this client.
    pub fn usage(&self) -> UsageTotals {
        self.meter.totals()
    }

    /// The shared usage meter.
    pub fn meter(&self) -> &Arc<UsageMeter> {
        &self.meter
    }

    /// Estimated USD cost of the tokens used so far, when the model's price is known
    /// (approximate list prices, see `models.rs`).
    pub fn estimated_cost_usd(&self) -> Option<f64> {
        super::models::estimate_cost_usd(&self.model, self.usage().usage)
    }

    /// A request for the configured model.
    pub fn request(&self, messages: Vec<super::ChatMessage>) -> ChatRequest {
        ChatRequest::new(self.model.clone(), messages)
    }

    /// The current adaptive concurrency limit (`None`: no such limit configured).
    pub fn concurrency_limit(&self) -> Option<usize> {
        self.limits.concurrency().map(super::adaptive::AdaptiveLimit::limit)
    }

    /// The fatal error (refused key, unknown model) that now fails every call, if one came.
    pub fn fatal_error(&self) -> Option<Error> {
        self.stack.latch().error().cloned()
    }
}

impl ChatModel for Client {
    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, Error> {
        let result = self.stack.chat(request).await;
        if result.is_err() {
            self.meter.record_error(request.step);
        }
        result
    }

    fn max_tokens(&self, step: Step) -> Option<u32> {
        self.budget.get(step)
    }
}

impl EmbedClient {
    /// Requests and tokens so far, over all clones of this client.
    pub fn usage(&self) -> UsageTotals {
        self.meter.totals()
    }

    /// The shared usage meter.
    pub fn meter(&self) -> &Arc<UsageMeter> {
        &self.meter
    }

    /// The fatal error (refused key, unknown model) that now fails every call, if one came.
    pub fn fatal_error(&self) -> Option<Error> {
        self.stack.latch().error().cloned()
    }
}

impl Embedder for EmbedClient {
    fn name(&self) -> &str {
        self.stack.name()
    }

    async fn embed(&self, texts: &[String]) -> Result<Embeddings, Error> {
        let mut vectors = Vec::with_capacity(texts.len());
        let mut usage = Usage::default();
        for batch in texts.chunks(self.batch_size) {
            let embeddings = self.stack.embed(batch).await.inspect_err(|_| {
                self.meter.record_error(None);
            })?;
            vectors.extend(embeddings.vectors);
            usage += embeddings.usage;
        }
        Ok(Embeddings { vectors, usage })
    }
}
