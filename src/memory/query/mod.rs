//! Pure read queries over a [`MemoryGraph`]: the seven tools of the answering agent (§10) plus
//! the keyword matching (§8) and timeline window used before the tool loop. No IO, no model
//! calls; every result is serde-serialisable and deterministically ordered (natural id order,
//! or coverage then id for matches).
//!
//! Deliberate differences from the reference: keys, tags, aspects and person names are matched
//! after normalisation (not as exact raw strings); results naming the same turn twice (several
//! sentences of one turn) are de-duplicated by origin; an unknown key, tag, person, aspect, topic
//! or event is a [`QueryError`] that lists what exists, so the agent can correct its call.
//! Re-ranking large results by embedding similarity is left to the caller.

use std::collections::{BTreeMap, BTreeSet};

use chrono::NaiveDate;
use petgraph::graph::NodeIndex;

use super::graph::{Edge, MemoryGraph, Node, natural_key};
use super::key::{match_tokens, normalize_key, tokens};

mod types;

pub use types::*;

/// `edges_by_tag`: the episodes a key links to under one tag, de-duplicated by origin, in
/// natural id order. Key and tag are normalised before lookup.
pub fn edges_by_tag(
    memory: &MemoryGraph,
    key: &str,
    tag: &str,
) -> Result<Vec<EventHit>, QueryError> {
    let normalized = normalize_key(key);
    let node =
        memory.key_node(&normalized).ok_or_else(|| QueryError::UnknownKey(key.to_string()))?;
    let unknown_tag = || {
        let known = key_tags_of(memory, node);
        QueryError::UnknownTag {
            key: known.as_ref().map_or_else(|| normalized.clone(), |known| known.key.clone()),
            tag: tag.to_string(),
            tags: known.map(|known| known.tags).unwrap_or_default(),
        }
    };
    let canonical = memory.canonical_tag(tag).ok_or_else(unknown_tag)?;
    let episodes: Vec<NodeIndex> = memory
        .out_edges(node)
        .into_iter()
        .filter(|(edge, _)| matches!(edge, Edge::Tag(label) if label == canonical))
        .map(|(_, episode)| episode)
        .collect();
    if episodes.is_empty() {
        return Err(unknown_tag());
    }
    Ok(event_hits(memory, episodes))
}

/// A key and its tags (for the agent's `keys_candidates`); `None` if the key is unknown.
pub fn key_tags(memory: &MemoryGraph, key: &str) -> Option<KeyTags> {
    key_tags_of(memory, memory.key_node(&normalize_key(key))?)
}

/// `query_conversation_time`: the date of the session an event belongs to. Accepts a sentence
/// id (`D3:5-1`) or a dia_id (`D3:5`).
pub fn query_conversation_time(
    memory: &MemoryGraph,
    event_id: &str,
) -> Result<ConversationTime, QueryError> {
    let episodes = resolve_episodes(memory, event_id)?;
    episodes
        .iter()
        .find_map(|&node| memory.episode(node).conversation_time)
        .map(|date| ConversationTime { event_id: event_id.trim().to_string(), date })
        .ok_or_else(|| QueryError::NoConversationTime(event_id.to_string()))
}

/// `query_event_keywords`: the keys linked to an event (all sentences of the turn for a dia_id),
/// each with all its tags, in link order without repeats.
pub fn query_event_keywords(
    memory: &MemoryGraph,
    event_id: &str,
) -> Result<Vec<KeyTags>, QueryError> {
    let mut seen = BTreeSet::new();
    let mut result = Vec::new();
    for episode in resolve_episodes(memory, event_id)? {
        for (edge, key) in memory.in_edges(episode) {
            if matches!(edge, Edge::Tag(_)) && seen.insert(key) {
                result.extend(key_tags_of(memory, key));
            }
        }
    }
    Ok(result)
}

/// `query_event_context`: the previous turn, the turn itself and the next turn of its session
/// (as many as exist). Accepts a sentence id or a dia_id.
pub fn query_event_context(
    memory: &MemoryGraph,
    event_id: &str,
) -> Result<Vec<RawTurn>, QueryError> {
    let id = event_id.trim();
    let turn = match memory.turn_node(id) {
        Some(turn) => turn,
        None => {
            let episode = memory
                .episode_node(id)
                .ok_or_else(|| QueryError::UnknownEvent(event_id.to_string()))?;
            memory
                .turn_node(&memory.episode(episode).origin)
                .ok_or_else(|| QueryError::UnknownEvent(event_id.to_string()))?
        }
    };
    let Node::Turn(turn_node) = memory.node(turn) else {
        return Err(QueryError::UnknownEvent(event_id.to_string()));
    };
    let order = memory.session_turn_nodes(turn_node.session);
    let position = order.iter().position(|&node| node == turn).unwrap_or(0);
    let window = &order[position.saturating_sub(1)..(position + 2).min(order.len())];
    Ok(window
        .iter()
        .filter_map(|&node| match memory.node(node) {
            Node::Turn(turn) => {
                Some(RawTurn { dia_id: turn.dia_id.clone(), text: turn.text.clone() })
            }
            _ => None,
        })
        .collect())
}

