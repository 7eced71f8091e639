//! The write path: conversations → rewrite → keywords → embeddings, each stage cached per unit
//! (session, or batch of sessions for LongMemEval), then the stage outputs a memory graph is
//! built from.
//!
//! Entry points: [`build`] for many conversations (the `mragent build` command), [`build_memory`]
//! for one conversation when its memory is needed right away, and [`load_memory`] to read a
//! finished build back without any model call.
//!
//! Concurrency: units of all conversations run concurrently, at most
//! [`BuildSettings::workers`] at a time (a semaphore; see [`Shared::permits`]). A unit runs its
//! three stages back to back and writes each stage's cache as soon as that stage is done, so an
//! interrupted build keeps every finished unit and the next build redoes only the rest. Request
//! rates are the `llm` stack's business, not this module's.
//!
//! Failures: a unit whose answer stays invalid, or whose calls fail, is recorded as failed in
//! the cache and listed in the [`BuildSummary`]; the build goes on with the other units. Only
//! errors that would fail every unit alike (bad key, unknown model, an unwritable cache) abort it.

mod ask;
mod cache;
pub mod embed;
pub mod granules;
pub mod keywords;
mod progress;
pub mod rewrite;
pub mod session;
mod unit;

use std::fmt;
use std::path::PathBuf;
use std::sync::Mutex as StdMutex;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::stream::{self, FuturesUnordered, StreamExt as _, TryStreamExt as _};
use serde::Serialize;
use tokio::sync::{Mutex, Semaphore};
use tracing::Instrument as _;

use crate::dataset::{Conversation, DatasetKind};
use crate::fsutil::safe_name;
use crate::ingest::ask::{AskFailure, AskSettings, ask_checked};
use crate::ingest::cache::{Outcome, PlannedUnit, Provenance, StageCache, UnitEntry};
pub use crate::ingest::embed::SampleEmbeddings;
use crate::ingest::embed::{EmbeddingCache, UnitTexts, embed_texts, question_texts};
pub use crate::ingest::granules::{
    ConversationGranules, GranuleSummary, SessionGranules, build_granules, load_granules,
};
use crate::ingest::keywords::KeywordRecord;
use crate::ingest::progress::{Progress, human_count};
pub use crate::ingest::session::{SessionError, SessionOutputs, build_session};
use crate::ingest::unit::{Unit, plan_units};
use crate::llm::{self, ChatModel, Embedder, Usage};
use crate::memory::input::{SessionKeywords, SessionRewrite};
use crate::memory::{MemoryGraph, build_graph};
use crate::prompts;

/// Resolved settings of a build.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct BuildSettings {
    /// The project's `data/` directory; caches go under `<data_dir>/<dataset>/`.
    pub data_dir: PathBuf,
    /// Dataset (names the cache folder: `locomo`, `LM`).
    pub dataset: DatasetKind,
    /// Model name used in cache paths (`rewrite_<model_name>`): the `--model` value as given,
    /// e.g. `gemini`.
    pub model_name: String,
    /// Model id sent to the endpoint, e.g. `google/gemini-2.5-flash`; recorded in the caches.
    pub model: String,
    /// LongMemEval: sessions per rewrite call (`--lm-batch`); LoCoMo always uses 1.
    pub lm_batch: usize,
    /// Units (sessions or batches) in flight at once across all conversations.
    pub workers: usize,
    /// Re-asks allowed for an answer that fails its schema, and again for one that fails the
    /// semantic checks.
    pub max_reasks: u32,
    /// Draw a progress bar on stderr.
    pub progress: bool,
}

impl BuildSettings {
    /// Settings with the reference defaults: batch 1, 10 workers, 3 re-asks, progress bar on.
    pub fn new(
        data_dir: impl Into<PathBuf>,
        dataset: DatasetKind,
        model_name: &str,
        model: &str,
    ) -> Self {
        Self {
            data_dir: data_dir.into(),
            dataset,
            model_name: model_name.to_string(),
            model: model.to_string(),
            lm_batch: 1,
            workers: 10,
            max_reasks: 3,
            progress: true,
        }
    }

