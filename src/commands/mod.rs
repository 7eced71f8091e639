//! What each CLI subcommand does once its settings are resolved, one file per subcommand, each
//! with an `execute` that does the work and prints its results; `main.rs` only dispatches and
//! turns the [`Outcome`] into an exit code. Orchestration errors are `anyhow` with context.
//!
//! Shared by them: `output` (standard output, `outln!`), `interrupt` (Ctrl-C), `judging` (the
//! judge client of `eval` and `compare`), `own` (the store and service of own conversations),
//! and for `run` the `guard` (run lock) and the `manifest`. Each conversation's memory comes from `crate::snapshot`.

pub mod ask;
pub mod build;
pub mod compare;
pub mod eval;
pub mod export;
pub mod interrupt;
pub mod keys;
pub mod learn;
pub mod mcp;
pub mod memory;
mod memory_edits;
mod memory_jobs;
pub mod output;
pub mod ping;
pub mod retrieve;
pub mod run;
pub mod serve;
pub mod store_copy;
pub mod trace;
pub mod verify;

mod judging;
mod own;

use crate::cli::Command;

/// How a command ended when it did not fail outright.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Everything done.
    Success,
    /// Done, but some items failed or are left (they are recorded and a rerun does them).
    Partial,
}

/// The command's name, as its log file is named.
pub fn name(command: &Command) -> &'static str {
    match command {
        Command::Ping(_) => "ping",
        Command::Eval(_) => "eval",
        Command::Compare(_) => "compare",
        Command::Build(_) => "build",
        Command::Learn(_) => "learn",
        Command::Retrieve(_) => "retrieve",
        Command::Run(_) => "run",
        Command::Trace(_) => "trace",
        Command::Memory(_) => "memory",
        Command::Ask(_) => "ask",
        Command::Serve(_) => "serve",
        Command::Mcp(_) => "mcp",
        Command::Store(_) => "store",
        Command::Keys(_) => "keys",
        Command::Replay(_) => "replay",
        Command::Export(_) => "export",
        Command::Verify(_) => "verify",
    }
}

/// The chat client for `model` of `models`.
fn chat_client(
    models: &crate::settings::ModelSettings,
    model: &crate::settings::ModelChoice,
) -> anyhow::Result<crate::llm::Client> {
    use anyhow::Context as _;
    crate::llm::build_chat_model(&models.llm_config(model)).context("building the model client")
}
