//! The graph store: a petgraph directed graph of one conversation's memory plus the lookup
//! indices the answering tools need. Built once from the stage outputs by [`build_graph`], then
//! only read.
//!
//! Nodes ([`Node`]): Key (normalised cue word), Episode (one rewritten sentence, shown to the
//! model as its raw turn), Topic, Person, Fact, Date, Turn (a raw dialogue turn). Edges
//! ([`Edge`]): Key —tag→ Episode, Topic → Episode, Person —aspect→ Fact, Episode → Date,
//! Episode → Turn, Fact → Turn. Every index is a `BTreeMap` and every list is kept in natural
//! id order (`D2:…` before `D10:…`), so nothing depends on hash order.

use std::collections::{BTreeMap, BTreeSet};

use chrono::NaiveDate;
use petgraph::Direction;
use petgraph::graph::{DiGraph, NodeIndex};
use petgraph::visit::EdgeRef;

use crate::dataset::Conversation;
use crate::memory::input::{SessionKeywords, SessionRewrite};
use crate::memory::key::normalize_key;

mod insert;
mod nodes;

pub use nodes::*;

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
    let session_dates = memory.add_turns(conversation);
    memory.add_topics(rewrites)?;

    for rewrite in rewrites {
        for sentence in &rewrite.sentences {
            memory.add_episode(sentence, rewrite.conversation_time, &session_dates)?;
        }
        for fact in &rewrite.personal_facts {
            memory.add_fact(fact)?;
        }
    }

    memory.link_keywords(keywords);

    memory.finish(conversation);
    Ok(memory)
}

impl MemoryGraph {
    /// Marks fact `id` as an earlier value, held since `since` and replaced on `until`
    /// (`YYYY-MM-DD`); the personal tools list it after the current facts. Unknown ids are
    /// ignored.
    pub fn mark_earlier(&mut self, id: &str, since: Option<String>, until: String) {
        if let Some(&node) = self.facts.get(id)
            && let Node::Fact(fact) = &mut self.graph[node]
        {
            fact.earlier_since = since;
            fact.earlier_until = Some(until);
        }
    }

    /// The sample this memory belongs to.
    pub fn sample_id(&self) -> &str {
        &self.sample_id
    }

    /// The underlying petgraph graph (read-only).
    pub fn graph(&self) -> &DiGraph<Node, Edge> {
        &self.graph
    }

    /// An estimate of the heap bytes it holds ([`crate::heap`]): its nodes and edges, and the
    /// lookup maps (one entry per node, about 64 bytes each with its key).
    pub fn heap_bytes(&self) -> usize {
        let nodes: usize = self.graph.node_weights().map(crate::heap::json).sum();
        let edges: usize = self.graph.edge_weights().map(crate::heap::json).sum();
        let slots = self.graph.node_count() * (std::mem::size_of::<Node>() + 16)
            + self.graph.edge_count() * (std::mem::size_of::<Edge>() + 16);
        nodes + edges + slots + self.graph.node_count() * 64
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

    /// The personal facts drawn from one turn (`D3:5`), in insertion order.
    pub fn facts_of_turn(&self, dia_id: &str) -> Vec<&Fact> {
        let Some(turn) = self.turn_node(dia_id.trim()) else { return Vec::new() };
        self.in_edges(turn)
            .into_iter()
            .filter(|(edge, _)| matches!(edge, Edge::Source))
            .filter_map(|(_, node)| match &self.graph[node] {
                Node::Fact(fact) => Some(fact),
                _ => None,
            })
            .collect()
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
