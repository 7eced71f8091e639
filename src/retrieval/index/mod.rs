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

mod coverage;
mod dense;
mod fusion;
mod held;
mod lexical;
mod memgas;
mod needs;
mod options;
mod ranking;
mod speakers;
mod words;

pub use fusion::QueryChannels;
pub use needs::IndexNeeds;
pub use options::{
    FusionOptions, IndexOptions, MemgasOptions, Method, Normalisation, SessionAggregate,
    SessionStructure, TurnRouting,
};
pub use ranking::{IndexError, MemgasHits, Ranking, Scored, SessionHit, TurnHit};
pub use words::{QueryWords, WordError, WordIndex, turn_words};

use serde::{Deserialize, Serialize};

use super::ann::AnnIndex;
use super::bm25::Bm25Index;
use super::graph::AssociationGraph;
use super::router::rank_descending;
use super::units::{Granularity, SessionUnits, SessionVectors, UnitVectors};
use crate::text::content_words;

/// What a graph node stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct IndexNode {
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
    /// The turn's graph node; only meaningful when the index holds turn vectors
    /// ([`IndexNeeds`]), and [`MemoryIndex::rank`] refuses methods that read them otherwise.
    node: usize,
}

/// The memory of one conversation at every granularity. Serialisable, so that a built index
/// can be cached on disk (`retrieval::stored`).
#[derive(Clone, Serialize, Deserialize)]
pub struct MemoryIndex {
    options: IndexOptions,
    needs: IndexNeeds,
    dims: Option<usize>,
    sessions: Vec<SessionEntry>,
    turns: Vec<TurnEntry>,
    nodes: Vec<IndexNode>,
    vectors: Vec<Vec<f32>>,
    graph: AssociationGraph,
    bm25_turns: Bm25Index,
    bm25_sessions: Bm25Index,
    /// Every turn's content words and the words' vectors (soft word matching), when
    /// [`IndexNeeds::words`] asks for them.
    #[serde(default)]
    words: WordIndex,
    /// Approximate nearest neighbours over turn vectors, once there are
    /// [`AnnOptions::threshold`](crate::retrieval::ann::AnnOptions) turns (keyed by turn index).
    /// Not serialised (usearch's graph has no serde form): a deserialised index rebuilds it
    /// with [`MemoryIndex::restore_approximate`].
    #[serde(skip)]
    turn_ann: Option<std::sync::Arc<AnnIndex>>,
}

impl MemoryIndex {
    /// An empty index that holds everything (every vector and the association graph).
    pub fn new(options: IndexOptions) -> Self {
        Self::with_needs(options, IndexNeeds::ALL)
    }

    /// An empty index that holds only what `needs` asks for; [`MemoryIndex::rank`] refuses the
    /// methods that would read anything else ([`IndexError::NotBuilt`]).
    pub fn with_needs(options: IndexOptions, needs: IndexNeeds) -> Self {
        Self {
            options,
            needs,
            dims: None,
            sessions: Vec::new(),
            turns: Vec::new(),
            nodes: Vec::new(),
            vectors: Vec::new(),
            graph: AssociationGraph::default(),
            bm25_turns: Bm25Index::with_params(options.bm25),
            bm25_sessions: Bm25Index::with_params(options.bm25),
            words: WordIndex::default(),
            turn_ann: None,
        }
    }

    /// The options the index was built with.
    pub fn options(&self) -> &IndexOptions {
        &self.options
    }

    /// Replace the query-time options (method, MemGAS, fusion, BM25 k1/b, the approximate
    /// index's candidates per query) and keep what was built (units, graph, lexical postings,
    /// the approximate graph): a sweep ranks one index under many settings.
    pub fn set_query_options(&mut self, options: &IndexOptions) {
        self.options.query_method = options.query_method;
        self.options.ann.candidates = options.ann.candidates;
        self.options.memgas = options.memgas;
        self.options.fusion = options.fusion;
        self.options.bm25 = options.bm25;
        self.bm25_turns.set_params(options.bm25);
        self.bm25_sessions.set_params(options.bm25);
    }

    /// Append a session (the next one in time): its units become graph nodes linked to earlier
    /// sessions' nodes, and its texts join the lexical indexes.
    pub fn add_session(
        &mut self,
        units: SessionUnits,
        vectors: UnitVectors,
    ) -> Result<(), IndexError> {
        self.add_session_vectors(units, vectors.into())
    }

