//! Assembly of the real client stack, in exactly one place: [`build_chat_model`] and
//! [`build_embedder`] turn an [`LlmConfig`] into `Retrying<RateLimited<OpenAiChat>>` (and the
//! embedding equivalent), sharing one [`UsageMeter`] and one set of
//! [`RateLimits`](super::rate_limit::RateLimits).
//!
//! The returned [`Client`] / [`EmbedClient`] are cheap to clone; every clone shares the same
//! limiters and meter, so hand one clone (or an `Arc`) to each worker.

use std::future::Future;
use std::sync::Arc;

pub use super::config::{EmbedderConfig, LlmConfig};
use super::openai::{OpenAiChat, OpenAiEmbedder};
use super::rate_limit::RateLimited;
use super::retry::Retrying;
use super::usage::{UsageMeter, UsageTotals};
use super::{ChatModel, ChatRequest, ChatResponse, Embedder, Embeddings, Error, Usage};

/// The chat stack used by the pipeline: `Retrying<RateLimited<OpenAiChat>>` plus its meter.
#[derive(Debug, Clone)]
pub struct Client {
    stack: Retrying<RateLimited<OpenAiChat>>,
    meter: Arc<UsageMeter>,
    model: String,
}

/// The embedding stack: batches of `batch_size` texts, each through
/// `Retrying<RateLimited<OpenAiEmbedder>>`.
#[derive(Debug, Clone)]
pub struct EmbedClient {
    stack: Retrying<RateLimited<OpenAiEmbedder>>,
    meter: Arc<UsageMeter>,
    batch_size: usize,
}

/// Build the chat stack for `config`, with fresh rate limiters and a fresh usage meter.
pub fn build_chat_model(config: &LlmConfig) -> Result<Client, Error> {
    let meter = Arc::new(UsageMeter::new());
    let transport = OpenAiChat::new(config, Arc::clone(&meter))?;
    let stack =
        Retrying::new(RateLimited::new(transport, Arc::new(config.rate_limits())), config.retry);
    Ok(Client { stack, meter, model: config.model.clone() })
}

/// Build the embedding stack for `config` (endpoint, key, limits, retries) and `embedder`
/// (model, batch size), with its own limiters and meter.
pub fn build_embedder(config: &LlmConfig, embedder: &EmbedderConfig) -> Result<EmbedClient, Error> {
    if embedder.batch_size == 0 {
        return Err(Error::Config("embedding batch size must be at least 1".to_owned()));
    }
    let meter = Arc::new(UsageMeter::new());
    let transport = OpenAiEmbedder::new(config, &embedder.model, Arc::clone(&meter))?;
    let stack =
        Retrying::new(RateLimited::new(transport, Arc::new(config.rate_limits())), config.retry);
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
    pub fn request(&self, messages: Vec<super::Message>) -> ChatRequest {
        ChatRequest::new(self.model.clone(), messages)
    }
}

impl ChatModel for Client {
    fn chat(
        &self,
        request: &ChatRequest,
    ) -> impl Future<Output = Result<ChatResponse, Error>> + Send {
        self.stack.chat(request)
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
}

impl Embedder for EmbedClient {
    fn name(&self) -> &str {
        self.stack.name()
    }

    async fn embed(&self, texts: &[String]) -> Result<Embeddings, Error> {
        let mut vectors = Vec::with_capacity(texts.len());
        let mut usage = Usage::default();
        for batch in texts.chunks(self.batch_size) {
            let embeddings = self.stack.embed(batch).await?;
            vectors.extend(embeddings.vectors);
            usage += embeddings.usage;
        }
        Ok(Embeddings { vectors, usage })
    }
}
