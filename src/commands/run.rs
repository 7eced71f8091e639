//! `mragent run`: check the input, take the run lock, write the manifest, build every selected
//! conversation's memory (cached), index it for MemGAS, and answer the questions whose memory
//! is complete. The first Ctrl-C stops taking new work and writes what is in flight; the second
//! exits at once (every finished question is already on disk). A refused key or an unknown
//! model stops the run at the first such reply.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use anyhow::Context as _;

use super::guard::RunLock;
use super::manifest::{Manifest, endpoint_host};
use super::{api_embedder, build_settings};
use crate::agent::{AnswerSettings, MemgasMemory, RunSummary, SampleMemory};
use crate::cli::RunCommandArgs;
use crate::dataset::Conversation;
use crate::ingest::BuildSettings;
use crate::llm::fatal::{AfterFatal, FatalLatch, Latched};
use crate::llm::{Client, EmbedClient, UsageTotals};
use crate::settings::{DataSettings, ModelSettings, ProjectPaths, RunSettings};

/// How a run ended.
#[derive(Debug)]
pub struct RunOutcome {
    /// What the answer phase did (absent when the run stopped before it).
    pub summary: Option<RunSummary>,
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
        crate::results::check_path_component("sample id", &conversation.sample_id)
            .map_err(|message| anyhow::anyhow!("{}: {message}", data.file.display()))?;
    }
    Ok(())
}

/// The job (see the module documentation).
pub async fn run(
    paths: &ProjectPaths,
    data: &DataSettings,
    models: &ModelSettings,
    args: &RunCommandArgs,
    quiet: bool,
    conversations: Vec<Conversation>,
) -> anyhow::Result<RunOutcome> {
    let run = RunSettings::resolve(&args.run)?;
    check_sample_ids(data, &conversations)?;
    let conversations = select_shard(conversations, run.shard);
    let tag = run.tag();
    let results = paths.root.join("result").join(data.kind.as_str());
    let lock_path = results.join(format!(".{}_{tag}.lock", models.build_model.alias));
    let lock = Arc::new(RunLock::acquire(&lock_path)?);
    let manifest_path = results.join(format!("{}_{tag}.manifest.json", models.build_model.alias));
    let mut manifest = Manifest::start(manifest_path.clone(), data.kind.as_str(), &data.file)?;
    describe(&mut manifest, models, args, &run, &conversations);
    manifest.write()?;
    let manifest = Arc::new(Mutex::new(manifest));
    let stop = interrupts(manifest.clone(), lock.clone());

    let outcome = phases(paths, data, models, args, quiet, &run, conversations, stop).await;
    lock.release();
    let mut manifest = manifest.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
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
fn describe(
    manifest: &mut Manifest,
    models: &ModelSettings,
    args: &RunCommandArgs,
    run: &RunSettings,
    conversations: &[Conversation],
) {
    manifest.models.insert("build".into(), models.build_model.id.clone());
    manifest.models.insert("answer".into(), models.answer_model.id.clone());
    manifest.models.insert("embedding".into(), args.embed.embed_model.clone());
    manifest.endpoint_host = endpoint_host(&models.base_url);
    manifest.set("file", &run.file);
    manifest.set("shard", run.shard.map(|(k, n)| format!("{k}/{n}")));
    manifest.set("workers", run.workers);
    manifest.set("seed", args.seed);
    manifest.set("memgas", !args.no_memgas);
    manifest.set("traces", !args.no_traces);
    manifest.set("requests_per_minute", models.requests_per_minute);
    manifest.set("tokens_per_minute", models.tokens_per_minute);
    manifest.set("timeout_s", models.timeout.as_secs());
    manifest.set("structured_output", models.structured_output);
    manifest.set("hedge", models.hedge);
    manifest.set("answer_prompts", crate::agent::answer_prompts_version());
    let samples: Vec<&str> = conversations.iter().map(|c| c.sample_id.as_str()).collect();
    manifest.set("samples", samples);
}

/// Ctrl-C handling: the returned receiver turns true at the first Ctrl-C; the second ends the
/// process at once with exit code 130, after recording that in the manifest.
fn interrupts(
    manifest: Arc<Mutex<Manifest>>,
    lock: Arc<RunLock>,
) -> tokio::sync::watch::Receiver<bool> {
    let (sender, receiver) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_err() {
            // No Ctrl-C support: never stop early (the sender stays alive).
            return std::future::pending::<()>().await;
        }
        eprintln!(
            "interrupted: finishing the work in flight, starting nothing new (press Ctrl-C again to stop at once)"
        );
        let _ = sender.send(true);
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!(
                "stopped at once: every finished question is saved; run the same command again to resume"
            );
            let mut manifest = manifest.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            manifest.end("killed", 130);
            if let Err(error) = manifest.write() {
                eprintln!("could not write {}: {error:#}", manifest.path().display());
            }
            lock.release();
            std::process::exit(130);
        }
    });
    receiver
}

