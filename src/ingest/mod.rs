//! The write path: conversations → rewrite → keywords → embeddings, each stage cached per unit
//! (session, or batch of sessions for LongMemEval), then the stage outputs a memory graph is
//! built from.
//!
//! Entry points: [`build`] for many conversations (the `mragent build` command), [`build_memory`]
//! for one conversation when its memory is needed right away, and [`load_memory`] to read a
//! finished build back without any model call.
//!
//! Concurrency: units of all conversations run concurrently, at most
//! [`BuildSettings::workers`] at a time (a semaphore in the shared [`workers::Pool`]). A unit runs its
//! three stages back to back and writes each stage's cache as soon as that stage is done, so an
//! interrupted build keeps every finished unit and the next build redoes only the rest. Request
//! rates are the `llm` stack's business, not this module's.
//!
//! Failures: a unit whose calls fail is recorded as failed in the cache and listed in the
//! [`BuildSummary`]; the build goes on with the other units. Only errors that would fail every
//! unit alike (bad key, unknown model, an unwritable cache) abort it. What the model writes
//! never fails a unit: answers are salvaged item by item, missing items re-asked alone, and
//! what stays missing is filled without the model and counted (`repair`).

mod ask;
mod cache;
mod config;
pub mod embed;
pub mod granules;
pub mod keywords;
mod progress;
mod repair;
pub mod rewrite;
mod sample;
pub mod session;
mod summary;
mod unit;
mod workers;

use std::sync::Mutex as StdMutex;
use std::time::Instant;

use anyhow::Context as _;
use futures::stream::{self, StreamExt as _, TryStreamExt as _};
use tokio::sync::Mutex;

use crate::dataset::Conversation;
use crate::ingest::cache::StageCache;
pub use crate::ingest::config::BuildSettings;
pub use crate::ingest::embed::SampleEmbeddings;
use crate::ingest::embed::{EmbeddingStageCache, embed_texts, question_texts};
pub use crate::ingest::granules::{
    ConversationGranules, GranuleSummary, SessionGranules, build_granules, load_granules,
};
use crate::ingest::keywords::{KeywordRecord, KeywordSalvage};
pub use crate::ingest::repair::Repair;
use crate::ingest::repair::ask_salvaging;
use crate::ingest::rewrite::{RewriteRecord, RewriteSalvage};
use crate::ingest::sample::{SampleCaches, embedding_planned, keyword_planned, rewrite_planned};
pub use crate::ingest::session::{SessionError, SessionOutputs, build_session};
use crate::ingest::summary::summarise;
pub use crate::ingest::summary::{
    BuildSummary, BuiltMemory, FailedUnit, RepairCounts, RunSummary, SampleFailures, SampleSummary,
    Stage, StageOutputs,
};
use crate::ingest::unit::{Unit, plan_units};
use crate::ingest::workers::{Ledger, Pool, Tally, abort_if_fatal, failed_unit, run_all, settle};
use crate::llm::{ChatModel, Embedder, Usage};
use crate::memory::input::SessionRewrite;
use crate::memory::{MemoryGraph, build_graph};

/// Build (or finish building) the memory inputs of every conversation.
///
/// Finished units are taken from the caches; everything else is asked of `chat` and
/// `embedder`, at most `settings.workers` units at a time. Failed units are listed in the
/// summary, not returned as errors.
pub async fn build<M: ChatModel, E: Embedder>(
    settings: &BuildSettings,
    chat: &M,
    embedder: &E,
    conversations: &[Conversation],
) -> anyhow::Result<BuildSummary> {
    build_each(settings, chat, embedder, conversations, None, |_| {}).await
}

/// [`build`], calling `on_built(index)` as soon as `conversations[index]` is built (every unit
/// settled, its caches written, its questions embedded) while the others still build, so that
/// a caller can start on it at once. Units are served first come first served, so earlier
/// conversations tend to finish first. The progress bar joins `bars` when given.
pub async fn build_each<M: ChatModel, E: Embedder>(
    settings: &BuildSettings,
    chat: &M,
    embedder: &E,
    conversations: &[Conversation],
    bars: Option<&indicatif::MultiProgress>,
    on_built: impl Fn(usize) + Sync,
) -> anyhow::Result<BuildSummary> {
    let started = Instant::now();
    let shared = Shared::new(settings, chat, embedder, conversations);
    if let Some(bars) = bars {
        shared.pool.progress.join(bars);
    }
    tracing::info!(conversations = conversations.len(), model = %settings.model, embedder = embedder.name(), "build started");
    let shared_ref = &shared;
    let on_built = &on_built;
    let samples: Vec<SampleSummary> = stream::iter(conversations.iter().enumerate())
        .map(|(index, conversation)| async move {
            let summary = build_sample(shared_ref, conversation, false).await?.0;
            on_built(index);
            Ok::<_, anyhow::Error>(summary)
        })
        .buffered(settings.workers.max(1))
        .try_collect()
        .await?;
    let (notices, usage) = shared.pool.finish(samples.iter().map(|sample| sample.usage));
    let summary = BuildSummary { samples, notices, usage, elapsed: started.elapsed() };
    tracing::info!(failed = summary.failed().count(), tokens = usage.total(), "build finished");
    Ok(summary)
}