/// `query_personal_information`: the aspects known about a person (name matched after
/// normalisation).
pub fn query_personal_information(
    memory: &MemoryGraph,
    person: &str,
) -> Result<PersonAspects, QueryError> {
    let node = find_person(memory, person)?;
    match memory.node(node) {
        Node::Person(found) => {
            Ok(PersonAspects { person: found.name.clone(), aspects: found.aspects.clone() })
        }
        _ => Err(unknown_person(memory, person)),
    }
}

/// `query_personal_aspect`: the facts about a person under one aspect, in insertion order,
/// current facts before earlier values (facts a later one replaced, own memory).
pub fn query_personal_aspect(
    memory: &MemoryGraph,
    person: &str,
    aspect: &str,
) -> Result<Vec<FactHit>, QueryError> {
    let node = find_person(memory, person)?;
    let Node::Person(found) = memory.node(node) else {
        return Err(unknown_person(memory, person));
    };
    let unknown_aspect = || QueryError::UnknownAspect {
        person: found.name.clone(),
        aspect: aspect.to_string(),
        aspects: found.aspects.clone(),
    };
    let canonical = memory.canonical_aspect(aspect).ok_or_else(unknown_aspect)?;
    let mut facts: Vec<FactHit> = memory
        .out_edges(node)
        .into_iter()
        .filter(|(edge, _)| matches!(edge, Edge::Aspect(label) if label == canonical))
        .filter_map(|(_, fact)| match memory.node(fact) {
            Node::Fact(fact) => Some(FactHit {
                fact_id: fact.id.clone(),
                origins: fact.origins.clone(),
                text: fact.text.clone(),
                earlier_until: fact.earlier_until.clone(),
                earlier_since: fact.earlier_since.clone(),
            }),
            _ => None,
        })
        .collect();
    // Current facts first (in insertion order), then earlier values, latest replaced first.
    facts.sort_by(|a, b| {
        let rank = |hit: &FactHit| {
            (hit.earlier_until.is_some(), std::cmp::Reverse(hit.earlier_until.clone()))
        };
        rank(a).cmp(&rank(b))
    });
    if facts.is_empty() {
        return Err(unknown_aspect());
    }
    Ok(facts)
}

/// `query_topic_events`: the episodes of a topic, de-duplicated by origin, in natural id order.
pub fn query_topic_events(
    memory: &MemoryGraph,
    topic_id: &str,
) -> Result<Vec<EventHit>, QueryError> {
    let node = memory
        .topic_node(topic_id.trim())
        .ok_or_else(|| QueryError::UnknownTopic(topic_id.to_string()))?;
    let episodes = memory
        .out_edges(node)
        .into_iter()
        .filter(|(edge, _)| matches!(edge, Edge::Member))
        .map(|(_, episode)| episode)
        .collect();
    Ok(event_hits(memory, episodes))
}

/// The timeline between two days (inclusive): episodes by date, then natural id, one per origin
/// and day.
pub fn events_between(memory: &MemoryGraph, from: NaiveDate, to: NaiveDate) -> Vec<DatedEvent> {
    if from > to {
        return Vec::new();
    }
    let mut result = Vec::new();
    for (date, date_node) in memory.date_nodes(from..=to) {
        let episodes = memory
            .in_edges(date_node)
            .into_iter()
            .filter(|(edge, _)| matches!(edge, Edge::OnDate))
            .map(|(_, e)| e)
            .collect();
        result.extend(event_hits(memory, episodes).into_iter().map(|hit| DatedEvent {
            date,
            event_id: hit.event_id,
            text: hit.text,
        }));
    }
    result
}

