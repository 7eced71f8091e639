//! The one stage sequence of the write path: rewrite → keywords → embeddings for one unit
//! (a session, or a batch of sessions for LongMemEval). Each stage is skipped when the sink
//! already holds its output, else asked of the model and handed to the sink as soon as it
//! exists; a stage the sink does not accept ends the unit.
//!
//! Where the outputs go is the [`StageSink`]'s business: the file caches of a dataset run
//! (`sample::SampleRun`, driven by `batch`), or the store of own conversations (the service's
//! store sink, one session at a time). The model side is the same for both: the same prompts,
//! schemas, salvaging and re-asks (`repair`), so a stored session is what `mragent build` would
//! have cached for it.
//!
//! Not here: concurrency, progress and counting (the caller's and the sink's), and any IO.

use std::future::Future;

use crate::dataset::Conversation;
pub(crate) use crate::ingest::ask::{AskFailure, AskSettings, Asked};
use crate::ingest::embed::embed_texts;
pub(crate) use crate::ingest::embed::{EmbedError, Embedded, UnitTexts};
pub(crate) use crate::ingest::keywords::KeywordRecord;
use crate::ingest::keywords::{self, KeywordSalvage};
use crate::ingest::repair::ask_salvaging;
pub(crate) use crate::ingest::rewrite::RewriteRecord;
use crate::ingest::rewrite::{self, RewriteSalvage};
use crate::ingest::summary::Stage;
pub(crate) use crate::ingest::unit::Unit;
use crate::ingest::unit::plan_units;
use crate::llm::{ChatModel, Embedder};
use crate::memory::input::SessionRewrite;
use crate::prompts::PromptError;

/// What the stages ask: the chat model (rewrite, keywords) with its request settings, and the
/// embedder (embeddings).
pub(crate) struct Models<'a, M, E> {
    pub(crate) chat: &'a M,
    pub(crate) embedder: &'a E,
    pub(crate) ask: &'a AskSettings,
}

/// Where the stages of a unit find what was made before and put what they make.
///
/// `kept_*` is asked before a stage: `Some`/`true` skips its model call. `put_*` receives the
/// stage's answer, or why there is none; it records it and says whether the unit goes on
/// (`Some`/`true`), ends here (`None`/`false`, the failure recorded by the sink) or aborts
/// (`Err`, returned by [`run_stages`] as is).
pub(crate) trait StageSink: Sync {
    /// Why a unit's run is aborted.
    type Error: Send;

    /// The error for a stage whose prompt cannot be rendered.
    fn prompt_failed(&self, stage: Stage, error: PromptError) -> Self::Error;

    /// Stage 1 of `unit`, if the sink has it already.
    fn kept_rewrite(&self, unit: &Unit<'_>) -> impl Future<Output = Option<SessionRewrite>> + Send;

    /// Takes stage 1's answer for `unit`; the rewrite the next stages work on.
    fn put_rewrite(
        &self,
        unit: &Unit<'_>,
        asked: Result<Asked<RewriteRecord>, AskFailure>,
    ) -> impl Future<Output = Result<Option<SessionRewrite>, Self::Error>> + Send;

    /// Whether stage 2 of `unit` (over `rewrite`) is there already.
    fn kept_keywords(
        &self,
        unit: &Unit<'_>,
        rewrite: &SessionRewrite,
    ) -> impl Future<Output = bool> + Send;

    /// Takes stage 2's answer for `unit`; whether the unit goes on.
    fn put_keywords(
        &self,
        unit: &Unit<'_>,
        rewrite: &SessionRewrite,
        asked: Result<Asked<KeywordRecord>, AskFailure>,
    ) -> impl Future<Output = Result<bool, Self::Error>> + Send;

    /// Whether stage 3 of `unit` (the vectors of `texts`) is there already.
    fn kept_embeddings(
        &self,
        unit: &Unit<'_>,
        texts: &UnitTexts,
    ) -> impl Future<Output = bool> + Send;

    /// Takes stage 3's vectors of `texts` for `unit`.
    fn put_embeddings(
        &self,
        unit: &Unit<'_>,
        texts: &UnitTexts,
        embedded: Result<Embedded, EmbedError>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;
}

/// Runs the stages of `unit` that `sink` does not hold yet, in order, into `sink`.
pub(crate) async fn run_stages<M: ChatModel, E: Embedder, S: StageSink>(
    models: &Models<'_, M, E>,
    sink: &S,
    unit: &Unit<'_>,
) -> Result<(), S::Error> {
    let Some(rewrite) = rewrite_stage(models, sink, unit).await? else {
        return Ok(());
    };
    if !keyword_stage(models, sink, unit, &rewrite).await? {
        return Ok(());
    }
    embedding_stage(models, sink, unit, &rewrite).await
}

/// The unit of session `number` of `conversation` built alone (as the store builds sessions);
/// `None` when the conversation has no such session with turns.
pub(crate) fn session_unit(conversation: &Conversation, number: u32) -> Option<Unit<'_>> {
    plan_units(conversation, 1).into_iter().find(|unit| unit.first_session == number)
}

/// Stage 1: the unit's turns rewritten into dated, self-contained sentences.
async fn rewrite_stage<M: ChatModel, E: Embedder, S: StageSink>(
    models: &Models<'_, M, E>,
    sink: &S,
    unit: &Unit<'_>,
) -> Result<Option<SessionRewrite>, S::Error> {
    if let Some(kept) = sink.kept_rewrite(unit).await {
        return Ok(Some(kept));
    }
    let prompt =
        rewrite::render_prompt(unit).map_err(|error| sink.prompt_failed(Stage::Rewrite, error))?;
    let state = RewriteSalvage::new(unit);
    let asked = ask_salvaging(models.chat, models.ask, prompt, &rewrite::schema(), state)
        .await
        .map(|salvaged| salvaged.finish(RewriteSalvage::into_record, &unit.dia_ids));
    sink.put_rewrite(unit, asked).await
}

/// Stage 2: the keywords of every sentence of the rewrite.
async fn keyword_stage<M: ChatModel, E: Embedder, S: StageSink>(
    models: &Models<'_, M, E>,
    sink: &S,
    unit: &Unit<'_>,
    rewrite: &SessionRewrite,
) -> Result<bool, S::Error> {
    if sink.kept_keywords(unit, rewrite).await {
        return Ok(true);
    }
    let prompt = keywords::render_prompt(&rewrite.sentences)
        .map_err(|error| sink.prompt_failed(Stage::Keywords, error))?;
    let state = KeywordSalvage::new(&rewrite.session, &rewrite.sentences);
    let ids: Vec<String> = rewrite.sentences.iter().map(|sentence| sentence.id.clone()).collect();
    let asked = ask_salvaging(models.chat, models.ask, prompt, &keywords::schema(), state)
        .await
        .map(|salvaged| salvaged.finish(KeywordSalvage::into_record, &ids));
    sink.put_keywords(unit, rewrite, asked).await
}

/// Stage 3: the vectors of the rewrite's sentences and topics.
async fn embedding_stage<M: ChatModel, E: Embedder, S: StageSink>(
    models: &Models<'_, M, E>,
    sink: &S,
    unit: &Unit<'_>,
    rewrite: &SessionRewrite,
) -> Result<(), S::Error> {
    let texts = UnitTexts::of(rewrite);
    if sink.kept_embeddings(unit, &texts).await {
        return Ok(());
    }
    let embedded = embed_texts(models.embedder, &texts.texts).await;
    sink.put_embeddings(unit, &texts, embedded).await
}