    /// Sessions per rewrite call for this dataset.
    fn batch(&self) -> usize {
        match self.dataset {
            DatasetKind::Locomo | DatasetKind::Own => 1,
            DatasetKind::LongMemEval => self.lm_batch.max(1),
        }
    }

    fn dataset_dir(&self) -> PathBuf {
        self.data_dir.join(self.dataset.as_str())
    }

    /// `data/<dataset>/rewrite_<model>/<sample>_rewrite.json`.
    pub fn rewrite_path(&self, sample_id: &str) -> PathBuf {
        self.dataset_dir()
            .join(format!("rewrite_{}", safe_name(&self.model_name, '_')))
            .join(format!("{}_rewrite.json", safe_name(sample_id, '_')))
    }

    /// `data/<dataset>/keyword_<model>/<sample>_keyword.json`.
    pub fn keyword_path(&self, sample_id: &str) -> PathBuf {
        self.dataset_dir()
            .join(format!("keyword_{}", safe_name(&self.model_name, '_')))
            .join(format!("{}_keyword.json", safe_name(sample_id, '_')))
    }

    /// `data/<dataset>/embedding/<embedder>/<sample>_embedding.bin`. The embeddings are of the
    /// rewritten text, so the rewrite model is part of the name too.
    pub fn embedding_path(&self, embedder: &str, sample_id: &str) -> PathBuf {
        self.dataset_dir().join("embedding").join(safe_name(embedder, '_')).join(format!(
            "{}_{}_embedding.bin",
            safe_name(sample_id, '_'),
            safe_name(&self.model_name, '_')
        ))
    }
}

/// A build stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// Stage 1: dialogue → sentences, topics, personal facts.
    Rewrite,
    /// Stage 2: sentences → keywords.
    Keywords,
    /// Stage 3: sentences, topics and questions → vectors.
    Embeddings,
    /// MemGAS granules: session → LLM summary and keywords ([`build_granules`]; not part of
    /// the memory build).
    Granules,
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Stage::Rewrite => "rewrite",
            Stage::Keywords => "keywords",
            Stage::Embeddings => "embeddings",
            Stage::Granules => "granules",
        })
    }
}

/// A unit that has no valid output for some stage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FailedUnit {
    /// Sample id.
    pub sample_id: String,
    /// Unit key (`session_3`, `session_1-session_10`, or `questions` for question embeddings).
    pub unit: String,
    /// Session numbers covered (empty for questions).
    pub sessions: Vec<u32>,
    /// The stage that failed.
    pub stage: Stage,
    /// Why.
    pub error: String,
    /// Model calls made for it in this build.
    pub attempts: u32,
}

/// Everything the stages produced for one conversation, in dialogue order: what the graph
/// store is built from. Only units whose rewrite is valid contribute; keywords only where the
/// keyword stage finished for exactly that rewrite.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StageOutputs {
    /// One record per unit with a valid rewrite.
    pub rewrites: Vec<SessionRewrite>,
    /// One record per unit whose keywords match its current rewrite.
    pub keywords: Vec<SessionKeywords>,
}

/// What a build made of one conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SampleSummary {
    /// Sample id.
    pub sample_id: String,
    /// Sessions with turns.
    pub sessions: usize,
    /// Of those, sessions all of whose stages came from the caches.
    pub sessions_reused: usize,
    /// Episode events (rewritten sentences).
    pub events: usize,
    /// Distinct keys (keywords and speakers).
    pub keys: usize,
    /// Topics.
    pub topics: usize,
    /// Distinct persons with personal facts.
    pub persons: usize,
    /// Distinct event dates.
    pub dates: usize,
    /// Units without valid output for some stage.
    pub failed: Vec<FailedUnit>,
    /// Keyword answers' sentence ids that matched no sentence (dropped with a warning).
    pub dropped_keyword_ids: usize,
    /// Tokens spent on this conversation in this build (chat and embeddings).
    pub usage: Usage,
    /// Model calls made for this conversation in this build (chat, including re-asks).
    pub chat_calls: u32,
}