/// Build (or finish building) one conversation and return its memory.
pub async fn build_memory<M: ChatModel, E: Embedder>(
    settings: &BuildSettings,
    chat: &M,
    embedder: &E,
    conversation: &Conversation,
) -> anyhow::Result<BuiltMemory> {
    let shared = Shared::new(settings, chat, embedder, std::slice::from_ref(conversation));
    let (_, memory) = build_sample(&shared, conversation, true).await?;
    shared.pool.finish(std::iter::empty());
    memory.context("built memory was not kept")
}

/// Read one conversation's finished build from the caches, without any model call. Units
/// missing from a cache are listed as failed with the reason `not built`.
pub fn load_memory(
    settings: &BuildSettings,
    embedder: &str,
    conversation: &Conversation,
) -> anyhow::Result<BuiltMemory> {
    let caches = SampleCaches::open(settings, embedder, conversation)?;
    let units = plan_units(conversation, settings.batch());
    let mut failed = Vec::new();
    for unit in &units {
        let planned = rewrite_planned(unit);
        let missing = match caches.rewrite.done(&planned) {
            None => Some(Stage::Rewrite),
            Some(record)
                if caches.keywords.done(&keyword_planned(unit, &record.rewrite)).is_none() =>
            {
                Some(Stage::Keywords)
            }
            Some(record)
                if !caches.embeddings.unit_done(&embedding_planned(unit, &record.rewrite).0) =>
            {
                Some(Stage::Embeddings)
            }
            Some(_) => None,
        };
        if let Some(stage) = missing {
            failed.push(failed_unit(conversation, unit, stage, "not built".into(), 0));
        }
    }
    let (_, _, question_hash) = question_texts(&conversation.questions);
    if !conversation.questions.is_empty() && !caches.embeddings.questions_done(&question_hash) {
        failed.push(questions_failure(conversation, "not built".into(), 0));
    }
    let outputs = caches.outputs(&units);
    let graph = graph_of(conversation, &outputs)?;
    let mut summary = summarise(conversation, &graph, failed, 0, Usage::default(), 0);
    caches.count_repairs(&units, &mut summary);
    Ok(BuiltMemory { embeddings: caches.embeddings.to_embeddings(), graph, outputs, summary })
}

/// State shared by every unit of a build.
struct Shared<'a, M, E> {
    settings: &'a BuildSettings,
    chat: &'a M,
    embedder: &'a E,
    pool: Pool,
}

impl<'a, M: ChatModel, E: Embedder> Shared<'a, M, E> {
    fn new(
        settings: &'a BuildSettings,
        chat: &'a M,
        embedder: &'a E,
        conversations: &[Conversation],
    ) -> Self {
        Self { settings, chat, embedder, pool: Pool::new(settings, conversations) }
    }
}

/// One conversation's build in progress: its caches behind async locks (held across the
/// cache write, so writes of one file never interleave and the last write holds every unit).
struct SampleRun<'c> {
    conversation: &'c Conversation,
    rewrite: Mutex<StageCache<RewriteRecord>>,
    keywords: Mutex<StageCache<KeywordRecord>>,
    embeddings: Mutex<EmbeddingStageCache>,
    tally: StdMutex<Tally>,
}

impl SampleRun<'_> {
    fn tally(&self) -> std::sync::MutexGuard<'_, Tally> {
        self.tally.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn ledger<'a>(&'a self, progress: &'a progress::Progress) -> Ledger<'a> {
        Ledger { progress, conversation: self.conversation, tally: &self.tally }
    }
}

