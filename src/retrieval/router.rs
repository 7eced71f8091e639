//! The entropy router, seed selection and score ranking of MemGAS (§5.2, §5.3, §5.5).
//!
//! For each granularity g the router turns the query's similarities to the n units of g into a
//! distribution `p = softmax(sim / λ)` and measures its entropy `H_g = −Σ p·ln(p + 1e-12)`. A
//! peaked distribution (low entropy) means that granularity singles out a few units, so it should
//! count more. Three weightings exist in MemGAS's sources; all are here, the paper's is the
//! default:
//! - [`RouterFormula::InverseEntropy`] (paper Eq. 4): `w_g = (1/H_g) / Σ (1/H_g')`;
//! - [`RouterFormula::OneMinusEntropy`] (research code): `w_g = (1 − H_g) / Σ (1 − H_g')`, which
//!   prefers the *flatter* granularity whenever every `H > 1` and can go negative (memgas.md §5.2);
//! - [`RouterFormula::NormalizedEntropy`] (quickstart): `w_g ∝ max(1e-6, 1 − H_g / ln max(n, 2))`.
//!
//! Synchronous, pure, deterministic.

use serde::{Deserialize, Serialize};

/// How entropies become granularity weights.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RouterFormula {
    /// The paper's normalised inverse entropy (default).
    #[default]
    InverseEntropy,
    /// The research code's `(1 − H) / Σ(1 − H)`.
    OneMinusEntropy,
    /// The quickstart's normalised entropy `1 − H / ln n`, floored at 1e-6.
    NormalizedEntropy,
    /// Equal weights (the paper's "w/o Router" ablation).
    Uniform,
}

/// Added inside the logarithm of the entropy (memgas.md §9).
const LOG_EPSILON: f64 = 1e-12;

/// Entropy floor for the inverse formula, so a one-hot distribution gets a finite (dominant)
/// weight instead of a division by zero.
const MIN_ENTROPY: f64 = 1e-12;

/// Entropy (natural log) of `softmax(similarities / temperature)`; 0 for an empty slice.
pub fn softmax_entropy(similarities: &[f64], temperature: f64) -> f64 {
    if similarities.is_empty() {
        return 0.0;
    }
    let temperature = temperature.max(1e-6);
    let max = similarities.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let exps: Vec<f64> = similarities.iter().map(|s| ((s - max) / temperature).exp()).collect();
    let total: f64 = exps.iter().sum();
    -exps.iter().map(|e| e / total).map(|p| p * (p + LOG_EPSILON).ln()).sum::<f64>()
}

/// Granularity weights from per-granularity entropies; `counts[g]` is the number of units of g
/// (used only by [`RouterFormula::NormalizedEntropy`]). A degenerate normaliser (a zero or
/// non-finite sum) falls back to equal weights.
pub fn weights_from_entropies(
    entropies: &[f64],
    counts: &[usize],
    formula: RouterFormula,
) -> Vec<f64> {
    let raw: Vec<f64> = match formula {
        RouterFormula::InverseEntropy => {
            entropies.iter().map(|h| 1.0 / h.max(MIN_ENTROPY)).collect()
        }
        RouterFormula::OneMinusEntropy => entropies.iter().map(|h| 1.0 - h).collect(),
        RouterFormula::NormalizedEntropy => entropies
            .iter()
            .zip(counts)
            .map(|(h, &n)| (1.0 - h / (n.max(2) as f64).ln()).max(1e-6))
            .collect(),
        RouterFormula::Uniform => vec![1.0; entropies.len()],
    };
    let total: f64 = raw.iter().sum();
    if entropies.is_empty() || total == 0.0 || !total.is_finite() {
        return vec![1.0 / entropies.len().max(1) as f64; entropies.len()];
    }
    raw.iter().map(|w| w / total).collect()
}

/// One weight per granularity for a query, from its similarities to each granularity's units.
pub fn route(similarities: &[&[f64]], temperature: f64, formula: RouterFormula) -> Vec<f64> {
    let entropies: Vec<f64> =
        similarities.iter().map(|s| softmax_entropy(s, temperature)).collect();
    let counts: Vec<usize> = similarities.iter().map(|s| s.len()).collect();
    weights_from_entropies(&entropies, &counts, formula)
}

/// Sharpen a seed vector: every positive entry `s` becomes `exp((s − max) / temperature)`,
/// zeros stay zero. A temperature of 0 (or less) leaves the vector unchanged (the paper's
/// linear seeds). Ranking among seeds is kept; only how much more the best seed weighs changes.
pub fn sharpen_seeds(seeds: &[f64], temperature: f64) -> Vec<f64> {
    if temperature <= 0.0 {
        return seeds.to_vec();
    }
    let max = seeds.iter().copied().filter(|s| *s > 0.0).fold(f64::NEG_INFINITY, f64::max);
    seeds.iter().map(|&s| if s > 0.0 { ((s - max) / temperature).exp() } else { 0.0 }).collect()
}

