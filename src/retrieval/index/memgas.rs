//! MemGAS ranking: entropy router, seed selection and personalized PageRank over the association
//! graph.

use super::options::TurnRouting;
use super::ranking::Ranking;
use super::{MemoryIndex, ranked};
use crate::retrieval::ppr::personalized_pagerank;
use crate::retrieval::router::{route, select_seeds};
use crate::retrieval::units::Granularity;
use crate::retrieval::vector::dot_f64 as dot;

impl MemoryIndex {
    /// MemGAS (§5): router weights from per-granularity entropies, weighted node scores, top-α
    /// seeds, personalized PageRank, session score = sum of its nodes' mass.
    pub(super) fn memgas(&self, query: &[f32]) -> Ranking {
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