/// Build one conversation; with `keep`, also return its stage outputs and embeddings.
async fn build_sample<M: ChatModel, E: Embedder>(
    shared: &Shared<'_, M, E>,
    conversation: &Conversation,
    keep: bool,
) -> anyhow::Result<(SampleSummary, Option<BuiltMemory>)> {
    let settings = shared.settings;
    let caches = SampleCaches::open(settings, shared.embedder.name(), conversation)?;
    for notice in &caches.notices {
        shared.pool.notice(notice.clone());
    }
    let units = plan_units(conversation, settings.batch());
    let (complete, pending): (Vec<&Unit<'_>>, Vec<&Unit<'_>>) =
        units.iter().partition(|unit| caches.unit_complete(unit));
    let sessions_reused: usize = complete.iter().map(|unit| unit.n_sessions()).sum();
    shared.pool.progress.reused(sessions_reused);
    tracing::info!(sample = %conversation.sample_id, units = units.len(), cached = complete.len(), "building conversation");

    let run = SampleRun {
        conversation,
        rewrite: Mutex::new(caches.rewrite),
        keywords: Mutex::new(caches.keywords),
        embeddings: Mutex::new(caches.embeddings),
        tally: StdMutex::new(Tally::default()),
    };
    // The questions wait for a worker beside the conversation's own units, not after them:
    // asked last, they would queue behind every other conversation's units (the permits are
    // FIFO) and no conversation would be ready before the whole build is.
    futures::try_join!(
        run_all(pending.into_iter().map(|unit| build_unit(shared, &run, unit))),
        embed_questions(shared, &run),
    )?;

    let rewrite = run.rewrite.into_inner();
    let keywords = run.keywords.into_inner();
    let embeddings = run.embeddings.into_inner();
    let tally = Tally::take(run.tally);
    let caches = SampleCaches { rewrite, keywords, embeddings, notices: Vec::new() };
    let outputs = caches.outputs(&units);
    let mut failed = tally.failed;
    failed.sort_by(|a, b| (a.sessions.first(), a.stage).cmp(&(b.sessions.first(), b.stage)));
    let graph = graph_of(conversation, &outputs)?;
    let mut summary =
        summarise(conversation, &graph, failed, sessions_reused, tally.usage, tally.chat_calls);
    caches.count_repairs(&units, &mut summary);
    let kept = keep.then(|| BuiltMemory {
        graph,
        outputs,
        embeddings: caches.embeddings.to_embeddings(),
        summary: summary.clone(),
    });
    Ok((summary, kept))
}

/// Run the stages of one unit that are not cached yet. `Err` only for what must abort the
/// build; a failed stage is recorded and ends the unit.
async fn build_unit<M: ChatModel, E: Embedder>(
    shared: &Shared<'_, M, E>,
    run: &SampleRun<'_>,
    unit: &Unit<'_>,
) -> anyhow::Result<()> {
    let span = tracing::info_span!("unit", sample = %run.conversation.sample_id, unit = %unit.key);
    let work = build_unit_stages(shared, run, unit);
    shared.pool.run_unit("build worker pool closed", span, unit.n_sessions(), work).await
}

async fn build_unit_stages<M: ChatModel, E: Embedder>(
    shared: &Shared<'_, M, E>,
    run: &SampleRun<'_>,
    unit: &Unit<'_>,
) -> anyhow::Result<()> {
    let Some(record) = rewrite_stage(shared, run, unit).await? else {
        return Ok(());
    };
    if !keyword_stage(shared, run, unit, &record).await? {
        return Ok(());
    }
    embedding_stage(shared, run, unit, &record).await
}

/// Stage 1: the unit's rewrite, from the cache or asked; `None` when it failed.
async fn rewrite_stage<M: ChatModel, E: Embedder>(
    shared: &Shared<'_, M, E>,
    run: &SampleRun<'_>,
    unit: &Unit<'_>,
) -> anyhow::Result<Option<SessionRewrite>> {
    let planned = rewrite_planned(unit);
    let cached = run.rewrite.lock().await.done(&planned).map(|record| record.rewrite.clone());
    if cached.is_some() {
        return Ok(cached);
    }
    let prompt = rewrite::render_prompt(unit)?;
    let state = RewriteSalvage::new(unit);
    let asked = ask_salvaging(shared.chat, &shared.pool.ask, prompt, &rewrite::schema(), state)
        .await
        .map(|salvaged| salvaged.finish(RewriteSalvage::into_record, &unit.dia_ids));
    if let Ok(asked) = &asked {
        report_repair(shared, run, unit, Stage::Rewrite, &asked.value.repair);
    }
    let ledger = run.ledger(&shared.pool.progress);
    let settled = settle(ledger, unit, Stage::Rewrite, &planned, asked, &run.rewrite).await?;
    Ok(settled.map(|record| record.rewrite))
}

