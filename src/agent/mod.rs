//! The answer engine: per-question retrieval, the tool-calling loop, and resumable concurrent
//! runs over many conversations.
//!
//! Entry points: [`answer_all`] for runs, [`answer_one`] for a question that comes alone (`ask`,
//! `serve`). [`answer_all`] keeps `workers` questions in flight across all samples at once
//! (not sample by sample), appends one result line per question as soon as it finishes, and
//! resumes by question id: questions with a successful line are skipped, failed ones are answered
//! again, a torn last line from a killed run is repaired (see `resume`). Each question also gets
//! a JSONL trace (see `trace`), rendered by `mragent trace` (see `render`).
//!
//! [`answer_one`] answers one question over a snapshot and returns its result line, written
//! nowhere; its trace is written as in a run.
//!
//! The answer side reads conversations as [`crate::snapshot::Snapshot`]s; it never assembles one.
//!
//! Layout (the `use crate::agent::…` graph has no cycles; `ids` is the leaf everything may use):
//! - `pool`: [`answer_all`] and [`answer_stream`] (conversations joining the pool as their
//!   memories become ready), the worker pool, result appending, progress, [`AnswerSummary`];
//!   `scan` what the result files already hold; `counts` the one [`Counts`] struct (fallbacks,
//!   rejected replies, skipped calls, retries, hedges) from trace writer to run summary;
//! - `answer`: one question end to end (trace, retrieval, loop, result line), and
//!   [`answer_one`];
//! - `tool_loop`: the async driver of the loop (model calls, tool calls, the tools' async parts),
//!   which reports each round to `events` when the caller asks for it;
//! - `run`: the sans-IO loop state machine and the final-answer contract;
//! - `tools`: the closed tool set, one file per tool (schema, parsing, execution, result);
//! - `retrieve`: pre-loop retrieval, one file per step;
//! - `question` (category-aware question text), `settings` ([`AnswerSettings`]), `ids` (evidence ids), `resume` (result files), `trace` and `render`
//!   (traces), `scripted` (test support).
//!
//! Only `pool`, `answer`, `tool_loop`, `retrieve` and two tools (the tag scoring of
//! `query_event_keywords`, `query_memgas`) await anything.
//!
//! Concurrency: `futures::StreamExt::buffer_unordered(workers)` bounds the questions in flight;
//! request rates are the `llm` stack's business. Within a question, the re-rank and the tag
//! scoring run concurrently, tag scoring for several keys goes out at once, and a round's tool
//! calls are applied in call order (in-memory lookups; the order decides which keys
//! `query_event_keywords` has already shown) while the model and embedding work they need runs
//! concurrently. Concurrent work records into trace branches merged in call order.

mod answer;
mod counts;
pub mod events;
pub mod ids;
mod mode;
mod pool;
mod progress;
pub mod question;
pub mod render;
pub mod resume;
pub mod retrieve;
pub mod rules;
pub mod run;
mod scan;
#[cfg(any(test, feature = "test-support"))]
pub mod scripted;
mod settings;
mod single;
mod tool_loop;
pub mod tools;
pub mod trace;

pub use self::answer::answer_one;
pub use self::counts::Counts;
pub use self::mode::{AnswerGate, AnswerMode, OWN_ANSWER_MODE};
pub use self::pool::{
    AnswerSummary, PathCounts, PendingSample, SampleFeed, answer_all, answer_stream,
};
pub use self::settings::{AnswerPass, AnswerSettings, answer_prompts_version};
pub use self::single::{NOTHING_FOUND, context as single_context};
