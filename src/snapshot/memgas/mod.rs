//! What the MemGAS tool needs of a snapshot: the conversation's index and the embedder its
//! queries must be embedded with ([`MemgasMemory`]), either ready or loaded on first use, and
//! [`QueryEmbedder`], the object-safe query side of an [`Embedder`].

use std::sync::Arc;

use futures::future::BoxFuture;

use crate::llm::Embedder;
use crate::retrieval::MemoryIndex;

/// A conversation's MemGAS index with the embedder it was built with (queries must be embedded
/// by the same model). Either ready, or loaded on the first [`MemgasMemory::get`] from a
/// [`MemgasSource`] (concurrent first calls load once; a failed load is remembered, not
/// retried). Cheap to clone: clones share the index.
#[derive(Clone)]
pub struct MemgasMemory {
    cell: Arc<tokio::sync::OnceCell<Result<LoadedMemgas, String>>>,
    source: Option<Arc<dyn MemgasSource>>,
}

/// A loaded MemGAS index and its query embedder.
#[derive(Clone)]
pub struct LoadedMemgas {
    /// The index.
    pub index: Arc<MemoryIndex>,
    /// The index's embedder, for the tool's query texts.
    pub embedder: Arc<dyn QueryEmbedder>,
}

/// Loads a conversation's MemGAS index when it is first needed.
pub trait MemgasSource: Send + Sync {
    /// The index and its query embedder.
    fn load(&self) -> BoxFuture<'_, anyhow::Result<LoadedMemgas>>;
}

impl MemgasMemory {
    /// Pairs a built index with its embedder.
    pub fn new(index: MemoryIndex, embedder: impl Embedder + 'static) -> Self {
        Self::ready(LoadedMemgas { index: Arc::new(index), embedder: Arc::new(embedder) })
    }

    /// An index that is already loaded (e.g. shared with a cache, not copied).
    pub fn ready(loaded: LoadedMemgas) -> Self {
        Self { cell: Arc::new(tokio::sync::OnceCell::new_with(Some(Ok(loaded)))), source: None }
    }

    /// An index loaded from `source` on the first [`MemgasMemory::get`].
    pub fn lazy(source: impl MemgasSource + 'static) -> Self {
        Self { cell: Arc::new(tokio::sync::OnceCell::new()), source: Some(Arc::new(source)) }
    }

    /// Whether the index is loaded (or its load has failed).
    pub fn is_loaded(&self) -> bool {
        self.cell.initialized()
    }

    /// The index and its embedder, loading them first if needed; `Err` says why they are
    /// unavailable.
    pub async fn get(&self) -> Result<&LoadedMemgas, String> {
        let loaded = self
            .cell
            .get_or_init(|| async {
                let Some(source) = &self.source else {
                    return Err("no MemGAS index".to_string());
                };
                source.load().await.map_err(|error| {
                    let message = format!("{error:#}");
                    tracing::warn!(error = %message, "the MemGAS index could not be loaded");
                    message
                })
            })
            .await;
        loaded.as_ref().map_err(String::clone)
    }
}

impl std::fmt::Debug for MemgasMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.cell.get() {
            Some(Ok(loaded)) => f
                .debug_struct("MemgasMemory")
                .field("sessions", &loaded.index.n_sessions())
                .field("turns", &loaded.index.n_turns())
                .finish(),
            Some(Err(error)) => f.debug_struct("MemgasMemory").field("error", error).finish(),
            None => f.write_str("MemgasMemory(not loaded)"),
        }
    }
}

/// A query's vector and its words' vectors, in order.
pub type QueryAndWords = (Vec<f32>, Vec<Vec<f32>>);

/// Embeds one query text. Implemented for every [`Embedder`]; it exists so that a
/// [`Snapshot`](crate::snapshot::Snapshot) can carry its MemGAS embedder without a type parameter (`Embedder` itself
/// returns `impl Future` and cannot be a trait object).
pub trait QueryEmbedder: Send + Sync {
    /// The unit-length embedding of `text`.
    fn embed_query<'a>(
        &'a self,
        text: &'a str,
    ) -> BoxFuture<'a, Result<Vec<f32>, crate::llm::Error>>;

    /// One embedding per word, in order (the query's words that the memory lacks, for
    /// fusion's soft word matching); nothing is sent for no words.
    fn embed_words<'a>(
        &'a self,
        words: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<Vec<f32>>, crate::llm::Error>>;

    /// [`QueryEmbedder::embed_query`] and [`QueryEmbedder::embed_words`] in one request: the
    /// query text first, then its words, so a tool call or search waits for one embedding
    /// round trip, not two.
    fn embed_query_and_words<'a>(
        &'a self,
        text: &'a str,
        words: &'a [String],
    ) -> BoxFuture<'a, Result<QueryAndWords, crate::llm::Error>>;
}

impl<E: Embedder> QueryEmbedder for E {
    fn embed_words<'a>(
        &'a self,
        words: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<Vec<f32>>, crate::llm::Error>> {
        Box::pin(async move {
            if words.is_empty() {
                return Ok(Vec::new());
            }
            Ok(unit_vectors(self, words, "words").await?.0)
        })
    }

    fn embed_query_and_words<'a>(
        &'a self,
        text: &'a str,
        words: &'a [String],
    ) -> BoxFuture<'a, Result<QueryAndWords, crate::llm::Error>> {
        Box::pin(async move {
            let texts: Vec<String> =
                std::iter::once(text.to_string()).chain(words.to_vec()).collect();
            let mut vectors = unit_vectors(self, &texts, "texts").await?.0.into_iter();
            let query = vectors.next().ok_or_else(|| crate::llm::Error::Decode {
                message: "the embedder returned no vector".to_string(),
            })?;
            Ok((query, vectors.collect()))
        })
    }

    fn embed_query<'a>(
        &'a self,
        text: &'a str,
    ) -> BoxFuture<'a, Result<Vec<f32>, crate::llm::Error>> {
        Box::pin(async move {
            let texts = [text.to_string()];
            let embedded = self.embed(&texts).await?;
            let vector = embedded.vectors.into_iter().next().ok_or_else(|| {
                crate::llm::Error::Decode { message: "the embedder returned no vector".to_string() }
            })?;
            Ok(unit_length(vector))
        })
    }
}

/// One unit-length vector per text and what the request was billed, or a decode error naming
/// `what` when the count is off.
pub(crate) async fn unit_vectors<E: Embedder>(
    embedder: &E,
    texts: &[String],
    what: &str,
) -> Result<(Vec<Vec<f32>>, crate::llm::Usage), crate::llm::Error> {
    let embedded = embedder.embed(texts).await?;
    if embedded.vectors.len() != texts.len() {
        return Err(crate::llm::Error::Decode {
            message: format!(
                "the embedder returned {} vectors for {} {what}",
                embedded.vectors.len(),
                texts.len()
            ),
        });
    }
    Ok((embedded.vectors.into_iter().map(unit_length).collect(), embedded.usage))
}

use crate::retrieval::vector::unit_length;

#[cfg(test)]
mod tests;
