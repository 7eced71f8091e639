//! The graph store: a petgraph directed graph of one conversation's memory plus the lookup
//! indices the answering tools need. Built once from the stage outputs by [`build_graph`], then
//! only read.
//!
//! Nodes ([`Node`]): Key (normalised cue word), Episode (one rewritten sentence, shown to the
//! model as its raw turn), Topic, Person, Fact, Date, Turn (a raw dialogue turn). Edges
//! ([`Edge`]): Key —tag→ Episode, Topic → Episode, Person —aspect→ Fact, Episode → Date,
//! Episode → Turn, Fact → Turn. Every index is a `BTreeMap` and every list is kept in natural
//! id order (`D2:…` before `D10:…`), so nothing depends on hash order.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use chrono::NaiveDate;
use petgraph::Direction;
use petgraph::graph::{DiGraph, NodeIndex};
use petgraph::visit::EdgeRef;
use serde::Serialize;

use super::input::{SessionKeywords, SessionRewrite};
use super::key::{clean_key, normalize_key, tokens};
use crate::dataset::Conversation;

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

/// One conversation's memory: the graph and its indices. Read it through
/// [`crate::memory::query`].
#[derive(Debug, Clone)]
pub struct MemoryGraph {
    sample_id: String,
    graph: DiGraph<Node, Edge>,
    /// Normalised key → Key node.
    keys: BTreeMap<String, NodeIndex>,
    /// Sentence id → Episode node.
    episodes: BTreeMap<String, NodeIndex>,
    /// Episode nodes in natural id order.
    episode_order: Vec<NodeIndex>,
    /// Dia_id → its Episode nodes in natural id order.
    by_origin: BTreeMap<String, Vec<NodeIndex>>,
    /// Dia_id → Turn node.
    turns: BTreeMap<String, NodeIndex>,
    /// Session number → Turn nodes in dialogue order.
    session_turns: BTreeMap<u32, Vec<NodeIndex>>,
    /// Topic id → Topic node.
    topics: BTreeMap<String, NodeIndex>,
    /// Topic nodes in natural id order.
    topic_order: Vec<NodeIndex>,
    /// Normalised person name → Person node.
    persons: BTreeMap<String, NodeIndex>,
    /// Fact id → Fact node.
    facts: BTreeMap<String, NodeIndex>,
    /// Day → Date node.
    dates: BTreeMap<NaiveDate, NodeIndex>,
    /// Normalised tag → canonical spelling (the first one seen).
    tags: BTreeMap<String, String>,
    /// Normalised aspect → canonical spelling.
    aspects: BTreeMap<String, String>,
    /// Tokens too common to match longer phrases on their own.
    common_tokens: BTreeSet<String>,
    /// Every key with its content tokens (sorted), in normalised-key order, for matching scans.
    key_tokens: Vec<(NodeIndex, Vec<String>)>,
    stats: GraphStats,
}

