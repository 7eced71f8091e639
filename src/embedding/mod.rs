//! The local sentence embedder: all-MiniLM-L6-v2 computed in Rust, no API key, no model hub.
//!
//! [`LocalEmbedder`] tokenises with the model's `tokenizer.json` (truncation at 256 word pieces,
//! as sentence-transformers configures this model), runs the BERT encoder of [`encoder`] on
//! packed batches spread over a private thread pool, mean-pools the final hidden states over each
//! text's tokens and L2-normalises the result, the same vectors sentence-transformers produces
//! (parity is pinned by `tests/it/retrieval.rs` against committed reference vectors).
//! The model files come from [`provision`]. This module does no network IO itself; provisioning
//! runs `pip` once.

mod encoder;
pub mod provision;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokenizers::{PaddingParams, Tokenizer, TruncationParams, TruncationStrategy};

use crate::llm::{self, Embeddings, Usage};
pub use provision::{MODEL_DIR_ENV, MODEL_PACKAGE, ModelSource};

use encoder::{Encoder, Scratch};

/// Name of the local embedder in cache paths (`data/<dataset>/embedding/<name>/`).
pub const LOCAL_EMBEDDER_NAME: &str = "local-all-minilm-l6-v2";

/// Longest input in word pieces, special tokens included (sentence-transformers'
/// `max_seq_length` for all-MiniLM-L6-v2); longer texts are truncated, as in the reference.
pub const MAX_TOKENS: usize = 256;

/// Errors of loading or running the local embedder.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A model directory lacks a required file.
    #[error(
        "embedding model directory {} has no {file} (point --embed-model-dir or {} at a directory with config.json, tokenizer.json and model.safetensors, or unset it to install {} automatically)",
        dir.display(), MODEL_DIR_ENV, MODEL_PACKAGE
    )]
    MissingModelFile {
        /// The directory searched.
        dir: PathBuf,
        /// The missing file.
        file: String,
    },
    /// Automatic installation failed.
    #[error(
        "could not install the local embedding model ({message}); run `{command}` by hand, or set --embed-model-dir / {} to a directory holding the all-MiniLM-L6-v2 files",
        MODEL_DIR_ENV
    )]
    Provision {
        /// The command that was run.
        command: String,
        /// What went wrong.
        message: String,
    },
    /// A model file could not be read or has unexpected content.
    #[error("loading {}: {message}", path.display())]
    Load {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// Tokenisation failed.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
}

/// Which of `gemm`'s matrix kernels the encoder's products run on, on this CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MatrixKernels {
    /// AVX-512F kernels (`gemm`'s `x86-v4` feature, which this crate enables).
    Avx512,
    /// AVX2/FMA kernels.
    Fma,
    /// Portable kernels (no FMA, or not x86).
    Scalar,
}

/// The kernels `gemm` 0.19 selects at run time: its dispatch (`gemm-common`, `init_gemm_fn`)
/// takes AVX-512F when detected and built with `x86-v4`, else FMA when detected, else scalar,
/// with the same `is_x86_feature_detected!` checks used here. Tests use this report to prove
/// which kernels ran instead of comparing floating-point bits, which also depend on the host's
/// cache sizes (`gemm-common` sizes its blocking from them).
pub fn matrix_kernels() -> MatrixKernels {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            return MatrixKernels::Avx512;
        }
        if std::arch::is_x86_feature_detected!("fma") {
            return MatrixKernels::Fma;
        }
    }
    MatrixKernels::Scalar
}

/// How the local embedder runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalEmbedderOptions {
    /// Worker threads (each encodes whole chunks; 0 = available cores).
    pub threads: usize,
    /// Target number of word pieces per chunk; chunks are the unit of work of one thread.
    pub tokens_per_chunk: usize,
}

impl Default for LocalEmbedderOptions {
    fn default() -> Self {
        Self { threads: 0, tokens_per_chunk: 512 }
    }
}

/// Loads the local embedder, the one way every command does: the model files from
/// `explicit_dir` (`--embed-model-dir`) when given, else from `<data_dir>/models`, installed
/// there on first use. Blocking (it reads the weights); async callers use
/// [`load_local_async`].
pub fn load_local(
    explicit_dir: Option<PathBuf>,
    data_dir: &Path,
    options: LocalEmbedderOptions,
) -> Result<LocalEmbedder, Error> {
    let source = ModelSource { explicit_dir, models_root: data_dir.join("models") };
    LocalEmbedder::from_source(&source, options)
}

