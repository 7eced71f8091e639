//! The node and edge types of the memory graph, its statistics and its build errors.

use chrono::NaiveDate;
use serde::Serialize;

/// A key linked to more than this share of the episodes is "common": as a single token it does
/// not match longer phrases (§17 item 18).
pub const COMMON_KEY_SHARE: f64 = 0.1;
/// …but only once it is linked to more than this many episodes, so small conversations keep
/// ordinary matching.
pub const COMMON_KEY_MIN_EPISODES: usize = 25;

/// A node of the memory graph.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Node {
    /// A cue word.
    Key(KeyNode),
    /// A rewritten sentence (content node).
    Episode(Episode),
    /// A topic of a session (abstraction layer).
    Topic(Topic),
    /// A person facts are known about (semantic layer).
    Person(Person),
    /// One fact about a person.
    Fact(Fact),
    /// A calendar day on the timeline.
    Date {
        /// The day.
        date: NaiveDate,
    },
    /// A raw dialogue turn.
    Turn(TurnNode),
}

/// A labelled edge of the memory graph.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "label", rename_all = "snake_case")]
pub enum Edge {
    /// Key → Episode: the key occurs in (or is the speaker of) the episode; the label is the
    /// episode's tag (in its canonical spelling, see [`MemoryGraph::canonical_tag`]).
    Tag(String),
    /// Topic → Episode: the episode belongs to the topic.
    Member,
    /// Person → Fact, labelled with the fact's aspect (canonical spelling).
    Aspect(String),
    /// Episode → Date: when the event happened.
    OnDate,
    /// Episode → Turn: the turn the sentence was rewritten from.
    Origin,
    /// Fact → Turn: a turn the fact was drawn from.
    Source,
}

/// A cue word.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KeyNode {
    /// The key as first written, cleaned (see [`clean_key`]); shown to the model.
    pub key: String,
    /// The normalised form (see [`normalize_key`]) under which it is stored and looked up.
    pub normalized: String,
    /// Tags of the episodes it links to, in order of first appearance.
    pub tags: Vec<String>,
    /// Number of episodes it links to.
    pub n_episodes: usize,
}

/// One rewritten sentence, displayed as the raw turn it comes from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Episode {
    /// Sentence id `D<s>:<t>-<k>`.
    pub id: String,
    /// Origin dia_id `D<s>:<t>`.
    pub origin: String,
    /// Session number of the origin turn.
    pub session: u32,
    /// Speaker of the origin turn.
    pub speaker: String,
    /// Raw turn text as the answering model sees it (`Speaker: text[ and shared caption]`).
    pub text: String,
    /// The rewritten, self-contained sentence.
    pub sentence: String,
    /// The sentence's tag (canonical spelling).
    pub tag: String,
    /// When the event happened: the sentence date, else the session date.
    pub date: Option<NaiveDate>,
    /// When the conversation happened: the dataset's session date, else the rewrite model's.
    pub conversation_time: Option<NaiveDate>,
    /// Topics it belongs to (those that exist).
    pub topics: Vec<String>,
}

/// A topic of a session.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Topic {
    /// `D<s>:t<k>`.
    pub id: String,
    /// The topic sentence.
    pub text: String,
}

/// A person facts are known about.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Person {
    /// The name as first written.
    pub name: String,
    /// Aspects in order of first appearance (canonical spelling).
    pub aspects: Vec<String>,
}

/// A fact about a person.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fact {
    /// `D<s>:p<k>`.
    pub id: String,
    /// The person's name (as on the [`Person`] node).
    pub person: String,
    /// Aspect (canonical spelling).
    pub aspect: String,
    /// The fact.
    pub text: String,
    /// Source dia_ids that exist in the conversation.
    pub origins: Vec<String>,
    /// When a later fact replaced this one (`YYYY-MM-DD`): it is an earlier value (own memory).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub earlier_until: Option<String>,
    /// For an earlier value, since when it held (`YYYY-MM-DD`), if known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub earlier_since: Option<String>,
}

/// A raw dialogue turn.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TurnNode {
    /// `D<s>:<t>`.
    pub dia_id: String,
    /// Session number.
    pub session: u32,
    /// Speaker.
    pub speaker: String,
    /// Display text (`Speaker: text[ and shared caption]`).
    pub text: String,
}

/// Sizes of a built graph and what the builder had to skip.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct GraphStats {
    /// Turn nodes.
    pub turns: usize,
    /// Episode nodes.
    pub episodes: usize,
    /// Key nodes.
    pub keys: usize,
    /// Topic nodes.
    pub topics: usize,
    /// Person nodes.
    pub persons: usize,
    /// Fact nodes.
    pub facts: usize,
    /// Date nodes.
    pub dates: usize,
    /// All edges.
    pub edges: usize,
    /// Episodes without any date.
    pub undated_episodes: usize,
    /// Keyword records naming a sentence that does not exist (dropped).
    pub skipped_keyword_sentences: usize,
    /// Sentence topic ids naming a topic that does not exist (ignored).
    pub skipped_topic_refs: usize,
    /// Fact origins naming a turn that does not exist (ignored).
    pub skipped_fact_origins: usize,
}

/// Stage outputs that cannot form a graph.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A sentence's origin is not a turn of the conversation.
    #[error("{sample}: sentence {sentence_id}: origin {origin} is not a turn of the conversation")]
    UnknownOrigin {
        /// Sample id.
        sample: String,
        /// Sentence id.
        sentence_id: String,
        /// The origin given.
        origin: String,
    },
    /// Two records share an id.
    #[error("{sample}: duplicate {what} id: {id}")]
    DuplicateId {
        /// Sample id.
        sample: String,
        /// `sentence`, `topic` or `fact`.
        what: &'static str,
        /// The id.
        id: String,
    },
}
