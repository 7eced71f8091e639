//! mragent: long-term conversational memory for LLM agents.
//!
//! # Layout
//! Modules are declared in data-flow order (a suggested reading order):
//! - [`cli`]: clap types; [`logging`]: tracing setup; [`prompts`]: every prompt, compiled in.
//! - [`dataset`]: LoCoMo / LongMemEval input model and loaders.
//! - [`llm`]: the only module that talks to model endpoints.
//! - [`results`]: the per-question result-line format.

pub mod cli;
pub mod logging;
pub mod prompts;

pub mod agent;
pub mod build;
pub mod dataset;
pub mod llm;
pub mod memory;
pub mod results;
