//! What an index holds, read: its sizes, ids, texts, session vectors, granularities and its
//! heap estimate (what the service's byte-bounded cache weighs it by).

use super::{IndexNeeds, MemoryIndex, Scored, TurnHit};
use crate::retrieval::graph::AssociationGraph;
use crate::retrieval::units::Granularity;

impl MemoryIndex {
    /// Number of sessions.
    pub fn n_sessions(&self) -> usize {
        self.sessions.len()
    }

    /// An estimate of the heap bytes the index holds ([`crate::heap`]): unit texts and
    /// vectors, the graph, the lexical indexes, the words and their vectors, and the
    /// approximate turn index when it has one. What a byte-bounded cache weighs it by.
    pub fn heap_bytes(&self) -> usize {
        use crate::heap::{flat, optional_text, text, vectors};
        let sessions: usize = self
            .sessions
            .iter()
            .map(|entry| {
                let units = &entry.units;
                let turns: usize = units
                    .turns
                    .iter()
                    .map(|turn| text(&turn.dia_id) + text(&turn.speaker) + text(&turn.text))
                    .sum();
                text(&units.session_id)
                    + optional_text(units.date.as_deref())
                    + optional_text(units.summary.as_deref())
                    + optional_text(units.keywords.as_deref())
                    + flat(&units.turns)
                    + turns
                    + entry.hybrid.as_deref().map_or(0, flat)
            })
            .sum();
        // The approximate index keeps its own copy of each turn vector and its links.
        let ann = self.turn_ann.as_ref().map_or(0, |_| {
            let dims = self.dims.unwrap_or(0);
            self.turns.len() * (dims * std::mem::size_of::<f32>() + 64 * 4)
        });
        flat(&self.sessions)
            + sessions
            + flat(&self.turns)
            + flat(&self.nodes)
            + vectors(&self.vectors)
            + self.graph.heap_bytes()
            + self.bm25_turns.heap_bytes()
            + self.bm25_sessions.heap_bytes()
            + self.words.heap_bytes()
            + ann
    }

    /// Number of turns.
    pub fn n_turns(&self) -> usize {
        self.turns.len()
    }

    /// What the index holds.
    pub fn needs(&self) -> IndexNeeds {
        self.needs
    }

    /// Whether dense turn retrieval goes through the approximate index (the memory has reached
    /// [`AnnOptions::threshold`](crate::retrieval::ann::AnnOptions) turns).
    pub fn is_approximate(&self) -> bool {
        self.turn_ann.is_some()
    }

    /// The association graph.
    pub fn graph(&self) -> &AssociationGraph {
        &self.graph
    }

    /// Session id (`D<n>`) of session `index`.
    pub fn session_id(&self, index: usize) -> &str {
        &self.sessions[index].units.session_id
    }

    /// The session vector of session `index`, when the index holds session vectors.
    pub fn session_vector(&self, index: usize) -> Option<&[f32]> {
        self.nodes
            .iter()
            .zip(&self.vectors)
            .find(|(node, _)| node.session == index && node.granularity == Granularity::Session)
            .map(|(_, vector)| vector.as_slice())
    }

    /// Dia_id of turn `index`.
    pub fn turn_id(&self, index: usize) -> &str {
        let entry = self.turns[index];
        let local = index - self.sessions[entry.session].turns.start;
        &self.sessions[entry.session].units.turns[local].dia_id
    }

    /// A ranked turn with its session, date, speaker and text.
    pub fn turn_hit(&self, hit: Scored) -> TurnHit {
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
    }

    /// The position of turn `index`'s session among the index's sessions.
    pub fn turn_session(&self, index: usize) -> usize {
        self.turns[index].session
    }

    /// The text (`speaker: text`) of turn `index`.
    pub fn turn_text(&self, index: usize) -> &str {
        let entry = self.turns[index];
        let local = index - self.sessions[entry.session].turns.start;
        &self.sessions[entry.session].units.turns[local].text
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
}
