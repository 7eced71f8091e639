//! A build of dataset conversations into the file caches (`mragent build`, `run`): every unit
//! of every conversation through the stage sequence (`pipeline`) with the conversation's caches
//! as the sink (`sample::SampleRun`), at most [`BuildSettings::workers`] units at a time (the
//! shared [`Pool`]), and the questions' vectors beside them; then the summary and, when asked
//! for, the memory. [`load_memory`] reads a finished build back without a model.

use std::time::Instant;

use anyhow::Context as _;
use futures::stream::{self, StreamExt as _, TryStreamExt as _};

use crate::dataset::Conversation;
use crate::ingest::embed::{self, embed_texts, question_texts};
use crate::ingest::pipeline::{self, Models};
use crate::ingest::sample::{
    SampleCaches, SampleRun, embedding_planned, keyword_planned, rewrite_planned,
};
use crate::ingest::summary::summarise;
use crate::ingest::unit::{Unit, plan_units};
use crate::ingest::workers::{Pool, abort_if_fatal, failed_unit, run_all};
use crate::ingest::{
    BuildSettings, BuildSummary, BuiltMemory, FailedUnit, SampleSummary, Stage, StageOutputs,
};
use crate::llm::{ChatModel, Embedder, Usage};
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
    let shared = BuildShared::new(settings, chat, embedder, conversations);
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
    let shared = BuildShared::new(settings, chat, embedder, std::slice::from_ref(conversation));
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
struct BuildShared<'a, M, E> {
    settings: &'a BuildSettings,
    chat: &'a M,
    embedder: &'a E,
    pool: Pool,
}

impl<'a, M: ChatModel, E: Embedder> BuildShared<'a, M, E> {
    fn new(
        settings: &'a BuildSettings,
        chat: &'a M,
        embedder: &'a E,
        conversations: &[Conversation],
    ) -> Self {
        Self { settings, chat, embedder, pool: Pool::new(settings, conversations) }
    }
}

/// Build one conversation; with `keep`, also return its stage outputs and embeddings.
async fn build_sample<M: ChatModel, E: Embedder>(
    shared: &BuildShared<'_, M, E>,
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

    let run = SampleRun::new(&shared.pool, conversation, caches);
    // The questions wait for a worker beside the conversation's own units, not after them:
    // asked last, they would queue behind every other conversation's units (the permits are
    // FIFO) and no conversation would be ready before the whole build is.
    // Every model call of the build is recorded under the conversation (see `llm::tape`).
    let label = format!("the build of {}", conversation.sample_id);
    crate::llm::tape::within(label, async {
        futures::try_join!(
            run_all(pending.into_iter().map(|unit| build_unit(shared, &run, unit))),
            embed_questions(shared, &run),
        )
    })
    .await?;

    let (caches, tally) = run.finish();
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

/// Run the stages of one unit that are not cached yet, under a worker permit. `Err` only for
/// what must abort the build; a failed stage is recorded and ends the unit.
async fn build_unit<M: ChatModel, E: Embedder>(
    shared: &BuildShared<'_, M, E>,
    run: &SampleRun<'_>,
    unit: &Unit<'_>,
) -> anyhow::Result<()> {
    let span = tracing::info_span!("unit", sample = %run.conversation.sample_id, unit = %unit.key);
    let models = Models { chat: shared.chat, embedder: shared.embedder, ask: &shared.pool.ask };
    let work = pipeline::run_stages(&models, run, unit);
    shared.pool.run_unit("build worker pool closed", span, unit.n_sessions(), work).await
}

/// Embed the conversation's questions unless cached.
async fn embed_questions<M: ChatModel, E: Embedder>(
    shared: &BuildShared<'_, M, E>,
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