/// Stage 2: the keywords of the unit's rewrite unless cached; `false` when they failed.
async fn keyword_stage<M: ChatModel, E: Embedder>(
    shared: &Shared<'_, M, E>,
    run: &SampleRun<'_>,
    unit: &Unit<'_>,
    record: &SessionRewrite,
) -> anyhow::Result<bool> {
    let planned = keyword_planned(unit, record);
    if run.keywords.lock().await.done(&planned).is_some() {
        return Ok(true);
    }
    let prompt = keywords::render_prompt(&record.sentences)?;
    let state = KeywordSalvage::new(&record.session, &record.sentences);
    let ids: Vec<String> = record.sentences.iter().map(|sentence| sentence.id.clone()).collect();
    let asked = ask_salvaging(shared.chat, &shared.pool.ask, prompt, &keywords::schema(), state)
        .await
        .map(|salvaged| salvaged.finish(KeywordSalvage::into_record, &ids));
    if let Ok(asked) = &asked {
        report_repair(shared, run, unit, Stage::Keywords, &asked.value.repair);
    }
    let ledger = run.ledger(&shared.pool.progress);
    let Some(keywords) =
        settle(ledger, unit, Stage::Keywords, &planned, asked, &run.keywords).await?
    else {
        return Ok(false);
    };
    if !keywords.dropped_ids.is_empty() {
        tracing::warn!(sample = %run.conversation.sample_id, unit = %unit.key, ids = ?keywords.dropped_ids, "keyword answer named unknown sentence ids; dropped them");
    }
    Ok(true)
}

/// Show a unit's repair on the progress bar and in the log.
fn report_repair<M: ChatModel, E: Embedder>(
    shared: &Shared<'_, M, E>,
    run: &SampleRun<'_>,
    unit: &Unit<'_>,
    stage: Stage,
    repair: &Repair,
) {
    if repair.is_clean() {
        return;
    }
    shared.pool.progress.repaired(stage, repair);
    tracing::warn!(sample = %run.conversation.sample_id, unit = %unit.key, %stage, reasks = repair.reasks, salvaged = repair.salvaged.len(), fallback = ?repair.fallback, "model answer repaired");
}

/// Stage 3: embeddings of the unit's sentences and topics unless cached; a failure is
/// recorded in the tally.
async fn embedding_stage<M: ChatModel, E: Embedder>(
    shared: &Shared<'_, M, E>,
    run: &SampleRun<'_>,
    unit: &Unit<'_>,
    record: &SessionRewrite,
) -> anyhow::Result<()> {
    let (planned, texts) = embedding_planned(unit, record);
    if run.embeddings.lock().await.unit_done(&planned) {
        return Ok(());
    }
    match embed_texts(shared.embedder, &texts.texts).await {
        Ok(embedded) => {
            shared.pool.progress.tokens(embedded.usage);
            run.tally().usage += embedded.usage;
            run.embeddings.lock().await.record_unit(&planned, &texts, embedded).await?;
        }
        Err(error) => {
            if let embed::EmbedError::Llm(llm_error) = &error {
                abort_if_fatal(llm_error)?;
            }
            shared.pool.progress.failure();
            tracing::warn!(sample = %run.conversation.sample_id, unit = %unit.key, error = %error, "embedding failed");
            run.tally().failed.push(failed_unit(
                run.conversation,
                unit,
                Stage::Embeddings,
                error.to_string(),
                0,
            ));
        }
    }
    Ok(())
}

/// Embed the conversation's questions unless cached.
async fn embed_questions<M: ChatModel, E: Embedder>(
    shared: &Shared<'_, M, E>,
    run: &SampleRun<'_>,
) -> anyhow::Result<()> {
    let (ids, texts, hash) = question_texts(&run.conversation.questions);
    if texts.is_empty() || run.embeddings.lock().await.questions_done(&hash) {
        return Ok(());
    }
    let _permit = shared.pool.permit("build worker pool closed").await?;
    match embed_texts(shared.embedder, &texts).await {
        Ok(embedded) => {
            shared.pool.progress.tokens(embedded.usage);
            run.tally().usage += embedded.usage;
            run.embeddings.lock().await.record_questions(ids, hash, embedded).await
        }
        Err(error) => {
            if let embed::EmbedError::Llm(llm_error) = &error {
                abort_if_fatal(llm_error)?;
            }
            shared.pool.progress.failure();
            run.tally().failed.push(questions_failure(run.conversation, error.to_string(), 0));
            Ok(())
        }
    }
}

fn questions_failure(conversation: &Conversation, error: String, attempts: u32) -> FailedUnit {
    FailedUnit {
        sample_id: conversation.sample_id.clone(),
        unit: "questions".into(),
        sessions: Vec::new(),
        stage: Stage::Embeddings,
        error,
        attempts,
    }
}

/// Build the memory graph of the stage outputs. The stages validate everything the graph
/// requires, so a failure here is a bug worth stopping for.
fn graph_of(conversation: &Conversation, outputs: &StageOutputs) -> anyhow::Result<MemoryGraph> {
    build_graph(conversation, &outputs.rewrites, &outputs.keywords)
        .with_context(|| format!("building the memory graph of {}", conversation.sample_id))
}

#[cfg(test)]
mod tests;
