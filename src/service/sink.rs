//! The store as the sink of the stage sequence (`ingest::pipeline`): one session of an own
//! conversation goes through the same stages as a dataset build, its outputs are gathered stage
//! by stage, and once the last stage is done they are written to the store together with the
//! session's MemGAS unit vectors, in one write: a session is in the store with all its outputs
//! or not at all. The store keeps no partial stage, so nothing is ever skipped here: sessions
//! with outputs for their content are not built at all (`add`).

use std::collections::BTreeSet;
use std::sync::Mutex;

use super::{MemoryService, blocking};
use crate::dataset::Conversation;
use crate::ingest::pipeline::{
    AskFailure, Asked, EmbedError, Embedded, KeywordRecord, RewriteRecord, StageSink, Unit,
    UnitTexts,
};
use crate::ingest::{SessionError, SessionOutputs, Stage};
use crate::llm::{ChatModel, Embedder, Usage};
use crate::memory::input::SessionRewrite;
use crate::prompts::PromptError;
use crate::retrieval::IndexOptions;
use crate::retrieval::index::turn_words;
use crate::retrieval::units::{SessionUnits, UnitVectors};

/// Session `number` of `conversation` on its way into the store of `service`.
pub(super) struct StoreSink<'s, M, E> {
    service: &'s MemoryService<M, E>,
    conversation: &'s Conversation,
    number: u32,
    /// The session's content hash when the build started: the outputs are stored only if the
    /// session still has that content.
    content_hash: String,
    /// What the stages made so far (they run one after the other; the lock only lets a shared
    /// sink record).
    made: Mutex<Made>,
}

/// The chat stages' outputs, and what they cost.
#[derive(Default)]
struct Made {
    rewrite: Option<SessionRewrite>,
    keywords: Option<KeywordRecord>,
    usage: Usage,
    chat_calls: u32,
}

impl<'s, M, E> StoreSink<'s, M, E> {
    pub(super) fn new(
        service: &'s MemoryService<M, E>,
        conversation: &'s Conversation,
        number: u32,
        content_hash: String,
    ) -> Self {
        Self { service, conversation, number, content_hash, made: Mutex::default() }
    }

    /// Chat calls made so far, re-asks included, and their tokens.
    pub(super) fn spent(&self) -> (u32, Usage) {
        let made = self.made();
        (made.chat_calls, made.usage)
    }

    fn made(&self) -> std::sync::MutexGuard<'_, Made> {
        // A panic while the lock was held cannot leave `Made` half-updated in a way that
        // matters: its fields are independent values.
        self.made.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Counts a chat stage's answer; its value, or why the session fails.
    fn answered<T>(
        &self,
        stage: Stage,
        asked: Result<Asked<T>, AskFailure>,
    ) -> Result<T, SessionError> {
        let asked = asked.map_err(|failure| SessionError::asking(stage, failure))?;
        let mut made = self.made();
        made.usage += asked.usage;
        made.chat_calls += asked.attempts;
        Ok(asked.value)
    }
}

impl<M, E> StageSink for StoreSink<'_, M, E>
where
    M: ChatModel,
    E: Embedder + Clone + 'static,
{
    type Error = SessionError;

    fn prompt_failed(&self, stage: Stage, error: PromptError) -> SessionError {
        SessionError::Stage { stage, error: error.to_string() }
    }

    async fn kept_rewrite(&self, _unit: &Unit<'_>) -> Option<SessionRewrite> {
        None
    }

    async fn put_rewrite(
        &self,
        _unit: &Unit<'_>,
        asked: Result<Asked<RewriteRecord>, AskFailure>,
    ) -> Result<Option<SessionRewrite>, SessionError> {
        let rewrite = self.answered(Stage::Rewrite, asked)?.rewrite;
        self.made().rewrite = Some(rewrite.clone());
        Ok(Some(rewrite))
    }

    async fn kept_keywords(&self, _unit: &Unit<'_>, _rewrite: &SessionRewrite) -> bool {
        false
    }

    async fn put_keywords(
        &self,
        _unit: &Unit<'_>,
        _rewrite: &SessionRewrite,
        asked: Result<Asked<KeywordRecord>, AskFailure>,
    ) -> Result<bool, SessionError> {
        let keywords = self.answered(Stage::Keywords, asked)?;
        self.made().keywords = Some(keywords);
        Ok(true)
    }

    async fn kept_embeddings(&self, _unit: &Unit<'_>, _texts: &UnitTexts) -> bool {
        false
    }

    async fn put_embeddings(
        &self,
        _unit: &Unit<'_>,
        texts: &UnitTexts,
        embedded: Result<Embedded, EmbedError>,
    ) -> Result<(), SessionError> {
        let embedded = embedded.map_err(SessionError::embedding)?;
        let (rewrite, keywords, usage, chat_calls) = {
            let mut made = self.made();
            (made.rewrite.take(), made.keywords.take(), made.usage, made.chat_calls)
        };
        let (Some(rewrite), Some(keywords)) = (rewrite, keywords) else {
            // The pipeline puts the embeddings only after a rewrite and its keywords.
            let error = "the embeddings came before the rewrite or the keywords".to_string();
            return Err(SessionError::Stage { stage: Stage::Embeddings, error });
        };
        let outputs =
            SessionOutputs::assemble(rewrite, keywords, texts, embedded, usage, chat_calls);
        self.store(outputs).await
    }
}

