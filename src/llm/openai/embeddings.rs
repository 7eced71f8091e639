//! The embeddings client: [`OpenAiEmbedder`] sends one request per [`Embedder::embed`] call and
//! checks the reply's count and order.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use async_openai::types::embeddings::{CreateEmbeddingRequest, EmbeddingInput};

use super::response::WireEmbeddingResponse;
use super::transport::Transport;
use crate::llm::config::LlmConfig;
use crate::llm::usage::UsageMeter;
use crate::llm::{Embedder, Embeddings, Error, Usage};

/// One OpenAI-compatible embeddings endpoint; each [`Embedder::embed`] call is one HTTP
/// request with all the given texts (batching is done above it, in `EmbedClient`).
#[derive(Clone)]
pub struct OpenAiEmbedder {
    transport: Transport,
    model: String,
    name: String,
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

impl fmt::Debug for OpenAiEmbedder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiEmbedder")
            .field("base_url", &self.transport.base_url)
            .field("model", &self.model)
            .finish_non_exhaustive()
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
                .send(None, |client| async move { client.embeddings().create_byot(request).await })
                .await;
            let embeddings = result.and_then(|wire| self.transport.embeddings(wire, expected));
            match &embeddings {
                Ok(embeddings) => {
                    self.transport.meter.record_usage(None, embeddings.usage);
                    tracing::debug!(model = %self.model, texts = expected, "embeddings");
                }
                Err(error) => {
                    self.transport.meter.record_failure(None);
                    tracing::debug!(model = %self.model, error = %error, "embedding attempt failed");
                }
            }
            embeddings
        }
    }
}

impl Transport {
    pub(super) fn embeddings(
        &self,
        wire: WireEmbeddingResponse,
        expected: usize,
    ) -> Result<Embeddings, Error> {
        let WireEmbeddingResponse { mut data, usage, error } = wire;
        if data.is_empty()
            && let Some(error) = error
        {
            return Err(self.errors.embedded_error(error));
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
}
