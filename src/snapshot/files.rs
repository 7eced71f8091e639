//! A snapshot from the file caches of a dataset run: a conversation's memory read back from
//! the build's caches once its build is done, with its completeness, fingerprint and a MemGAS
//! index loaded on first use.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use futures::future::BoxFuture;

use super::{LoadedMemgas, MemgasMemory, MemgasSource, Snapshot};
use crate::dataset::{Conversation, DatasetKind};
use crate::embedding::{LOCAL_EMBEDDER_NAME, LocalEmbedder, load_local_async};
use crate::ingest::BuildSettings;
use crate::llm::tape::{Tape, TapeMode, TapedEmbedder};

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

/// Where the snapshots of a run come from: the build's caches and, unless MemGAS is off, the
/// run's MemGAS caches.
pub struct CacheSource {
    build: BuildSettings,
    /// The build's embedder.
    embedder_name: String,
    /// Where MemGAS indexes come from (`None`: `--no-memgas`).
    memgas: Option<Arc<MemgasCaches>>,
}

impl CacheSource {
    /// The caches of the build made with `build` and the embedder `embedder_name`; MemGAS
    /// indexes from `memgas` (none: no `query_memgas` tool).
    pub fn new(build: &BuildSettings, embedder_name: &str, memgas: Option<MemgasCaches>) -> Self {
        Self {
            build: build.clone(),
            embedder_name: embedder_name.to_string(),
            memgas: memgas.map(Arc::new),
        }
    }
}

impl Snapshot {
    /// The memory of `conversation` from its finished build in `source`, with its completeness
    /// and fingerprint, and a MemGAS index loaded on first use when the memory is complete and
    /// MemGAS is on.
    pub async fn from_caches(
        source: &CacheSource,
        conversation: Conversation,
    ) -> anyhow::Result<Snapshot> {
        let build = source.build.clone();
        let name = source.embedder_name.clone();
        // Reading the caches and building the graph is blocking work.
        let (conversation, memory, fingerprint) = tokio::task::spawn_blocking(move || {
            let memory = crate::ingest::load_memory(&build, &name, &conversation)
                .with_context(|| format!("loading the memory of {}", conversation.sample_id))?;
            let fingerprint = memory_fingerprint(&build, &name, &conversation.sample_id);
            anyhow::Ok((conversation, memory, fingerprint))
        })
        .await
        .context("loading a memory")??;
        let memgas = match &source.memgas {
            Some(run) if memory.summary.failed.is_empty() => {
                Some(MemgasMemory::lazy(ConversationMemgas {
                    run: run.clone(),
                    conversation: conversation.clone(),
                }))
            }
            _ => None,
        };
        let mut snapshot = Snapshot::from_built(conversation, memory);
        snapshot.memgas = memgas;
        snapshot.memory.fingerprint = fingerprint;
        Ok(snapshot)
    }
}

/// What every conversation's MemGAS index of a run is made with: the local embedder (loaded
/// once, when the first index is needed), the unit-vector and index caches, the granules.
pub struct MemgasCaches {
    /// The project's `data/` directory.
    data_dir: PathBuf,
    /// `--embed-model-dir`, if given.
    embed_model_dir: Option<PathBuf>,
    local: tokio::sync::OnceCell<LocalEmbedder>,
    vectors: crate::retrieval::TextVectorCache,
    indexes: crate::retrieval::IndexFileCache,
    build: BuildSettings,
    /// The run's recorded calls: queries are embedded through it (see [`crate::llm::tape`]).
    tape: Option<Arc<Tape>>,
}

