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

use serde::{Deserialize, Serialize};

use super::bm25::{Bm25Index, Bm25Params};
use super::dates::{date_affinity, month_mentions, session_month};
use super::graph::{AssociationGraph, GraphOptions};
use super::ppr::personalized_pagerank;
use super::router::{RouterFormula, rank_descending, route, select_seeds};
use super::units::{Granularity, SessionUnits, UnitTextOptions, UnitVectors};
use super::vector::dot_f64 as dot;

/// A retrieval method.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// MemGAS: entropy router, seeds, personalized PageRank over the association graph.
    Memgas,
    /// Dense similarity to the session vector.
    Session,
    /// Dense similarity to each turn; a session scores its best turn.
    Turn,
    /// Dense similarity to the LLM summary.
    Summary,
    /// Dense similarity to the LLM keywords.
    Keyword,
    /// Dense similarity to MemGAS's hybrid text (summary, keywords, session).
    Hybrid,
    /// BM25 over turns (turn ranking) and over whole sessions (session ranking).
    Bm25,
    /// Weighted fusion of normalised BM25, dense-turn and (optionally) MemGAS scores.
    Fusion,
}

impl Method {
    /// Every method, in report order.
    pub const ALL: [Method; 8] = [
        Method::Memgas,
        Method::Session,
        Method::Turn,
        Method::Summary,
        Method::Keyword,
        Method::Hybrid,
        Method::Bm25,
        Method::Fusion,
    ];

    /// Lowercase name (as on the command line).
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Memgas => "memgas",
            Method::Session => "session",
            Method::Turn => "turn",
            Method::Summary => "summary",
            Method::Keyword => "keyword",
            Method::Hybrid => "hybrid",
            Method::Bm25 => "bm25",
            Method::Fusion => "fusion",
        }
    }

    /// Parse a name as printed by [`Method::as_str`].
    pub fn parse(name: &str) -> Option<Method> {
        Method::ALL.into_iter().find(|method| method.as_str() == name.trim().to_ascii_lowercase())
    }
}

impl std::fmt::Display for Method {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the router compares for the turn granularity.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TurnRouting {
    /// Each session's best turn similarity, so every granularity's softmax runs over the same
    /// number of memories (the sessions), as in MemGAS where a session has one turn vector.
    #[default]
    BestPerSession,
    /// All turns (the entropy then grows with the turn count, penalising turns).
    AllTurns,
}

/// MemGAS query-time settings (memgas.md §9 defaults; temperature as in the paper's runs).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MemgasOptions {
    /// Router weighting.
    pub router: RouterFormula,
    /// Router softmax temperature λ.
    pub temperature: f64,
    /// Seeds kept for PageRank (α).
    pub n_seeds: usize,
    /// Probability of following an edge in PageRank.
    pub damping: f64,
    /// Router input for turns.
    pub turn_routing: TurnRouting,
}

impl Default for MemgasOptions {
    fn default() -> Self {
        Self {
            router: RouterFormula::InverseEntropy,
            temperature: 0.2,
            n_seeds: 15,
            damping: 0.1,
            turn_routing: TurnRouting::BestPerSession,
        }
    }
}

/// How a channel's scores are put on a common scale before they are weighted and summed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Normalisation {
    /// `(v − min) / (max − min)`, so the best unit of every channel scores 1.
    #[default]
    MinMax,
    /// `(v − mean) / standard deviation`, so a channel whose best unit stands far out of the
    /// crowd counts for more than one with a flat top.
    ZScore,
}

