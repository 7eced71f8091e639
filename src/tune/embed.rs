//! Embedding for a retrieval evaluation: only the vectors the requested methods read, the local
//! model loaded on the first text the cache lacks (never for lexical methods or a warm cache),
//! batches with progress, the cache written as it goes, and a stop between batches.

use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use anyhow::Context;

use super::progress::EmbedProgress;
use super::{RetrieveSettings, Timings};
use crate::dataset::Conversation;
use crate::embedding::{LOCAL_EMBEDDER_NAME, LocalEmbedder, LocalEmbedderOptions, load_local};
use crate::retrieval::cache::{Batching, TextVectorCache};
use crate::retrieval::index::{IndexNeeds, MemoryIndex, QueryWords};
use crate::retrieval::units::SessionUnits;
use crate::text::content_words;

/// Texts per embedder call: big enough to keep both cores busy, small enough for a fresh ETA.
const BATCH: usize = 256;
/// How often the cache bucket of a conversation is written while it is being embedded.
const FLUSH_EVERY: Duration = Duration::from_secs(30);

/// The embedding side of a run.
pub(super) struct Embedding<'a> {
    settings: &'a RetrieveSettings,
    needs: IndexNeeds,
    cache: TextVectorCache,
    embedder: Option<LocalEmbedder>,
    progress: EmbedProgress,
    stop: &'a AtomicBool,
}

impl<'a> Embedding<'a> {
    /// Embedding for `needs` over `conversations` (their texts counted for the progress bar).
    pub(super) fn new(
        settings: &'a RetrieveSettings,
        needs: IndexNeeds,
        conversations: &[Conversation],
        stop: &'a AtomicBool,
    ) -> Self {
        let total: usize = conversations
            .iter()
            .map(|conversation| expected_texts(settings, &needs, conversation))
            .sum();
        let progress = EmbedProgress::new(total as u64, settings.progress && total > 0);
        let cache = TextVectorCache::new(
            &settings.data_dir,
            settings.dataset.as_str(),
            LOCAL_EMBEDDER_NAME,
        );
        Self { settings, needs, cache, embedder: None, progress, stop }
    }

    /// Vectors of `texts` from the cache, embedding the missing ones; `None` when stopped.
    fn vectors(
        &mut self,
        bucket: &str,
        texts: &[String],
        timings: &mut Timings,
    ) -> anyhow::Result<Option<Vec<Vec<f32>>>> {
        let batching = Batching { size: BATCH, flush_every: FLUSH_EVERY, stop: self.stop };
        let Self { settings, cache, embedder, progress, .. } = self;
        let mut embedded_seconds = 0.0;
        let mut embedded_texts = 0;
        let outcome = cache.get_or_embed_batched(
            bucket,
            texts,
            batching,
            |batch| {
                let model = match embedder {
                    Some(model) => model,
                    None => embedder.insert(load_embedder(settings, timings)?),
                };
                let started = Instant::now();
                let vectors = model.embed_blocking(batch)?;
                let seconds = started.elapsed().as_secs_f64();
                embedded_seconds += seconds;
                embedded_texts += batch.len();
                progress.embedded(batch.len(), seconds);
                Ok(vectors)
            },
            |_| {},
        )?;
        timings.embed_seconds += embedded_seconds;
        // Counted per batch, so a stopped run reports what it embedded too.
        timings.texts_embedded += embedded_texts;
        Ok(outcome.map(|(vectors, embedded)| {
            timings.texts_cached += texts.len() - embedded;
            progress.cached(texts.len() - embedded);
            vectors
        }))
    }

    /// The question vectors of a conversation (empty vectors when no method reads vectors) and
    /// the vectors of the questions' words that `index` lacks (fusion's soft word matching;
    /// empty unless the index holds words); `None` when stopped.
    pub(super) fn questions(
        &mut self,
        conversation: &Conversation,
        index: &MemoryIndex,
        timings: &mut Timings,
    ) -> anyhow::Result<Option<(Vec<Vec<f32>>, QueryWords)>> {
        if !self.needs.vectors.any() {
            return Ok(Some((vec![Vec::new(); conversation.questions.len()], QueryWords::new())));
        }
        let questions: Vec<String> =
            conversation.questions.iter().map(|q| q.question.clone()).collect();
        let Some(vectors) = self.vectors(&conversation.sample_id, &questions, timings)? else {
            return Ok(None);
        };
        let words = missing_question_words(index, conversation);
        let Some(word_vectors) = self.vectors(&conversation.sample_id, &words, timings)? else {
            return Ok(None);
        };
        Ok(Some((vectors, words.into_iter().zip(word_vectors).collect())))
    }

