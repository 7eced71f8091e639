//! `mragent run`: check the input, take the run lock, write the manifest, then build the selected
//! conversations' memories (cached) and answer their questions as one pipeline: a conversation's
//! questions join the shared worker pool as soon as its memory is built, while the others still
//! build. Questions over an incomplete memory stay pending. The first Ctrl-C stops taking new
//! work and writes what is in flight; the second exits at once (every finished question is
//! already on disk). A refused key or an unknown model stops the run at the first such reply.
//! Then the summary, the result files, the endpoint usage and the manifest are printed.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use futures::{StreamExt as _, TryStreamExt as _};

use super::build::{api_embedder, print_report};
use super::interrupt::{INTERRUPTED_STATUS, StopRequest, watch};
use super::output::outln;
use super::{Outcome, chat_client};
use crate::agent::{AnswerSummary, SampleFeed};
use crate::dataset::Conversation;
use crate::ingest::BuildSummary;
use crate::llm::fatal::{AfterFatal, FatalLatch, Latched};
use crate::llm::tape::{Tape, TapedChat, TapedEmbedder};
use crate::llm::{Client, EmbedClient, UsageTotals};
use crate::recorded::RunFiles;
use crate::recorded::lock::RunLock;
use crate::recorded::manifest::{Manifest, MetaRulesRecord, endpoint_host};
use crate::recorded::tape::{CallsRecord, compare_results, open_run_tape};
use crate::settings::{DataSettings, RunJob};
use crate::snapshot::{CacheSource, MemgasCaches, Snapshot};

/// How a run ended.
#[derive(Debug)]
struct RunOutcome {
    /// What the answer phase did (absent when the run stopped before it).
    pub summary: Option<AnswerSummary>,
    /// What the build did, when it went through every conversation (absent when it was
    /// interrupted or stopped by a refused key): the same report as `mragent build`'s.
    pub build: Option<BuildSummary>,
    /// The exit code: 0 all answered, 2 something is left for a rerun, 1 stopped by an error.
    pub exit_code: u8,
    /// Why the run stopped, when it was stopped by an error (a refused key, an unknown model).
    pub error: Option<String>,
    /// The manifest written beside the results.
    pub manifest: std::path::PathBuf,
    /// What each client of the run sent to the endpoint, every attempt and failed requests
    /// included (`build_chat`, `embeddings`, and `answer_chat` once answering started): the
    /// figures to hold against the endpoint's own counts.
    pub endpoint_usage: BTreeMap<String, UsageTotals>,
    /// `replay`: how its result lines compare with the recorded run's.
    pub replayed: Option<String>,
}

/// The conversations of shard `k` of `n`: every `n`-th one in dataset order, starting at `k`.
pub fn select_shard(
    conversations: Vec<Conversation>,
    shard: Option<(u32, u32)>,
) -> Vec<Conversation> {
    match shard {
        None => conversations,
        Some((k, n)) => conversations
            .into_iter()
            .enumerate()
            .filter(|(index, _)| *index as u64 % u64::from(n) == u64::from(k))
            .map(|(_, conversation)| conversation)
            .collect(),
    }
}

/// Refuses sample ids that cannot become file names (traversal, absolute, separators), before
/// anything is written.
fn check_sample_ids(data: &DataSettings, conversations: &[Conversation]) -> anyhow::Result<()> {
    for conversation in conversations {
        crate::names::check_name(crate::names::NameKind::Sample, &conversation.sample_id)
            .with_context(|| {
                format!("{}: fix it in the input (nothing was written)", data.file.display())
            })?;
    }
    Ok(())
}

