//! Building a [`MemoryIndex`] for a conversation from any [`Embedder`] (async), for callers
//! outside the offline evaluation, such as the answer loop's `query_memgas` tool.
//!
//! The units of every session are embedded in one batch (through an [`TextVectorCache`] when one
//! is given) and added to the index in session order; then the memory's words (fusion's soft
//! word matching) are embedded the same way.

use anyhow::Context;

use super::cache::TextVectorCache;
use super::index::{IndexOptions, MemoryIndex};
use super::units::SessionUnits;
use crate::llm::Embedder;

/// Embed `sessions` (in time order) with `embedder` and index them. `cache` is an optional
/// cache with the bucket name to use (e.g. the conversation's sample id).
pub async fn build_index<E: Embedder>(
    sessions: Vec<SessionUnits>,
    embedder: &E,
    cache: Option<(&TextVectorCache, &str)>,
    options: IndexOptions,
) -> anyhow::Result<MemoryIndex> {
    let per_session: Vec<Vec<String>> =
        sessions.iter().map(|s| s.texts_to_embed(&options.units)).collect();
    let all: Vec<String> = per_session.iter().flatten().cloned().collect();
    let vectors = embed(&all, embedder, cache).await.context("embedding session units")?;
    let mut index = MemoryIndex::new(options);
    let mut rest = vectors.into_iter();
    for (units, texts) in sessions.into_iter().zip(&per_session) {
        let session_vectors: Vec<Vec<f32>> = rest.by_ref().take(texts.len()).collect();
        let assembled = units
            .assemble(&options.units, session_vectors)
            .with_context(|| format!("session {}: embedding count mismatch", units.session_id))?;
        index.add_session(units, assembled)?;
    }
    // Fusion's soft word matching: the memory's words, embedded like the units.
    let words = index.words_without_vectors();
    if !words.is_empty() {
        let vectors = embed(&words, embedder, cache).await.context("embedding memory words")?;
        index.set_word_vectors(&words, vectors);
    }
    Ok(index)
}

/// One vector per text, through the cache when there is one.
async fn embed<E: Embedder>(
    texts: &[String],
    embedder: &E,
    cache: Option<(&TextVectorCache, &str)>,
) -> anyhow::Result<Vec<Vec<f32>>> {
    let vectors = match cache {
        Some((cache, bucket)) => cache.get_or_embed_with(bucket, texts, embedder).await?.0,
        None => embedder.embed(texts).await?.vectors,
    };
    anyhow::ensure!(
        vectors.len() == texts.len(),
        "embedder returned {} vectors for {} texts",
        vectors.len(),
        texts.len()
    );
    Ok(vectors)
}