/// What a build did, for the command's report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BuildSummary {
    /// Per conversation, in input order.
    pub samples: Vec<SampleSummary>,
    /// Notices about caches that were discarded (a changed prompt or model), one per file.
    pub notices: Vec<String>,
    /// Tokens spent in this build.
    pub usage: Usage,
    /// Wall time.
    pub elapsed: Duration,
}

impl BuildSummary {
    /// Every failed unit.
    pub fn failed(&self) -> impl Iterator<Item = &FailedUnit> {
        self.samples.iter().flat_map(|sample| sample.failed.iter())
    }

    /// Whether every unit of every conversation has valid output for every stage.
    pub fn is_complete(&self) -> bool {
        self.failed().next().is_none()
    }
}

impl fmt::Display for BuildSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sessions: usize = self.samples.iter().map(|sample| sample.sessions).sum();
        let reused: usize = self.samples.iter().map(|sample| sample.sessions_reused).sum();
        let failed = self.failed().count();
        writeln!(
            f,
            "built {} conversations, {sessions} sessions ({reused} from cache), {failed} failed units, {} tokens, {:.1}s",
            self.samples.len(),
            human_count(self.usage.total()),
            self.elapsed.as_secs_f64()
        )?;
        writeln!(
            f,
            "{:<24} {:>8} {:>7} {:>6} {:>6} {:>7} {:>5} {:>6}",
            "sample", "sessions", "events", "keys", "topics", "persons", "dates", "failed"
        )?;
        for sample in &self.samples {
            writeln!(
                f,
                "{:<24} {:>8} {:>7} {:>6} {:>6} {:>7} {:>5} {:>6}",
                sample.sample_id,
                sample.sessions,
                sample.events,
                sample.keys,
                sample.topics,
                sample.persons,
                sample.dates,
                sample.failed.len()
            )?;
        }
        for unit in self.failed() {
            writeln!(
                f,
                "failed: {} {} ({}): {}",
                unit.sample_id, unit.unit, unit.stage, unit.error
            )?;
        }
        for notice in &self.notices {
            writeln!(f, "note: {notice}")?;
        }
        Ok(())
    }
}

/// One conversation's memory, as built or read back from the caches.
#[derive(Debug, Clone)]
pub struct BuiltMemory {
    /// The memory graph built from the stage outputs.
    pub graph: MemoryGraph,
    /// Stage outputs.
    pub outputs: StageOutputs,
    /// Vectors of sentences, topics and questions.
    pub embeddings: SampleEmbeddings,
    /// Counts and failures.
    pub summary: SampleSummary,
}

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
    let started = Instant::now();
    let shared = Shared::new(settings, chat, embedder, conversations);
    tracing::info!(conversations = conversations.len(), model = %settings.model, embedder = embedder.name(), "build started");
    let shared_ref = &shared;
    let samples: Vec<SampleSummary> = stream::iter(conversations)
        .map(|conversation| async move {
            Ok::<_, anyhow::Error>(build_sample(shared_ref, conversation, false).await?.0)
        })
        .buffered(settings.workers.max(1))
        .try_collect()
        .await?;
    shared.progress.finish();
    let usage = samples.iter().fold(Usage::default(), |total, sample| total + sample.usage);
    let notices = shared.notices.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
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
    shared.progress.finish();
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
            Some(record) if caches.keywords.done(&keyword_planned(unit, record)).is_none() => {
                Some(Stage::Keywords)
            }
            Some(record) if !caches.embeddings.unit_done(&embedding_planned(unit, record).0) => {
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
    let summary = summarise(conversation, &graph, failed, 0, Usage::default(), 0);
    Ok(BuiltMemory { embeddings: caches.embeddings.to_embeddings(), graph, outputs, summary })
}

/// State shared by every unit of a build.
struct Shared<'a, M, E> {
    settings: &'a BuildSettings,
    chat: &'a M,
    embedder: &'a E,
    ask: AskSettings,
    /// Bounds the units in flight across all conversations to `settings.workers`. A unit
    /// holds one permit from its first model call until its last stage is written, so the
    /// number of concurrent requests never exceeds the number of workers.
    permits: Semaphore,
    progress: Progress,
    /// Cache-invalidation notices, in the order they were found.
    notices: StdMutex<Vec<String>>,
}

