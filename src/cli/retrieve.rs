//! `mragent retrieve`: the offline retrieval benchmark's arguments.

use std::path::PathBuf;

use clap::Args;

use super::DataArgs;

/// `mragent retrieve`.
#[derive(Debug, Args)]
pub struct RetrieveArgs {
    /// Dataset selection.
    #[command(flatten)]
    pub data: DataArgs,
    /// Methods to evaluate (repeat or comma-separate): memgas, session, turn, summary, keyword,
    /// hybrid, bm25, fusion, or all.
    #[arg(long, value_delimiter = ',', default_value = "all")]
    pub method: Vec<String>,
    /// Directory with all-MiniLM-L6-v2 (model.safetensors, tokenizer.json, config.json);
    /// default: installed automatically into data/models/ on first use.
    #[arg(long, env = "MRAGENT_EMBED_MODEL_DIR")]
    pub embed_model_dir: Option<PathBuf>,
    /// Embedding threads (0: all cores).
    #[arg(long, default_value_t = 0)]
    pub embed_threads: usize,
    /// Use the MemGAS granules (summary and keyword units) built by `build --granules --model
    /// <this>`; without them MemGAS runs on session and turn units and says so.
    #[arg(long, value_name = "MODEL")]
    pub granules: Option<String>,
    /// Summary/keyword units from a JSON file `{sample: {session: {"summary", "keywords"}}}`.
    #[arg(long)]
    pub llm_units: Option<PathBuf>,
    /// Leave-one-conversation-out: choose every tuned setting of fusion and MemGAS on the other
    /// conversations, score the held-out one, and print the pooled held-out table
    /// (`eval/<dataset>/retrieve/folds.md`).
    #[arg(long)]
    pub folds: bool,
    /// Choose the answer gate of `--answer adaptive` on gold evidence turns: its context size
    /// and confidence threshold on the conv-26/conv-30 dev split, reported on the other
    /// conversations per category (`eval/<dataset>/retrieve/gate.md`).
    #[arg(long, conflicts_with = "folds")]
    pub gate: bool,
    /// Validity-aware ranking: of two sessions about the same thing that both score near the
    /// top, rank the newer first. `held-out` chooses the margin and threshold on half of the
    /// questions for the other half (and back); `MARGIN,THRESHOLD` fixes them (margin: fraction
    /// of the score range below the top; threshold: similarity of "the same thing").
    #[arg(long, value_name = "held-out|MARGIN,THRESHOLD")]
    pub prefer_newer: Option<String>,
    /// What makes two sessions about the same thing for --prefer-newer: `vector` (cosine of the
    /// session vectors) or `words` (shared content words over the smaller session's).
    #[arg(long, default_value = "vector", value_parser = ["vector", "words"])]
    pub same_topic: String,
    /// Rank over the memory's vectors as the store keeps them (8 bits and one scale per row,
    /// what `memory search`, `ask` and `serve` rank on) instead of the embedder's f32.
    #[arg(long)]
    pub stored_vectors: bool,
}
