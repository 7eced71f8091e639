//! A run's conversations as the answer side receives them: each one's memory read back from
//! the build's caches, with its completeness, fingerprint and MemGAS index.

use anyhow::Context as _;

use crate::agent::{MemgasMemory, SampleMemory};
use crate::cli::RunCommandArgs;
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
    pub(super) paths: &'a ProjectPaths,
    pub(super) data: &'a DataSettings,
    pub(super) build: &'a BuildSettings,
    /// The build's embedder.
    pub(super) embedder_name: String,
    /// The local embedder MemGAS indexes with (`None`: `--no-memgas`).
    pub(super) local: Option<crate::embedding::LocalEmbedder>,
}

impl SampleLoader<'_> {
    /// The memory of `conversation` from its finished build, with its completeness and
    /// fingerprint, and a MemGAS index when the memory is complete and MemGAS is on.
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
        let memgas = match &self.local {
            Some(local) if memory.summary.failed.is_empty() => {
                Some(self.memgas(&conversation, local).await?)
            }
            _ => None,
        };
        let mut sample = SampleMemory::from_built(conversation, memory);
        sample.memgas = memgas;
        sample.memory.fingerprint = fingerprint;
        Ok(sample)
    }

    async fn memgas(
        &self,
        conversation: &Conversation,
        local: &crate::embedding::LocalEmbedder,
    ) -> anyhow::Result<MemgasMemory> {
        let cache = crate::retrieval::EmbeddingCache::new(
            &self.paths.root.join("data"),
            self.data.kind.as_str(),
            crate::embedding::LOCAL_EMBEDDER_NAME,
        );
        let granules = crate::ingest::load_granules(self.build, conversation)?;
        let units = crate::retrieval::eval::session_units(conversation, None, granules.as_ref());
        let index = crate::retrieval::build_index(
            units,
            local,
            Some((&cache, &conversation.sample_id)),
            crate::retrieval::IndexOptions::default(),
        )
        .await
        .with_context(|| format!("indexing {} for MemGAS", conversation.sample_id))?;
        Ok(MemgasMemory::new(index, local.clone()))
    }
}

/// The local embedder MemGAS indexes with, unless `--no-memgas`.
pub(super) async fn local_embedder(
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
