//! MemGAS ranking: entropy router, seed selection and personalized PageRank over the association
//! graph.

use super::options::{MemgasOptions, SessionAggregate, SessionStructure, TurnRouting};
use super::ranking::Ranking;
use super::{MemoryIndex, ranked};
use crate::retrieval::ppr::weighted_personalized_pagerank;
use crate::retrieval::router::{route, select_seeds, sharpen_seeds};
use crate::retrieval::units::Granularity;
use crate::retrieval::vector::dot_f64 as dot;

impl MemoryIndex {
    /// MemGAS (§5): router weights from per-granularity entropies, weighted node scores, top-α
    /// seeds (optionally sharpened), personalized PageRank over the association graph plus the
    /// in-session edges of [`SessionStructure`], session score read off its nodes' mass
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
        let seeds =
            sharpen_seeds(&select_seeds(&node_scores, options.n_seeds), options.seed_temperature);
        let neighbours = self.weighted_graph(options);
        let mass = match weighted_personalized_pagerank(&neighbours, &seeds, options.damping) {
            Ok(mass) => mass,
            // Only an empty index gets here (select_seeds never returns an all-zero vector).
            Err(_) => vec![0.0; self.nodes.len()],
        };
        let session_scores = self.session_mass(&mass, &granularities, &weights, options);
        let turn_scores: Vec<f64> = self.turns.iter().map(|t| mass[t.node]).collect();
        Ranking {
            sessions: ranked(&session_scores),
            turns: Some(ranked(&turn_scores)),
            router_weights: granularities.into_iter().zip(weights).collect(),
        }
    }

    /// The association graph's edges (weight [`MemgasOptions::association_weight`]) plus edges
    /// of weight 1 inside each session ([`SessionStructure`]): the session node to each of the
    /// session's other nodes and, with adjacent turns, each turn to the next one. The association graph never links two units of one
    /// session, so no edge is doubled.
    pub(super) fn weighted_graph(&self, options: &MemgasOptions) -> Vec<Vec<(u32, f64)>> {
        let mut neighbours: Vec<Vec<(u32, f64)>> = self
            .graph
            .neighbours()
            .iter()
            .map(|list| list.iter().map(|&v| (v, options.association_weight)).collect())
            .collect();
        let structure = options.structure;
        if structure == SessionStructure::None {
            return neighbours;
        }
        // Nodes are pushed per session: the session's nodes form one contiguous block.
        let mut start = 0;
        while start < self.nodes.len() {
            let session = self.nodes[start].session;
            let end = start
                + self.nodes[start..].iter().take_while(|node| node.session == session).count();
            let block = start..end;
            let hub = block.clone().find(|&i| self.nodes[i].granularity == Granularity::Session);
            if let Some(hub) = hub {
                for other in block.clone().filter(|&i| i != hub) {
                    neighbours[hub].push((other as u32, 1.0));
                    neighbours[other].push((hub as u32, 1.0));
                }
            }
            if structure == SessionStructure::SessionAndAdjacentTurns {
                let turns: Vec<usize> =
                    block.filter(|&i| self.nodes[i].granularity == Granularity::Turn).collect();
                for pair in turns.windows(2) {
                    neighbours[pair[0]].push((pair[1] as u32, 1.0));
                    neighbours[pair[1]].push((pair[0] as u32, 1.0));
                }
            }
            start = end;
        }
        neighbours
    }

    /// Session scores from node mass (see [`SessionAggregate`]); `weights[i]` is the router
    /// weight of `granularities[i]`.
    fn session_mass(
        &self,
        mass: &[f64],
        granularities: &[Granularity],
        weights: &[f64],
        options: &MemgasOptions,
    ) -> Vec<f64> {
        let aggregate = options.session_score;
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
            SessionAggregate::SessionPlusBest => {
                let mut own = vec![0.0f64; n];
                let mut best = vec![0.0f64; n];
                for (node, m) in self.nodes.iter().zip(mass) {
                    if node.granularity == Granularity::Session {
                        own[node.session] += m;
                    } else {
                        best[node.session] = best[node.session].max(*m);
                    }
                }
                own.iter().zip(&best).map(|(o, b)| o + b).collect()
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
