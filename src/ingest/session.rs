//! One session through the three stages (rewrite → keywords → embeddings) without the stage
//! caches: for the memory store (`crate::store`), which keeps every session's outputs in its own
//! database and so asks this only for sessions it has no outputs for.
//!
//! The stage code is the build's own (`rewrite`, `keywords`, `embed`, `ask`): the same prompts,
//! schemas, semantic checks and re-asks, so a stored session is what `mragent build` would have
//! cached for it.

use crate::dataset::Conversation;
use crate::ingest::Stage;
use crate::ingest::ask::AskSettings;
use crate::ingest::embed::{UnitTexts, embed_texts};
use crate::ingest::keywords::{self, KeywordRecord, KeywordSalvage};
use crate::ingest::repair::ask_salvaging;
use crate::ingest::rewrite::{self, RewriteSalvage};
use crate::ingest::unit::plan_units;
use crate::ingest::workers::is_fatal;
use crate::llm::{self, ChatModel, Embedder, Usage};
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

/// Runs the three stages for session `number` of `conversation` (one session per unit).
pub async fn build_session<M: ChatModel, E: Embedder>(
    chat: &M,
    embedder: &E,
    model: &str,
    max_reasks: u32,
    conversation: &Conversation,
    number: u32,
) -> Result<SessionOutputs, SessionError> {
    let units = plan_units(conversation, 1);
    let unit = units
        .iter()
        .find(|unit| unit.first_session == number)
        .ok_or(SessionError::NoSuchSession(number))?;
    let ask = AskSettings { model: model.to_string(), max_reasks };
    let stage_error = |stage: Stage, error: String| SessionError::Stage { stage, error };

    let prompt = rewrite::render_prompt(unit)
        .map_err(|error| stage_error(Stage::Rewrite, error.to_string()))?;
    let asked = ask_salvaging(chat, &ask, prompt, &rewrite::schema(), RewriteSalvage::new(unit))
        .await
        .map(|salvaged| salvaged.finish(RewriteSalvage::into_record, &unit.dia_ids))
        .map_err(|failure| failed(Stage::Rewrite, failure))?;
    let (rewrite, mut usage, mut chat_calls) = (asked.value.rewrite, asked.usage, asked.attempts);

    let prompt = keywords::render_prompt(&rewrite.sentences)
        .map_err(|error| stage_error(Stage::Keywords, error.to_string()))?;
    let ids: Vec<String> = rewrite.sentences.iter().map(|sentence| sentence.id.clone()).collect();
    let state = KeywordSalvage::new(&rewrite.session, &rewrite.sentences);
    let asked = ask_salvaging(chat, &ask, prompt, &keywords::schema(), state)
        .await
        .map(|salvaged| salvaged.finish(KeywordSalvage::into_record, &ids))
        .map_err(|failure| failed(Stage::Keywords, failure))?;
    usage += asked.usage;
    chat_calls += asked.attempts;
    let keywords = asked.value;

    let texts = UnitTexts::of(&rewrite);
    let embedded = embed_texts(embedder, &texts.texts).await.map_err(|error| match error {
        crate::ingest::embed::EmbedError::Llm(error) if is_fatal(&error) => {
            SessionError::Fatal(error)
        }
        other => stage_error(Stage::Embeddings, other.to_string()),
    })?;
    usage += embedded.usage;
    let dims = embedded.dims.max(1);
    let mut rows = embedded.vectors.chunks(dims).map(<[f32]>::to_vec);
    let sentence_vectors =
        texts.sentence_ids.iter().cloned().zip(rows.by_ref()).collect::<Vec<_>>();
    let topic_vectors = texts.topic_ids.iter().cloned().zip(rows).collect::<Vec<_>>();
    Ok(SessionOutputs { rewrite, keywords, sentence_vectors, topic_vectors, usage, chat_calls })
}

fn failed(stage: Stage, failure: crate::ingest::ask::AskFailure) -> SessionError {
    match failure.llm_error {
        Some(error) if is_fatal(&error) => SessionError::Fatal(error),
        _ => SessionError::Stage { stage, error: failure.error },
    }
}
