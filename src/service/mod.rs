//! The memory service: add to, search and ask own conversations kept in the [`Store`]. What the
//! `memory`/`ask` commands and the HTTP server (`serve`) both call.
//!
//! - [`MemoryService::add`]: stores the messages (one transaction), then runs only the
//!   sessions without outputs for their current content through the build stages
//!   (`ingest::pipeline`, with the store as the sink: `sink`) and embeds their MemGAS units; each session's outputs are
//!   committed as soon as they exist, so an interrupted add loses at most the sessions in
//!   flight and the same add finishes them. Adds to one conversation are serialised by the
//!   store's conversation lock (across processes too).
//! - [`MemoryService::search`]: MemGAS fusion over the stored unit vectors, no chat model.
//! - [`MemoryService::ask`]: the `run` answer loop (`agent::answer_one`) over the conversation's
//!   snapshot (`snapshot::Snapshot::from_store`: the memory graph and MemGAS index made from the
//!   stored outputs; pure, in-memory, no model call), returning its result directly.
//!
//! Both read through the service's per-conversation cache (`cache`): the index is built on a
//! conversation's first query, extended with the sessions an add built, and dropped on forget.

mod add;
mod cache;
mod edits;
mod facts;
mod jobs;
pub(crate) mod ops;
mod query;
mod rows;
mod scope;
mod sink;

use std::path::PathBuf;
use std::sync::Arc;

use chrono::TimeDelta;
use serde::Serialize;

use crate::embedding::LocalEmbedder;
use crate::llm::{EmbedClient, Embedder, Embeddings};
use crate::snapshot::QueryEmbedder as _;
use crate::store::{Store, StoreError};

pub use add::{AddReport, FailedSession, check_limits};
pub use cache::{CacheBudget, CacheCounts, CacheStats, IndexStats};
pub use edits::{FactQuery, ListedFact, UndoReport};
pub use facts::FactsReport;
pub use jobs::{JobsRun, MAX_RUNNING_JOBS, Queued, Waited};
pub use query::{AskReport, MissingSession, SearchHit};
pub use rows::{
    BackgroundJob, BackgroundState, ConversationSummary, EditEntry, FactEntry, JobCounts, JobFault,
    JobUsage, MessageForgotten,
};
pub use scope::{Scope, SearchFilters, time_bound};

/// The embedder name recorded for conversations embedded locally.
pub const LOCAL_EMBEDDER: &str = "local";

/// How long a job runner's claim lasts without renewal, by default.
pub const DEFAULT_JOB_LEASE: std::time::Duration = std::time::Duration::from_secs(30);

/// Settings of a service.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServiceSettings {
    /// Project root: `ask` writes its traces under `log/own/ask/` (and no result file).
    pub root: PathBuf,
    /// The embedder as recorded with each conversation: [`LOCAL_EMBEDDER`] or an API model id.
    pub embedder: String,
    /// Model name used in result file names (the `--model` value as given).
    pub model_name: String,
    /// Model id of the build stages.
    pub model: String,
    /// Model id of the answer loop.
    pub answer_model: String,
    /// A gap without messages that starts a new session.
    pub session_gap: TimeDelta,
    /// Re-asks allowed per stage answer.
    pub max_reasks: u32,
    /// Sessions built at once.
    pub workers: usize,
    /// Meta-memory rules every `ask` gives its loop (`--meta-rules`; empty: none).
    #[serde(skip)]
    pub rules: Arc<crate::agent::rules::RuleSet>,
    /// How long a job runner's claim on a job lasts without renewal (`MRAGENT_JOB_LEASE`,
    /// seconds): a job whose runner died is taken over once it expires.
    pub job_lease: std::time::Duration,
    /// How long an HTTP add (or batch add) that waits holds its request before it answers 202
    /// with its job while the build goes on (`MRAGENT_ADD_WAIT`, seconds; below the 29–60 s
    /// after which API gateways cut requests).
    pub add_wait: std::time::Duration,
    /// The memory the cached conversations and query vectors may take (`--cache-mb`).
    pub cache: CacheBudget,
    /// How every ask is answered (`--answer`, `--gate-threshold`).
    pub answer: crate::agent::AnswerGate,
}

/// How long an HTTP add waits for its build by default (see [`ServiceSettings::add_wait`]).
pub const DEFAULT_ADD_WAIT: std::time::Duration = std::time::Duration::from_secs(25);

