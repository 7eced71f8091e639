//! A seeded one-dimensional Gaussian mixture, fitted by EM, that splits a node's candidate
//! similarities into an accept set and a reject set (MemGAS §4.2).
//!
//! MemGAS fits `sklearn.mixture.GaussianMixture(n_components=2, random_state=0)` to the 1-D list
//! of the top candidates' similarity scores and links the candidates labelled with the
//! higher-mean component. This file follows the same procedure step by step: a k-means++ start
//! (two local trials per extra centre) refined by Lloyd iterations, then EM with sklearn's update
//! rules (component mass `n_k + 10·ε`, variance `+ 1e-6`, stop when the mean log-likelihood
//! changes by less than 1e-3, at most 100 iterations) and a final E-step for the labels. The
//! random draws come from a seeded ChaCha generator, not numpy's Mersenne Twister, so splits are
//! deterministic but can differ from sklearn's on the few inputs where its k-means lands in a
//! different local optimum. Measured on 3,000 random candidate sets of 20–30 scores against
//! sklearn 1.6.1: the seeded k-means start gives the same accept set in 75–82 % of sets depending
//! on the seed, the exact best two-means split ([`GmmInit::BestSplit`]) in 82 % — sklearn's own
//! k-means is equally seed-dependent (memgas.md §4.2).
//!
//! Hand-written (rust-stack.md §4): linfa's mixture model only offers full covariance on
//! n-dimensional data, has no seedable k-means++ start of this shape, and the 1-D case is a few
//! dozen lines. Synchronous, pure, deterministic given the seed.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// Settings of one fit; the defaults are MemGAS's (sklearn's) values.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GmmOptions {
    /// Mixture components (MemGAS: 2).
    pub n_components: usize,
    /// Seed of the k-means++ start.
    pub seed: u64,
    /// EM stops when the mean log-likelihood changes by less than this.
    pub tolerance: f64,
    /// Added to every variance.
    pub reg_covar: f64,
    /// EM iteration cap.
    pub max_iterations: usize,
    /// How the EM start is chosen.
    pub init: GmmInit,
}

/// Starting labels of EM.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GmmInit {
    /// Seeded k-means++ then Lloyd, as sklearn's `init_params="kmeans"` (the default).
    #[default]
    KMeans,
    /// The exact optimal two-means split of the sorted values (no randomness; only for two
    /// components, otherwise k-means).
    BestSplit,
}

impl Default for GmmOptions {
    fn default() -> Self {
        Self {
            n_components: 2,
            seed: 0,
            tolerance: 1e-3,
            reg_covar: 1e-6,
            max_iterations: 100,
            init: GmmInit::KMeans,
        }
    }
}

/// A fitted mixture and the label of every input value.
#[derive(Debug, Clone, PartialEq)]
pub struct GmmFit {
    /// Mixing weights, one per component.
    pub weights: Vec<f64>,
    /// Component means.
    pub means: Vec<f64>,
    /// Component variances.
    pub variances: Vec<f64>,
    /// Most probable component of each input value.
    pub labels: Vec<usize>,
    /// Whether EM met the tolerance before the iteration cap.
    pub converged: bool,
    /// EM iterations run.
    pub iterations: usize,
}

impl GmmFit {
    /// The component with the largest mean (first on ties).
    pub fn upper_component(&self) -> usize {
        let mut best = 0;
        for (index, mean) in self.means.iter().enumerate() {
            if *mean > self.means[best] {
                best = index;
            }
        }
        best
    }
}