    /// [`MemoryIndex::add_session`] with only the vectors the index needs ([`IndexNeeds`]);
    /// vectors it does not need are dropped, missing ones it needs are an error.
    pub fn add_session_vectors(
        &mut self,
        units: SessionUnits,
        vectors: SessionVectors,
    ) -> Result<(), IndexError> {
        let vectors = self.checked(&units, vectors)?;
        let session = self.sessions.len();
        let first_node = self.nodes.len();
        let first_turn = self.turns.len();
        let SessionVectors { session: session_vector, turns, summary, keywords, hybrid } = vectors;
        if let Some(vector) = session_vector {
            self.push_node(Granularity::Session, session, vector);
        }
        match turns {
            Some(turns) => {
                for vector in turns {
                    self.turns.push(TurnEntry { session, node: self.nodes.len() });
                    self.push_node(Granularity::Turn, session, vector);
                }
            }
            None => self
                .turns
                .extend(units.turns.iter().map(|_| TurnEntry { session, node: usize::MAX })),
        }
        if let Some(vector) = summary {
            self.push_node(Granularity::Summary, session, vector);
        }
        if let Some(vector) = keywords {
            self.push_node(Granularity::Keyword, session, vector);
        }
        if self.needs.graph {
            self.graph.add_session(
                &self.vectors,
                first_node..self.nodes.len(),
                &self.options.graph,
            );
        }
        self.index_turns_approximately(first_turn)?;
        self.index_lexical(&units);
        if self.needs.words {
            for turn in &units.turns {
                self.words.add_turn(turn_words(turn));
            }
        }
        self.sessions.push(SessionEntry { units, turns: first_turn..self.turns.len(), hybrid });
        Ok(())
    }

    /// The vectors the index needs, checked against the units and the index's dimension.
    fn checked(
        &mut self,
        units: &SessionUnits,
        vectors: SessionVectors,
    ) -> Result<SessionVectors, IndexError> {
        let bad =
            |message: String| IndexError::BadVectors { session: units.session_id.clone(), message };
        let needs = self.needs.vectors;
        let keep = |wanted: bool, vector: Option<Vec<f32>>| vector.filter(|_| wanted);
        let vectors = SessionVectors {
            session: keep(needs.session, vectors.session),
            turns: vectors.turns.filter(|_| needs.turns),
            summary: keep(needs.summary, vectors.summary),
            keywords: keep(needs.keywords, vectors.keywords),
            hybrid: keep(needs.hybrid, vectors.hybrid),
        };
        if needs.session && vectors.session.is_none() {
            return Err(bad("no session vector".to_string()));
        }
        let n_turns = vectors.turns.as_ref().map_or(0, Vec::len);
        if needs.turns && (vectors.turns.is_none() || n_turns != units.turns.len()) {
            return Err(bad(format!("{n_turns} turn vectors for {} turns", units.turns.len())));
        }
        if (needs.summary && vectors.summary.is_some() != units.summary.is_some())
            || (needs.keywords && vectors.keywords.is_some() != units.keywords.is_some())
        {
            return Err(bad("summary/keyword vectors do not match the units".to_string()));
        }
        let all = vectors
            .session
            .iter()
            .chain(vectors.turns.iter().flatten())
            .chain(vectors.summary.iter())
            .chain(vectors.keywords.iter())
            .chain(vectors.hybrid.iter());
        let mut lengths = all.map(Vec::len);
        if let Some(first) = self.dims.or_else(|| lengths.clone().next()) {
            if let Some(wrong) = lengths.find(|&len| len != first) {
                return Err(bad(format!("vector of {wrong} dimensions, expected {first}")));
            }
            self.dims = Some(first);
        }
        Ok(vectors)
    }

    fn push_node(&mut self, granularity: Granularity, session: usize, vector: Vec<f32>) {
        self.nodes.push(IndexNode { granularity, session });
        self.vectors.push(vector);
    }

    /// The memory's words that have no vector yet (to embed with the units' embedder and hand
    /// to [`MemoryIndex::set_word_vectors`]); empty unless [`IndexNeeds::words`].
    pub fn words_without_vectors(&self) -> Vec<String> {
        self.words.without_vectors()
    }

    /// Give memory words their vectors (`vectors[i]` embeds `words[i]`).
    pub fn set_word_vectors(&mut self, words: &[String], vectors: Vec<Vec<f32>>) {
        self.words.set_vectors(words, vectors);
    }

