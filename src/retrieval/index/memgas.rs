//! MemGAS ranking: entropy router, seed selection and personalized PageRank over the association
//! graph.

use super::options::{SessionAggregate, TurnRouting};
use super::ranking::Ranking;
use super::{MemoryIndex, ranked};
use crate::retrieval::ppr::personalized_pagerank;
use crate::retrieval::router::{route, select_seeds};
use crate::retrieval::units::Granularity;
use crate::retrieval::vector::dot_f64 as dot;

impl MemoryIndex {
    /// MemGAS (§5): router weights from per-granularity entropies, weighted node scores, top-α
    /// seeds, personalized PageRank, session score read off its nodes' mass
    /// ([`SessionAggregate`]).
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
        let session_scores =
            self.session_mass(&mass, &granularities, &weights, options.session_score);
        let turn_scores: Vec<f64> = self.turns.iter().map(|t| mass[t.node]).collect();
        Ranking {
            sessions: ranked(&session_scores),
            turns: Some(ranked(&turn_scores)),
            router_weights: granularities.into_iter().zip(weights).collect(),
        }
    }

    /// Session scores from node mass (see [`SessionAggregate`]); `weights[i]` is the router
    /// weight of `granularities[i]`.
    fn session_mass(
        &self,
        mass: &[f64],
        granularities: &[Granularity],
        weights: &[f64],
        aggregate: SessionAggregate,
    ) -> Vec<f64> {
        let n = self.sessions.len();
        match aggregate {
            SessionAggregate::Sum | SessionAggregate::Mean => {
                let mut total = vec![0.0; n];
                let mut count = vec![0usize; n];
                for (node, m) in self.nodes.iter().zip(mass) {
                    total[node.session] += m;
                    count[node.session] += 1;
                }
                if aggregate == SessionAggregate::Mean {
                    for (t, c) in total.iter_mut().zip(&count) {
                        *t /= (*c).max(1) as f64;
                    }
                }
                total
            }
            SessionAggregate::Max => {
                let mut best = vec![0.0f64; n];
                for (node, m) in self.nodes.iter().zip(mass) {
                    best[node.session] = best[node.session].max(*m);
                }
                best
            }
            SessionAggregate::RoutedMax => {
                let mut scores = vec![0.0; n];
                for (granularity, weight) in granularities.iter().zip(weights) {
                    let mut best = vec![0.0f64; n];
                    for (node, m) in self.nodes.iter().zip(mass) {
                        if node.granularity == *granularity {
                            best[node.session] = best[node.session].max(*m);
                        }
                    }
                    let top = best.iter().copied().fold(0.0f64, f64::max);
                    if top > 0.0 {
                        for (score, b) in scores.iter_mut().zip(&best) {
                            *score += weight * b / top;
                        }
                    }
                }
                scores
            }
        }
    }
}