/// Score-fusion settings: each channel's scores are normalised per query over the conversation
/// ([`Normalisation`]), then summed with these weights.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FusionOptions {
    /// Weight of BM25 over turns in the turn score.
    pub bm25: f64,
    /// Weight of dense similarity of the turn in the turn score.
    pub dense: f64,
    /// Weight of BM25 over whole session documents in the session score.
    pub session_bm25: f64,
    /// Weight of a session's best dense turn similarity in the session score.
    pub session_dense: f64,
    /// Weight of MemGAS's PageRank mass (turn node; session sum).
    pub memgas: f64,
    /// Weight of a turn's session score in its turn score (hierarchical: evidence turns sit in
    /// sessions that match the question as a whole).
    pub session_to_turn: f64,
    /// Weight of a session's aggregated fused turn scores in its session score.
    pub turn_to_session: f64,
    /// How many of a session's best fused turns make up that aggregate (1: the best alone).
    pub session_top_turns: usize,
    /// Weight of the i-th best of those turns is `session_turn_decay^i` (i from 0).
    pub session_turn_decay: f64,
    /// Channel normalisation.
    pub normalisation: Normalisation,
    /// Weight of [`date_affinity`] (a session dated in a month the question names) in the
    /// session score; 0 turns date awareness off.
    pub date: f64,
    /// Affinity of a session dated in the month after a named month (see [`date_affinity`]).
    pub date_next_month: f64,
}

impl Default for FusionOptions {
    fn default() -> Self {
        Self {
            bm25: 1.0,
            dense: 1.0,
            session_bm25: 0.5,
            session_dense: 1.0,
            memgas: 0.0,
            session_to_turn: 1.5,
            turn_to_session: 1.0,
            session_top_turns: 1,
            session_turn_decay: 0.5,
            normalisation: Normalisation::MinMax,
            date: 2.0,
            date_next_month: 0.5,
        }
    }
}

/// Everything that shapes an index and its rankings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct IndexOptions {
    /// The method [`MemoryIndex::query`] uses (fusion by default: the best offline method on
    /// LoCoMo; see `eval/locomo/retrieve/summary.md`).
    pub query_method: Method,
    /// How unit texts are written (used by callers when embedding).
    pub units: UnitTextOptions,
    /// Association graph construction.
    pub graph: GraphOptions,
    /// MemGAS query settings.
    pub memgas: MemgasOptions,
    /// Fusion settings.
    pub fusion: FusionOptions,
    /// BM25 parameters (turn and session indexes).
    pub bm25: Bm25Params,
}

impl Default for IndexOptions {
    fn default() -> Self {
        Self {
            query_method: Method::Fusion,
            units: UnitTextOptions::default(),
            graph: GraphOptions::default(),
            memgas: MemgasOptions::default(),
            fusion: FusionOptions::default(),
            bm25: Bm25Params::default(),
        }
    }
}

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

/// Result of [`MemoryIndex::query`].
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

/// What a graph node stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Node {
    granularity: Granularity,
    session: usize,
}

#[derive(Debug, Clone)]
struct SessionEntry {
    units: SessionUnits,
    turns: std::ops::Range<usize>,
    hybrid: Option<Vec<f32>>,
}

#[derive(Debug, Clone, Copy)]
struct TurnEntry {
    session: usize,
    node: usize,
}

