//! mragent: long-term conversational memory for LLM agents.
//!
//! # Layout
//! Modules are declared in data-flow order (a suggested reading order):
//! - [`text`]: words, stop words, the Porter stemmer and the short content hash every stage
//!   shares; a leaf that imports nothing from the crate.
//! - [`cli`]: clap types; [`fsutil`]: safe file names and atomic file replacement; [`heap`]:
//!   estimates of the heap bytes a value holds (byte-bounded caches); [`names`]: the
//!   one id rule and the shared input limits; [`logging`]: tracing setup; [`prompts`]: every
//!   prompt, compiled in; [`provenance`]: the crate version and the commit a build came from.
//! - [`dataset`]: LoCoMo / LongMemEval input model and loaders; [`convo`]: the format of own
//!   conversations and their placement into sessions.
//! - [`llm`]: the only module that talks to model endpoints (its `fatal` latch also stops a
//!   whole run on the first error no retry can fix).
//! - [`embedding`]: the local all-MiniLM-L6-v2 embedder, its BERT encoder written here (candle is
//!   only the `candle-baseline` feature's reference), its model files provisioned once.
//! - [`ingest`]: the write path, the three cached LLM stages (rewrite, keywords, embeddings) and the graph.
//! - [`memory`]: the graph store built from the stage outputs, and its pure queries.
//! - [`retrieval`]: MemGAS multi-granularity retrieval (GMM association graph, entropy router,
//!   personalized PageRank), BM25 and dense baselines; the library only.
//! - [`snapshot`]: a conversation ready to answer (memory graph, vectors, MemGAS index), assembled
//!   only there, from the file caches of a run or from the store.
//! - [`agent`]: the answer engine: pre-loop retrieval, graph tools, the tool-calling loop,
//!   resumable concurrent runs, traces.
//! - [`store`]: the store of own conversations (a source of truth), on SQLite or on PostgreSQL
//!   shared by replicas; [`service`]: add, search, ask, facts, edits and jobs over it, one file
//!   per operation (`service::ops`); [`serve`]: the HTTP API and MCP.
//! - [`results`]: the per-question result-line format; [`recorded`]: a recorded run on disk
//!   (its files, tape, lock, manifest, eval record and archive).
//! - [`eval`]: scoring of result files (LoCoMo F1, evidence recall, LLM judge) and reports.
//! - [`learn`]: MetaMem, rules on how to use memory learned from judged answers and kept only
//!   when held-out questions improve.
//! - [`tune`]: the `retrieve` benchmark harness: retrieval methods run over a dataset, scored
//!   with retrieval metrics, their settings tuned by folds.
//! - [`settings`]: every command's settings, resolved once from arguments and environment;
//!   [`commands`]: what each CLI subcommand does with them, and what it prints.

pub mod text;

pub mod cli;
pub mod fsutil;
pub mod heap;
pub mod logging;
pub mod names;
pub mod prompts;
pub mod provenance;

pub mod convo;
pub mod dataset;
pub mod llm;

pub mod embedding;

pub mod ingest;
pub mod memory;
pub mod store;

pub mod retrieval;

pub mod snapshot;

pub mod agent;

pub mod service;

pub mod results;

pub mod recorded;

pub mod eval;

// Learning: answers (agent) judged (eval) to learn rules.
pub mod learn;

pub mod tune;

pub mod serve;

pub mod settings;

pub mod commands;