    /// The index of a conversation with what the methods need; `None` when stopped.
    pub(super) fn index(
        &mut self,
        conversation: &Conversation,
        units: &[SessionUnits],
        timings: &mut Timings,
    ) -> anyhow::Result<Option<MemoryIndex>> {
        let text_options = self.settings.index.units;
        let needs = self.needs.vectors;
        let per_session: Vec<Vec<String>> =
            units.iter().map(|u| u.texts_for(&text_options, &needs)).collect();
        let all: Vec<String> = per_session.iter().flatten().cloned().collect();
        let expected = expected_texts(self.settings, &self.needs, conversation)
            - question_texts(&self.needs, conversation);
        self.progress.recount(expected, all.len());
        let Some(vectors) = self.vectors(&conversation.sample_id, &all, timings)? else {
            return Ok(None);
        };
        let vectors = self.as_stored(vectors)?;
        let index_started = Instant::now();
        let mut index = MemoryIndex::with_needs(self.settings.index, self.needs);
        let mut rest = vectors.into_iter();
        for (session_units, texts) in units.iter().zip(&per_session) {
            let session_vectors: Vec<Vec<f32>> = rest.by_ref().take(texts.len()).collect();
            let assembled = session_units
                .assemble_for(&text_options, &needs, session_vectors)
                .with_context(|| {
                    format!(
                        "{} {}: embedding count mismatch",
                        conversation.sample_id, session_units.session_id
                    )
                })?;
            index
                .add_session_vectors(session_units.clone(), assembled)
                .with_context(|| format!("indexing {}", conversation.sample_id))?;
        }
        timings.index_seconds += index_started.elapsed().as_secs_f64();
        let words = index.words_without_vectors();
        let Some(word_vectors) = self.vectors(&conversation.sample_id, &words, timings)? else {
            return Ok(None);
        };
        index.set_word_vectors(&words, self.as_stored(word_vectors)?);
        Ok(Some(index))
    }

    /// Memory vectors as ranking sees them: the store's compact form with `--stored-vectors`,
    /// else unchanged.
    fn as_stored(&self, vectors: Vec<Vec<f32>>) -> anyhow::Result<Vec<Vec<f32>>> {
        if !self.settings.stored_vectors {
            return Ok(vectors);
        }
        let compact = vectors.iter().map(|vector| crate::store::compact_round_trip(vector));
        Ok(compact.collect::<Result<_, _>>()?)
    }

    /// Remove the progress bar.
    pub(super) fn finish(&self) {
        self.progress.finish();
    }
}

/// The texts a conversation will embed, counted before LLM units are attached (they add a few).
fn expected_texts(
    settings: &RetrieveSettings,
    needs: &IndexNeeds,
    conversation: &Conversation,
) -> usize {
    let units: usize = conversation
        .sessions
        .iter()
        .map(|session| {
            SessionUnits::from_session(session)
                .texts_for(&settings.index.units, &needs.vectors)
                .len()
        })
        .sum();
    units + question_texts(needs, conversation)
}

/// Question texts plus, when the index collects words, the distinct words of the memory and
/// of the questions (each embedded once).
fn question_texts(needs: &IndexNeeds, conversation: &Conversation) -> usize {
    let questions = if needs.vectors.any() { conversation.questions.len() } else { 0 };
    if !needs.words {
        return questions;
    }
    let mut words = std::collections::BTreeSet::new();
    for session in &conversation.sessions {
        for unit in SessionUnits::from_session(session).turns {
            words.extend(content_words(unit.text_without_speaker()));
        }
    }
    for question in &conversation.questions {
        words.extend(content_words(&question.question));
    }
    questions + words.len()
}

/// The distinct content words of the questions that the memory lacks, sorted.
fn missing_question_words(index: &MemoryIndex, conversation: &Conversation) -> Vec<String> {
    let mut words: Vec<String> = conversation
        .questions
        .iter()
        .flat_map(|q| index.query_words_missing(&q.question))
        .collect();
    words.sort_unstable();
    words.dedup();
    words
}

/// The local embedder, its load time recorded in `timings`.
fn load_embedder(
    settings: &RetrieveSettings,
    timings: &mut Timings,
) -> anyhow::Result<LocalEmbedder> {
    let load_started = Instant::now();
    let options =
        LocalEmbedderOptions { threads: settings.embed_threads, ..LocalEmbedderOptions::default() };
    let embedder = load_local(settings.embed_model_dir.clone(), &settings.data_dir, options)
        .context("loading the local embedder")?;
    timings.model_load_seconds = load_started.elapsed().as_secs_f64();
    tracing::info!(seconds = timings.model_load_seconds, "loaded the local embedder");
    Ok(embedder)
}