impl<'a, M: ChatModel, E: Embedder> Shared<'a, M, E> {
    fn new(
        settings: &'a BuildSettings,
        chat: &'a M,
        embedder: &'a E,
        conversations: &[Conversation],
    ) -> Self {
        let total: usize = conversations
            .iter()
            .map(|c| c.sessions.iter().filter(|s| !s.turns.is_empty()).count())
            .sum();
        Self {
            settings,
            chat,
            embedder,
            ask: AskSettings { model: settings.model.clone(), max_reasks: settings.max_reasks },
            permits: Semaphore::new(settings.workers.max(1)),
            progress: Progress::new(total as u64, settings.progress),
            notices: StdMutex::new(Vec::new()),
        }
    }

    fn notice(&self, notice: String) {
        tracing::warn!("{notice}");
        self.notices.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(notice);
    }
}

/// The three caches of one conversation.
struct SampleCaches {
    rewrite: StageCache<SessionRewrite>,
    keywords: StageCache<KeywordRecord>,
    embeddings: EmbeddingCache,
    notices: Vec<String>,
}

impl SampleCaches {
    /// Open (or start) the caches, each checked against the current prompt versions, model
    /// and embedder. A stale stage's notice names the file and what changed.
    fn open(
        settings: &BuildSettings,
        embedder: &str,
        conversation: &Conversation,
    ) -> anyhow::Result<Self> {
        let sample_id = &conversation.sample_id;
        let rewrite_version = (prompts::REWRITE.name.to_string(), prompts::REWRITE.version());
        let keyword_version = (prompts::KEYWORDS.name.to_string(), prompts::KEYWORDS.version());
        let provenance = |stage: &str, model: &str, versions: Vec<(String, String)>| Provenance {
            stage: stage.into(),
            sample_id: sample_id.clone(),
            model: model.into(),
            versions: versions.into_iter().collect(),
        };
        let (mut rewrite, mut notices) = StageCache::open(
            &settings.rewrite_path(sample_id),
            provenance("rewrite", &settings.model, vec![rewrite_version.clone()]),
        )?;
        let (mut keywords, keyword_notices) = StageCache::open(
            &settings.keyword_path(sample_id),
            provenance("keywords", &settings.model, vec![rewrite_version.clone(), keyword_version]),
        )?;
        let mut embedding_provenance = provenance("embeddings", embedder, vec![rewrite_version]);
        embedding_provenance.versions.insert("rewrite model".into(), settings.model.clone());
        let (mut embeddings, embedding_notices) = EmbeddingCache::open(
            &settings.embedding_path(embedder, sample_id),
            embedding_provenance,
        )?;
        notices.extend(keyword_notices);
        notices.extend(embedding_notices);
        let plan: Vec<PlannedUnit> =
            plan_units(conversation, settings.batch()).iter().map(rewrite_planned).collect();
        rewrite.retain_planned(&plan);
        keywords.retain_planned(&plan);
        embeddings.retain_planned(&plan);
        Ok(Self { rewrite, keywords, embeddings, notices })
    }

    /// Whether all three stages of `unit` are cached.
    fn unit_complete(&self, unit: &Unit<'_>) -> bool {
        match self.rewrite.done(&rewrite_planned(unit)) {
            Some(record) => {
                self.keywords.done(&keyword_planned(unit, record)).is_some()
                    && self.embeddings.unit_done(&embedding_planned(unit, record).0)
            }
            None => false,
        }
    }