/// PPR reset vector from node scores (§5.3): keep every score ≥ the `n_seeds`-th largest (ties at
/// the threshold are all kept), zero the rest, and clamp negative or NaN scores to 0. When
/// nothing positive survives, all nodes get equal mass (the quickstart's fallback; the research
/// code would fail here).
pub fn select_seeds(scores: &[f64], n_seeds: usize) -> Vec<f64> {
    if scores.is_empty() {
        return Vec::new();
    }
    let mut sorted: Vec<f64> =
        scores.iter().map(|s| if s.is_nan() { f64::NEG_INFINITY } else { *s }).collect();
    sorted.sort_by(|a, b| b.total_cmp(a));
    let threshold = sorted[n_seeds.clamp(1, sorted.len()) - 1];
    let seeds: Vec<f64> = scores
        .iter()
        .map(|&s| if s >= threshold && s > 0.0 && !s.is_nan() { s } else { 0.0 })
        .collect();
    if seeds.iter().all(|&s| s == 0.0) {
        return vec![1.0; scores.len()];
    }
    seeds
}

/// Indices sorted by descending score; equal scores keep ascending index order (the stable
/// tie-break memgas.md §11.7 asks for). NaN ranks last.
pub fn rank_descending(scores: &[f64]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..scores.len()).collect();
    let key = |index: usize| if scores[index].is_nan() { f64::NEG_INFINITY } else { scores[index] };
    order.sort_by(|&a, &b| key(b).total_cmp(&key(a)));
    order
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn assert_close(got: &[f64], expected: &[f64], tolerance: f64) {
        assert_eq!(got.len(), expected.len());
        for (g, e) in got.iter().zip(expected) {
            assert!((g - e).abs() < tolerance, "got {got:?}, expected {expected:?}");
        }
    }

    // The worked examples of memgas.md §5.2.
    #[test]
    fn paper_formula_prefers_the_peaked_granularity() {
        let weights =
            weights_from_entropies(&[3.0, 2.6, 3.1, 2.9], &[27; 4], RouterFormula::InverseEntropy);
        assert_close(&weights, &[0.241, 0.278, 0.233, 0.249], 5e-4);
    }

    #[test]
    fn research_formula_reverses_the_preference_and_can_go_negative() {
        let weights =
            weights_from_entropies(&[3.0, 2.6, 3.1, 2.9], &[27; 4], RouterFormula::OneMinusEntropy);
        assert_close(&weights, &[0.263, 0.211, 0.276, 0.250], 5e-4);
        let mixed =
            weights_from_entropies(&[0.8, 2.6, 3.1, 2.9], &[27; 4], RouterFormula::OneMinusEntropy);
        assert_close(&mixed, &[-0.037, 0.296, 0.389, 0.352], 5e-4);
    }

    #[test]
    fn normalized_formula_divides_by_log_count() {
        let n = 27usize;
        let ln_n = (n as f64).ln();
        let weights =
            weights_from_entropies(&[ln_n, ln_n / 2.0], &[n, n], RouterFormula::NormalizedEntropy);
        // 1 − 1 floors at 1e-6; 1 − 1/2 = 0.5.
        assert_close(&weights, &[1e-6 / 0.500001, 0.5 / 0.500001], 1e-9);
    }

    #[test]
    fn entropy_of_uniform_and_peaked_similarities() {
        let uniform = softmax_entropy(&[0.3; 8], 0.2);
        assert!((uniform - 8f64.ln()).abs() < 1e-9);
        let peaked = softmax_entropy(&[1.0, 0.0, 0.0], 0.01);
        assert!(peaked < 1e-10);
        // route() = entropies then weights.
        let a = [0.9, 0.1, 0.1];
        let b = [0.5, 0.5, 0.5];
        let weights = route(&[&a, &b], 0.2, RouterFormula::InverseEntropy);
        assert!(weights[0] > weights[1]);
        assert!((weights.iter().sum::<f64>() - 1.0).abs() < 1e-12);
    }

    #[test]
    fn seeds_keep_ties_at_the_threshold_and_drop_negatives() {
        let scores = [0.5, 0.2, 0.7, 0.2, -0.1, 0.1];
        assert_eq!(select_seeds(&scores, 2), vec![0.5, 0.0, 0.7, 0.0, 0.0, 0.0]);
        assert_eq!(select_seeds(&scores, 3), vec![0.5, 0.2, 0.7, 0.2, 0.0, 0.0]);
        assert_eq!(select_seeds(&[-1.0, -2.0], 1), vec![1.0, 1.0]);
        assert_eq!(select_seeds(&[0.4, 0.3], 15), vec![0.4, 0.3]);
    }

    #[test]
    fn sharpened_seeds_keep_order_and_zeros() {
        let seeds = [0.5, 0.0, 0.7, 0.6];
        assert_eq!(sharpen_seeds(&seeds, 0.0), seeds.to_vec());
        let sharp = sharpen_seeds(&seeds, 0.1);
        assert_eq!(sharp[1], 0.0);
        assert!((sharp[2] - 1.0).abs() < 1e-12);
        assert!((sharp[3] - (-1.0f64).exp()).abs() < 1e-12);
        assert!((sharp[0] - (-2.0f64).exp()).abs() < 1e-12);
    }

    #[test]
    fn ranking_is_stable_on_ties() {
        assert_eq!(rank_descending(&[0.0, 0.3, 0.0, 0.3, f64::NAN, 0.1]), vec![1, 3, 5, 0, 2, 4]);
    }
}