/// Fit a mixture to `values`. Returns `None` when there are fewer distinct values than
/// components (no split exists).
pub fn fit(values: &[f64], options: &GmmOptions) -> Option<GmmFit> {
    let k = options.n_components.max(1);
    let mut distinct: Vec<f64> = values.to_vec();
    distinct.sort_by(f64::total_cmp);
    distinct.dedup();
    if distinct.len() < k || values.iter().any(|v| !v.is_finite()) {
        return None;
    }
    let initial_labels = match options.init {
        GmmInit::BestSplit if k == 2 => best_split(values),
        _ => kmeans(values, k, options.seed),
    };
    let mut responsibilities = one_hot(&initial_labels, k);
    let (mut weights, mut means, mut variances) =
        m_step(values, &responsibilities, k, options.reg_covar);

    let mut lower_bound = f64::NEG_INFINITY;
    let mut converged = false;
    let mut iterations = 0;
    for iteration in 1..=options.max_iterations {
        iterations = iteration;
        let previous = lower_bound;
        let mean_log_likelihood =
            e_step(values, &weights, &means, &variances, &mut responsibilities);
        (weights, means, variances) = m_step(values, &responsibilities, k, options.reg_covar);
        lower_bound = mean_log_likelihood;
        if (lower_bound - previous).abs() < options.tolerance {
            converged = true;
            break;
        }
    }
    // Final E-step so the labels belong to the returned parameters (as sklearn's fit_predict).
    e_step(values, &weights, &means, &variances, &mut responsibilities);
    let labels = responsibilities.chunks_exact(k).map(argmax).collect();
    Some(GmmFit { weights, means, variances, labels, converged, iterations })
}

/// MemGAS's accept set: `true` for every value labelled with the higher-mean component. When no
/// split exists (fewer distinct values than components) every value is accepted: there is no
/// evidence that any candidate is less related than another.
pub fn accept_upper(values: &[f64], options: &GmmOptions) -> Vec<bool> {
    match fit(values, options) {
        Some(fitted) => {
            let upper = fitted.upper_component();
            fitted.labels.iter().map(|&label| label == upper).collect()
        }
        None => vec![true; values.len()],
    }
}

/// Index of the largest entry (first on ties).
fn argmax(row: &[f64]) -> usize {
    let mut best = 0;
    for (index, value) in row.iter().enumerate() {
        if *value > row[best] {
            best = index;
        }
    }
    best
}

fn one_hot(labels: &[usize], k: usize) -> Vec<f64> {
    let mut out = vec![0.0; labels.len() * k];
    for (row, &label) in labels.iter().enumerate() {
        out[row * k + label] = 1.0;
    }
    out
}

/// Weights, means and variances from responsibilities (row-major `[n × k]`).
fn m_step(
    values: &[f64],
    responsibilities: &[f64],
    k: usize,
    reg_covar: f64,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let n = values.len() as f64;
    let mut mass = vec![10.0 * f64::EPSILON; k];
    let mut means = vec![0.0; k];
    for (value, row) in values.iter().zip(responsibilities.chunks_exact(k)) {
        for component in 0..k {
            mass[component] += row[component];
            means[component] += row[component] * value;
        }
    }
    for component in 0..k {
        means[component] /= mass[component];
    }
    let mut variances = vec![0.0; k];
    for (value, row) in values.iter().zip(responsibilities.chunks_exact(k)) {
        for component in 0..k {
            let diff = value - means[component];
            variances[component] += row[component] * diff * diff;
        }
    }
    for component in 0..k {
        variances[component] = variances[component] / mass[component] + reg_covar;
    }
    let weights = mass.iter().map(|m| m / n).collect();
    (weights, means, variances)
}

/// Fill `responsibilities` with posterior probabilities and return the mean log-likelihood.
fn e_step(
    values: &[f64],
    weights: &[f64],
    means: &[f64],
    variances: &[f64],
    responsibilities: &mut [f64],
) -> f64 {
    let k = weights.len();
    let log_two_pi = (2.0 * std::f64::consts::PI).ln();
    let mut total = 0.0;
    for (value, row) in values.iter().zip(responsibilities.chunks_exact_mut(k)) {
        for component in 0..k {
            let diff = value - means[component];
            row[component] = weights[component].ln()
                - 0.5
                    * (log_two_pi + variances[component].ln() + diff * diff / variances[component]);
        }
        let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let log_norm = max + row.iter().map(|x| (x - max).exp()).sum::<f64>().ln();
        for entry in row.iter_mut() {
            *entry = (*entry - log_norm).exp();
        }
        total += log_norm;
    }
    total / values.len() as f64
}

