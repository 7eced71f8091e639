//! What the index returns: full rankings, top hits, and why an operation failed.

use serde::{Deserialize, Serialize};

use super::options::Method;
use crate::retrieval::units::Granularity;

/// Why an index operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IndexError {
    /// The method needs units the index does not have.
    #[error(
        "method {method} needs {granularity} units, which this index does not have (they come from an LLM)"
    )]
    Unavailable {
        /// The method asked for.
        method: Method,
        /// The missing granularity.
        granularity: Granularity,
    },
    /// Vectors do not match the units or the index's dimension.
    #[error("session {session}: {message}")]
    BadVectors {
        /// Session id.
        session: String,
        /// What is wrong.
        message: String,
    },
    /// The method reads vectors or a graph the index was built without ([`IndexNeeds`](super::IndexNeeds)).
    #[error("method {method} reads parts this index was built without; build it for {method}")]
    NotBuilt {
        /// The method asked for.
        method: Method,
    },
    /// Fusion's soft word channel cannot score (see [`super::words`]).
    #[error(transparent)]
    Words(#[from] super::words::WordError),
    /// The approximate nearest-neighbour index failed.
    #[error(transparent)]
    Ann(#[from] crate::retrieval::ann::AnnError),
    /// A query vector of the wrong dimension.
    #[error("query vector has {got} dimensions, the index has {expected}")]
    QueryDims {
        /// Dimensions given.
        got: usize,
        /// Dimensions of the index.
        expected: usize,
    },
}

/// An item (session or turn index) with its score.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Scored {
    /// Index into the index's sessions or turns.
    pub index: usize,
    /// Method score (higher is better).
    pub score: f64,
}

/// A full ranking of sessions and, where the method scores them, turns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ranking {
    /// Every session, best first.
    pub sessions: Vec<Scored>,
    /// Every turn, best first (`None` for session-only methods).
    pub turns: Option<Vec<Scored>>,
    /// Router weights per granularity (MemGAS only).
    pub router_weights: Vec<(Granularity, f64)>,
}

/// One retrieved session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionHit {
    /// `D<n>`.
    pub session_id: String,
    /// Session date as given by the dataset.
    pub date: Option<String>,
    /// Method score.
    pub score: f64,
}

/// One retrieved turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnHit {
    /// `D<session>:<turn>`.
    pub dia_id: String,
    /// Its session's id.
    pub session_id: String,
    /// Its session's date.
    pub date: Option<String>,
    /// Speaker.
    pub speaker: String,
    /// The turn text (`speaker: text`).
    pub text: String,
    /// Method score.
    pub score: f64,
}

/// Result of [`MemoryIndex::query`](super::MemoryIndex::query).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemgasHits {
    /// The method that ranked them.
    pub method: Method,
    /// Top sessions, best first.
    pub sessions: Vec<SessionHit>,
    /// Top turns, best first.
    pub turns: Vec<TurnHit>,
    /// Granularities the index has.
    pub granularities: Vec<Granularity>,
}
