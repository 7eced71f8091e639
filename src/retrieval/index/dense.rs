//! Dense ranking: similarity of the query vector to each session's units.
//!
//! Turn similarities are exact below [`AnnOptions::threshold`] turns. From there on an
//! approximate index ([`AnnIndex`]) proposes [`AnnOptions::candidates_for`] turns, which are scored
//! exactly; every other turn scores −∞ (so it ranks last and normalises to 0 in fusion), and the
//! `turn` method ranks the candidates only.

use super::ranking::{IndexError, Ranking, Scored};
use super::{MemoryIndex, ranked};
use crate::retrieval::ann::{AnnIndex, AnnOptions};
use crate::retrieval::units::Granularity;
use crate::retrieval::vector::dot_f64 as dot;

impl MemoryIndex {
    /// Per session, the similarity of its single node of `granularity` (−∞ if it has none).
    pub(super) fn node_scores_per_session(
        &self,
        granularity: Granularity,
        query: &[f32],
    ) -> Vec<f64> {
        let mut scores = vec![f64::NEG_INFINITY; self.sessions.len()];
        for (node, vector) in self.nodes.iter().zip(&self.vectors) {
            if node.granularity == granularity {
                scores[node.session] = dot(vector, query);
            }
        }
        scores
    }

    /// Similarity of every turn to the query: exact, or exact for the approximate index's
    /// candidates and −∞ for the rest.
    pub(super) fn turn_similarities(&self, query: &[f32]) -> Vec<f64> {
        match self.turn_candidates(query) {
            Some(candidates) => {
                let mut scores = vec![f64::NEG_INFINITY; self.turns.len()];
                for turn in candidates {
                    scores[turn] = dot(&self.vectors[self.turns[turn].node], query);
                }
                scores
            }
            None => self.turns.iter().map(|turn| dot(&self.vectors[turn.node], query)).collect(),
        }
    }

    /// The `turn` method: every turn by similarity and each session by its best turn (above
    /// the threshold: the candidate turns and their sessions only).
    pub(super) fn dense_turns(&self, query: &[f32]) -> Ranking {
        let Some(candidates) = self.turn_candidates(query) else {
            let turn_scores = self.turn_similarities(query);
            return Ranking {
                sessions: ranked(&self.best_turn_per_session(&turn_scores)),
                turns: Some(ranked(&turn_scores)),
                router_weights: Vec::new(),
            };
        };
        let mut turns: Vec<Scored> = candidates
            .into_iter()
            .map(|index| Scored { index, score: dot(&self.vectors[self.turns[index].node], query) })
            .collect();
        turns.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.index.cmp(&b.index)));
        let mut sessions: Vec<Scored> = Vec::new();
        for turn in &turns {
            let session = self.turns[turn.index].session;
            if !sessions.iter().any(|hit| hit.index == session) {
                sessions.push(Scored { index: session, score: turn.score });
            }
        }
        Ranking { sessions, turns: Some(turns), router_weights: Vec::new() }
    }

    /// The approximate index's candidate turns, once there is one. A failed search (which only
    /// a native error can cause: dimensions are checked on insertion) falls back to exact scoring.
    fn turn_candidates(&self, query: &[f32]) -> Option<Vec<usize>> {
        let ann = self.turn_ann.as_ref()?;
        match ann.search(query, self.options.ann.candidates_for(ann.len())) {
            Ok(candidates) => Some(candidates),
            Err(error) => {
                tracing::warn!(%error, "approximate turn search failed; scoring every turn");
                None
            }
        }
    }

    /// Add the turns from `first_turn` on to the approximate index, creating it (with every turn
    /// so far) when the memory reaches the threshold. Turns are added in order, one at a time,
    /// so the graph is the same for the same memory.
    pub(super) fn index_turns_approximately(
        &mut self,
        first_turn: usize,
    ) -> Result<(), IndexError> {
        let options: AnnOptions = self.options.ann;
        if !self.needs.vectors.turns
            || options.threshold == 0
            || self.turns.len() < options.threshold
        {
            return Ok(());
        }
        // A clone of the index (the own-data cache extends a copy) shares the ANN graph; the
        // copy being extended rebuilds its own from every turn instead of touching the shared one.
        let (mut ann, from) = match self.turn_ann.take().map(std::sync::Arc::try_unwrap) {
            Some(Ok(ann)) => (ann, first_turn),
            _ => {
                let dims = self.dims.unwrap_or_default();
                (AnnIndex::new(dims, &options).map_err(IndexError::from)?, 0)
            }
        };
        for turn in from..self.turns.len() {
            ann.add(turn, &self.vectors[self.turns[turn].node]).map_err(IndexError::from)?;
        }
        self.turn_ann = Some(std::sync::Arc::new(ann));
        Ok(())
    }

    pub(super) fn best_turn_per_session(&self, turn_scores: &[f64]) -> Vec<f64> {
        self.sessions
            .iter()
            .map(|s| turn_scores[s.turns.clone()].iter().copied().fold(f64::NEG_INFINITY, f64::max))
            .collect()
    }

    /// Per session, the similarity of its hybrid vector (−∞ if it has none).
    pub(super) fn hybrid_scores(&self, query: &[f32]) -> Vec<f64> {
        self.sessions
            .iter()
            .map(|s| s.hybrid.as_ref().map_or(f64::NEG_INFINITY, |v| dot(v, query)))
            .collect()
    }
}
