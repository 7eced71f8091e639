//! Joint coverage of the top sessions: a multi-hop question ("What did Mel paint and where did
//! Caro camp?") has its evidence in several sessions, and a ranking by each session's own score
//! fills the top with sessions that all answer the same part. The sessions at the top of the
//! fused order (the pool) are re-chosen greedily, MMR-style: each pick maximises
//!
//! `relevance − diversity · redundancy + coverage · new aspects`
//!
//! where relevance is the fused score min-max scaled over the pool, redundancy the highest
//! cosine between the candidate's best turn and the best turns of the sessions already chosen,
//! and new aspects the idf-weighted share of the question's terms (its names and content words,
//! split without a model) that the candidate's best turns contain and no chosen session's best
//! turns do. Sessions below the pool keep their order. Pure and deterministic: ties go to the
//! better fused rank.

use super::options::FusionOptions;
use super::ranking::Scored;
use super::{MemoryIndex, ranked};
use crate::retrieval::router::rank_descending;
use crate::retrieval::vector::dot_f64 as dot;

/// A session's best turns (by fused turn score) that count for its aspects.
const ASPECT_TURNS: usize = 3;

/// What the greedy selection weighs, per pool session (in fused order).
pub(super) struct Candidates {
    /// Fused score scaled to [0, 1] over the pool.
    pub relevance: Vec<f64>,
    /// `redundancy[a][b]`: similarity of pool sessions a and b.
    pub redundancy: Vec<Vec<f64>>,
    /// `covers[a][t]`: whether pool session a contains aspect t.
    pub covers: Vec<Vec<bool>>,
    /// Weight of each aspect (sums to 1 when there are aspects).
    pub aspect_weights: Vec<f64>,
}

/// Greedy selection order of the pool (positions into it), best first.
pub(super) fn select_greedy(candidates: &Candidates, diversity: f64, coverage: f64) -> Vec<usize> {
    let n = candidates.relevance.len();
    let n_aspects = candidates.aspect_weights.len();
    let mut chosen: Vec<usize> = Vec::with_capacity(n);
    let mut covered = vec![false; n_aspects];
    let mut left: Vec<usize> = (0..n).collect();
    while !left.is_empty() {
        let gain = |c: usize| {
            let redundancy =
                chosen.iter().map(|&s| candidates.redundancy[c][s]).fold(0.0f64, f64::max);
            let new: f64 = (0..n_aspects)
                .filter(|&t| candidates.covers[c][t] && !covered[t])
                .map(|t| candidates.aspect_weights[t])
                .sum();
            candidates.relevance[c] - diversity * redundancy + coverage * new
        };
        // `left` stays in pool order, so a strict `>` keeps the better fused rank on ties.
        let mut best = 0;
        let mut best_gain = gain(left[0]);
        for (position, &c) in left.iter().enumerate().skip(1) {
            let g = gain(c);
            if g > best_gain {
                best = position;
                best_gain = g;
            }
        }
        let pick = left.remove(best);
        for (t, flag) in covered.iter_mut().enumerate() {
            *flag |= candidates.covers[pick][t];
        }
        chosen.push(pick);
    }
    chosen
}

impl MemoryIndex {
    /// Sessions best first: the fused order, with the top
    /// [`rerank_pool`](FusionOptions::rerank_pool) re-chosen for joint coverage when
    /// [`diversity`](FusionOptions::diversity) or [`coverage`](FusionOptions::coverage) is set.
    /// Scores stay the fused scores.
    pub(super) fn rerank_sessions(
        &self,
        weights: &FusionOptions,
        query_text: &str,
        session_scores: &[f64],
        turn_scores: &[f64],
    ) -> Vec<Scored> {
        let order = ranked(session_scores);
        if (weights.diversity == 0.0 && weights.coverage == 0.0) || weights.rerank_pool < 2 {
            return order;
        }
        let pool: Vec<usize> = order.iter().take(weights.rerank_pool).map(|h| h.index).collect();
        let candidates = self.candidates(&pool, query_text, session_scores, turn_scores);
        let picked = select_greedy(&candidates, weights.diversity, weights.coverage);
        let mut out: Vec<Scored> = picked.into_iter().map(|p| order[p]).collect();
        out.extend_from_slice(&order[pool.len()..]);
        out
    }

    fn candidates(
        &self,
        pool: &[usize],
        query_text: &str,
        session_scores: &[f64],
        turn_scores: &[f64],
    ) -> Candidates {
        let best_turns: Vec<Vec<usize>> = pool
            .iter()
            .map(|&s| {
                let range = self.sessions[s].turns.clone();
                rank_descending(&turn_scores[range.clone()])
                    .into_iter()
                    .take(ASPECT_TURNS)
                    .map(|local| range.start + local)
                    .collect()
            })
            .collect();
        let pool_scores: Vec<f64> = pool.iter().map(|&s| session_scores[s]).collect();
        let relevance = super::fusion::min_max(&pool_scores);
        let redundancy = best_turns
            .iter()
            .map(|a| {
                best_turns
                    .iter()
                    .map(|b| match (a.first(), b.first()) {
                        (Some(&x), Some(&y)) => dot(
                            &self.vectors[self.turns[x].node],
                            &self.vectors[self.turns[y].node],
                        ),
                        _ => 0.0,
                    })
                    .collect()
            })
            .collect();
        let aspects = self.bm25_turns.query_terms(query_text);
        let total: f64 = aspects.iter().map(|(idf, _)| idf).sum();
        let aspect_weights: Vec<f64> =
            aspects.iter().map(|(idf, _)| if total > 0.0 { idf / total } else { 0.0 }).collect();
        let covers = best_turns
            .iter()
            .map(|turns| {
                aspects
                    .iter()
                    .map(|(_, documents)| {
                        turns.iter().any(|&t| documents.binary_search(&(t as u32)).is_ok())
                    })
                    .collect()
            })
            .collect();
        Candidates { relevance, redundancy, covers, aspect_weights }
    }
}