    /// The stage outputs of every unit with a valid rewrite, in dialogue order.
    fn outputs(&self, units: &[Unit<'_>]) -> StageOutputs {
        let mut outputs = StageOutputs::default();
        for unit in units {
            let Some(record) = self.rewrite.done(&rewrite_planned(unit)) else { continue };
            if let Some(keywords) = self.keywords.done(&keyword_planned(unit, record)) {
                outputs.keywords.push(keywords.keywords.clone());
            }
            outputs.rewrites.push(record.clone());
        }
        outputs
    }
}

fn rewrite_planned(unit: &Unit<'_>) -> PlannedUnit {
    PlannedUnit {
        key: unit.key.clone(),
        first_session: unit.first_session,
        input_hash: unit.input_hash(),
    }
}

fn keyword_planned(unit: &Unit<'_>, record: &SessionRewrite) -> PlannedUnit {
    PlannedUnit {
        key: unit.key.clone(),
        first_session: unit.first_session,
        input_hash: keywords::input_hash(&record.sentences),
    }
}

fn embedding_planned(unit: &Unit<'_>, record: &SessionRewrite) -> (PlannedUnit, UnitTexts) {
    let texts = UnitTexts::of(record);
    (
        PlannedUnit {
            key: unit.key.clone(),
            first_session: unit.first_session,
            input_hash: texts.input_hash(),
        },
        texts,
    )
}

/// One conversation's build in progress: its caches behind async locks (held across the
/// cache write, so writes of one file never interleave and the last write holds every unit).
struct SampleRun<'c> {
    conversation: &'c Conversation,
    rewrite: Mutex<StageCache<SessionRewrite>>,
    keywords: Mutex<StageCache<KeywordRecord>>,
    embeddings: Mutex<EmbeddingCache>,
    tally: StdMutex<Tally>,
}

/// What this build spent and what failed, for one conversation.
#[derive(Debug, Default)]
struct Tally {
    usage: Usage,
    chat_calls: u32,
    failed: Vec<FailedUnit>,
}

impl SampleRun<'_> {
    fn tally(&self) -> std::sync::MutexGuard<'_, Tally> {
        self.tally.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn ledger<'a>(&'a self, progress: &'a Progress) -> Ledger<'a> {
        Ledger { progress, conversation: self.conversation, tally: &self.tally }
    }
}

/// Where [`settle`] accounts for a stage result: the progress bar and one conversation's
/// tally. The MemGAS granules (`granules.rs`) settle their units through it too.
#[derive(Clone, Copy)]
struct Ledger<'a> {
    progress: &'a Progress,
    conversation: &'a Conversation,
    tally: &'a StdMutex<Tally>,
}

impl Ledger<'_> {
    fn tally(&self) -> std::sync::MutexGuard<'_, Tally> {
        self.tally.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
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
        shared.notice(notice.clone());
    }
    let units = plan_units(conversation, settings.batch());
    let (complete, pending): (Vec<&Unit<'_>>, Vec<&Unit<'_>>) =
        units.iter().partition(|unit| caches.unit_complete(unit));
    let sessions_reused: usize = complete.iter().map(|unit| unit.n_sessions()).sum();
    shared.progress.reused(sessions_reused);
    tracing::info!(sample = %conversation.sample_id, units = units.len(), cached = complete.len(), "building conversation");

    let run = SampleRun {
        conversation,
        rewrite: Mutex::new(caches.rewrite),
        keywords: Mutex::new(caches.keywords),
        embeddings: Mutex::new(caches.embeddings),
        tally: StdMutex::new(Tally::default()),
    };
    let mut in_flight: FuturesUnordered<_> =
        pending.into_iter().map(|unit| build_unit(shared, &run, unit)).collect();
    while let Some(result) = in_flight.next().await {
        result?;
    }
    drop(in_flight);
    embed_questions(shared, &run).await?;

    let rewrite = run.rewrite.into_inner();
    let keywords = run.keywords.into_inner();
    let embeddings = run.embeddings.into_inner();
    let tally = run.tally.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
    let caches = SampleCaches { rewrite, keywords, embeddings, notices: Vec::new() };
    let outputs = caches.outputs(&units);
    let dropped: usize =
        caches.keywords.outputs().map(|(_, record)| record.dropped_ids.len()).sum();
    let mut failed = tally.failed;
    failed.sort_by(|a, b| (a.sessions.first(), a.stage).cmp(&(b.sessions.first(), b.stage)));
    let graph = graph_of(conversation, &outputs)?;
    let mut summary =
        summarise(conversation, &graph, failed, sessions_reused, tally.usage, tally.chat_calls);
    summary.dropped_keyword_ids = dropped;
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
    let _permit = shared.permits.acquire().await.context("build worker pool closed")?;
    let span = tracing::info_span!("unit", sample = %run.conversation.sample_id, unit = %unit.key);
    let result = build_unit_stages(shared, run, unit).instrument(span).await;
    shared.progress.done(unit.n_sessions());
    result
}