/// The memory of one conversation at every granularity.
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

        for (position, turn) in units.turns.iter().enumerate() {
            if self.options.units.lexical_turn_context {
                self.bm25_turns.add(&units.turn_embedding_text(position, &self.options.units));
            } else {
                self.bm25_turns.add(&turn.text);
            }
        }
        let mut lexical = units.session_text();
        for extra in units.summary.iter().chain(units.keywords.iter()) {
            lexical.push('\n');
            lexical.push_str(extra);
        }
        self.bm25_sessions.add(&lexical);
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
                let scores = self
                    .sessions
                    .iter()
                    .map(|s| s.hybrid.as_ref().map_or(f64::NEG_INFINITY, |v| dot(v, query_vector)))
                    .collect::<Vec<_>>();
                session_only(scores)
            }
            Method::Turn => {
                let turn_scores = self.turn_similarities(query_vector);
                Ranking {
                    sessions: ranked(&self.best_turn_per_session(&turn_scores)),
                    turns: Some(ranked(&turn_scores)),
                    router_weights: Vec::new(),
                }
            }
            Method::Bm25 => Ranking {
                sessions: ranked(&self.bm25_sessions.scores(query_text)),
                turns: Some(ranked(&self.bm25_turns.scores(query_text))),
                router_weights: Vec::new(),
            },
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

    /// Per session, the similarity of its single node of `granularity` (−∞ if it has none).
    fn node_scores_per_session(&self, granularity: Granularity, query: &[f32]) -> Vec<f64> {
        let mut scores = vec![f64::NEG_INFINITY; self.sessions.len()];
        for (node, vector) in self.nodes.iter().zip(&self.vectors) {
            if node.granularity == granularity {
                scores[node.session] = dot(vector, query);
            }
        }
        scores
    }

    fn turn_similarities(&self, query: &[f32]) -> Vec<f64> {
        self.turns.iter().map(|turn| dot(&self.vectors[turn.node], query)).collect()
    }

    fn best_turn_per_session(&self, turn_scores: &[f64]) -> Vec<f64> {
        self.sessions
            .iter()
            .map(|s| turn_scores[s.turns.clone()].iter().copied().fold(f64::NEG_INFINITY, f64::max))
            .collect()
    }

    /// MemGAS (§5): router weights from per-granularity entropies, weighted node scores, top-α
    /// seeds, personalized PageRank, session score = sum of its nodes' mass.
    fn memgas(&self, query: &[f32]) -> Ranking {
        let options = &self.options.memgas;
        let granularities = self.granularities();
        let similarities: Vec<f64> = self.vectors.iter().map(|vector| dot(vector, query)).collect();
        let router_inputs: Vec<Vec<f64>> = granularities
            .iter()
            .map(|&granularity| match (granularity, options.turn_routing) {
                (Granularity::Turn, TurnRouting::BestPerSession) => self.best_turn_per_session(
                    &self.turns.iter().map(|t| similarities[t.node]).collect::<Vec<_>>(),
                ),
                _ => self
                    .nodes
                    .iter()
                    .zip(&similarities)
                    .filter(|(node, _)| node.granularity == granularity)
                    .map(|(_, s)| *s)
                    .collect(),
            })
            .collect();
        let inputs: Vec<&[f64]> = router_inputs.iter().map(Vec::as_slice).collect();
        let weights = route(&inputs, options.temperature, options.router);
        let weight_of = |granularity: Granularity| {
            granularities
                .iter()
                .position(|g| *g == granularity)
                .map_or(0.0, |position| weights[position])
        };
        let node_scores: Vec<f64> = self
            .nodes
            .iter()
            .zip(&similarities)
            .map(|(node, s)| weight_of(node.granularity) * s)
            .collect();
        let seeds = select_seeds(&node_scores, options.n_seeds);
        let mass = match personalized_pagerank(self.graph.neighbours(), &seeds, options.damping) {
            Ok(mass) => mass,
            // Only an empty index gets here (select_seeds never returns an all-zero vector).
            Err(_) => vec![0.0; self.nodes.len()],
        };
        let mut session_scores = vec![0.0; self.sessions.len()];
        for (node, m) in self.nodes.iter().zip(&mass) {
            session_scores[node.session] += m;
        }
        let turn_scores: Vec<f64> = self.turns.iter().map(|t| mass[t.node]).collect();
        Ranking {
            sessions: ranked(&session_scores),
            turns: Some(ranked(&turn_scores)),
            router_weights: granularities.into_iter().zip(weights).collect(),
        }
    }
}

