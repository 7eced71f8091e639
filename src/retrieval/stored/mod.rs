//! A built [`MemoryIndex`] cached on disk, so that a rerun loads it instead of embedding and
//! linking the units again.
//!
//! One file per conversation, `<dir>/<bucket>.json`, holding a key and the index. The key is a
//! SHA-256 over the format version, the embedder's name, the index options (ANN settings
//! included), what the index holds ([`IndexNeeds`]) and the units' content: a changed
//! conversation, embedder, option or need makes the file stale. A stale or unreadable file is
//! rebuilt (with a warning) and replaced atomically. The approximate turn index (usearch) is not
//! stored: a loaded index rebuilds it from its turn vectors when it has enough turns.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use super::build::build_index;
use super::cache::TextVectorCache;
use super::index::{IndexNeeds, IndexOptions, MemoryIndex};
use super::units::SessionUnits;
use crate::llm::Embedder;

/// Bumped when the file layout or the index's serialised form changes.
const FORMAT: &str = "memgas-index-4";

/// Where a conversation's index comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexSource {
    /// Read from its cache file.
    Loaded,
    /// Built now (and written to the cache file).
    Built,
}

#[derive(Serialize, Deserialize)]
struct StoredIndex {
    key: String,
    index: MemoryIndex,
}

/// The index cache of one embedder under `dir`.
#[derive(Debug, Clone)]
pub struct IndexFileCache {
    dir: PathBuf,
}

impl IndexFileCache {
    /// The cache of `embedder_name` for `dataset` under `data_dir`
    /// (`<data_dir>/<dataset>/memgas_index/<embedder_name>`).
    pub fn new(data_dir: &Path, dataset: &str, embedder_name: &str) -> Self {
        Self { dir: data_dir.join(dataset).join("memgas_index").join(embedder_name) }
    }

    /// The cache file of `bucket` (a sample id).
    pub fn path(&self, bucket: &str) -> PathBuf {
        self.dir.join(format!("{}.json", crate::fsutil::safe_name(bucket, '_')))
    }

    /// The index of `sessions` from the cache file of `bucket` when it holds this key, else
    /// built with `embedder` (unit vectors through `vectors`) and written back.
    pub async fn load_or_build<E: Embedder>(
        &self,
        bucket: &str,
        sessions: Vec<SessionUnits>,
        embedder: &E,
        vectors: &TextVectorCache,
        options: IndexOptions,
    ) -> anyhow::Result<(MemoryIndex, IndexSource)> {
        let key = index_key(embedder.name(), &options, &sessions)?;
        let path = self.path(bucket);
        let read_path = path.clone();
        let read_key = key.clone();
        let stored = tokio::task::spawn_blocking(move || read(&read_path, &read_key))
            .await
            .context("reading a MemGAS index")?;
        if let Some(index) = stored {
            return Ok((index, IndexSource::Loaded));
        }
        let index = build_index(sessions, embedder, Some((vectors, bucket)), options).await?;
        // Streamed to the file: the JSON of the word vectors alone is several MB, and a whole
        // in-memory copy of it raised the run's peak RSS.
        let stored = StoredIndex { key, index };
        let stored = tokio::task::spawn_blocking(move || {
            crate::fsutil::write_atomic_with(&path, |file| {
                serde_json::to_writer(file, &stored).context("serialising a MemGAS index")
            })?;
            anyhow::Ok(stored)
        })
        .await
        .context("writing a MemGAS index")??;
        Ok((stored.index, IndexSource::Built))
    }
}

/// The index in `path` if it holds `key`; `None` (with a warning when the file exists) if it
/// is absent, unreadable or stale.
fn read(path: &Path, key: &str) -> Option<MemoryIndex> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return None,
        Err(error) => {
            tracing::warn!(path = %path.display(), %error, "cannot read the MemGAS index; rebuilding it");
            return None;
        }
    };
    match serde_json::from_slice::<StoredIndex>(&bytes) {
        Ok(stored) if stored.key == key => {
            let mut index = stored.index;
            match index.restore_approximate() {
                Ok(()) => Some(index),
                Err(error) => {
                    tracing::warn!(path = %path.display(), %error, "cannot rebuild the approximate turn index; rebuilding the MemGAS index");
                    None
                }
            }
        }
        Ok(_) => {
            tracing::warn!(path = %path.display(), "the MemGAS index was built from other units, embedder or options; rebuilding it");
            None
        }
        Err(error) => {
            tracing::warn!(path = %path.display(), %error, "the MemGAS index file is corrupt; rebuilding it");
            None
        }
    }
}

/// SHA-256 (hex) over the format, the embedder, the options, the needs and the units.
/// [`build_index`] builds everything ([`IndexNeeds::ALL`]), so those are the needs hashed.
fn index_key(
    embedder: &str,
    options: &IndexOptions,
    sessions: &[SessionUnits],
) -> anyhow::Result<String> {
    let mut hasher = Sha256::new();
    for part in [
        FORMAT.as_bytes().to_vec(),
        embedder.as_bytes().to_vec(),
        serde_json::to_vec(options).context("hashing the index options")?,
        serde_json::to_vec(&IndexNeeds::ALL).context("hashing the index needs")?,
        serde_json::to_vec(sessions).context("hashing the MemGAS units")?,
    ] {
        hasher.update((part.len() as u64).to_le_bytes());
        hasher.update(&part);
    }
    Ok(hasher.finalize().iter().map(|byte| format!("{byte:02x}")).collect())
}

#[cfg(test)]
mod tests;