async fn build_unit_stages<M: ChatModel, E: Embedder>(
    shared: &Shared<'_, M, E>,
    run: &SampleRun<'_>,
    unit: &Unit<'_>,
) -> anyhow::Result<()> {
    let sample_id = &run.conversation.sample_id;

    // Stage 1: rewrite.
    let planned = rewrite_planned(unit);
    let cached = run.rewrite.lock().await.done(&planned).cloned();
    let record = match cached {
        Some(record) => record,
        None => {
            let prompt = rewrite::render_prompt(unit)?;
            let asked =
                ask_checked(shared.chat, &shared.ask, prompt, &rewrite::schema(), |value| {
                    rewrite::check(value, unit)
                })
                .await;
            let Some(record) = settle(
                run.ledger(&shared.progress),
                unit,
                Stage::Rewrite,
                &planned,
                asked,
                &run.rewrite,
            )
            .await?
            else {
                return Ok(());
            };
            record
        }
    };

    // Stage 2: keywords.
    let planned = keyword_planned(unit, &record);
    if run.keywords.lock().await.done(&planned).is_none() {
        let prompt = keywords::render_prompt(&record.sentences)?;
        let asked = ask_checked(shared.chat, &shared.ask, prompt, &keywords::schema(), |value| {
            keywords::check(value, &record.session, &record.sentences)
        })
        .await;
        let Some(keywords) = settle(
            run.ledger(&shared.progress),
            unit,
            Stage::Keywords,
            &planned,
            asked,
            &run.keywords,
        )
        .await?
        else {
            return Ok(());
        };
        if !keywords.dropped_ids.is_empty() {
            tracing::warn!(sample = %sample_id, unit = %unit.key, ids = ?keywords.dropped_ids, "keyword answer named unknown sentence ids; dropped them");
        }
    }

    // Stage 3: embeddings of sentences and topics.
    let (planned, texts) = embedding_planned(unit, &record);
    if !run.embeddings.lock().await.unit_done(&planned) {
        match embed_texts(shared.embedder, &texts.texts).await {
            Ok(embedded) => {
                shared.progress.tokens(embedded.usage);
                run.tally().usage += embedded.usage;
                run.embeddings.lock().await.record_unit(&planned, &texts, embedded).await?;
            }
            Err(error) => {
                if let embed::EmbedError::Llm(llm_error) = &error {
                    abort_if_fatal(llm_error)?;
                }
                shared.progress.failure();
                tracing::warn!(sample = %sample_id, unit = %unit.key, error = %error, "embedding failed");
                run.tally().failed.push(failed_unit(
                    run.conversation,
                    unit,
                    Stage::Embeddings,
                    error.to_string(),
                    0,
                ));
            }
        }
    }
    Ok(())
}

/// Record a stage's result in its cache and the tally; the output when it succeeded.
async fn settle<T: Serialize + serde::de::DeserializeOwned + Clone>(
    ledger: Ledger<'_>,
    unit: &Unit<'_>,
    stage: Stage,
    planned: &PlannedUnit,
    asked: Result<ask::Asked<T>, AskFailure>,
    cache: &Mutex<StageCache<T>>,
) -> anyhow::Result<Option<T>> {
    let (usage, attempts) = match &asked {
        Ok(asked) => (asked.usage, asked.attempts),
        Err(failure) => (failure.usage, failure.attempts),
    };
    ledger.progress.tokens(usage);
    {
        let mut tally = ledger.tally();
        tally.usage += usage;
        tally.chat_calls += attempts;
    }
    let (outcome, output) = match asked {
        Ok(asked) => (Outcome::Done { output: asked.value.clone() }, Some(asked.value)),
        Err(failure) => {
            if let Some(error) = &failure.llm_error {
                abort_if_fatal(error)?;
            }
            ledger.progress.failure();
            tracing::warn!(sample = %ledger.conversation.sample_id, unit = %unit.key, %stage, error = %failure.error, "unit failed");
            ledger.tally().failed.push(failed_unit(
                ledger.conversation,
                unit,
                stage,
                failure.error.clone(),
                attempts,
            ));
            (Outcome::Failed { error: failure.error }, None)
        }
    };
    let entry = UnitEntry {
        unit: planned.key.clone(),
        first_session: planned.first_session,
        input_hash: planned.input_hash.clone(),
        attempts,
        usage,
        outcome,
    };
    let mut cache = cache.lock().await;
    cache.record(entry).await.with_context(|| format!("writing {}", cache.path().display()))?;
    Ok(output)
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
    let _permit = shared.permits.acquire().await.context("build worker pool closed")?;
    match embed_texts(shared.embedder, &texts).await {
        Ok(embedded) => {
            shared.progress.tokens(embedded.usage);
            run.tally().usage += embedded.usage;
            run.embeddings.lock().await.record_questions(ids, hash, embedded).await
        }
        Err(error) => {
            if let embed::EmbedError::Llm(llm_error) = &error {
                abort_if_fatal(llm_error)?;
            }
            shared.progress.failure();
            run.tally().failed.push(questions_failure(run.conversation, error.to_string(), 0));
            Ok(())
        }
    }
}