/// Lloyd's k-means on 1-D data from a seeded k-means++ start; returns labels.
fn kmeans(values: &[f64], k: usize, seed: u64) -> Vec<usize> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut centres = kmeans_plus_plus(values, k, &mut rng);
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let variance = values.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
    let tolerance = 1e-4 * variance;
    let mut labels = assign(values, &centres);
    for _ in 0..300 {
        let mut sums = vec![0.0; k];
        let mut counts = vec![0usize; k];
        for (value, &label) in values.iter().zip(&labels) {
            sums[label] += value;
            counts[label] += 1;
        }
        let mut shift = 0.0;
        for component in 0..k {
            // An empty cluster keeps its centre (cannot happen for distinct 1-D k-means++
            // centres, which are data points nearest to themselves).
            if counts[component] > 0 {
                let updated = sums[component] / counts[component] as f64;
                shift += (updated - centres[component]).powi(2);
                centres[component] = updated;
            }
        }
        let relabelled = assign(values, &centres);
        let unchanged = relabelled == labels;
        labels = relabelled;
        if unchanged || shift <= tolerance {
            break;
        }
    }
    labels
}

/// Labels of the two-means split with the least within-cluster sum of squares: 1 for values
/// above the threshold, 0 below (found exactly from prefix sums of the sorted values).
fn best_split(values: &[f64]) -> Vec<usize> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    let mut prefix = vec![0.0; n + 1];
    let mut prefix_squares = vec![0.0; n + 1];
    for (index, value) in sorted.iter().enumerate() {
        prefix[index + 1] = prefix[index] + value;
        prefix_squares[index + 1] = prefix_squares[index] + value * value;
    }
    let cost = |from: usize, to: usize| {
        let count = (to - from) as f64;
        let sum = prefix[to] - prefix[from];
        prefix_squares[to] - prefix_squares[from] - sum * sum / count
    };
    let mut best: Option<(f64, usize)> = None;
    for split in 1..n {
        // Equal values must land on the same side.
        if sorted[split] == sorted[split - 1] {
            continue;
        }
        let total = cost(0, split) + cost(split, n);
        if best.is_none_or(|(c, _)| total < c) {
            best = Some((total, split));
        }
    }
    let threshold = best.map_or(f64::INFINITY, |(_, split)| sorted[split]);
    values.iter().map(|&value| usize::from(value >= threshold)).collect()
}

/// Nearest centre of each value (lowest index on ties).
fn assign(values: &[f64], centres: &[f64]) -> Vec<usize> {
    values
        .iter()
        .map(|value| {
            let mut best = 0;
            for (index, centre) in centres.iter().enumerate() {
                if (value - centre).abs() < (value - centres[best]).abs() {
                    best = index;
                }
            }
            best
        })
        .collect()
}

