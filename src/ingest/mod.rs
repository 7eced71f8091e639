//! The write path: conversations → rewrite → keywords → embeddings, each stage cached per unit
//! (session, or batch of sessions for LongMemEval), then the stage outputs a memory graph is
//! built from. This file only declares the rooms and re-exports their entry points.
//!
//! Entry points (in `batch`): [`build`] for many conversations (the `mragent build` command),
//! [`build_memory`] for one conversation when its memory is needed right away, and
//! [`load_memory`] to read a finished build back without any model call. The stage sequence
//! itself is written once, in `pipeline`, for a sink: the file caches here (`sample`), the
//! store of own conversations in `service`.
//!
//! Concurrency: units of all conversations run concurrently, at most
//! [`BuildSettings::workers`] at a time (a semaphore in the shared `workers::Pool`). A unit runs its
//! three stages back to back and writes each stage's cache as soon as that stage is done, so an
//! interrupted build keeps every finished unit and the next build redoes only the rest. Request
//! rates are the `llm` stack's business, not this module's.
//!
//! Failures: a unit whose calls fail is recorded as failed in the cache and listed in the
//! [`BuildSummary`]; the build goes on with the other units. Only errors that would fail every
//! unit alike (bad key, unknown model, an unwritable cache) abort it. What the model writes
//! never fails a unit: answers are salvaged item by item, missing items re-asked alone, and
//! what stays missing is filled without the model and counted (`repair`).

mod ask;
mod batch;
mod cache;
mod config;
pub mod embed;
pub mod granules;
pub mod keywords;
pub(crate) mod pipeline;
mod progress;
mod repair;
pub mod rewrite;
mod sample;
pub mod session;
mod summary;
mod unit;
mod workers;

pub use crate::ingest::batch::{build, build_each, build_memory, load_memory};
pub use crate::ingest::config::BuildSettings;
pub use crate::ingest::embed::SampleEmbeddings;
pub use crate::ingest::granules::{
    ConversationGranules, GranuleSummary, SessionGranules, build_granules, load_granules,
};
pub use crate::ingest::repair::Repair;
pub use crate::ingest::session::{SessionError, SessionOutputs};
pub use crate::ingest::summary::{
    BuildSummary, BuiltMemory, FailedUnit, RepairCounts, SampleFailures, SampleSummary, Stage,
    StageOutputs, UnitRunSummary,
};

#[cfg(test)]
mod tests;