impl<M, E> StoreSink<'_, M, E>
where
    E: Embedder + Clone + 'static,
{
    /// Stores the session's outputs with its MemGAS unit vectors.
    async fn store(&self, outputs: SessionOutputs) -> Result<(), SessionError> {
        let number = self.number;
        let session = self
            .conversation
            .sessions
            .iter()
            .find(|session| session.index == number)
            .ok_or(SessionError::NoSuchSession(number))?;
        let conversation = &self.conversation.sample_id;
        let units = self.embed_units(conversation, SessionUnits::from_session(session)).await?;
        let store = self.service.store.clone();
        let (id, hash) = (conversation.clone(), self.content_hash.clone());
        let model = self.service.settings.model.clone();
        let saved =
            blocking(move || store.save_outputs(&id, number, &hash, &model, &outputs, &units))
                .await
                .map_err(|error| SessionError::Stage {
                    stage: Stage::Embeddings,
                    error: format!("storing the outputs: {error}"),
                })?;
        if !saved {
            tracing::warn!(session = number, "session changed while it was built; not stored");
        }
        Ok(())
    }

    /// The MemGAS unit vectors of one session (with the index's default text options), embedded
    /// in one request with the session's content words that the conversation has no vector for
    /// yet (fusion's soft word matching); the word vectors are stored here, so queries find them
    /// in the store. Sessions built side by side may embed a shared word twice; the store keeps
    /// the first.
    async fn embed_units(
        &self,
        conversation: &str,
        units: SessionUnits,
    ) -> Result<UnitVectors, SessionError> {
        let failed = |error: String| SessionError::Stage {
            stage: Stage::Embeddings,
            error: format!("MemGAS units: {error}"),
        };
        let service = self.service;
        let words: Vec<String> =
            units.turns.iter().flat_map(turn_words).collect::<BTreeSet<_>>().into_iter().collect();
        let (store, id, asked) = (service.store.clone(), conversation.to_string(), words.clone());
        let known = blocking(move || store.word_vectors(&id, &asked))
            .await
            .map_err(|error| failed(error.to_string()))?;
        let known: BTreeSet<&String> = known.iter().map(|(word, _)| word).collect();
        let missing: Vec<String> = words.iter().filter(|w| !known.contains(w)).cloned().collect();

        let options = IndexOptions::default().units;
        let mut texts = units.texts_to_embed(&options);
        let n_units = texts.len();
        texts.extend(missing.iter().cloned());
        let mut vectors =
            service.embedder.embed(&texts).await.map_err(|e| failed(e.to_string()))?.vectors;
        if vectors.len() != texts.len() {
            return Err(failed(format!("{} vectors for {} texts", vectors.len(), texts.len())));
        }
        let word_vectors = vectors.split_off(n_units);
        // Every word of the session is recorded as used by the conversation (the vectors of
        // the known ones are shared with other conversations of the embedder), so forgetting
        // another conversation keeps them.
        let used: Vec<String> = words.iter().filter(|w| known.contains(w)).cloned().collect();
        if !missing.is_empty() || !used.is_empty() {
            let pairs: Vec<(String, Vec<f32>)> = missing.into_iter().zip(word_vectors).collect();
            let (store, id) = (service.store.clone(), conversation.to_string());
            blocking(move || store.save_word_vectors(&id, &used, &pairs))
                .await
                .map_err(|error| failed(format!("storing the words: {error}")))?;
        }
        // As `retrieval::build_index` does for `run`: the embedder's vectors as they come.
        units.assemble(&options, vectors).ok_or_else(|| failed("wrong number of vectors".into()))
    }
}