impl MemgasCaches {
    /// The caches of `dataset` under `data_dir`, the model from `embed_model_dir` (else the
    /// installed one); nothing is loaded yet.
    pub fn new(
        data_dir: &Path,
        dataset: DatasetKind,
        embed_model_dir: Option<PathBuf>,
        build: &BuildSettings,
    ) -> Self {
        let name = LOCAL_EMBEDDER_NAME;
        Self {
            data_dir: data_dir.to_path_buf(),
            embed_model_dir,
            local: tokio::sync::OnceCell::new(),
            vectors: crate::retrieval::TextVectorCache::new(data_dir, dataset.as_str(), name),
            indexes: crate::retrieval::IndexFileCache::new(data_dir, dataset.as_str(), name),
            build: build.clone(),
            tape: None,
        }
    }

    /// Query embeddings recorded on (or replayed from) `tape`.
    #[must_use]
    pub fn with_tape(mut self, tape: Arc<Tape>) -> Self {
        self.tape = Some(tape);
        self
    }

    /// The local embedder, loaded by the first caller.
    async fn local(&self) -> anyhow::Result<&LocalEmbedder> {
        self.local
            .get_or_try_init(|| {
                load_local_async(self.embed_model_dir.clone(), self.data_dir.clone())
            })
            .await
    }
}

/// One conversation's MemGAS index, loaded (from the index cache, else built) on first use.
struct ConversationMemgas {
    run: Arc<MemgasCaches>,
    conversation: Conversation,
}

impl MemgasSource for ConversationMemgas {
    fn load(&self) -> BoxFuture<'_, anyhow::Result<LoadedMemgas>> {
        Box::pin(async move {
            let run = &self.run;
            let conversation = &self.conversation;
            let replaying = run.tape.as_ref().is_some_and(|tape| tape.mode() != TapeMode::Record);
            if !replaying {
                // Loaded now, so that a missing model fails the index, as it always did.
                run.local().await?;
            }
            // A replay that sends nothing never loads the model: an index that is not among the
            // caches cannot be rebuilt from the tape (its vectors were never recorded), and
            // loading the model could mean installing it, over the network.
            let offline = run
                .tape
                .as_ref()
                .is_some_and(|tape| tape.mode() == TapeMode::Replay { fill: false });
            let local = LazyLocal {
                run: Arc::clone(run),
                offline: offline.then(|| conversation.sample_id.clone()),
            };
            let granules = crate::ingest::load_granules(&run.build, conversation)?;
            let units =
                crate::retrieval::units::SessionUnits::of_conversation(conversation, |id| {
                    granules.as_ref().and_then(|found| found.units_of(id))
                });
            let options = crate::retrieval::IndexOptions::default();
            let (index, source) = run
                .indexes
                .load_or_build(&conversation.sample_id, units, &local, &run.vectors, options)
                .await
                .with_context(|| format!("indexing {} for MemGAS", conversation.sample_id))?;
            tracing::info!(sample = %conversation.sample_id, ?source, "MemGAS index ready");
            let embedder: Arc<dyn crate::snapshot::QueryEmbedder> = match &run.tape {
                Some(tape) => Arc::new(TapedEmbedder::new(local, Arc::clone(tape))),
                None => Arc::new(local),
            };
            Ok(LoadedMemgas { index: Arc::new(index), embedder })
        })
    }
}

/// The local embedder of a run, loaded on the first text it must embed: an index read from its
/// cache and queries replayed from a tape need no model at all. `offline` (a replay that sends
/// nothing: the conversation's sample id) refuses to load it.
#[derive(Clone)]
struct LazyLocal {
    run: Arc<MemgasCaches>,
    offline: Option<String>,
}

impl crate::llm::Embedder for LazyLocal {
    fn name(&self) -> &str {
        LOCAL_EMBEDDER_NAME
    }

    async fn embed(&self, texts: &[String]) -> Result<crate::llm::Embeddings, crate::llm::Error> {
        if let Some(sample) = &self.offline {
            return Err(crate::llm::Error::Config(format!(
                "replaying {sample}: its MemGAS index is not among the memory caches, and a replay never loads the local embedding model to build it"
            )));
        }
        let local = self
            .run
            .local()
            .await
            .map_err(|error| crate::llm::Error::Config(format!("{error:#}")))?;
        local.embed(texts).await
    }
}
