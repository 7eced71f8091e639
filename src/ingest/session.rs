//! What the stages make of one session of an own conversation ([`SessionOutputs`], which the
//! store keeps), and why a session has none ([`SessionError`]). The store builds a session
//! through the one stage sequence (`pipeline`) with itself as the sink (the service's store
//! sink), without the file caches: it keeps every session's outputs in its own database and so
//! builds only sessions it has no outputs for.

use crate::ingest::Stage;
use crate::ingest::ask::AskFailure;
use crate::ingest::embed::{EmbedError, Embedded, UnitTexts};
use crate::ingest::keywords::KeywordRecord;
use crate::ingest::workers::is_fatal;
use crate::llm::{self, Usage};
use crate::memory::input::SessionRewrite;

/// Everything the stages made of one session.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionOutputs {
    /// Stage 1.
    pub rewrite: SessionRewrite,
    /// Stage 2.
    pub keywords: KeywordRecord,
    /// Stage 3: sentence id → unit vector, in sentence order.
    pub sentence_vectors: Vec<(String, Vec<f32>)>,
    /// Stage 3: topic id → unit vector.
    pub topic_vectors: Vec<(String, Vec<f32>)>,
    /// Tokens spent (chat and embeddings).
    pub usage: Usage,
    /// Chat calls made, re-asks included.
    pub chat_calls: u32,
}

/// Why a session has no outputs.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The conversation has no session with that number (or it has no turns).
    #[error("session D{0} has no turns")]
    NoSuchSession(u32),
    /// A stage failed for this session; other sessions may still succeed.
    #[error("{stage} failed: {error}")]
    Stage {
        /// Which stage.
        stage: Stage,
        /// Why.
        error: String,
    },
    /// The endpoint refuses every request (bad key, unknown model, bad configuration): no
    /// other session would fare better.
    #[error("the endpoint refuses every request: {0}")]
    Fatal(llm::Error),
}

impl SessionOutputs {
    /// The outputs of one session from its three stages: `embedded` holds one vector per text
    /// of `texts` (sentences first, then topics); `usage` and `chat_calls` are those of the
    /// two chat stages, to which the embedding's tokens are added.
    pub(crate) fn assemble(
        rewrite: SessionRewrite,
        keywords: KeywordRecord,
        texts: &UnitTexts,
        embedded: Embedded,
        usage: Usage,
        chat_calls: u32,
    ) -> Self {
        let usage = usage + embedded.usage;
        let dims = embedded.dims.max(1);
        let mut rows = embedded.vectors.chunks(dims).map(<[f32]>::to_vec);
        let sentence_vectors =
            texts.sentence_ids.iter().cloned().zip(rows.by_ref()).collect::<Vec<_>>();
        let topic_vectors = texts.topic_ids.iter().cloned().zip(rows).collect::<Vec<_>>();
        SessionOutputs { rewrite, keywords, sentence_vectors, topic_vectors, usage, chat_calls }
    }
}

impl SessionError {
    /// Why a chat stage gave no output: the endpoint refuses everything, or this stage failed.
    pub(crate) fn asking(stage: Stage, failure: AskFailure) -> Self {
        match failure.llm_error {
            Some(error) if is_fatal(&error) => SessionError::Fatal(error),
            _ => SessionError::Stage { stage, error: failure.error },
        }
    }

    /// Why the embedding stage gave no output.
    pub(crate) fn embedding(error: EmbedError) -> Self {
        match error {
            EmbedError::Llm(error) if is_fatal(&error) => SessionError::Fatal(error),
            other => SessionError::Stage { stage: Stage::Embeddings, error: other.to_string() },
        }
    }
}