impl ServiceSettings {
    /// Defaults: the default session gap, 3 re-asks, 4 workers, no rules, the default cache
    /// budget.
    pub fn new(root: impl Into<PathBuf>, embedder: &str, model_name: &str, model: &str) -> Self {
        Self {
            root: root.into(),
            embedder: embedder.to_string(),
            model_name: model_name.to_string(),
            model: model.to_string(),
            answer_model: model.to_string(),
            session_gap: crate::convo::DEFAULT_SESSION_GAP,
            max_reasks: 3,
            workers: 4,
            rules: Arc::default(),
            job_lease: DEFAULT_JOB_LEASE,
            add_wait: DEFAULT_ADD_WAIT,
            cache: CacheBudget::default(),
            answer: crate::agent::AnswerGate::with_mode(crate::agent::OWN_ANSWER_MODE),
        }
    }
}

/// Why a service call failed.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// The store refused (unknown conversation, bad id, other embedder, database error).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A request field is unusable.
    #[error("field `{field}`: {problem}")]
    Invalid {
        /// The field.
        field: String,
        /// What is wrong.
        problem: String,
    },
    /// The user has no conversation.
    #[error("user {0:?} has no conversation; `mragent memory list --user` shows a user's")]
    UnknownUser(String),
    /// The conversation (or the user's conversations) has no session with stage outputs to
    /// answer from; the second field says why (nothing said before the date asked about, a
    /// job still building, or sessions that failed).
    #[error("{0:?} has no built session to answer from: {1}")]
    NotBuilt(String, String),
    /// Anything else (the endpoint refusing every request, a failed task, IO). The message
    /// holds the whole chain of causes, so they are not also the error's `source`.
    #[error("{0:#}")]
    Other(anyhow::Error),
}

impl From<anyhow::Error> for ServiceError {
    fn from(error: anyhow::Error) -> Self {
        ServiceError::Other(error)
    }
}

impl ServiceError {
    fn invalid(field: &str, problem: impl Into<String>) -> Self {
        ServiceError::Invalid { field: field.to_string(), problem: problem.into() }
    }
}

/// The memory service over one store, one chat model and one embedder.
pub struct MemoryService<M, E> {
    store: Store,
    settings: ServiceSettings,
    chat: M,
    embedder: E,
    cache: cache::ConversationCache,
    /// Wakes this service's job runner when an add queues a job.
    jobs_wake: tokio::sync::Notify,
    /// This service's name as a job runner (the owner of its job leases).
    runner: String,
}

