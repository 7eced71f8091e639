//! The multi-granularity memory index of one conversation and every retrieval method over it.
//!
//! [`MemoryIndex`] holds the units of each session (text and vectors), the association graph
//! between them ([`super::graph`]) and BM25 indexes over turns and sessions. Sessions are added in
//! order with [`MemoryIndex::add_session`]; each addition extends the graph and the lexical
//! indexes, never rebuilds them. [`MemoryIndex::rank`] ranks all sessions (and, where the method
//! scores turns, all turns) for a query; [`MemoryIndex::query`] returns the top hits with ids,
//! dates and scores for the agent's `query_memgas` tool.
//!
//! No IO, no model calls: callers embed the units and the query (see [`super::SessionUnits`]).

mod dense;
mod fusion;
mod lexical;
mod memgas;
mod options;
mod ranking;

pub use options::{FusionOptions, IndexOptions, MemgasOptions, Method, Normalisation, TurnRouting};
pub use ranking::{IndexError, MemgasHits, Ranking, Scored, SessionHit, TurnHit};

use serde::{Deserialize, Serialize};

use super::bm25::Bm25Index;
use super::graph::AssociationGraph;
use super::router::rank_descending;
use super::units::{Granularity, SessionUnits, UnitVectors};

/// What a graph node stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Node {
    granularity: Granularity,
    session: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct SessionEntry {
    units: SessionUnits,
    turns: std::ops::Range<usize>,
    hybrid: Option<Vec<f32>>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct TurnEntry {
    session: usize,
    node: usize,
}

/// The memory of one conversation at every granularity. Serialisable, so that a built index
/// can be cached on disk (`retrieval::stored`).
#[derive(Serialize, Deserialize)]
pub struct MemoryIndex {
    options: IndexOptions,
    dims: Option<usize>,
    sessions: Vec<SessionEntry>,
    turns: Vec<TurnEntry>,
    nodes: Vec<Node>,
    vectors: Vec<Vec<f32>>,
    graph: AssociationGraph,
    bm25_turns: Bm25Index,
    bm25_sessions: Bm25Index,
}

impl MemoryIndex {
    /// An empty index.
    pub fn new(options: IndexOptions) -> Self {
        Self {
            options,
            dims: None,
            sessions: Vec::new(),
            turns: Vec::new(),
            nodes: Vec::new(),
            vectors: Vec::new(),
            graph: AssociationGraph::default(),
            bm25_turns: Bm25Index::with_params(options.bm25),
            bm25_sessions: Bm25Index::with_params(options.bm25),
        }
    }

    /// The options the index was built with.
    pub fn options(&self) -> &IndexOptions {
        &self.options
    }

    /// Append a session (the next one in time): its units become graph nodes linked to earlier
    /// sessions' nodes, and its texts join the lexical indexes.
    pub fn add_session(
        &mut self,
        units: SessionUnits,
        vectors: UnitVectors,
    ) -> Result<(), IndexError> {
        let bad =
            |message: String| IndexError::BadVectors { session: units.session_id.clone(), message };
        if vectors.turns.len() != units.turns.len() {
            return Err(bad(format!(
                "{} turn vectors for {} turns",
                vectors.turns.len(),
                units.turns.len()
            )));
        }
        if vectors.summary.is_some() != units.summary.is_some()
            || vectors.keywords.is_some() != units.keywords.is_some()
        {
            return Err(bad("summary/keyword vectors do not match the units".to_string()));
        }
        let dims = self.dims.unwrap_or(vectors.session.len());
        let all = std::iter::once(&vectors.session)
            .chain(&vectors.turns)
            .chain(vectors.summary.iter())
            .chain(vectors.keywords.iter())
            .chain(vectors.hybrid.iter());
        if let Some(wrong) = all.map(Vec::len).find(|&len| len != dims) {
            return Err(bad(format!("vector of {wrong} dimensions, expected {dims}")));
        }
        self.dims = Some(dims);

        let session = self.sessions.len();
        let first_node = self.nodes.len();
        let first_turn = self.turns.len();
        let UnitVectors { session: session_vector, turns, summary, keywords, hybrid } = vectors;
        self.push_node(Granularity::Session, session, session_vector);
        for vector in turns {
            self.turns.push(TurnEntry { session, node: self.nodes.len() });
            self.push_node(Granularity::Turn, session, vector);
        }
        if let Some(vector) = summary {
            self.push_node(Granularity::Summary, session, vector);
        }
        if let Some(vector) = keywords {
            self.push_node(Granularity::Keyword, session, vector);
        }
        self.graph.add_session(&self.vectors, first_node..self.nodes.len(), &self.options.graph);

        self.index_lexical(&units);
        self.sessions.push(SessionEntry { units, turns: first_turn..self.turns.len(), hybrid });
        Ok(())
    }

    fn push_node(&mut self, granularity: Granularity, session: usize, vector: Vec<f32>) {
        self.nodes.push(Node { granularity, session });
        self.vectors.push(vector);
    }

    /// Number of sessions.
    pub fn n_sessions(&self) -> usize {
        self.sessions.len()
    }

    /// Number of turns.
    pub fn n_turns(&self) -> usize {
        self.turns.len()
    }

    /// The association graph.
    pub fn graph(&self) -> &AssociationGraph {
        &self.graph
    }

    /// Session id (`D<n>`) of session `index`.
    pub fn session_id(&self, index: usize) -> &str {
        &self.sessions[index].units.session_id
    }

    /// Dia_id of turn `index`.
    pub fn turn_id(&self, index: usize) -> &str {
        let entry = self.turns[index];
        let local = index - self.sessions[entry.session].turns.start;
        &self.sessions[entry.session].units.turns[local].dia_id
    }

    /// Granularities present in every session (session and turn always; summary and keyword only
    /// when every session has them).
    pub fn granularities(&self) -> Vec<Granularity> {
        let mut present = vec![Granularity::Session, Granularity::Turn];
        if !self.sessions.is_empty() && self.sessions.iter().all(|s| s.units.summary.is_some()) {
            present.push(Granularity::Summary);
        }
        if !self.sessions.is_empty() && self.sessions.iter().all(|s| s.units.keywords.is_some()) {
            present.push(Granularity::Keyword);
        }
        present
    }

    /// Rank every session (and turn, where the method scores turns) for a query.
    pub fn rank(
        &self,
        method: Method,
        query_text: &str,
        query_vector: &[f32],
    ) -> Result<Ranking, IndexError> {
        if let Some(expected) = self.dims
            && query_vector.len() != expected
        {
            return Err(IndexError::QueryDims { got: query_vector.len(), expected });
        }
        let available = self.granularities();
        let require = |granularity: Granularity| {
            if available.contains(&granularity) {
                Ok(())
            } else {
                Err(IndexError::Unavailable { method, granularity })
            }
        };
        let session_only = |scores: Vec<f64>| Ranking {
            sessions: ranked(&scores),
            turns: None,
            router_weights: Vec::new(),
        };
        Ok(match method {
            Method::Session => {
                session_only(self.node_scores_per_session(Granularity::Session, query_vector))
            }
            Method::Summary => {
                require(Granularity::Summary)?;
                session_only(self.node_scores_per_session(Granularity::Summary, query_vector))
            }
            Method::Keyword => {
                require(Granularity::Keyword)?;
                session_only(self.node_scores_per_session(Granularity::Keyword, query_vector))
            }
            Method::Hybrid => {
                require(Granularity::Summary)?;
                require(Granularity::Keyword)?;
                session_only(self.hybrid_scores(query_vector))
            }
            Method::Turn => {
                let turn_scores = self.turn_similarities(query_vector);
                Ranking {
                    sessions: ranked(&self.best_turn_per_session(&turn_scores)),
                    turns: Some(ranked(&turn_scores)),
                    router_weights: Vec::new(),
                }
            }
            Method::Bm25 => self.bm25(query_text),
            Method::Memgas => self.memgas(query_vector),
            Method::Fusion => self.fusion(query_text, query_vector),
        })
    }

    /// Top `k` sessions and turns for the agent's `query_memgas` tool, ranked by
    /// [`IndexOptions::query_method`]. `query_vector` is the query text embedded with the same
    /// embedder as the units.
    pub fn query(
        &self,
        query_text: &str,
        query_vector: &[f32],
        k: usize,
    ) -> Result<MemgasHits, IndexError> {
        self.query_with(self.options.query_method, query_text, query_vector, k)
    }

    /// Like [`MemoryIndex::query`] with another method; session-only methods return no turns.
    pub fn query_with(
        &self,
        method: Method,
        query_text: &str,
        query_vector: &[f32],
        k: usize,
    ) -> Result<MemgasHits, IndexError> {
        let ranking = self.rank(method, query_text, query_vector)?;
        let sessions = ranking
            .sessions
            .iter()
            .take(k)
            .map(|hit| {
                let units = &self.sessions[hit.index].units;
                SessionHit {
                    session_id: units.session_id.clone(),
                    date: units.date.clone(),
                    score: hit.score,
                }
            })
            .collect();
        let turns = ranking
            .turns
            .unwrap_or_default()
            .iter()
            .take(k)
            .map(|hit| {
                let entry = self.turns[hit.index];
                let units = &self.sessions[entry.session].units;
                let turn = &units.turns[hit.index - self.sessions[entry.session].turns.start];
                TurnHit {
                    dia_id: turn.dia_id.clone(),
                    session_id: units.session_id.clone(),
                    date: units.date.clone(),
                    speaker: turn.speaker.clone(),
                    text: turn.text.clone(),
                    score: hit.score,
                }
            })
            .collect();
        Ok(MemgasHits { method, sessions, turns, granularities: self.granularities() })
    }
}

/// Scores → full ranking, best first, ties in index order.
fn ranked(scores: &[f64]) -> Vec<Scored> {
    rank_descending(scores)
        .into_iter()
        .map(|index| Scored { index, score: scores[index] })
        .collect()
}

/// Session ids and turn ids of a ranking, for metrics.
pub fn ranking_ids(index: &MemoryIndex, ranking: &Ranking) -> (Vec<String>, Option<Vec<String>>) {
    let sessions =
        ranking.sessions.iter().map(|hit| index.session_id(hit.index).to_string()).collect();
    let turns = ranking
        .turns
        .as_ref()
        .map(|turns| turns.iter().map(|hit| index.turn_id(hit.index).to_string()).collect());
    (sessions, turns)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