/// Builds the memory graph of `conversation` from its stage outputs. Raw turn text comes from the
/// conversation. Broken links that the stages should have caught (a keyword record for an
/// unknown sentence, an unknown topic id, an unknown fact origin) are skipped, logged and counted
/// in [`GraphStats`]; a sentence whose origin is not a turn, or a duplicate id, is an error.
pub fn build_graph(
    conversation: &Conversation,
    rewrites: &[SessionRewrite],
    keywords: &[SessionKeywords],
) -> Result<MemoryGraph, Error> {
    let mut memory = MemoryGraph {
        sample_id: conversation.sample_id.clone(),
        graph: DiGraph::new(),
        keys: BTreeMap::new(),
        episodes: BTreeMap::new(),
        episode_order: Vec::new(),
        by_origin: BTreeMap::new(),
        turns: BTreeMap::new(),
        session_turns: BTreeMap::new(),
        topics: BTreeMap::new(),
        topic_order: Vec::new(),
        persons: BTreeMap::new(),
        facts: BTreeMap::new(),
        dates: BTreeMap::new(),
        tags: BTreeMap::new(),
        aspects: BTreeMap::new(),
        common_tokens: BTreeSet::new(),
        key_tokens: Vec::new(),
        stats: GraphStats::default(),
    };
    let mut session_dates: BTreeMap<u32, Option<NaiveDate>> = BTreeMap::new();
    for session in &conversation.sessions {
        session_dates.insert(session.index, session.date);
        let mut order = Vec::with_capacity(session.turns.len());
        for turn in &session.turns {
            let node = memory.graph.add_node(Node::Turn(TurnNode {
                dia_id: turn.dia_id.clone(),
                session: session.index,
                speaker: turn.speaker.clone(),
                text: turn.display(),
            }));
            memory.turns.insert(turn.dia_id.clone(), node);
            order.push(node);
        }
        memory.session_turns.insert(session.index, order);
    }

    // Topics first, so a sentence may name a topic of any record.
    for rewrite in rewrites {
        for topic in &rewrite.topics {
            if memory.topics.contains_key(&topic.id) {
                return Err(memory.duplicate("topic", &topic.id));
            }
            let node = memory
                .graph
                .add_node(Node::Topic(Topic { id: topic.id.clone(), text: topic.text.clone() }));
            memory.topics.insert(topic.id.clone(), node);
        }
    }

    for rewrite in rewrites {
        for sentence in &rewrite.sentences {
            memory.add_episode(sentence, rewrite.conversation_time, &session_dates)?;
        }
        for fact in &rewrite.personal_facts {
            memory.add_fact(fact)?;
        }
    }

    let mut state = LinkState::default();
    // Every episode hangs off its speaker's key (as in the reference), keyword file or not.
    for &episode in &memory.episode_order.clone() {
        let speaker = memory.episode(episode).speaker.clone();
        memory.link_key(&speaker, episode, &mut state);
    }
    for record in keywords {
        for item in &record.sentences {
            let Some(&episode) = memory.episodes.get(&item.sentence_id) else {
                tracing::warn!(
                    sample = %memory.sample_id,
                    session = %record.session,
                    sentence_id = %item.sentence_id,
                    "keywords for an unknown sentence dropped"
                );
                memory.stats.skipped_keyword_sentences += 1;
                continue;
            };
            for keyword in &item.keywords {
                memory.link_key(keyword, episode, &mut state);
            }
        }
    }

    memory.finish(conversation);
    Ok(memory)
}

impl MemoryGraph {
    /// The sample this memory belongs to.
    pub fn sample_id(&self) -> &str {
        &self.sample_id
    }

    /// The underlying petgraph graph (read-only).
    pub fn graph(&self) -> &DiGraph<Node, Edge> {
        &self.graph
    }

    /// Sizes and skip counts.
    pub fn stats(&self) -> &GraphStats {
        &self.stats
    }