/// Resolves when `stop` turns true; never if its sender is gone without that.
async fn stopped(mut stop: tokio::sync::watch::Receiver<bool>) {
    if stop.wait_for(|stopped| *stopped).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Build, load, answer.
#[allow(clippy::too_many_arguments)]
async fn phases(
    paths: &ProjectPaths,
    data: &DataSettings,
    models: &ModelSettings,
    args: &RunCommandArgs,
    quiet: bool,
    run: &RunSettings,
    conversations: Vec<Conversation>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<RunOutcome> {
    let mut build_settings = build_settings(paths, data, models, run.workers as u32);
    build_settings.progress = !quiet;
    let latch = Arc::new(FatalLatch::default());
    let build_chat = crate::llm::build_chat_model(&models.llm_config(&models.build_model))
        .context("building the model client")?;
    let embedder = api_embedder(models, &args.embed)?;
    let outcome = |summary, exit_code, error, answer_chat: Option<&Client>| RunOutcome {
        summary,
        exit_code,
        error,
        manifest: Default::default(),
        endpoint_usage: endpoint_usage(&build_chat, &embedder, answer_chat),
    };
    let key = models.key_variable;
    let latched_chat = Latched::sharing(&build_chat, &latch, key, AfterFatal::Wait);
    let latched_embedder = Latched::sharing(&embedder, &latch, key, AfterFatal::Wait);
    let built = tokio::select! {
        biased;
        cause = latch.tripped() => {
            return Ok(outcome(None, 1, Some(format!("building stopped: {cause}")), None));
        }
        () = stopped(stop.clone()) => return Ok(outcome(None, 2, None, None)),
        built = crate::ingest::build(
            &build_settings,
            &latched_chat,
            &latched_embedder,
            &conversations,
        ) => built?,
    };
    if !built.is_complete() {
        tracing::warn!(
            failed = built.failed().count(),
            "some sessions failed to build; the questions of their conversations stay pending until a rerun builds them"
        );
    }

    let local = local_embedder(paths, args).await?;
    let embedder_name = crate::llm::Embedder::name(&embedder).to_string();
    let samples =
        load_samples(paths, data, &build_settings, &embedder_name, local.as_ref(), conversations)
            .await?;

    let settings = answer_settings(paths, data, models, args, run, quiet);
    let answer_chat = crate::llm::build_chat_model(&models.llm_config(&models.answer_model))
        .context("building the model client")?;
    let summary =
        crate::agent::answer_all(&settings, &samples, &answer_chat, &embedder, stopped(stop))
            .await?;
    let (exit_code, error) = match &summary.fatal {
        Some(cause) => (1, Some(format!("answering stopped: {cause}"))),
        None if summary.resume_hint().is_some() || summary.interrupted => (2, None),
        None => (0, None),
    };
    Ok(outcome(Some(summary), exit_code, error, Some(&answer_chat)))
}

/// The answer phase's settings.
fn answer_settings(
    paths: &ProjectPaths,
    data: &DataSettings,
    models: &ModelSettings,
    args: &RunCommandArgs,
    run: &RunSettings,
    quiet: bool,
) -> AnswerSettings {
    let mut settings = AnswerSettings::new(
        &paths.root,
        data.kind,
        &models.build_model.alias,
        &models.answer_model.id,
        &run.file,
    );
    settings.workers = run.workers;
    settings.seed = args.seed;
    settings.progress = !quiet;
    settings.traces = !args.no_traces;
    settings.key_variable = models.key_variable.to_string();
    settings
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

/// Fingerprint of a sample's memory: SHA-256 over its three stage cache files (their names and
/// bytes; the caches record model and prompt versions), shortened to 16 hex digits. Of the
/// embedding cache only the memory part counts: it also holds the questions' vectors, and an
/// edited question must not make every other answer of the sample stale.
pub fn memory_fingerprint(settings: &BuildSettings, embedder: &str, sample_id: &str) -> String {
    use sha2::Digest as _;
    let mut hasher = sha2::Sha256::new();
    let embeddings = settings.embedding_path(embedder, sample_id);
    for path in
        [settings.rewrite_path(sample_id), settings.keyword_path(sample_id), embeddings.clone()]
    {
        let name = path.file_name().map(|name| name.to_string_lossy().into_owned());
        hasher.update(name.unwrap_or_default().as_bytes());
        let read = std::fs::read(&path).map(|bytes| {
            if path == embeddings {
                crate::ingest::embed::memory_part(&bytes).unwrap_or(bytes)
            } else {
                bytes
            }
        });
        match read {
            Ok(bytes) => {
                hasher.update((bytes.len() as u64).to_le_bytes());
                hasher.update(&bytes);
            }
            Err(_) => hasher.update(b"absent"),
        }
    }
    hasher.finalize().iter().take(8).map(|byte| format!("{byte:02x}")).collect()
}

/// Every conversation's memory from its build (`embedder_name` names the build's embedder),
/// with its completeness and fingerprint, and a MemGAS index when a `local` embedder is given.
async fn load_samples(
    paths: &ProjectPaths,
    data: &DataSettings,
    build_settings: &BuildSettings,
    embedder_name: &str,
    local: Option<&crate::embedding::LocalEmbedder>,
    conversations: Vec<Conversation>,
) -> anyhow::Result<Vec<SampleMemory>> {
    let cache = crate::retrieval::EmbeddingCache::new(
        &paths.root.join("data"),
        data.kind.as_str(),
        crate::embedding::LOCAL_EMBEDDER_NAME,
    );
    let mut samples = Vec::with_capacity(conversations.len());
    for conversation in conversations {
        let memory = crate::ingest::load_memory(build_settings, embedder_name, &conversation)
            .with_context(|| format!("loading the memory of {}", conversation.sample_id))?;
        let fingerprint =
            memory_fingerprint(build_settings, embedder_name, &conversation.sample_id);
        let memgas = match local {
            Some(local) if memory.summary.failed.is_empty() => {
                let granules = crate::ingest::load_granules(build_settings, &conversation)?;
                let units =
                    crate::retrieval::eval::session_units(&conversation, None, granules.as_ref());
                let index = crate::retrieval::build_index(
                    units,
                    local,
                    Some((&cache, &conversation.sample_id)),
                    crate::retrieval::IndexOptions::default(),
                )
                .await
                .with_context(|| format!("indexing {} for MemGAS", conversation.sample_id))?;
                Some(MemgasMemory::new(index, local.clone()))
            }
            _ => None,
        };
        let mut sample = SampleMemory::from_built(conversation, memory);
        sample.memgas = memgas;
        sample.memory.fingerprint = fingerprint;
        samples.push(sample);
    }
    Ok(samples)
}

/// The local embedder MemGAS indexes with, unless `--no-memgas`.
async fn local_embedder(
    paths: &ProjectPaths,
    args: &RunCommandArgs,
) -> anyhow::Result<Option<crate::embedding::LocalEmbedder>> {
    if args.no_memgas {
        return Ok(None);
    }
    let source = crate::embedding::ModelSource {
        explicit_dir: args.embed_model_dir.clone(),
        models_root: paths.root.join("data").join("models"),
    };
    let embedder = tokio::task::spawn_blocking(move || {
        crate::embedding::LocalEmbedder::from_source(
            &source,
            crate::embedding::LocalEmbedderOptions::default(),
        )
    })
    .await
    .context("loading the local embedder")??;
    Ok(Some(embedder))
}