impl MemoryIndex {
    /// Weighted sum of normalised channel scores (see [`FusionOptions`]).
    fn fusion(&self, query_text: &str, query: &[f32]) -> Ranking {
        let weights = self.options.fusion;
        let normalise = |values: &[f64]| normalised(values, weights.normalisation);
        let dense_turns = self.turn_similarities(query);
        let dense_sessions = self.best_turn_per_session(&dense_turns);
        let mut session_scores = vec![0.0; self.sessions.len()];
        let mut turn_scores = vec![0.0; self.turns.len()];
        let add = |target: &mut Vec<f64>, weight: f64, values: &[f64]| {
            if weight != 0.0 {
                for (t, v) in target.iter_mut().zip(normalise(values)) {
                    *t += weight * v;
                }
            }
        };
        add(&mut session_scores, weights.session_bm25, &self.bm25_sessions.scores(query_text));
        add(&mut session_scores, weights.session_dense, &dense_sessions);
        add(&mut turn_scores, weights.bm25, &self.bm25_turns.scores(query_text));
        add(&mut turn_scores, weights.dense, &dense_turns);
        if weights.memgas != 0.0 {
            let memgas = self.memgas(query);
            let mut by_session = vec![0.0; self.sessions.len()];
            for hit in &memgas.sessions {
                by_session[hit.index] = hit.score;
            }
            let mut by_turn = vec![0.0; self.turns.len()];
            for hit in memgas.turns.iter().flatten() {
                by_turn[hit.index] = hit.score;
            }
            add(&mut session_scores, weights.memgas, &by_session);
            add(&mut turn_scores, weights.memgas, &by_turn);
        }
        if weights.turn_to_session != 0.0 {
            let aggregated: Vec<f64> = self
                .sessions
                .iter()
                .map(|s| {
                    top_decayed_sum(
                        &turn_scores[s.turns.clone()],
                        weights.session_top_turns,
                        weights.session_turn_decay,
                    )
                })
                .collect();
            add(&mut session_scores, weights.turn_to_session, &aggregated);
        }
        if weights.date != 0.0 {
            let mentions = month_mentions(query_text);
            for (score, session) in session_scores.iter_mut().zip(&self.sessions) {
                let month = session.units.date.as_deref().and_then(session_month);
                *score += weights.date * date_affinity(&mentions, month, weights.date_next_month);
            }
        }
        if weights.session_to_turn != 0.0 {
            let sessions = normalise(&session_scores);
            for (score, turn) in turn_scores.iter_mut().zip(&self.turns) {
                *score += weights.session_to_turn * sessions[turn.session];
            }
        }
        Ranking {
            sessions: ranked(&session_scores),
            turns: Some(ranked(&turn_scores)),
            router_weights: Vec::new(),
        }
    }
}

/// `values` on the scale of `normalisation`.
fn normalised(values: &[f64], normalisation: Normalisation) -> Vec<f64> {
    match normalisation {
        Normalisation::MinMax => min_max(values),
        Normalisation::ZScore => z_scores(values),
    }
}

/// Standard scores over the finite values; non-finite values get the lowest finite score (all
/// zeros when the finite values do not vary).
fn z_scores(values: &[f64]) -> Vec<f64> {
    let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    if finite.is_empty() {
        return vec![0.0; values.len()];
    }
    let n = finite.len() as f64;
    let mean = finite.iter().sum::<f64>() / n;
    let deviation = (finite.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n).sqrt();
    if deviation <= 0.0 {
        return vec![0.0; values.len()];
    }
    let lowest = finite.iter().copied().fold(f64::INFINITY, f64::min);
    values
        .iter()
        .map(|v| if v.is_finite() { (v - mean) / deviation } else { (lowest - mean) / deviation })
        .collect()
}

/// `Σ_{i<m} decay^i · s_(i)` over the `m` largest values `s_(0) ≥ s_(1) ≥ …` (fewer when there
/// are fewer values; −∞ for none). `m` = 1 is the maximum.
fn top_decayed_sum(values: &[f64], m: usize, decay: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(|a, b| b.total_cmp(a));
    if sorted.is_empty() || m == 0 {
        return f64::NEG_INFINITY;
    }
    let mut weight = 1.0;
    let mut total = 0.0;
    for value in sorted.into_iter().take(m) {
        total += weight * value;
        weight *= decay;
    }
    total
}