    /// All episodes in natural id order.
    pub fn episodes(&self) -> impl Iterator<Item = &Episode> + '_ {
        self.episode_order.iter().map(|&node| self.episode(node))
    }

    /// The episode with this sentence id.
    pub fn episode_by_id(&self, sentence_id: &str) -> Option<&Episode> {
        self.episodes.get(sentence_id.trim()).map(|&node| self.episode(node))
    }

    /// The episodes rewritten from one turn (`D3:5`), in natural id order.
    pub fn episodes_of_turn(&self, dia_id: &str) -> impl Iterator<Item = &Episode> + '_ {
        self.origin_episodes(dia_id.trim()).iter().map(|&node| self.episode(node))
    }

    /// A raw turn by dia_id.
    pub fn turn(&self, dia_id: &str) -> Option<&TurnNode> {
        match self.turns.get(dia_id.trim()).map(|&node| &self.graph[node]) {
            Some(Node::Turn(turn)) => Some(turn),
            _ => None,
        }
    }

    /// A topic by id (`D3:t1`).
    pub fn topic(&self, topic_id: &str) -> Option<&Topic> {
        match self.topics.get(topic_id.trim()).map(|&node| &self.graph[node]) {
            Some(Node::Topic(topic)) => Some(topic),
            _ => None,
        }
    }

    /// All topics in natural id order.
    pub fn topics(&self) -> impl Iterator<Item = &Topic> + '_ {
        self.topic_order.iter().filter_map(|&node| match &self.graph[node] {
            Node::Topic(topic) => Some(topic),
            _ => None,
        })
    }

    /// All keys in order of their normalised form.
    pub fn keys(&self) -> impl Iterator<Item = &KeyNode> + '_ {
        self.keys.values().filter_map(|&node| match &self.graph[node] {
            Node::Key(key) => Some(key),
            _ => None,
        })
    }

    /// The key node for `key` (normalised before lookup).
    pub fn key(&self, key: &str) -> Option<&KeyNode> {
        match self.keys.get(&normalize_key(key)).map(|&node| &self.graph[node]) {
            Some(Node::Key(key)) => Some(key),
            _ => None,
        }
    }

    /// All persons in normalised-name order.
    pub fn persons(&self) -> impl Iterator<Item = &Person> + '_ {
        self.persons.values().filter_map(|&node| match &self.graph[node] {
            Node::Person(person) => Some(person),
            _ => None,
        })
    }

    /// The canonical spelling of a tag (the first one stored), if any stored tag normalises like
    /// `tag`.
    pub fn canonical_tag(&self, tag: &str) -> Option<&str> {
        self.tags.get(&normalize_key(tag)).map(String::as_str)
    }

    /// Whether a single token is too common to stand for a longer phrase: a speaker name, or a
    /// key linked to more than [`COMMON_KEY_SHARE`] of the episodes (and more than
    /// [`COMMON_KEY_MIN_EPISODES`]).
    pub fn is_common_token(&self, token: &str) -> bool {
        self.common_tokens.contains(token)
    }

    pub(crate) fn node(&self, node: NodeIndex) -> &Node {
        &self.graph[node]
    }

    pub(crate) fn key_node(&self, normalized: &str) -> Option<NodeIndex> {
        self.keys.get(normalized).copied()
    }

    /// Every key node with its normalised form and content tokens, in normalised-key order.
    pub(crate) fn key_nodes(&self) -> impl Iterator<Item = (&KeyNode, NodeIndex, &[String])> + '_ {
        self.key_tokens.iter().filter_map(|(node, tokens)| match &self.graph[*node] {
            Node::Key(key) => Some((key, *node, tokens.as_slice())),
            _ => None,
        })
    }

    pub(crate) fn episode_node(&self, sentence_id: &str) -> Option<NodeIndex> {
        self.episodes.get(sentence_id).copied()
    }

    pub(crate) fn origin_episodes(&self, dia_id: &str) -> &[NodeIndex] {
        self.by_origin.get(dia_id).map(Vec::as_slice).unwrap_or_default()
    }

    pub(crate) fn turn_node(&self, dia_id: &str) -> Option<NodeIndex> {
        self.turns.get(dia_id).copied()
    }

    pub(crate) fn session_turn_nodes(&self, session: u32) -> &[NodeIndex] {
        self.session_turns.get(&session).map(Vec::as_slice).unwrap_or_default()
    }

    pub(crate) fn topic_node(&self, topic_id: &str) -> Option<NodeIndex> {
        self.topics.get(topic_id).copied()
    }

    pub(crate) fn person_node(&self, name: &str) -> Option<NodeIndex> {
        self.persons.get(&normalize_key(name)).copied()
    }

    pub(crate) fn date_nodes(
        &self,
        range: impl std::ops::RangeBounds<NaiveDate>,
    ) -> impl Iterator<Item = (NaiveDate, NodeIndex)> + '_ {
        self.dates.range(range).map(|(&date, &node)| (date, node))
    }

    pub(crate) fn canonical_aspect(&self, aspect: &str) -> Option<&str> {
        self.aspects.get(&normalize_key(aspect)).map(String::as_str)
    }

    /// Targets of the outgoing edges of `node`, with their labels, in insertion order.
    pub(crate) fn out_edges(&self, node: NodeIndex) -> Vec<(&Edge, NodeIndex)> {
        // petgraph walks a node's edge list newest first; reverse to insertion order.
        let mut edges: Vec<(&Edge, NodeIndex)> = self
            .graph
            .edges_directed(node, Direction::Outgoing)
            .map(|edge| (edge.weight(), edge.target()))
            .collect();
        edges.reverse();
        edges
    }

    /// Sources of the incoming edges of `node`, with their labels, in insertion order.
    pub(crate) fn in_edges(&self, node: NodeIndex) -> Vec<(&Edge, NodeIndex)> {
        let mut edges: Vec<(&Edge, NodeIndex)> = self
            .graph
            .edges_directed(node, Direction::Incoming)
            .map(|edge| (edge.weight(), edge.source()))
            .collect();
        edges.reverse();
        edges
    }

    /// The episode stored at `node`.
    ///
    /// Only called with indices taken from the episode indices, which point at Episode nodes by
    /// construction.
    pub(crate) fn episode(&self, node: NodeIndex) -> &Episode {
        match &self.graph[node] {
            Node::Episode(episode) => episode,
            #[allow(clippy::unreachable)]
            other => unreachable!("episode index points at {other:?}"),
        }
    }

    fn duplicate(&self, what: &'static str, id: &str) -> Error {
        Error::DuplicateId { sample: self.sample_id.clone(), what, id: id.to_string() }
    }

    fn add_episode(
        &mut self,
        sentence: &super::input::RewrittenSentence,
        rewrite_time: Option<NaiveDate>,
        session_dates: &BTreeMap<u32, Option<NaiveDate>>,
    ) -> Result<(), Error> {
        if self.episodes.contains_key(&sentence.id) {
            return Err(self.duplicate("sentence", &sentence.id));
        }
        let origin = sentence.origin.trim();
        let (turn_node, turn) = match self.turns.get(origin).map(|&node| (node, &self.graph[node]))
        {
            Some((node, Node::Turn(turn))) => (node, turn.clone()),
            _ => {
                return Err(Error::UnknownOrigin {
                    sample: self.sample_id.clone(),
                    sentence_id: sentence.id.clone(),
                    origin: sentence.origin.clone(),
                });
            }
        };
        // The dataset's session date is parsed by the loader; the rewrite model's reading of it
        // is only a fallback (and is per record, which for LongMemEval batches spans sessions).
        let conversation_time =
            session_dates.get(&turn.session).copied().flatten().or(rewrite_time);
        let date = sentence.date.or(conversation_time);
        let tag = canonical(&mut self.tags, &sentence.tag);
        let mut topics = Vec::new();
        for topic_id in &sentence.topic_ids {
            if self.topics.contains_key(topic_id) {
                if !topics.contains(topic_id) {
                    topics.push(topic_id.clone());
                }
            } else {
                tracing::warn!(sample = %self.sample_id, sentence_id = %sentence.id, %topic_id, "unknown topic id ignored");
                self.stats.skipped_topic_refs += 1;
            }
        }
        let node = self.graph.add_node(Node::Episode(Episode {
            id: sentence.id.clone(),
            origin: turn.dia_id.clone(),
            session: turn.session,
            speaker: turn.speaker.clone(),
            text: turn.text.clone(),
            sentence: sentence.text.clone(),
            tag,
            date,
            conversation_time,
            topics: topics.clone(),
        }));
        self.graph.add_edge(node, turn_node, Edge::Origin);
        match date {
            Some(date) => {
                let date_node = *self
                    .dates
                    .entry(date)
                    .or_insert_with(|| self.graph.add_node(Node::Date { date }));
                self.graph.add_edge(node, date_node, Edge::OnDate);
            }
            None => self.stats.undated_episodes += 1,
        }
        for topic_id in &topics {
            if let Some(&topic_node) = self.topics.get(topic_id) {
                self.graph.add_edge(topic_node, node, Edge::Member);
            }
        }
        self.episodes.insert(sentence.id.clone(), node);
        self.episode_order.push(node);
        self.by_origin.entry(turn.dia_id).or_default().push(node);
        Ok(())
    }

    fn add_fact(&mut self, fact: &super::input::PersonalFact) -> Result<(), Error> {
        let person_key = normalize_key(&fact.person);
        if self.facts.contains_key(&fact.id) {
            return Err(self.duplicate("fact", &fact.id));
        }
        let aspect = canonical(&mut self.aspects, &fact.aspect);
        let person_node = *self.persons.entry(person_key).or_insert_with(|| {
            self.graph.add_node(Node::Person(Person {
                name: fact.person.trim().to_string(),
                aspects: Vec::new(),
            }))
        });
        let person_name = match &mut self.graph[person_node] {
            Node::Person(person) => {
                if !person.aspects.contains(&aspect) {
                    person.aspects.push(aspect.clone());
                }
                person.name.clone()
            }
            _ => fact.person.clone(),
        };
        let mut origins = Vec::new();
        let mut sources = Vec::new();
        for origin in &fact.origins {
            match self.turns.get(origin.trim()) {
                Some(&turn) => {
                    origins.push(origin.trim().to_string());
                    sources.push(turn);
                }
                None => {
                    tracing::warn!(sample = %self.sample_id, fact_id = %fact.id, %origin, "unknown fact origin ignored");
                    self.stats.skipped_fact_origins += 1;
                }
            }
        }
        let fact_node = self.graph.add_node(Node::Fact(Fact {
            id: fact.id.clone(),
            person: person_name,
            aspect: aspect.clone(),
            text: fact.fact.clone(),
            origins,
        }));
        self.facts.insert(fact.id.clone(), fact_node);
        self.graph.add_edge(person_node, fact_node, Edge::Aspect(aspect));
        for turn in sources {
            self.graph.add_edge(fact_node, turn, Edge::Source);
        }
        Ok(())
    }

    /// Links the key `raw` to `episode` once, labelled with the episode's tag.
    fn link_key(&mut self, raw: &str, episode: NodeIndex, state: &mut LinkState) {
        let key = match state.normalized.get(raw) {
            Some(key) => key.clone(),
            None => {
                let key = normalize_key(raw);
                state.normalized.insert(raw.to_string(), key.clone());
                key
            }
        };
        if key.is_empty() {
            return;
        }
        let key_node = match self.keys.get(&key) {
            Some(&node) => node,
            None => {
                let node = self.graph.add_node(Node::Key(KeyNode {
                    key: clean_key(raw),
                    normalized: key.clone(),
                    tags: Vec::new(),
                    n_episodes: 0,
                }));
                self.keys.insert(key, node);
                node
            }
        };
        if !state.linked.insert((key_node, episode)) {
            return;
        }
        let tag = self.episode(episode).tag.clone();
        let new_tag = state.key_tags.insert((key_node, tag.clone()));
        if let Node::Key(key) = &mut self.graph[key_node] {
            key.n_episodes += 1;
            if new_tag {
                key.tags.push(tag.clone());
            }
        }
        self.graph.add_edge(key_node, episode, Edge::Tag(tag));
    }

    /// Sorts the orders, marks common tokens and fills the stats.
    fn finish(&mut self, conversation: &Conversation) {
        let graph = &self.graph;
        let episode_id = |node: &NodeIndex| match &graph[*node] {
            Node::Episode(episode) => natural_key(&episode.id),
            _ => (Vec::new(), String::new()),
        };
        self.episode_order.sort_by_cached_key(episode_id);
        for nodes in self.by_origin.values_mut() {
            nodes.sort_by_cached_key(episode_id);
        }
        let mut topic_order: Vec<(String, NodeIndex)> =
            self.topics.iter().map(|(id, &node)| (id.clone(), node)).collect();
        topic_order.sort_by_cached_key(|(id, _)| natural_key(id));
        self.topic_order = topic_order.into_iter().map(|(_, node)| node).collect();

        let n_episodes = self.episode_order.len();
        for speaker in &conversation.speakers {
            self.common_tokens.extend(normalize_key(speaker).split(' ').map(str::to_string));
        }
        for key in self.keys.values().filter_map(|&node| match &self.graph[node] {
            Node::Key(key) => Some(key),
            _ => None,
        }) {
            // Counts are far below 2^52, so the conversions are exact.
            #[allow(clippy::cast_precision_loss)]
            let share = key.n_episodes as f64 / n_episodes.max(1) as f64;
            if !key.normalized.contains(' ')
                && key.n_episodes > COMMON_KEY_MIN_EPISODES
                && share > COMMON_KEY_SHARE
            {
                self.common_tokens.insert(key.normalized.clone());
            }
        }
        self.common_tokens.retain(|token| !token.is_empty());
        self.key_tokens = self
            .keys
            .iter()
            .map(|(key, &node)| (node, tokens(key).into_iter().map(str::to_string).collect()))
            .collect();

        self.stats.turns = self.turns.len();
        self.stats.episodes = n_episodes;
        self.stats.keys = self.keys.len();
        self.stats.topics = self.topics.len();
        self.stats.persons = self.persons.len();
        self.stats.facts = self.facts.len();
        self.stats.dates = self.dates.len();
        self.stats.edges = self.graph.edge_count();
    }
}