impl<M, E> MemoryService<M, E>
where
    E: Embedder + Clone + 'static,
{
    /// A service (`chat` is only called by `add` and `ask`); `settings.embedder` must name `embedder`.
    pub fn new(store: Store, settings: ServiceSettings, chat: M, embedder: E) -> Self {
        Self {
            store,
            chat,
            embedder,
            cache: cache::ConversationCache::new(settings.cache),
            jobs_wake: tokio::sync::Notify::new(),
            runner: jobs::runner_name(),
            settings,
        }
    }

    /// How the per-conversation index cache has served queries so far.
    pub fn index_stats(&self) -> IndexStats {
        self.cache.stats()
    }

    /// What the caches hold and how they served so far (`/metrics`).
    pub fn cache_stats(&self) -> CacheStats {
        self.cache.cache_stats()
    }

    /// Build gates held now: one per conversation whose entry a query is building (bounded by
    /// the queries in flight, not by the conversations ever queried).
    pub fn building(&self) -> usize {
        self.cache.gates()
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The chat model of the build stages and the answer loop.
    pub fn chat(&self) -> &M {
        &self.chat
    }

    /// The embedder.
    pub fn embedder(&self) -> &E {
        &self.embedder
    }

    /// The settings.
    pub fn settings(&self) -> &ServiceSettings {
        &self.settings
    }

    /// Every conversation.
    pub async fn list(&self) -> Result<Vec<crate::store::ConversationInfo>, ServiceError> {
        let store = self.store.clone();
        blocking(move || store.list()).await
    }

    /// Deletes a conversation (waiting for an add in progress on it to finish).
    pub async fn forget(&self, id: &str) -> Result<crate::store::ConversationInfo, ServiceError> {
        let (store, owned) = (self.store.clone(), id.to_string());
        let forgotten = blocking(move || {
            let _lock = store.lock_conversation(&owned)?;
            store.forget(&owned)
        })
        .await;
        self.cache.remove(id);
        forgotten
    }

    /// Errors unless `id` exists and is embedded with this service's embedder.
    pub async fn check_conversation(&self, id: &str) -> Result<(), ServiceError> {
        self.load_checked(id).await.map(drop)
    }

    /// Loads a conversation and checks it is embedded with this service's embedder.
    async fn load_checked(
        &self,
        id: &str,
    ) -> Result<crate::store::StoredConversation, ServiceError> {
        let (store, owned) = (self.store.clone(), id.to_string());
        let stored = blocking(move || store.load(&owned)).await?;
        if stored.info.embedder != self.settings.embedder {
            return Err(StoreError::EmbedderMismatch {
                conversation: id.to_string(),
                stored: stored.info.embedder.clone(),
                requested: self.settings.embedder.clone(),
            }
            .into());
        }
        Ok(stored)
    }
}

impl<M, E> MemoryService<M, E>
where
    E: Embedder + Clone + 'static,
{
    /// The conversation's cache entry, brought up to date with the store first (see `cache`).
    async fn cached(&self, id: &str) -> Result<Arc<cache::Cached>, ServiceError> {
        let (store, owned) = (self.store.clone(), id.to_string());
        let revision = blocking(move || store.revision(&owned)).await?;
        let (previous, current) = self.cache.lookup(id, revision, true);
        if let (Some(entry), true) = (&previous, current) {
            return Ok(Arc::clone(entry));
        }
        drop(previous);
        let gate = self.cache.gate(id);
        let built = {
            let _building = gate.lock().await;
            self.build_entry(id, revision).await
        };
        self.cache.release(id, gate);
        built
    }

    /// [`MemoryService::cached`] past the lookup, holding the conversation's build gate.
    async fn build_entry(
        &self,
        id: &str,
        revision: i64,
    ) -> Result<Arc<cache::Cached>, ServiceError> {
        // Another query may have built it while this one waited at the gate.
        let (previous, current) = self.cache.lookup(id, revision, false);
        if let (Some(entry), true) = (&previous, current) {
            return Ok(Arc::clone(entry));
        }
        let stored = self.load_checked(id).await?;
        let updated =
            tokio::task::spawn_blocking(move || cache::Cached::update(stored, previous.as_deref()))
                .await
                .map_err(|error| anyhow::anyhow!("index task failed: {error}"))?;
        let (mut entry, rebuilt) =
            updated.map_err(|error| anyhow::anyhow!("indexing the stored vectors: {error}"))?;
        self.complete_word_vectors(id, &mut entry).await?;
        Ok(self.cache.store(id, entry, rebuilt))
    }

    /// Gives every memory word of `entry` its vector: from the store when it has one, else
    /// embedded now and stored (so the next process does not embed it again). A failed
    /// embedding fails the query: fusion never ranks over a memory whose words lack vectors.
    async fn complete_word_vectors(
        &self,
        id: &str,
        entry: &mut cache::Cached,
    ) -> Result<(), ServiceError> {
        let missing = entry.words_without_vectors();
        if missing.is_empty() {
            return Ok(());
        }
        let (store, owned) = (self.store.clone(), id.to_string());
        let stored = blocking(move || store.word_vectors(&owned, &missing)).await?;
        let found: Vec<String> = stored.iter().map(|(word, _)| word.clone()).collect();
        entry.set_word_vectors(stored);
        let missing = entry.words_without_vectors();
        if missing.is_empty() {
            return Ok(());
        }
        let vectors = self.embedder.embed_words(&missing).await.map_err(|error| {
            anyhow::anyhow!("embedding {} words of the memory: {error}", missing.len())
        })?;
        let words: Vec<(String, Vec<f32>)> = missing.into_iter().zip(vectors).collect();
        let (store, owned, to_save) = (self.store.clone(), id.to_string(), words.clone());
        blocking(move || store.save_word_vectors(&owned, &found, &to_save)).await?;
        entry.set_word_vectors(words);
        Ok(())
    }
}

/// The embedder of a conversation: the local model or an endpoint's embedding model.
#[derive(Clone)]
pub enum OwnEmbedder {
    /// all-MiniLM-L6-v2 on this machine.
    Local(LocalEmbedder),
    /// An embedding model of the endpoint (boxed: the client stack is large).
    Api(Box<EmbedClient>),
}

impl OwnEmbedder {
    /// The usage meter of an endpoint's embedder (the local one sends no request).
    pub fn meter(&self) -> Option<&Arc<crate::llm::UsageMeter>> {
        match self {
            OwnEmbedder::Local(_) => None,
            OwnEmbedder::Api(api) => Some(api.meter()),
        }
    }
}

impl Embedder for OwnEmbedder {
    fn name(&self) -> &str {
        match self {
            OwnEmbedder::Local(local) => local.name(),
            OwnEmbedder::Api(api) => api.name(),
        }
    }

    async fn embed(&self, texts: &[String]) -> Result<Embeddings, crate::llm::Error> {
        match self {
            OwnEmbedder::Local(local) => local.embed(texts).await,
            OwnEmbedder::Api(api) => api.embed(texts).await,
        }
    }
}

/// Runs store work off the async executor.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> Result<T, ServiceError> {
    match tokio::task::spawn_blocking(work).await {
        Ok(result) => Ok(result?),
        Err(error) => Err(anyhow::anyhow!("store task failed: {error}").into()),
    }
}