/// Runs the job, prints what it did, and turns how it ended into the outcome.
pub async fn execute(job: &RunJob) -> anyhow::Result<Outcome> {
    // A replay without --fill sends nothing, so it needs no key.
    if job.replay.as_ref().is_none_or(|replay| replay.fill) {
        job.models.require_key()?;
    }
    let conversations = job.data.load()?;
    let outcome = run(job, conversations).await?;
    if let Some(build) = outcome.build.as_ref().filter(|_| !job.quiet) {
        print_report(build)?;
    }
    if let Some(summary) = &outcome.summary {
        outln!("{summary}")?;
        for file in &summary.result_files {
            outln!("  {}", file.display())?;
        }
        if let Some(hint) = summary.resume_hint() {
            eprintln!("{hint}");
        }
    }
    for (client, totals) in &outcome.endpoint_usage {
        outln!(
            "endpoint {client}: {} requests ({} failed, {} hedges), {} prompt + {} completion tokens",
            totals.requests,
            totals.failed_requests,
            totals.hedges,
            totals.usage.prompt_tokens,
            totals.usage.completion_tokens
        )?;
    }
    outln!("manifest: {}", outcome.manifest.display())?;
    if let Some(replayed) = &outcome.replayed {
        outln!("{replayed}")?;
    }
    match (outcome.error, outcome.exit_code) {
        (Some(error), _) => Err(anyhow::anyhow!(error)),
        (None, 0) => Ok(Outcome::Success),
        (None, _) => {
            if outcome.summary.is_none() {
                eprintln!(
                    "interrupted while building: finished sessions are cached; run the same command again to resume"
                );
            }
            Ok(Outcome::Partial)
        }
    }
}

/// `verify`: runs the replay job without printing; `Err` holds why its lines are not the
/// recorded run's (or why it could not finish).
pub(super) async fn replay_silently(job: &RunJob) -> anyhow::Result<Result<String, String>> {
    let conversations = job.data.load()?;
    let outcome = run(job, conversations).await;
    Ok(match outcome {
        Err(error) => Err(format!("{error:#}")),
        Ok(RunOutcome { error: Some(error), .. }) => Err(error),
        Ok(RunOutcome { exit_code: 0, replayed: Some(replayed), .. }) => Ok(replayed),
        Ok(_) => Err("the replay left questions unanswered".to_string()),
    })
}

/// The job (see the module documentation).
async fn run(job: &RunJob, conversations: Vec<Conversation>) -> anyhow::Result<RunOutcome> {
    let (data, run) = (&job.data, &job.run);
    check_sample_ids(data, &conversations)?;
    let conversations = select_shard(conversations, run.shard);
    let files = RunFiles::of_run(job);
    let lock = Arc::new(RunLock::acquire(&files.lock())?);
    let manifest_path = files.manifest();
    let mut manifest = Manifest::start(manifest_path.clone(), data.kind.as_str(), &data.file)?;
    describe(&mut manifest, job, &conversations);
    manifest.write()?;
    let tape = open_run_tape(job)?;
    let manifest = Arc::new(Mutex::new(manifest));
    let stop = interrupts(manifest.clone(), lock.clone());

    let samples: Vec<String> = conversations.iter().map(|c| c.sample_id.clone()).collect();
    let outcome = phases(job, conversations, stop, &tape).await;
    lock.release();
    let mut manifest = manifest.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    manifest.calls = Some(CallsRecord::of(&tape)?);
    let outcome = match outcome {
        Ok(outcome) => compare_replay(job, &samples, outcome),
        Err(error) => Err(error),
    };
    let outcome = match outcome {
        Ok(outcome) => outcome,
        Err(error) => {
            manifest.error = Some(format!("{error:#}"));
            manifest.end("failed", 1);
            manifest.write()?;
            return Err(error);
        }
    };
    manifest.summary = outcome.summary.clone();
    manifest.error = outcome.error.clone();
    manifest.endpoint_usage = outcome.endpoint_usage.clone();
    let status = match (&outcome.summary, outcome.exit_code) {
        (_, 1) => "failed",
        (Some(summary), _) if summary.interrupted => "interrupted",
        (None, _) => "interrupted",
        (_, 0) => "complete",
        _ => "partial",
    };
    manifest.end(status, outcome.exit_code);
    manifest.write()?;
    Ok(RunOutcome { manifest: manifest_path, ..outcome })
}

/// Models, endpoint and settings in the manifest (never the key).
fn describe(manifest: &mut Manifest, job: &RunJob, conversations: &[Conversation]) {
    let (models, run) = (&job.models, &job.run);
    manifest.models.insert("build".into(), models.build_model.id.clone());
    manifest.models.insert("answer".into(), models.answer_model.id.clone());
    manifest.models.insert("embedding".into(), job.embedder.model.clone());
    manifest.endpoint_host = endpoint_host(&models.base_url);
    manifest.set("file", &run.file);
    manifest.set("shard", run.shard.map(|(k, n)| format!("{k}/{n}")));
    manifest.set("workers", run.workers);
    manifest.set("seed", job.answer.seed);
    manifest.set("memgas", job.memgas.is_some());
    manifest.set("traces", job.answer.traces);
    manifest.set("requests_per_minute", models.requests_per_minute);
    manifest.set("tokens_per_minute", models.tokens_per_minute);
    manifest.set("timeout_s", models.timeout.as_secs());
    manifest.set("structured_output", models.structured_output);
    manifest.set("hedge", models.hedge);
    manifest.set("answer_prompts", job.answer.prompts_version());
    manifest.set("answer", job.answer.answer);
    manifest.meta_rules = job.meta_rules.as_ref().map(MetaRulesRecord::of);
    let samples: Vec<&str> = conversations.iter().map(|c| c.sample_id.as_str()).collect();
    manifest.set("samples", samples);
    manifest.replay_args.clone_from(&job.replay_args);
    manifest.replay_of = job.replay.as_ref().map(|replay| replay.from.clone());
}

