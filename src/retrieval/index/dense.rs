//! Dense ranking: similarity of the query vector to each session's units.

use super::MemoryIndex;
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

    pub(super) fn turn_similarities(&self, query: &[f32]) -> Vec<f64> {
        self.turns.iter().map(|turn| dot(&self.vectors[turn.node], query)).collect()
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
