//! Arguments of `mragent learn`.

use std::path::PathBuf;

use clap::Args;

use super::{DataArgs, EmbedArgs, JudgeProtocolArg, ModelArgs};

/// `mragent learn`.
#[derive(Debug, Args)]
pub struct LearnArgs {
    /// Dataset selection.
    #[command(flatten)]
    pub data: DataArgs,
    /// Model and endpoint: `--model` builds the memory, `--re-model` (default `--model`)
    /// answers and learns.
    #[command(flatten)]
    pub model: ModelArgs,
    /// Embedder of the memory.
    #[command(flatten)]
    pub embed: EmbedArgs,
    /// Judge model (alias or id) that grades every attempt.
    #[arg(long)]
    pub judge_model: String,
    /// LoCoMo judge protocol (LongMemEval always uses its per-type rules).
    #[arg(long, value_enum, default_value = "mem0")]
    pub judge_protocol: JudgeProtocolArg,
    /// Folds: LoCoMo splits by conversation, LongMemEval by question, stratified by type.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(2..=20))]
    pub folds: u32,
    /// Only this fold (from 0); default: every fold.
    #[arg(long)]
    pub fold: Option<u32>,
    /// Passes over each fold's training questions.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub epochs: u32,
    /// Most learning steps per fold (default: every batch of every epoch).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub steps: Option<u32>,
    /// Attempts per training question (at least 2: only mixed outcomes teach).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(2..=10))]
    pub samples: u32,
    /// Training questions per step.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..))]
    pub batch: u32,
    /// Validation questions per fold, drawn stratified by category (0: all of them).
    #[arg(long, default_value_t = 50)]
    pub validation: u32,
    /// Most rules in a set.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub max_rules: u32,
    /// Temperature of the training attempts (validation and test answers use 0).
    #[arg(long, default_value_t = 0.7)]
    pub temperature: f32,
    /// Name of the run: its files go to data/<dataset>/meta/<name>/.
    #[arg(long, default_value = "default")]
    pub name: String,
    /// Seed of the folds, the batches and the requests.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Questions in flight at once.
    #[arg(long, env = "MRAGENT_WORKERS", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
    pub workers: u32,
    /// Do not answer the test folds with and without the kept rules at the end.
    #[arg(long)]
    pub no_test: bool,
    /// Print the folds and the estimate, then stop (nothing is sent).
    #[arg(long)]
    pub dry_run: bool,
    /// Stop cleanly once this invocation's estimated spend reaches this many USD (resumable).
    #[arg(long, value_name = "USD")]
    pub max_cost: Option<f64>,
    /// Stop cleanly once this invocation has spent this many tokens (resumable).
    #[arg(long, value_name = "TOKENS")]
    pub max_tokens_total: Option<u64>,
    /// Do not offer the MemGAS retrieval tool.
    #[arg(long)]
    pub no_memgas: bool,
    /// Directory with all-MiniLM-L6-v2 for the MemGAS tool.
    #[arg(long, env = "MRAGENT_EMBED_MODEL_DIR")]
    pub embed_model_dir: Option<PathBuf>,
}