/// `replay`: compares every result line with the recorded run's and says so; a difference is
/// an error unless `--fill` (which exists to change answers).
fn compare_replay(
    job: &RunJob,
    samples: &[String],
    outcome: RunOutcome,
) -> anyhow::Result<RunOutcome> {
    let Some(replay) = &job.replay else { return Ok(outcome) };
    if outcome.exit_code != 0 {
        return Ok(outcome);
    }
    let (root, dataset, model) =
        (&job.paths.root, job.data.kind.as_str(), job.models.build_model.alias.as_str());
    let pairs: Vec<_> = samples
        .iter()
        .map(|sample| {
            let path = |tag: &str| crate::results::result_path(root, dataset, sample, model, tag);
            (path(&replay.from), path(&job.run.file))
        })
        .collect();
    let comparison = compare_results(&pairs)?;
    let mut text = format!(
        "replay of {}: {} of {} result lines identical (latency aside)",
        replay.from, comparison.identical, comparison.compared
    );
    let error = match (&comparison.first_mismatch, replay.fill) {
        (None, _) => None,
        (Some(first), true) => {
            text.push_str(&format!("; {} changed, the first: {first}", comparison.differing));
            None
        }
        (Some(first), false) => Some(format!("replay differs from run {}: {first}", replay.from)),
    };
    let exit_code = if error.is_some() { 1 } else { outcome.exit_code };
    Ok(RunOutcome { replayed: Some(text), error: error.or(outcome.error), exit_code, ..outcome })
}

/// Ctrl-C handling: the returned request turns on at the first Ctrl-C; the second ends the
/// process at once with exit code 130, after recording that in the manifest.
fn interrupts(manifest: Arc<Mutex<Manifest>>, lock: Arc<RunLock>) -> StopRequest {
    let notice = "interrupted: finishing the work in flight, starting nothing new (press Ctrl-C again to stop at once)";
    // The watcher is left to watch until the process ends.
    let (stop, _watcher) = watch(notice, move || {
        eprintln!(
            "stopped at once: every finished question is saved; run the same command again to resume"
        );
        let mut manifest = manifest.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        manifest.end("killed", INTERRUPTED_STATUS);
        if let Err(error) = manifest.write() {
            eprintln!("could not write {}: {error:#}", manifest.path().display());
        }
        lock.release();
    });
    stop
}