/// [`load_local`] with the default options, on a blocking thread.
pub async fn load_local_async(
    explicit_dir: Option<PathBuf>,
    data_dir: PathBuf,
) -> anyhow::Result<LocalEmbedder> {
    load_local_source(ModelSource { explicit_dir, models_root: data_dir.join("models") }).await
}

/// The local embedder from `source` with the default options, on a blocking thread.
pub async fn load_local_source(source: ModelSource) -> anyhow::Result<LocalEmbedder> {
    use anyhow::Context as _;
    let loaded = tokio::task::spawn_blocking(move || {
        LocalEmbedder::from_source(&source, LocalEmbedderOptions::default())
    })
    .await
    .context("loading the local embedder")?;
    Ok(loaded?)
}

/// all-MiniLM-L6-v2 sentence embeddings computed locally. Cheap to clone (shared state).
#[derive(Clone)]
pub struct LocalEmbedder {
    inner: Arc<LoadedModel>,
}

struct LoadedModel {
    tokenizer: Tokenizer,
    encoder: Encoder,
    /// Threads that run encoder chunks (and tokenisation). Owned by the embedder so its
    /// parallelism is independent of rayon's global pool and of other rayon users.
    pool: rayon::ThreadPool,
    options: LocalEmbedderOptions,
    model_dir: PathBuf,
}

impl LocalEmbedder {
    /// Resolve the model directory from `source` (installing the package if needed) and load it.
    pub fn from_source(source: &ModelSource, options: LocalEmbedderOptions) -> Result<Self, Error> {
        let dir = source.resolve()?;
        Self::load(&dir, options)
    }

    /// Load the model from a directory holding `config.json`, `tokenizer.json` and
    /// `model.safetensors`.
    pub fn load(model_dir: &Path, options: LocalEmbedderOptions) -> Result<Self, Error> {
        provision::check_model_dir(model_dir)?;
        let encoder = Encoder::load(model_dir)?;
        let tokenizer_path = model_dir.join("tokenizer.json");
        let mut tokenizer = Tokenizer::from_file(&tokenizer_path).map_err(|err| Error::Load {
            path: tokenizer_path.clone(),
            message: err.to_string(),
        })?;
        // The shipped tokenizer.json pads and truncates to 128; sentence-transformers overrides
        // both (no padding, truncation at max_seq_length), and so do we.
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: MAX_TOKENS.min(encoder.max_positions()),
                strategy: TruncationStrategy::LongestFirst,
                ..TruncationParams::default()
            }))
            .map_err(|err| Error::Load {
                path: tokenizer_path.clone(),
                message: err.to_string(),
            })?;
        tokenizer.with_padding(None::<PaddingParams>);
        let threads = if options.threads == 0 {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            options.threads
        };
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|index| format!("embed-{index}"))
            .build()
            .map_err(|err| Error::Load {
                path: model_dir.to_path_buf(),
                message: format!("thread pool: {err}"),
            })?;
        let options = LocalEmbedderOptions { threads, ..options };
        Ok(Self {
            inner: Arc::new(LoadedModel {
                tokenizer,
                encoder,
                pool,
                options,
                model_dir: model_dir.to_path_buf(),
            }),
        })
    }

    /// Output dimension (384).
    pub fn dims(&self) -> usize {
        self.inner.encoder.hidden_size()
    }

    /// The directory the model was loaded from.
    pub fn model_dir(&self) -> &Path {
        &self.inner.model_dir
    }

    /// Threads used per call.
    pub fn threads(&self) -> usize {
        self.inner.options.threads
    }

    /// Embed texts synchronously on the embedder's thread pool: one unit vector per text, in
    /// input order. Blocks the caller; async code goes through [`llm::Embedder::embed`].
    pub fn embed_blocking(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, Error> {
        let inner = &self.inner;
        inner.pool.install(|| inner.embed(texts))
    }

    /// Word-piece ids of one text as the encoder sees it (special tokens included, truncated).
    pub fn token_ids(&self, text: &str) -> Result<Vec<u32>, Error> {
        let encoding = self
            .inner
            .tokenizer
            .encode_fast(text, true)
            .map_err(|err| Error::Tokenizer(err.to_string()))?;
        Ok(encoding.get_ids().to_vec())
    }
}