    /// Hold the memory words' vectors compact from now on (8 bits per dimension; own memory's
    /// index, whose vectors come compact from the store).
    pub fn hold_word_vectors_compact(&mut self) {
        self.words.hold_compact();
    }

    /// Give every memory word without a vector a stand-in ([`words::test_word_vector`]).
    #[cfg(test)]
    pub(crate) fn set_test_word_vectors(&mut self) {
        let words = self.words_without_vectors();
        let vectors = words.iter().map(|word| words::test_word_vector(word)).collect();
        self.set_word_vectors(&words, vectors);
    }

    /// `sessions` sessions of 10 turns on a circle in 4-D (turn i at angle i·0.01), each with
    /// its text `t<i>`.
    #[cfg(test)]
    pub(crate) fn test_circle(mut self, sessions: usize) -> Self {
        for s in 0..sessions {
            let turns: Vec<crate::retrieval::units::TurnUnit> = (0..10)
                .map(|t| crate::retrieval::units::TurnUnit {
                    dia_id: format!("D{}:{}", s + 1, t + 1),
                    speaker: "A".into(),
                    text: format!("A: t{}", s * 10 + t),
                })
                .collect();
            let vectors: Vec<Vec<f32>> = (0..10)
                .map(|t| {
                    let angle = (s * 10 + t) as f32 * 0.01;
                    vec![angle.cos(), angle.sin(), 0.0, 0.0]
                })
                .collect();
            let units = crate::retrieval::units::SessionUnits {
                session_id: format!("D{}", s + 1),
                date: None,
                turns,
                summary: None,
                keywords: None,
            };
            let parts = crate::retrieval::units::SessionVectors {
                session: Some(vec![1.0, 0.0, 0.0, 0.0]),
                turns: Some(vectors),
                ..crate::retrieval::units::SessionVectors::default()
            };
            self.add_session_vectors(units, parts).unwrap();
        }
        self.set_test_word_vectors();
        self
    }

    /// The content words of `query_text` that the memory lacks: a caller embeds them and passes
    /// them to [`MemoryIndex::rank_with_words`] (fusion's soft word matching).
    pub fn query_words_missing(&self, query_text: &str) -> Vec<String> {
        if !self.needs.words {
            return Vec::new();
        }
        content_words(query_text).into_iter().filter(|w| !self.words.contains(w)).collect()
    }

    /// Rebuild the approximate turn index from the turn vectors when the memory has reached
    /// the threshold and the index is missing (a deserialised index: `turn_ann` is not stored).
    pub fn restore_approximate(&mut self) -> Result<(), IndexError> {
        if self.turn_ann.is_some() {
            return Ok(());
        }
        self.index_turns_approximately(0)
    }

    /// Rank every session (and turn, where the method scores turns) for a query.
    pub fn rank(
        &self,
        method: Method,
        query_text: &str,
        query_vector: &[f32],
    ) -> Result<Ranking, IndexError> {
        self.rank_with_words(method, query_text, query_vector, &QueryWords::new())
    }

    /// [`MemoryIndex::rank`] with vectors for the query's words that the memory lacks
    /// ([`MemoryIndex::query_words_missing`]); without them such a word matches nothing in
    /// fusion's soft word channel (as it matches nothing in BM25).
    pub fn rank_with_words(
        &self,
        method: Method,
        query_text: &str,
        query_vector: &[f32],
        query_words: &QueryWords,
    ) -> Result<Ranking, IndexError> {
        if !self.needs.covers(&IndexNeeds::for_method(method, &self.options)) {
            return Err(IndexError::NotBuilt { method });
        }
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
            Method::Turn => self.dense_turns(query_vector),
            Method::Bm25 => self.bm25(query_text),
            Method::Memgas => self.memgas(query_vector),
            Method::Fusion => self.fusion(query_text, query_vector, query_words)?,
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
        self.query_with(self.options.query_method, query_text, query_vector, &QueryWords::new(), k)
    }

    /// Like [`MemoryIndex::query`] with another method; session-only methods return no turns.
    pub fn query_with(
        &self,
        method: Method,
        query_text: &str,
        query_vector: &[f32],
        query_words: &QueryWords,
        k: usize,
    ) -> Result<MemgasHits, IndexError> {
        let ranking = self.rank_with_words(method, query_text, query_vector, query_words)?;
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
            .map(|&hit| self.turn_hit(hit))
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
