//! Arguments of `mragent eval`.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use super::{DataArg, ModelArgs};

/// The LoCoMo judge protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum JudgeProtocolArg {
    /// The published LoCoMo J protocol (Mem0's paper and those comparing with it):
    /// categories 1–4, a generous CORRECT/WRONG grade with a one-sentence reason.
    Mem0,
    /// Ours: categories 1–4, CORRECT only for the gold fact at the gold answer's precision.
    Strict,
}

/// `mragent eval`.
#[derive(Debug, Args)]
pub struct EvalArgs {
    /// Dataset whose results to score.
    #[arg(long, value_enum, default_value = "locomo")]
    pub data: DataArg,
    /// The dataset file the run answered (default: data/dataset_<data>.json); every question
    /// of it (or of --sample / --ca) must have exactly one result line.
    #[arg(long)]
    pub data_file: Option<PathBuf>,
    /// The run's --sample, when it answered one sample only.
    #[arg(long)]
    pub sample: Option<String>,
    /// The run's --ca (LongMemEval question type), when it answered one type only.
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..=5))]
    pub ca: Option<u8>,
    /// Score the questions that have a result line even if others are missing; every table
    /// is then labelled `PARTIAL n/N`.
    #[arg(long)]
    pub partial: bool,
    /// Run tag of the results (`--file` of `run`).
    #[arg(long, default_value = "0")]
    pub file: String,
    /// Also score this run tag (same dataset, selection, judge and protocol) and compare it
    /// with --file on the questions both answered successfully: per category J and F1 of each,
    /// the paired difference with a 95% bootstrap interval, judge flips and mean answer length;
    /// writes eval/<dataset>/<model>_<file>_vs_<tag>.md (and .json).
    #[arg(long, value_name = "TAG")]
    pub paired_with: Option<String>,
    /// Judge model (alias or id); without it only F1, exact match and evidence recall are computed.
    #[arg(long)]
    pub judge_model: Option<String>,
    /// LoCoMo judge protocol (LongMemEval always uses its per-type rules).
    #[arg(long, value_enum, default_value = "mem0")]
    pub judge_protocol: JudgeProtocolArg,
    /// A judge prompt file to use instead of the built-in prompts (e.g. a published prompt,
    /// verbatim). Slots: {{question}}, {{gold}} (gold answer), {{prediction}} (the response).
    /// A reply with a JSON `label` is CORRECT when the label is CORRECT; otherwise when it
    /// contains "yes".
    #[arg(long, value_name = "FILE")]
    pub judge_prompt: Option<PathBuf>,
    /// Independent judge runs; accuracy is reported as mean ± std (published LoCoMo J is often
    /// the mean of 3).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10))]
    pub judge_runs: u32,
    /// Judge requests in flight at once.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..))]
    pub judge_workers: u32,
    /// Leave out the LoCoMo audit corrections.
    #[arg(long)]
    pub no_audit: bool,
    /// The LoCoMo audit file, read at run time (default: data/locomo_audit.json).
    #[arg(long, value_name = "FILE", conflicts_with = "no_audit")]
    pub audit_file: Option<PathBuf>,
    /// LoCoMo: also print the official overall over categories 1–5 (F1 only).
    #[arg(long = "overall-with-5")]
    pub overall_with_adversarial: bool,
    /// Model and endpoint: `--model` names the result files; the endpoint serves the judge.
    #[command(flatten)]
    pub model: ModelArgs,
}