impl LoadedModel {
    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, Error> {
        use rayon::prelude::*;
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let inputs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let encodings = self
            .tokenizer
            .encode_batch_fast(inputs, true)
            .map_err(|err| Error::Tokenizer(err.to_string()))?;
        let vocab = self.encoder.vocab_size();
        let mut ids: Vec<Vec<u32>> = Vec::with_capacity(encodings.len());
        for encoding in &encodings {
            let sequence = encoding.get_ids();
            if let Some(bad) = sequence.iter().find(|&&id| id as usize >= vocab) {
                return Err(Error::Tokenizer(format!(
                    "token id {bad} outside the vocabulary of {vocab}"
                )));
            }
            ids.push(sequence.to_vec());
        }
        let chunks = plan_chunks(&ids, self.options.tokens_per_chunk, self.options.threads);
        let results: Vec<Vec<(usize, Vec<f32>)>> = chunks
            .par_iter()
            .map_init(Scratch::default, |scratch, chunk| {
                let sequences: Vec<&[u32]> =
                    chunk.iter().map(|&index| ids[index].as_slice()).collect();
                let vectors = self.encoder.embed_chunk(&sequences, scratch);
                chunk.iter().copied().zip(vectors).collect()
            })
            .collect();
        let mut out = vec![Vec::new(); texts.len()];
        for (index, vector) in results.into_iter().flatten() {
            out[index] = vector;
        }
        Ok(out)
    }
}

/// Group text indices into chunks of about `tokens_per_chunk` word pieces, longest texts first,
/// with at least `threads` chunks when there are that many texts so every thread gets work.
/// Chunk composition does not change any vector (sequences never interact); it only balances
/// threads and keeps the packed matrices in cache-friendly sizes.
fn plan_chunks(ids: &[Vec<u32>], tokens_per_chunk: usize, threads: usize) -> Vec<Vec<usize>> {
    let total: usize = ids.iter().map(Vec::len).sum();
    let budget = tokens_per_chunk.min(total.div_ceil(threads.max(1))).max(1);
    let mut order: Vec<usize> = (0..ids.len()).collect();
    // Longest first (stable on ties) so big items start early and small ones fill the tail.
    order.sort_by_key(|&index| std::cmp::Reverse(ids[index].len()));
    let mut chunks = Vec::new();
    let mut current = Vec::new();
    let mut current_tokens = 0;
    for index in order {
        if !current.is_empty() && current_tokens + ids[index].len() > budget {
            chunks.push(std::mem::take(&mut current));
            current_tokens = 0;
        }
        current_tokens += ids[index].len();
        current.push(index);
    }
    if !current.is_empty() {
        chunks.push(current);
    }
    chunks
}

impl llm::Embedder for LocalEmbedder {
    fn name(&self) -> &str {
        LOCAL_EMBEDDER_NAME
    }

    fn embed(
        &self,
        texts: &[String],
    ) -> impl Future<Output = Result<Embeddings, llm::Error>> + Send {
        let embedder = self.clone();
        let texts = texts.to_vec();
        async move {
            // CPU-bound work stays off the async executor.
            let vectors = tokio::task::spawn_blocking(move || embedder.embed_blocking(&texts))
                .await
                .map_err(|err| llm::Error::Config(format!("local embedder task failed: {err}")))?
                .map_err(|err| llm::Error::Config(format!("local embedder: {err}")))?;
            Ok(Embeddings { vectors, usage: Usage::default() })
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_every_text_once_and_respect_the_budget() {
        let ids: Vec<Vec<u32>> = [5, 1, 9, 3, 3, 7, 2].iter().map(|&n| vec![0; n]).collect();
        let chunks = plan_chunks(&ids, 10, 2);
        let mut seen: Vec<usize> = chunks.iter().flatten().copied().collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..ids.len()).collect::<Vec<_>>());
        for chunk in &chunks {
            let tokens: usize = chunk.iter().map(|&i| ids[i].len()).sum();
            assert!(chunk.len() == 1 || tokens <= 10, "{chunk:?}");
        }
        assert_eq!(chunks[0][0], 2, "longest text first");
    }
}
