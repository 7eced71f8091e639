//! Arguments of `mragent eval` and `mragent compare`.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use super::{DataArg, ModelArgs};

/// The LoCoMo judge protocol of `learn`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum JudgeProtocolArg {
    /// The published LoCoMo J protocol (Mem0's paper and those comparing with it):
    /// categories 1–4, a generous CORRECT/WRONG grade with a one-sentence reason.
    Mem0,
    /// Ours: categories 1–4, CORRECT only for the gold fact at the gold answer's precision.
    Strict,
}

/// A judge protocol of `eval` and `compare`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EvalProtocolArg {
    /// LoCoMo: the published J protocol (Mem0's paper and those comparing with it),
    /// categories 1–4, a generous CORRECT/WRONG grade with a one-sentence reason.
    Mem0,
    /// LoCoMo: ours, categories 1–4, CORRECT only for the gold fact at the gold answer's
    /// precision.
    Strict,
    /// LongMemEval data: its per-type rules (the only protocol there). LoCoMo: LongMemEval's
    /// standard rule on categories 1–4.
    #[value(name = "longmemeval")]
    LongMemEval,
}

/// What `eval` and `compare` share: the dataset selection, the judge and the audit.
#[derive(Debug, Args)]
pub struct ScoringArgs {
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
    /// Judge model (alias or id); without it only F1, exact match and evidence recall are computed.
    #[arg(long)]
    pub judge_model: Option<String>,
    /// Judge protocol(s), comma-separated (default: mem0 for LoCoMo, longmemeval for
    /// LongMemEval). `eval` with several (e.g. mem0,strict) judges once per protocol and
    /// prints one judge matrix; LongMemEval data takes longmemeval only.
    #[arg(long, value_enum, value_delimiter = ',', value_name = "PROTOCOL[,PROTOCOL...]")]
    pub judge_protocol: Vec<EvalProtocolArg>,
    /// A judge prompt file to use instead of the built-in prompts (e.g. a published prompt,
    /// verbatim). Slots: {{question}}, {{gold}} (gold answer), {{prediction}} (the response).
    /// A reply with a JSON `label` is CORRECT when the label is CORRECT; otherwise when it
    /// contains "yes".
    #[arg(long, value_name = "FILE")]
    pub judge_prompt: Option<PathBuf>,
    /// Independent judge runs per question and protocol; accuracy is reported as mean ± std
    /// (3, the published LoCoMo setting; judge requests = questions × protocols × runs).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=10))]
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
    /// Model and endpoint: `--model` names the result files; the endpoint serves the judge.
    #[command(flatten)]
    pub model: ModelArgs,
}

/// `mragent eval`.
#[derive(Debug, Args)]
pub struct EvalArgs {
    /// Run tag of the results (`--file` of `run`).
    #[arg(long, default_value = "0")]
    pub file: String,
    /// Also score this run tag (same dataset, selection, judge and protocol) and compare it
    /// with --file on the questions both answered successfully, as `mragent compare` does:
    /// per category J and F1 of each, the paired difference with a 95% bootstrap interval,
    /// flips, mean answer length and tokens; writes eval/<dataset>/<model>_<file>_vs_<tag>.md
    /// (and .json).
    #[arg(long, value_name = "TAG")]
    pub paired_with: Option<String>,
    /// LoCoMo: also print the official overall over categories 1–5 (F1 only).
    #[arg(long = "overall-with-5")]
    pub overall_with_adversarial: bool,
    /// Dataset selection, judge and audit.
    #[command(flatten)]
    pub scoring: ScoringArgs,
}

/// `mragent compare`.
#[derive(Debug, Args)]
pub struct CompareArgs {
    /// Run tag of run A (`--file` of `run`).
    #[arg(value_name = "RUN_A")]
    pub run_a: String,
    /// Run tag of run B, compared with A on the questions both answered successfully.
    #[arg(value_name = "RUN_B")]
    pub run_b: String,
    /// Dataset selection, judge (one protocol) and audit, as for `eval`.
    #[command(flatten)]
    pub scoring: ScoringArgs,
}
