//! What shapes an index and its rankings: the retrieval [`Method`]s and their settings.

use serde::{Deserialize, Serialize};

use crate::retrieval::ann::AnnOptions;
use crate::retrieval::bm25::Bm25Params;
use crate::retrieval::graph::GraphOptions;
use crate::retrieval::router::RouterFormula;
use crate::retrieval::units::UnitTextOptions;

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

/// MemGAS query-time settings. The paper's λ = 0.2 leaves the router at nearly even weights for
/// cosine similarities (every entropy is close to ln n); λ = 0.05 lets it move weight. Defaults
/// are what most `retrieve --folds` folds chose on LoCoMo with session and turn units (8 or more
/// of 10 for each value): λ 0.05 with the normalised-entropy router; edges inside each session
/// (session node ↔ its units, turn ↔ next turn) so PageRank carries a matching turn's mass to
/// its session and neighbours; damping 0.7 (the walk follows an edge 70 % of the time); the
/// association graph's similarity edges at weight 0.05 against 1 for the in-session edges, so
/// mass spreads along a session but little across sessions (at weight 1 every fold chose damping
/// 0.1, i.e. hardly any propagation); 30 seeds sharpened with τ 0.05; the routed best node per
/// granularity as the session score.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default)]
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
    /// How a session's score is read off its nodes' PageRank mass.
    pub session_score: SessionAggregate,
    /// Edges between a session's own units added to the association graph for PageRank.
    pub structure: SessionStructure,
    /// Shape of the seed (reset) mass: 0 keeps the paper's linear node scores; τ > 0 gives each
    /// kept seed `exp((score − best) / τ)`, so the best matches carry most of the mass.
    pub seed_temperature: f64,
    /// Weight of an association-graph edge in PageRank relative to the weight 1 of a
    /// [`SessionStructure`] edge (1: every edge alike, the paper's unweighted walk).
    pub association_weight: f64,
}

/// Edges inside a session that join the association graph (which only links units of different
/// sessions) for PageRank, so mass found on one unit reaches the rest of its session.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SessionStructure {
    /// None (the paper's graph).
    #[default]
    None,
    /// The session node ↔ each of its other units.
    SessionToUnits,
    /// The session node ↔ each of its other units, and each turn ↔ the next turn.
    SessionAndAdjacentTurns,
}

/// How MemGAS turns node mass into a session score.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SessionAggregate {
    /// Per granularity, the session's best node (mass normalised by that granularity's best
    /// node over all sessions), weighted by the router and summed: a session scores by how well
    /// its best unit of each granularity matches, whatever its size.
    RoutedMax,
    /// The session's single heaviest node.
    #[default]
    Max,
    /// The session node's mass plus the mass of the session's heaviest other node: the session
    /// as a whole (which, with [`SessionStructure`] edges, collects mass from all its turns) and
    /// its best single unit.
    SessionPlusBest,
    /// The mean mass of the session's nodes.
    Mean,
    /// The sum of its nodes' mass (the research code, with one node per granularity; with one
    /// node per turn, long sessions win by size).
    Sum,
}

impl MemgasOptions {
    /// The paper's settings (λ 0.2, α 15, damping 0.1, inverse entropy) with the research
    /// code's sum of node mass per session.
    pub fn paper() -> Self {
        Self {
            router: RouterFormula::InverseEntropy,
            temperature: 0.2,
            n_seeds: 15,
            damping: 0.1,
            turn_routing: TurnRouting::BestPerSession,
            session_score: SessionAggregate::Sum,
            structure: SessionStructure::None,
            seed_temperature: 0.0,
            association_weight: 1.0,
        }
    }
}

impl Default for MemgasOptions {
    fn default() -> Self {
        Self {
            router: RouterFormula::NormalizedEntropy,
            temperature: 0.05,
            n_seeds: 30,
            damping: 0.7,
            turn_routing: TurnRouting::BestPerSession,
            session_score: SessionAggregate::RoutedMax,
            structure: SessionStructure::SessionAndAdjacentTurns,
            seed_temperature: 0.05,
            association_weight: 0.05,
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
#[serde(default)]
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
    /// Weight of [`date_affinity`](crate::retrieval::dates::date_affinity) (a session dated in a month the question names) in the
    /// session score; 0 turns date awareness off.
    pub date: f64,
    /// Affinity of a session dated in the month after a named month (see [`date_affinity`](crate::retrieval::dates::date_affinity)).
    pub date_next_month: f64,
    /// Weight of the next turn's channel score in a turn's score (context after the turn: a
    /// question is often answered in the turn that follows it); 0 turns it off.
    pub next_turn: f64,
    /// Weight of the previous turn's channel score in a turn's score.
    pub previous_turn: f64,
    /// Pseudo-relevance feedback: the query vector moves towards the mean of the best
    /// `prf_turns` first-pass turns by this weight (Rocchio), and the dense turn channel is
    /// scored again; 0 turns it off.
    pub prf_weight: f64,
    /// Turns that make up the feedback centroid.
    pub prf_turns: usize,
    /// Diversity of the top sessions (see [`super::coverage`]): the weight of a candidate's
    /// redundancy with the sessions already chosen; 0 keeps the fused order.
    pub diversity: f64,
    /// Weight of clause coverage (see [`super::coverage`]): how much of the question's clauses
    /// and names a candidate adds that the sessions already chosen lack; 0 turns it off.
    pub coverage: f64,
    /// Sessions at the top of the fused order that diversity and coverage may reorder.
    pub rerank_pool: usize,
    /// Bonus of a turn spoken by a person the question names (see [`super::speakers`]) in the
    /// turn ranking (sessions keep their order): a question about "Caroline" is answered by
    /// Caroline's own turns in most cases; 0 turns it off.
    pub speaker: f64,
    /// Weight of soft word matching (see [`super::words`]) in the turn score: question words
    /// and their near-synonyms among a turn's own words; 0 turns it off (and the index then
    /// collects no words).
    pub word_match: f64,
    /// Cosine below which a memory word earns nothing for a question word (θ of
    /// [`super::words`]).
    pub word_threshold: f64,
}

impl FusionOptions {
    /// The settings tuned on the conv-26/conv-30 dev split before leave-one-conversation-out
    /// existed; `retrieve --folds` starts every fold's ascent here.
    pub fn dev_split() -> Self {
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
            next_turn: 0.0,
            previous_turn: 0.0,
            prf_weight: 0.0,
            prf_turns: 5,
            diversity: 0.0,
            coverage: 0.0,
            rerank_pool: 8,
            speaker: 0.0,
            word_match: 0.0,
            word_threshold: 0.5,
        }
    }
}

impl Default for FusionOptions {
    /// The dev-split settings with the values most `retrieve --folds` folds chose on LoCoMo
    /// (date 4, next turn 0.5, feedback 0.5, speaker 0.15, word matching 0.5 at θ 0.4); see the
    /// README for the held-out numbers.
    fn default() -> Self {
        Self {
            date: 4.0,
            next_turn: 0.5,
            prf_weight: 0.5,
            speaker: 0.15,
            word_match: 0.5,
            word_threshold: 0.4,
            ..Self::dev_split()
        }
    }
}

/// Everything that shapes an index and its rankings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct IndexOptions {
    /// The method [`MemoryIndex::query`](super::MemoryIndex::query) uses (fusion by default: the best offline method on
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
    /// When dense turn retrieval turns approximate (large memories only).
    #[serde(default)]
    pub ann: AnnOptions,
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
            ann: AnnOptions::default(),
        }
    }
}