/// Resolves when `halt` turns true; never if its sender is gone without that.
async fn until_halted(mut halt: tokio::sync::watch::Receiver<bool>) {
    if halt.wait_for(|halted| *halted).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// How the build side of the pipeline ended.
enum Built {
    /// Every conversation went through the build.
    Done(BuildSummary),
    /// Ctrl-C: the build was dropped (finished sessions are cached).
    Interrupted,
    /// The endpoint refused the key or the model.
    Fatal(String),
}

/// Build and answer at once (see the module documentation).
async fn phases(
    job: &RunJob,
    conversations: Vec<Conversation>,
    stop: StopRequest,
    tape: &Arc<Tape>,
) -> anyhow::Result<RunOutcome> {
    let (models, build_settings) = (&job.models, &job.build);
    let latch = Arc::new(FatalLatch::default());
    let (build_client, embed_client) =
        (chat_client(models, &models.build_model)?, api_embedder(models, &job.embedder)?);
    let answer_client = chat_client(models, &models.answer_model)?;
    // Every call goes through the run's tape (recorded, or played back by `replay`).
    let build_chat = TapedChat::new(&build_client, Arc::clone(tape));
    let embedder = TapedEmbedder::new(&embed_client, Arc::clone(tape));
    let answer_chat = TapedChat::new(&answer_client, Arc::clone(tape));
    let memgas = job.memgas.as_ref().map(|model| {
        let data_dir = job.paths.root.join("data");
        MemgasCaches::new(&data_dir, job.data.kind, model.explicit_dir.clone(), build_settings)
            .with_tape(Arc::clone(tape))
    });
    let source = CacheSource::new(build_settings, crate::llm::Embedder::name(&embedder), memgas);
    let bars = (!job.quiet).then(indicatif::MultiProgress::new);

    // The build announces each finished conversation on `ready`; the answer side loads it and
    // adds its questions to the pool. `halt` stops the answers when the build cannot go on.
    let (ready, arrivals) = futures::channel::mpsc::unbounded::<usize>();
    let (halt, halted) = tokio::sync::watch::channel(false);
    let key = models.key_variable;
    let latched_chat = Latched::sharing(&build_chat, &latch, key, AfterFatal::Wait);
    let latched_embedder = Latched::sharing(&embedder, &latch, key, AfterFatal::Wait);
    let building = async {
        let built = tokio::select! {
            biased;
            cause = latch.tripped() => Ok(Built::Fatal(cause.to_string())),
            () = stop.requested() => Ok(Built::Interrupted),
            built = crate::ingest::build_each(
                build_settings,
                &latched_chat,
                &latched_embedder,
                &conversations,
                bars.as_ref(),
                |index| { let _ = ready.unbounded_send(index); },
            ) => built.map(Built::Done),
        };
        ready.close_channel();
        if !matches!(built, Ok(Built::Done(_))) {
            let _ = halt.send(true);
        }
        built
    };
    let feed = SampleFeed {
        // Shared, not cloned, by the questions of the conversation.
        samples: arrivals
            .then(|index| Snapshot::from_caches(&source, conversations[index].clone()))
            .map_ok(Arc::new)
            .boxed(),
        questions: conversations.iter().map(|c| c.questions.len()).sum(),
        bars: bars.clone(),
    };
    let wind_down = either_stopped(&stop, halted);
    let pass = job.pass();
    let answering =
        crate::agent::answer_stream(&job.answer, &pass, feed, &answer_chat, &embedder, wind_down);
    let (built, summary) = tokio::join!(building, answering);
    let summary = summary?;
    let built = built?;
    let build = if let Built::Done(build) = &built { Some(build.clone()) } else { None };
    let (exit_code, error) = exit(built, &summary);
    Ok(RunOutcome {
        summary: Some(summary),
        build,
        exit_code,
        error,
        manifest: Default::default(),
        endpoint_usage: endpoint_usage(&build_client, &embed_client, Some(&answer_client)),
        replayed: None,
    })
}

/// Resolves when the run is stopped (Ctrl-C) or halted (the build cannot go on).
fn either_stopped(
    stop: &StopRequest,
    halt: tokio::sync::watch::Receiver<bool>,
) -> impl Future<Output = ()> + Send + 'static {
    let stop = stop.requested();
    async move {
        tokio::select! {
            () = stop => {}
            () = until_halted(halt) => {}
        }
    }
}

/// The exit code and the error of a run whose build ended as `built`.
fn exit(built: Built, summary: &AnswerSummary) -> (u8, Option<String>) {
    match (built, &summary.fatal) {
        (Built::Fatal(cause), _) => (1, Some(format!("building stopped: {cause}"))),
        (_, Some(cause)) => (1, Some(format!("answering stopped: {cause}"))),
        (built, None) => {
            if let Built::Done(built) = &built
                && !built.is_complete()
            {
                tracing::warn!(
                    failed = built.failed().count(),
                    "some sessions failed to build; the questions of their conversations stay pending until a rerun builds them"
                );
            }
            let left = summary.resume_hint().is_some() || summary.interrupted;
            (if left || matches!(built, Built::Interrupted) { 2 } else { 0 }, None)
        }
    }
}

/// What each client sent (see [`RunOutcome::endpoint_usage`]).
fn endpoint_usage(
    build_chat: &Client,
    embedder: &EmbedClient,
    answer_chat: Option<&Client>,
) -> BTreeMap<String, UsageTotals> {
    let mut usage = BTreeMap::new();
    usage.insert("build_chat".to_string(), build_chat.usage());
    usage.insert("embeddings".to_string(), embedder.usage());
    if let Some(answer_chat) = answer_chat {
        usage.insert("answer_chat".to_string(), answer_chat.usage());
    }
    usage
}