/// Bookkeeping while keys are linked. Hash sets and maps are only looked up, never iterated, so
/// their order cannot leak into the graph.
#[derive(Default)]
struct LinkState {
    /// (key, episode) pairs already linked.
    linked: HashSet<(NodeIndex, NodeIndex)>,
    /// (key, tag) pairs already in the key's tag list.
    key_tags: HashSet<(NodeIndex, String)>,
    /// Raw keyword → normalised key (keywords repeat a lot; speakers on every episode).
    normalized: HashMap<String, String>,
}

/// The canonical spelling for `text` in `table` (first spelling seen for its normalised form).
fn canonical(table: &mut BTreeMap<String, String>, text: &str) -> String {
    let text = text.trim();
    table.entry(normalize_key(text)).or_insert_with(|| text.to_string()).clone()
}

/// Natural sort key of an id: its digit runs as numbers, then the id itself, so `D2:5-1` sorts
/// before `D10:1-1` and `D3:t2` before `D3:t10`.
pub(crate) fn natural_key(id: &str) -> (Vec<u64>, String) {
    let numbers = id
        .split(|c: char| !c.is_ascii_digit())
        .filter(|part| !part.is_empty())
        .map(|part| part.parse::<u64>().unwrap_or(u64::MAX))
        .collect();
    (numbers, id.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn natural_order_of_ids() {
        let mut ids = vec!["D10:1-1", "D2:5-2", "D2:5-1", "D2:10-1", "D3:t10", "D3:t2"];
        ids.sort_by_key(|id| natural_key(id));
        assert_eq!(ids, ["D2:5-1", "D2:5-2", "D2:10-1", "D3:t2", "D3:t10", "D10:1-1"]);
    }
}