/// Scale to [0, 1] by the minimum and maximum (all zeros when the values are all equal).
fn min_max(values: &[f64]) -> Vec<f64> {
    let finite = values.iter().copied().filter(|v| v.is_finite());
    let min = finite.clone().fold(f64::INFINITY, f64::min);
    let max = finite.fold(f64::NEG_INFINITY, f64::max);
    // Also covers no finite value at all (min = +∞, max = −∞).
    if max <= min {
        return vec![0.0; values.len()];
    }
    values.iter().map(|v| if v.is_finite() { (v - min) / (max - min) } else { 0.0 }).collect()
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
mod tests {
    use super::*;
    use crate::retrieval::units::TurnUnit;

    /// A unit vector in 3-D pointing at `angle` in the x-y plane, tilted by `z`.
    fn vector(angle: f32, z: f32) -> Vec<f32> {
        let v = [angle.cos(), angle.sin(), z];
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter().map(|x| x / norm).collect()
    }

    /// Session n (1-based) has turns with the given texts and angles.
    fn session(n: usize, turns: &[(&str, f32)]) -> (SessionUnits, UnitVectors) {
        let units = SessionUnits {
            session_id: format!("D{n}"),
            date: Some(format!("day {n}")),
            turns: turns
                .iter()
                .enumerate()
                .map(|(i, (text, _))| TurnUnit {
                    dia_id: format!("D{n}:{}", i + 1),
                    speaker: "Ann".into(),
                    text: format!("Ann: {text}"),
                })
                .collect(),
            summary: None,
            keywords: None,
        };
        let turn_vectors: Vec<Vec<f32>> =
            turns.iter().map(|(_, angle)| vector(*angle, 0.1)).collect();
        let session_vector = crate::retrieval::units::normalised_mean(&turn_vectors);
        (
            units,
            UnitVectors {
                session: session_vector,
                turns: turn_vectors,
                summary: None,
                keywords: None,
                hybrid: None,
            },
        )
    }

    fn index() -> MemoryIndex {
        let mut index = MemoryIndex::new(IndexOptions::default());
        let sessions = [
            session(
                1,
                &[("we talked about gardening tomatoes", 0.0), ("the weather was mild", 0.2)],
            ),
            session(2, &[("my cat Pepper chased a mouse", 1.5), ("cats sleep a lot", 1.4)]),
            session(3, &[("I bought new running shoes", 3.0), ("marathon training starts", 3.1)]),
            session(4, &[("Pepper the cat got sick", 1.55), ("the vet was kind", 1.2)]),
        ];
        for (units, vectors) in sessions {
            index.add_session(units, vectors).unwrap();
        }
        index
    }

    fn session_order(ranking: &Ranking, index: &MemoryIndex) -> Vec<String> {
        ranking.sessions.iter().map(|hit| index.session_id(hit.index).to_string()).collect()
    }

    #[test]
    fn dense_lexical_and_fused_rankings_find_the_matching_sessions() {
        let index = index();
        let query = vector(1.54, 0.1);
        let turn = index.rank(Method::Turn, "what happened to Pepper", &query).unwrap();
        assert_eq!(&session_order(&turn, &index)[..2], ["D4", "D2"]);
        let turns = turn.turns.as_ref().unwrap();
        assert_eq!(index.turn_id(turns[0].index), "D4:1");

        let lexical = index.rank(Method::Bm25, "running marathon", &query).unwrap();
        assert_eq!(session_order(&lexical, &index)[0], "D3");
        assert_eq!(index.turn_id(lexical.turns.as_ref().unwrap()[0].index), "D3:2");

        let fused = index.rank(Method::Fusion, "Pepper cat sick", &query).unwrap();
        assert_eq!(session_order(&fused, &index)[0], "D4");
        assert_eq!(fused.sessions.len(), 4);
        assert_eq!(fused.turns.as_ref().unwrap().len(), 8);
    }

    #[test]
    fn memgas_ranks_by_pagerank_mass_with_router_weights() {
        let index = index();
        let ranking = index.rank(Method::Memgas, "", &vector(1.54, 0.1)).unwrap();
        assert_eq!(ranking.router_weights.len(), 2);
        let total: f64 = ranking.router_weights.iter().map(|(_, w)| w).sum();
        assert!((total - 1.0).abs() < 1e-12);
        let mut top_two = session_order(&ranking, &index)[..2].to_vec();
        top_two.sort();
        assert_eq!(top_two, ["D2", "D4"]);
        // All 12 nodes are seeds (fewer than α = 15), so PageRank mass sums to 1 over sessions.
        let mass: f64 = ranking.sessions.iter().map(|hit| hit.score).sum();
        assert!((mass - 1.0).abs() < 1e-9);
    }

    #[test]
    fn missing_units_and_bad_vectors_are_errors() {
        let mut index = index();
        assert_eq!(
            index.rank(Method::Summary, "x", &vector(0.0, 0.0)),
            Err(IndexError::Unavailable {
                method: Method::Summary,
                granularity: Granularity::Summary
            })
        );
        assert!(matches!(index.rank(Method::Turn, "x", &[1.0]), Err(IndexError::QueryDims { .. })));
        let (units, mut vectors) = session(5, &[("x", 0.0)]);
        vectors.turns.clear();
        assert!(matches!(index.add_session(units, vectors), Err(IndexError::BadVectors { .. })));
        assert_eq!(index.n_sessions(), 4);
    }

    #[test]
    fn query_reports_ids_dates_and_turn_text() {
        let index = index();
        let hits = index.query("Pepper", &vector(1.54, 0.1), 2).unwrap();
        assert_eq!(hits.sessions.len(), 2);
        assert_eq!(hits.sessions[0].date.as_deref(), Some("day 4"));
        assert_eq!(hits.turns.len(), 2);
        assert!(hits.turns[0].text.contains("Pepper"));
        assert_eq!(hits.granularities, vec![Granularity::Session, Granularity::Turn]);
    }

    #[test]
    fn z_scores_standardise_and_floor_missing_values() {
        let z = z_scores(&[1.0, 2.0, 3.0]);
        let sd = (2.0f64 / 3.0).sqrt();
        assert!((z[0] + 1.0 / sd).abs() < 1e-12 && z[1].abs() < 1e-12);
        assert!((z[2] - 1.0 / sd).abs() < 1e-12);
        assert_eq!(z_scores(&[5.0, 5.0]), vec![0.0, 0.0]);
        let with_missing = z_scores(&[f64::NEG_INFINITY, 1.0, 3.0]);
        assert_eq!(with_missing, vec![-1.0, -1.0, 1.0]);
        assert_eq!(normalised(&[1.0, 3.0], Normalisation::MinMax), vec![0.0, 1.0]);
    }

    #[test]
    fn top_decayed_sum_weights_the_best_values() {
        assert_eq!(top_decayed_sum(&[0.2, 0.9, 0.5], 1, 0.5), 0.9);
        assert!((top_decayed_sum(&[0.2, 0.9, 0.5], 2, 0.5) - (0.9 + 0.25)).abs() < 1e-12);
        assert!((top_decayed_sum(&[0.2, 0.9, 0.5], 9, 1.0) - 1.6).abs() < 1e-12);
        assert_eq!(top_decayed_sum(&[], 3, 0.5), f64::NEG_INFINITY);
    }

    #[test]
    fn min_max_scales_and_handles_flat_input() {
        assert_eq!(min_max(&[1.0, 3.0, 2.0]), vec![0.0, 1.0, 0.5]);
        assert_eq!(min_max(&[2.0, 2.0]), vec![0.0, 0.0]);
        assert_eq!(min_max(&[f64::NEG_INFINITY, 1.0, 3.0]), vec![0.0, 0.0, 1.0]);
    }
}
