//! Arguments of `mragent replay`, `export` and `verify`: recorded runs.

use std::path::PathBuf;

use clap::Args;

use super::RunCommandArgs;

/// `mragent replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The recorded run, given as it was run (`--file` names it): the same dataset, models and
    /// answer settings, or its requests will not be found.
    #[command(flatten)]
    pub run: RunCommandArgs,
    /// Run tag of the replayed answers (default: `<file>-replay`).
    #[arg(long, value_name = "TAG")]
    pub to: Option<String>,
    /// Send the requests that were never recorded to the endpoint (and record them) instead of
    /// stopping at the first one.
    #[arg(long)]
    pub fill: bool,
}

/// `mragent export`.
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// Dataset of the run (`locomo`, `longmemeval`).
    #[arg(long, value_enum, default_value = "locomo")]
    pub data: super::DataArg,
    /// The run's build model alias (`--model` of the run: it names the result files).
    #[arg(long, env = "MRAGENT_MODEL", default_value = "gemini")]
    pub model: String,
    /// Run tag (`--file` of the run).
    #[arg(long, required_unless_present = "learn", conflicts_with = "learn")]
    pub file: Option<String>,
    /// Archive a `learn` run instead: its `--name` (its folder `data/<dataset>/meta/<name>/`,
    /// its test answers and the memories it learned over).
    #[arg(long, value_name = "NAME")]
    pub learn: Option<String>,
    /// Archive the comparison of the run with run B too (`compare FILE B`, `eval --file FILE
    /// --paired-with B`): both runs, the comparison's outputs, how it was made and its judge's
    /// recorded calls.
    #[arg(long, value_name = "B", conflicts_with = "learn")]
    pub vs: Option<String>,
    /// Archive to write (default: export/<dataset>/<model>_<file>.tar.zst,
    /// export/<dataset>/<model>_<file>_vs_<B>.tar.zst, or
    /// export/<dataset>/learn_<name>.tar.zst).
    #[arg(long, short)]
    pub output: Option<PathBuf>,
}

/// `mragent verify`.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// An archive written by `mragent export`.
    pub archive: PathBuf,
    /// Keep the unpacked archive and the recomputed files in this (new or empty) folder.
    #[arg(long, value_name = "DIR")]
    pub keep: Option<PathBuf>,
}
