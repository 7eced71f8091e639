//! The memory store: one conversation's graph (petgraph) built from the LLM stage outputs, and
//! the pure queries the answering agent's tools call.
//!
//! This module never calls a model and does no IO beyond (de)serialising its records.
//! * `input` — the records the build stages produce (rewritten sentences, topics, personal
//!   facts, keywords).
//! * `date` — lenient parsing of model-written event dates into timeline days (§7.3).
//! * `key` — key normalisation (lowercase, punctuation, plural folding) and deterministic fuzzy
//!   matching.
//! * `graph` — [`MemoryGraph`] and [`build_graph`].
//! * `query` — the tool queries (`edges_by_tag`, `query_conversation_time`, …), keyword matching
//!   and the timeline window.

pub mod input;
pub mod query;

mod date;
mod graph;
mod key;

pub use date::parse_event_date;
pub use graph::{
    COMMON_KEY_MIN_EPISODES, COMMON_KEY_SHARE, Edge, Episode, Error, Fact, GraphStats, KeyNode,
    MemoryGraph, Node, Person, Topic, TurnNode, build_graph,
};
pub use key::{JACCARD_THRESHOLD, MatchKind, clean_key, match_phrase, normalize_key, tokens};
