//! Fusion ranking: a weighted sum of normalised lexical, dense and (optionally) MemGAS scores, with
//! session↔turn propagation and a date boost.

use super::options::Normalisation;
use super::ranking::Ranking;
use super::{MemoryIndex, ranked};
use crate::retrieval::dates::{date_affinity, month_mentions, session_month};

impl MemoryIndex {
    /// Weighted sum of normalised channel scores (see [`FusionOptions`](super::FusionOptions)).
    pub(super) fn fusion(&self, query_text: &str, query: &[f32]) -> Ranking {
        let weights = self.options.fusion;
        let normalise = |values: &[f64]| normalised(values, weights.normalisation);
        let dense_turns = self.turn_similarities(query);
        let dense_sessions = self.best_turn_per_session(&dense_turns);
        let mut session_scores = vec![0.0; self.sessions.len()];
        let mut turn_scores = vec![0.0; self.turns.len()];
        let add = |target: &mut Vec<f64>, weight: f64, values: &[f64]| {
            if weight != 0.0 {
                for (t, v) in target.iter_mut().zip(normalise(values)) {
                    *t += weight * v;
                }
            }
        };
        add(&mut session_scores, weights.session_bm25, &self.bm25_sessions.scores(query_text));
        add(&mut session_scores, weights.session_dense, &dense_sessions);
        add(&mut turn_scores, weights.bm25, &self.bm25_turns.scores(query_text));
        add(&mut turn_scores, weights.dense, &dense_turns);
        if weights.memgas != 0.0 {
            let memgas = self.memgas(query);
            let mut by_session = vec![0.0; self.sessions.len()];
            for hit in &memgas.sessions {
                by_session[hit.index] = hit.score;
            }
            let mut by_turn = vec![0.0; self.turns.len()];
            for hit in memgas.turns.iter().flatten() {
                by_turn[hit.index] = hit.score;
            }
            add(&mut session_scores, weights.memgas, &by_session);
            add(&mut turn_scores, weights.memgas, &by_turn);
        }
        if weights.turn_to_session != 0.0 {
            let aggregated: Vec<f64> = self
                .sessions
                .iter()
                .map(|s| {
                    top_decayed_sum(
                        &turn_scores[s.turns.clone()],
                        weights.session_top_turns,
                        weights.session_turn_decay,
                    )
                })
                .collect();
            add(&mut session_scores, weights.turn_to_session, &aggregated);
        }
        if weights.date != 0.0 {
            let mentions = month_mentions(query_text);
            for (score, session) in session_scores.iter_mut().zip(&self.sessions) {
                let month = session.units.date.as_deref().and_then(session_month);
                *score += weights.date * date_affinity(&mentions, month, weights.date_next_month);
            }
        }
        if weights.session_to_turn != 0.0 {
            let sessions = normalise(&session_scores);
            for (score, turn) in turn_scores.iter_mut().zip(&self.turns) {
                *score += weights.session_to_turn * sessions[turn.session];
            }
        }
        Ranking {
            sessions: ranked(&session_scores),
            turns: Some(ranked(&turn_scores)),
            router_weights: Vec::new(),
        }
    }
}

/// `values` on the scale of `normalisation`.
fn normalised(values: &[f64], normalisation: Normalisation) -> Vec<f64> {
    match normalisation {
        Normalisation::MinMax => min_max(values),
        Normalisation::ZScore => z_scores(values),
    }
}

/// Standard scores over the finite values; non-finite values get the lowest finite score (all
/// zeros when the finite values do not vary).
fn z_scores(values: &[f64]) -> Vec<f64> {
    let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    if finite.is_empty() {
        return vec![0.0; values.len()];
    }
    let n = finite.len() as f64;
    let mean = finite.iter().sum::<f64>() / n;
    let deviation = (finite.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n).sqrt();
    if deviation <= 0.0 {
        return vec![0.0; values.len()];
    }
    let lowest = finite.iter().copied().fold(f64::INFINITY, f64::min);
    values
        .iter()
        .map(|v| if v.is_finite() { (v - mean) / deviation } else { (lowest - mean) / deviation })
        .collect()
}

/// `Σ_{i<m} decay^i · s_(i)` over the `m` largest values `s_(0) ≥ s_(1) ≥ …` (fewer when there
/// are fewer values; −∞ for none). `m` = 1 is the maximum.
fn top_decayed_sum(values: &[f64], m: usize, decay: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(|a, b| b.total_cmp(a));
    if sorted.is_empty() || m == 0 {
        return f64::NEG_INFINITY;
    }
    let mut weight = 1.0;
    let mut total = 0.0;
    for value in sorted.into_iter().take(m) {
        total += weight * value;
        weight *= decay;
    }
    total
}

/// Scale to [0, 1] by the minimum and maximum (all zeros when the values are all equal).
fn min_max(values: &[f64]) -> Vec<f64> {
    let finite = values.iter().copied().filter(|v| v.is_finite());
    let min = finite.clone().fold(f64::INFINITY, f64::min);
    let max = finite.fold(f64::NEG_INFINITY, f64::max);
    // Also covers no finite value at all (min = +∞, max = −∞).
    if max <= min {
        return vec![0.0; values.len()];
    }
    values.iter().map(|v| if v.is_finite() { (v - min) / (max - min) } else { 0.0 }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn z_scores_standardise_and_floor_missing_values() {
        let z = z_scores(&[1.0, 2.0, 3.0]);
        let sd = (2.0f64 / 3.0).sqrt();
        assert!((z[0] + 1.0 / sd).abs() < 1e-12 && z[1].abs() < 1e-12);
        assert!((z[2] - 1.0 / sd).abs() < 1e-12);
        assert_eq!(z_scores(&[5.0, 5.0]), vec![0.0, 0.0]);
        let with_missing = z_scores(&[f64::NEG_INFINITY, 1.0, 3.0]);
        assert_eq!(with_missing, vec![-1.0, -1.0, 1.0]);
        assert_eq!(normalised(&[1.0, 3.0], Normalisation::MinMax), vec![0.0, 1.0]);
    }

    #[test]
    fn top_decayed_sum_weights_the_best_values() {
        assert_eq!(top_decayed_sum(&[0.2, 0.9, 0.5], 1, 0.5), 0.9);
        assert!((top_decayed_sum(&[0.2, 0.9, 0.5], 2, 0.5) - (0.9 + 0.25)).abs() < 1e-12);
        assert!((top_decayed_sum(&[0.2, 0.9, 0.5], 9, 1.0) - 1.6).abs() < 1e-12);
        assert_eq!(top_decayed_sum(&[], 3, 0.5), f64::NEG_INFINITY);
    }

    #[test]
    fn min_max_scales_and_handles_flat_input() {
        assert_eq!(min_max(&[1.0, 3.0, 2.0]), vec![0.0, 1.0, 0.5]);
        assert_eq!(min_max(&[2.0, 2.0]), vec![0.0, 0.0]);
        assert_eq!(min_max(&[f64::NEG_INFINITY, 1.0, 3.0]), vec![0.0, 0.0, 1.0]);
    }
}
