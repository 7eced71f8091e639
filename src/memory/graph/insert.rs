//! Building the graph: turns, topics, episodes, facts and key links are inserted here, then
//! [`MemoryGraph::finish`] sorts the orders and fills the stats.

use std::collections::{BTreeMap, HashMap, HashSet};

use chrono::NaiveDate;
use petgraph::graph::NodeIndex;

use super::nodes::*;
use super::{MemoryGraph, natural_key};
use crate::dataset::Conversation;
use crate::memory::input::{SessionKeywords, SessionRewrite};
use crate::memory::key::{clean_key, normalize_key, tokens};

impl MemoryGraph {
    /// Adds every raw turn of the conversation as a Turn node; returns each session's date.
    pub(super) fn add_turns(
        &mut self,
        conversation: &Conversation,
    ) -> BTreeMap<u32, Option<NaiveDate>> {
        let mut session_dates: BTreeMap<u32, Option<NaiveDate>> = BTreeMap::new();
        for session in &conversation.sessions {
            session_dates.insert(session.index, session.date);
            let mut order = Vec::with_capacity(session.turns.len());
            for turn in &session.turns {
                let node = self.graph.add_node(Node::Turn(TurnNode {
                    dia_id: turn.dia_id.clone(),
                    session: session.index,
                    speaker: turn.speaker.clone(),
                    text: turn.display(),
                }));
                self.turns.insert(turn.dia_id.clone(), node);
                order.push(node);
            }
            self.session_turns.insert(session.index, order);
        }
        session_dates
    }

    /// Adds the topics of every record (before any sentence, so a sentence may name a topic of
    /// any record).
    pub(super) fn add_topics(&mut self, rewrites: &[SessionRewrite]) -> Result<(), Error> {
        for rewrite in rewrites {
            for topic in &rewrite.topics {
                if self.topics.contains_key(&topic.id) {
                    return Err(self.duplicate("topic", &topic.id));
                }
                let node = self.graph.add_node(Node::Topic(Topic {
                    id: topic.id.clone(),
                    text: topic.text.clone(),
                }));
                self.topics.insert(topic.id.clone(), node);
            }
        }
        Ok(())
    }

    /// Links every episode to its speaker's key, then to each of its keywords.
    pub(super) fn link_keywords(&mut self, keywords: &[SessionKeywords]) {
        let mut state = LinkState::default();
        // Every episode hangs off its speaker's key (as in the reference), keyword file or not.
        for &episode in &self.episode_order.clone() {
            let speaker = self.episode(episode).speaker.clone();
            self.link_key(&speaker, episode, &mut state);
        }
        for record in keywords {
            for item in &record.sentences {
                let Some(&episode) = self.episodes.get(&item.sentence_id) else {
                    tracing::warn!(
                        sample = %self.sample_id,
                        session = %record.session,
                        sentence_id = %item.sentence_id,
                        "keywords for an unknown sentence dropped"
                    );
                    self.stats.skipped_keyword_sentences += 1;
                    continue;
                };
                for keyword in &item.keywords {
                    self.link_key(keyword, episode, &mut state);
                }
            }
        }
    }

    pub(super) fn duplicate(&self, what: &'static str, id: &str) -> Error {
        Error::DuplicateId { sample: self.sample_id.clone(), what, id: id.to_string() }
    }

    pub(super) fn add_episode(
        &mut self,
        sentence: &crate::memory::input::RewrittenSentence,
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

    pub(super) fn add_fact(
        &mut self,
        fact: &crate::memory::input::PersonalFact,
    ) -> Result<(), Error> {
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
            earlier_until: None,
            earlier_since: None,
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
    pub(super) fn finish(&mut self, conversation: &Conversation) {
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
