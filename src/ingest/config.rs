//! [`BuildSettings`]: the resolved settings of a build and where its stage caches live.

use std::path::PathBuf;

use serde::Serialize;

use crate::dataset::DatasetKind;
use crate::fsutil::safe_name;

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
    pub(super) fn batch(&self) -> usize {
        match self.dataset {
            DatasetKind::Locomo | DatasetKind::Own => 1,
            DatasetKind::LongMemEval => self.lm_batch.max(1),
        }
    }

    pub(super) fn dataset_dir(&self) -> PathBuf {
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
