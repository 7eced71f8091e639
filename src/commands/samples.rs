//! A run's conversations as the answer side receives them: each one's memory read back from
//! the build's caches, with its completeness, fingerprint and MemGAS index.

use std::sync::Arc;

use anyhow::Context as _;
use futures::future::BoxFuture;

use crate::agent::{LoadedMemgas, MemgasMemory, MemgasSource, SampleMemory};
use crate::dataset::Conversation;
use crate::ingest::BuildSettings;
use crate::settings::{DataSettings, ProjectPaths};

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

/// Loads the conversations of a run once their builds are done.
pub(super) struct SampleLoader<'a> {
    pub(super) build: &'a BuildSettings,
    /// The build's embedder.
    pub(super) embedder_name: String,
    /// Where MemGAS indexes come from (`None`: `--no-memgas`).
    pub(super) memgas: Option<Arc<RunMemgas>>,
}

impl SampleLoader<'_> {
    /// The memory of `conversation` from its finished build, with its completeness and
    /// fingerprint, and a MemGAS index loaded on first use when the memory is complete and
    /// MemGAS is on.
    pub(super) async fn load(&self, conversation: Conversation) -> anyhow::Result<SampleMemory> {
        let build = self.build.clone();
        let name = self.embedder_name.clone();
        // Reading the caches and building the graph is blocking work.
        let (conversation, memory, fingerprint) = tokio::task::spawn_blocking(move || {
            let memory = crate::ingest::load_memory(&build, &name, &conversation)
                .with_context(|| format!("loading the memory of {}", conversation.sample_id))?;
            let fingerprint = memory_fingerprint(&build, &name, &conversation.sample_id);
            anyhow::Ok((conversation, memory, fingerprint))
        })
        .await
        .context("loading a memory")??;
        let memgas = match &self.memgas {
            Some(run) if memory.summary.failed.is_empty() => {
                Some(MemgasMemory::lazy(ConversationMemgas {
                    run: run.clone(),
                    conversation: conversation.clone(),
                }))
            }
            _ => None,
        };
        let mut sample = SampleMemory::from_built(conversation, memory);
        sample.memgas = memgas;
        sample.memory.fingerprint = fingerprint;
        Ok(sample)
    }
}

/// What every conversation's MemGAS index of a run is made with: the local embedder (loaded
/// once, when the first index is needed), the unit-vector and index caches, the granules.
pub(super) struct RunMemgas {
    source: crate::embedding::ModelSource,
    local: tokio::sync::OnceCell<crate::embedding::LocalEmbedder>,
    vectors: crate::retrieval::TextVectorCache,
    indexes: crate::retrieval::IndexFileCache,
    build: BuildSettings,
}

impl RunMemgas {
    /// Nothing is loaded yet; `None` with `--no-memgas` (no `source`).
    pub(super) fn new(
        paths: &ProjectPaths,
        data: &DataSettings,
        build: &BuildSettings,
        source: Option<crate::embedding::ModelSource>,
    ) -> Option<Arc<Self>> {
        let source = source?;
        let data_dir = paths.root.join("data");
        let name = crate::embedding::LOCAL_EMBEDDER_NAME;
        Some(Arc::new(Self {
            source,
            local: tokio::sync::OnceCell::new(),
            vectors: crate::retrieval::TextVectorCache::new(&data_dir, data.kind.as_str(), name),
            indexes: crate::retrieval::IndexFileCache::new(&data_dir, data.kind.as_str(), name),
            build: build.clone(),
        }))
    }

    /// The local embedder, loaded by the first caller.
    async fn local(&self) -> anyhow::Result<&crate::embedding::LocalEmbedder> {
        self.local
            .get_or_try_init(|| async {
                let source = self.source.clone();
                tokio::task::spawn_blocking(move || {
                    crate::embedding::LocalEmbedder::from_source(
                        &source,
                        crate::embedding::LocalEmbedderOptions::default(),
                    )
                })
                .await
                .context("loading the local embedder")?
                .map_err(anyhow::Error::from)
            })
            .await
    }
}

/// One conversation's MemGAS index, loaded (from the index cache, else built) on first use.
struct ConversationMemgas {
    run: Arc<RunMemgas>,
    conversation: Conversation,
}

impl MemgasSource for ConversationMemgas {
    fn load(&self) -> BoxFuture<'_, anyhow::Result<LoadedMemgas>> {
        Box::pin(async move {
            let run = &self.run;
            let conversation = &self.conversation;
            let local = run.local().await?;
            let granules = crate::ingest::load_granules(&run.build, conversation)?;
            let units =
                crate::retrieval::eval::session_units(conversation, None, granules.as_ref());
            let options = crate::retrieval::IndexOptions::default();
            let (index, source) = run
                .indexes
                .load_or_build(&conversation.sample_id, units, local, &run.vectors, options)
                .await
                .with_context(|| format!("indexing {} for MemGAS", conversation.sample_id))?;
            tracing::info!(sample = %conversation.sample_id, ?source, "MemGAS index ready");
            Ok(LoadedMemgas { index: Arc::new(index), embedder: Arc::new(local.clone()) })
        })
    }
}