/// Errors that would fail every unit the same way abort the build instead of being recorded
/// unit by unit: a configuration problem, a rejected key, an unknown model.
fn abort_if_fatal(error: &llm::Error) -> anyhow::Result<()> {
    match error {
        llm::Error::Config(_) | llm::Error::Api { status: 401 | 403 | 404, .. } => {
            Err(anyhow::anyhow!("the endpoint refuses every request, stopping the build: {error}"))
        }
        _ => Ok(()),
    }
}

fn failed_unit(
    conversation: &Conversation,
    unit: &Unit<'_>,
    stage: Stage,
    error: String,
    attempts: u32,
) -> FailedUnit {
    FailedUnit {
        sample_id: conversation.sample_id.clone(),
        unit: unit.key.clone(),
        sessions: unit.session_numbers(),
        stage,
        error,
        attempts,
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

/// The summary of a conversation's build: counts from its memory graph.
fn summarise(
    conversation: &Conversation,
    graph: &MemoryGraph,
    failed: Vec<FailedUnit>,
    sessions_reused: usize,
    usage: Usage,
    chat_calls: u32,
) -> SampleSummary {
    let stats = graph.stats();
    SampleSummary {
        sample_id: conversation.sample_id.clone(),
        sessions: conversation.sessions.iter().filter(|session| !session.turns.is_empty()).count(),
        sessions_reused,
        events: stats.episodes,
        keys: stats.keys,
        topics: stats.topics,
        persons: stats.persons,
        dates: stats.dates,
        failed,
        dropped_keyword_ids: 0,
        usage,
        chat_calls,
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn cache_paths_follow_the_reference_layout() {
        let settings =
            BuildSettings::new("/p/data", DatasetKind::Locomo, "gemini", "google/gemini-2.5-flash");
        assert_eq!(
            settings.rewrite_path("conv-26"),
            Path::new("/p/data/locomo/rewrite_gemini/conv-26_rewrite.json")
        );
        assert_eq!(
            settings.keyword_path("conv-26"),
            Path::new("/p/data/locomo/keyword_gemini/conv-26_keyword.json")
        );
        assert_eq!(
            settings.embedding_path("openai/text-embedding-3-large", "conv-26"),
            Path::new(
                "/p/data/locomo/embedding/openai_text-embedding-3-large/conv-26_gemini_embedding.bin"
            )
        );
        let lm =
            BuildSettings::new("d", DatasetKind::LongMemEval, "openai/gpt-4o", "openai/gpt-4o");
        assert_eq!(
            lm.rewrite_path("e47becba"),
            Path::new("d/LM/rewrite_openai_gpt-4o/e47becba_rewrite.json")
        );
    }

    #[test]
    fn locomo_ignores_the_batch_setting() {
        let mut settings = BuildSettings::new("d", DatasetKind::Locomo, "m", "m");
        settings.lm_batch = 10;
        assert_eq!(settings.batch(), 1);
        settings.dataset = DatasetKind::LongMemEval;
        assert_eq!(settings.batch(), 10);
    }
}