/// Matches question keywords against the graph keys (§8): a key matches a keyword when the
/// keyword or one of its alternatives equals it, contains it or is contained in it (token sets;
/// a single common token such as a speaker name only matches itself), or overlaps it with
/// Jaccard ≥ 0.6. Each episode is scored by the share of keywords that reach it.
pub fn match_keywords(memory: &MemoryGraph, keywords: &[QueryKeyword]) -> KeywordMatches {
    let mut keyword_keys = Vec::new();
    // episode → indices of the keywords reaching it, and the keys used.
    let mut reached: BTreeMap<NodeIndex, (BTreeSet<usize>, BTreeSet<String>)> = BTreeMap::new();
    let mut total = 0;
    for keyword in keywords {
        let phrases: BTreeSet<String> = std::iter::once(&keyword.id)
            .chain(&keyword.alternatives)
            .map(|phrase| normalize_key(phrase))
            .filter(|phrase| !phrase.is_empty())
            .collect();
        if phrases.is_empty() {
            continue;
        }
        let position = total;
        total += 1;
        let phrase_tokens: Vec<Vec<&str>> =
            phrases.iter().map(|phrase| tokens(phrase).into_iter().collect()).collect();
        let mut keys = BTreeSet::new();
        for (key, node, key_tokens) in memory.key_nodes() {
            let matched = phrases.iter().zip(&phrase_tokens).any(|(phrase, phrase_tokens)| {
                match_tokens(phrase, phrase_tokens, &key.normalized, key_tokens, |token| {
                    memory.is_common_token(token)
                })
                .is_some()
            });
            if !matched {
                continue;
            }
            keys.insert(key.key.clone());
            for (edge, episode) in memory.out_edges(node) {
                if matches!(edge, Edge::Tag(_)) {
                    let entry = reached.entry(episode).or_default();
                    entry.0.insert(position);
                    entry.1.insert(key.key.clone());
                }
            }
        }
        keyword_keys
            .push(KeywordKeys { keyword: keyword.id.clone(), keys: keys.into_iter().collect() });
    }

    let mut matches: Vec<(Vec<u64>, String, EventMatch)> = reached
        .into_iter()
        .map(|(node, (positions, keys))| {
            let episode = memory.episode(node);
            let matched_keywords: Vec<String> =
                positions.iter().map(|&position| keyword_keys[position].keyword.clone()).collect();
            // Keyword counts are tiny, so the conversions are exact.
            #[allow(clippy::cast_precision_loss)]
            let coverage = matched_keywords.len() as f64 / total as f64;
            let (numbers, id) = natural_key(&episode.id);
            (
                numbers,
                id,
                EventMatch {
                    event_id: episode.id.clone(),
                    origin: episode.origin.clone(),
                    text: episode.text.clone(),
                    matched_keywords,
                    matched_keys: keys.into_iter().collect(),
                    total_keywords: total,
                    coverage,
                },
            )
        })
        .collect();
    matches.sort_by(|a, b| {
        b.2.matched_keywords
            .len()
            .cmp(&a.2.matched_keywords.len())
            .then_with(|| (&a.0, &a.1).cmp(&(&b.0, &b.1)))
    });
    let (full, partial): (Vec<EventMatch>, Vec<EventMatch>) = matches
        .into_iter()
        .map(|(_, _, found)| found)
        .partition(|found| found.matched_keywords.len() == total);
    KeywordMatches { keys: keyword_keys, full, partial }
}

fn key_tags_of(memory: &MemoryGraph, node: NodeIndex) -> Option<KeyTags> {
    match memory.node(node) {
        Node::Key(key) => Some(KeyTags { key: key.key.clone(), tags: key.tags.clone() }),
        _ => None,
    }
}

/// Episodes of a sentence id, or all episodes of a dia_id.
fn resolve_episodes(memory: &MemoryGraph, event_id: &str) -> Result<Vec<NodeIndex>, QueryError> {
    let id = event_id.trim();
    if let Some(node) = memory.episode_node(id) {
        return Ok(vec![node]);
    }
    let episodes = memory.origin_episodes(id);
    if episodes.is_empty() {
        Err(QueryError::UnknownEvent(event_id.to_string()))
    } else {
        Ok(episodes.to_vec())
    }
}

/// Episodes in natural id order, keeping the first per origin.
fn event_hits(memory: &MemoryGraph, mut episodes: Vec<NodeIndex>) -> Vec<EventHit> {
    episodes.sort_by_cached_key(|&node| natural_key(&memory.episode(node).id));
    let mut origins = BTreeSet::new();
    episodes
        .into_iter()
        .map(|node| memory.episode(node))
        .filter(|episode| origins.insert(episode.origin.clone()))
        .map(|episode| EventHit { event_id: episode.id.clone(), text: episode.text.clone() })
        .collect()
}

fn find_person(memory: &MemoryGraph, person: &str) -> Result<NodeIndex, QueryError> {
    memory.person_node(person).ok_or_else(|| unknown_person(memory, person))
}

fn unknown_person(memory: &MemoryGraph, person: &str) -> QueryError {
    QueryError::UnknownPerson {
        person: person.to_string(),
        known: memory.persons().map(|known| known.name.clone()).collect(),
    }
}
