//! mragent: long-term conversational memory for LLM agents.
//!
//! # Layout
//! Modules are declared in data-flow order (a suggested reading order):
//! - [`cli`]: clap types; [`settings`]: resolved settings; [`logging`]: tracing setup; [`prompts`]: every prompt, compiled in.
//! - [`dataset`]: LoCoMo / LongMemEval input model and loaders.
//! - [`llm`]: the only module that talks to model endpoints.
//! - [`memory`]: the graph store built from the stage outputs, and its pure queries.
//! - [`results`]: the per-question result-line format.
//! - [`eval`]: scoring of result files (LoCoMo F1, evidence recall, LLM judge) and reports.
//! - [`commands`]: what each CLI subcommand does, given resolved settings.

pub mod cli;
pub mod logging;
pub mod prompts;
pub mod settings;

pub mod agent;
pub mod build;
pub mod dataset;
pub mod embedding;
pub mod llm;
pub mod memory;
pub mod results;
pub mod retrieval;

pub mod eval;

pub mod commands;