/// k-means++ seeding with `2 + ⌊ln k⌋` local trials per extra centre (sklearn's rule): each
/// trial draws a point with probability proportional to its squared distance to the nearest
/// chosen centre, and the trial that lowers the total squared distance most is kept.
fn kmeans_plus_plus(values: &[f64], k: usize, rng: &mut ChaCha8Rng) -> Vec<f64> {
    let trials = 2 + (k as f64).ln().floor() as usize;
    let first = values[rng.random_range(0..values.len())];
    let mut centres = vec![first];
    let mut closest: Vec<f64> = values.iter().map(|v| (v - first).powi(2)).collect();
    while centres.len() < k {
        let potential: f64 = closest.iter().sum();
        let mut cumulative = Vec::with_capacity(values.len());
        let mut running = 0.0;
        for distance in &closest {
            running += distance;
            cumulative.push(running);
        }
        let mut best: Option<(f64, usize)> = None;
        for _ in 0..trials {
            let target = rng.random::<f64>() * potential;
            let candidate = cumulative.partition_point(|&c| c < target).min(values.len() - 1);
            let candidate_potential: f64 = values
                .iter()
                .zip(&closest)
                .map(|(v, d)| d.min((v - values[candidate]).powi(2)))
                .sum();
            if best.is_none_or(|(p, _)| candidate_potential < p) {
                best = Some((candidate_potential, candidate));
            }
        }
        let chosen = best.map_or(0, |(_, index)| index);
        let centre = values[chosen];
        for (distance, value) in closest.iter_mut().zip(values) {
            *distance = distance.min((value - centre).powi(2));
        }
        centres.push(centre);
    }
    centres
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn separates_two_clear_clusters_and_accepts_the_upper_one() {
        let values = [0.91, 0.88, 0.90, 0.31, 0.28, 0.35, 0.30, 0.33, 0.29, 0.32];
        let fitted = fit(&values, &GmmOptions::default()).unwrap();
        let upper = fitted.upper_component();
        // sklearn 1.6.1: means (0.31142857, 0.89666667), weights (0.7, 0.3).
        assert!((fitted.means[upper] - 0.89666667).abs() < 1e-6, "{fitted:?}");
        assert!((fitted.weights[upper] - 0.3).abs() < 1e-6);
        assert!((fitted.variances[upper] - 0.00015656).abs() < 1e-7);
        assert!(fitted.converged);
        assert_eq!(
            accept_upper(&values, &GmmOptions::default()),
            vec![true, true, true, false, false, false, false, false, false, false]
        );
    }

    /// Fitted parameters of sklearn 1.6.1 `GaussianMixture(2, random_state=0)` on the same values.
    struct Sklearn {
        upper_mean: f64,
        upper_weight: f64,
        upper_variance: f64,
        accepted: Vec<bool>,
    }

    fn check_against_sklearn(values: &[f64], init: GmmInit, expected: Sklearn) {
        let options = GmmOptions { init, ..GmmOptions::default() };
        let fitted = fit(values, &options).unwrap();
        let upper = fitted.upper_component();
        assert!((fitted.means[upper] - expected.upper_mean).abs() < 1e-5, "{fitted:?}");
        assert!((fitted.weights[upper] - expected.upper_weight).abs() < 1e-5, "{fitted:?}");
        assert!((fitted.variances[upper] - expected.upper_variance).abs() < 1e-6, "{fitted:?}");
        assert_eq!(accept_upper(values, &options), expected.accepted);
    }

    #[test]
    fn wide_upper_component_absorbs_middle_values_like_sklearn() {
        // A tight block near 0.8 and a wide spread below: sklearn's k-means starts EM from the
        // optimal two-means split (threshold 0.45), and EM then keeps 0.62, 0.45 and 0.52 in the
        // upper component. Our seeded k-means++ lands in the other local optimum (threshold
        // 0.62) on this input, so the exact best-split start is what reproduces sklearn here.
        let values = [0.80, 0.81, 0.79, 0.80, 0.62, 0.10, 0.45, 0.30, 0.05, 0.52, 0.20];
        let accepted =
            [true, true, true, true, true, false, true, false, false, true, false].to_vec();
        check_against_sklearn(
            &values,
            GmmInit::BestSplit,
            Sklearn {
                upper_mean: 0.6796489,
                upper_weight: 0.64238459,
                upper_variance: 0.0218109,
                accepted,
            },
        );
    }

    #[test]
    fn accept_set_can_be_non_contiguous_like_sklearn() {
        // memgas.md §4.2: with unequal variances the wide upper component can also claim a low
        // outlier (0.218 here) while the narrow lower block around 0.39 is rejected.
        let values = [
            0.954, 0.791, 0.778, 0.644, 0.629, 0.623, 0.593, 0.591, 0.589, 0.568, 0.562, 0.462,
            0.429, 0.42, 0.41, 0.399, 0.396, 0.375, 0.367, 0.361, 0.358, 0.356, 0.218,
        ];
        let mut accepted = vec![true; 12];
        accepted.extend([false; 10]);
        accepted.push(true);
        check_against_sklearn(
            &values,
            GmmInit::KMeans,
            Sklearn {
                upper_mean: 0.58755709,
                upper_weight: 0.64655708,
                upper_variance: 0.02982501,
                accepted,
            },
        );
    }

    #[test]
    fn is_deterministic_for_a_seed() {
        let values: Vec<f64> = (0..30).map(|i| ((i * 37 % 17) as f64 * 0.05).sin()).collect();
        let a = fit(&values, &GmmOptions::default()).unwrap();
        let b = fit(&values, &GmmOptions::default()).unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn degenerate_inputs_accept_everything() {
        assert_eq!(accept_upper(&[0.5, 0.5, 0.5], &GmmOptions::default()), vec![true; 3]);
        assert_eq!(accept_upper(&[0.7], &GmmOptions::default()), vec![true]);
        assert!(fit(&[0.2, 0.2], &GmmOptions::default()).is_none());
    }
}
