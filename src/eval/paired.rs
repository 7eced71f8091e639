//! Paired comparison of two runs on the same questions: the mean of each, their difference, a
//! 95% paired bootstrap interval of the difference, and for 0/1 values the questions that flip
//! each way.
//!
//! The bootstrap resamples *questions* with replacement (each resample draws `n` question
//! indices uniformly, with a [`ChaCha8Rng`] seeded by [`BootstrapSettings::seed`]) and takes the
//! mean of the per-question differences `a − b`; the interval is the 2.5th and 97.5th
//! percentiles of those means (linear interpolation between order statistics, as numpy's
//! default `percentile`). An interval that contains 0 is *inside the noise*: these questions do
//! not show that the runs differ.
//!
//! Pure and deterministic: the same pairs and seed give the same interval on every platform.

use rand::{Rng as _, SeedableRng as _};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// Resamples drawn by default.
pub const DEFAULT_RESAMPLES: usize = 2_000;
/// Seed of the resampling by default.
pub const DEFAULT_SEED: u64 = 25;
/// Coverage of the interval.
pub const CONFIDENCE: f64 = 0.95;
/// The percentiles (as fractions) bounding the [`CONFIDENCE`] interval, written out exactly
/// (`(1 − 0.95) / 2` in floating point is not exactly 0.025).
pub const PERCENTILES: (f64, f64) = (0.025, 0.975);

/// How to bootstrap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BootstrapSettings {
    /// Resamples drawn (at least 1 is used).
    pub resamples: usize,
    /// Seed of the resampling.
    pub seed: u64,
}

impl Default for BootstrapSettings {
    fn default() -> Self {
        Self { resamples: DEFAULT_RESAMPLES, seed: DEFAULT_SEED }
    }
}

/// A closed interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    /// Lower end.
    pub low: f64,
    /// Upper end.
    pub high: f64,
}

impl Interval {
    /// Whether 0 lies in the interval (ends included).
    pub fn contains_zero(&self) -> bool {
        self.low <= 0.0 && 0.0 <= self.high
    }
}

/// Questions whose 0/1 value differs between the runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Flips {
    /// `b` wrong and `a` right (a gain for `a`).
    pub gained: usize,
    /// `a` wrong and `b` right (a loss for `a`).
    pub lost: usize,
}

/// The paired comparison of one set of questions.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PairedStats {
    /// Questions paired.
    pub n: usize,
    /// Mean of `a`.
    pub mean_a: f64,
    /// Mean of `b`.
    pub mean_b: f64,
    /// `mean_a − mean_b`.
    pub difference: f64,
    /// The 95% paired bootstrap interval of the difference.
    pub interval: Interval,
    /// The interval contains 0.
    pub inside_noise: bool,
    /// Flips each way, when every value is 0 or 1.
    pub flips: Option<Flips>,
}

/// Compare paired values `(a, b)`, one pair per question; `None` without pairs.
pub fn paired_stats(pairs: &[(f64, f64)], settings: BootstrapSettings) -> Option<PairedStats> {
    if pairs.is_empty() {
        return None;
    }
    let n = pairs.len() as f64;
    let mean_a = pairs.iter().map(|(a, _)| a).sum::<f64>() / n;
    let mean_b = pairs.iter().map(|(_, b)| b).sum::<f64>() / n;
    let differences: Vec<f64> = pairs.iter().map(|(a, b)| a - b).collect();
    let interval = bootstrap_interval(&differences, settings)?;
    Some(PairedStats {
        n: pairs.len(),
        mean_a,
        mean_b,
        difference: mean_a - mean_b,
        interval,
        inside_noise: interval.contains_zero(),
        flips: flips(pairs),
    })
}

/// The 95% percentile bootstrap interval of the mean of `values` (one value per question:
/// a paired difference, or one run's per-question score) over question resamples; `None`
/// without values. Each resample draws `values.len()` indices with
/// `rng.random_range(0..len)` from one [`ChaCha8Rng`] seeded with `settings.seed`, resample
/// after resample.
pub fn bootstrap_interval(values: &[f64], settings: BootstrapSettings) -> Option<Interval> {
    if values.is_empty() {
        return None;
    }
    let mut rng = ChaCha8Rng::seed_from_u64(settings.seed);
    let n = values.len();
    let mut means: Vec<f64> = (0..settings.resamples.max(1))
        .map(|_| {
            let total: f64 = (0..n).map(|_| values[rng.random_range(0..n)]).sum();
            total / n as f64
        })
        .collect();
    means.sort_by(f64::total_cmp);
    let (low, high) = PERCENTILES;
    Some(Interval { low: percentile(&means, low), high: percentile(&means, high) })
}

/// The `fraction` percentile (0–1) of sorted, non-empty `values`, interpolating linearly
/// between the order statistics around position `fraction · (len − 1)`.
fn percentile(values: &[f64], fraction: f64) -> f64 {
    let position = fraction.clamp(0.0, 1.0) * (values.len() - 1) as f64;
    let below = position.floor() as usize;
    let above = (below + 1).min(values.len() - 1);
    let weight = position - below as f64;
    values[below] + weight * (values[above] - values[below])
}

/// Flips of the majority verdict: a question is right in a run when its value (the share of
/// judge runs that accepted it) is above one half. With 0/1 values these are [`PairedStats`]'
/// flips.
pub fn majority_flips(pairs: &[(f64, f64)]) -> Flips {
    let mut flips = Flips::default();
    for (a, b) in pairs {
        match (*a > 0.5, *b > 0.5) {
            (true, false) => flips.gained += 1,
            (false, true) => flips.lost += 1,
            _ => {}
        }
    }
    flips
}

/// Questions whose value is higher in `a` (gained) and lower in `a` (lost), e.g. per-question F1.
pub fn value_changes(pairs: &[(f64, f64)]) -> Flips {
    let mut changes = Flips::default();
    for (a, b) in pairs {
        if a > b {
            changes.gained += 1;
        } else if a < b {
            changes.lost += 1;
        }
    }
    changes
}

/// Flips each way when every value is 0 or 1.
fn flips(pairs: &[(f64, f64)]) -> Option<Flips> {
    let binary = |value: f64| value == 0.0 || value == 1.0;
    if !pairs.iter().all(|(a, b)| binary(*a) && binary(*b)) {
        return None;
    }
    let mut flips = Flips::default();
    for (a, b) in pairs {
        if *a == 1.0 && *b == 0.0 {
            flips.gained += 1;
        } else if *a == 0.0 && *b == 1.0 {
            flips.lost += 1;
        }
    }
    Some(flips)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binary(a: &[u8], b: &[u8]) -> Vec<(f64, f64)> {
        a.iter().zip(b).map(|(a, b)| (f64::from(*a), f64::from(*b))).collect()
    }

    #[test]
    fn percentile_interpolates_between_order_statistics() {
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0, 5.0], 0.25), 2.0);
        assert_eq!(percentile(&[0.0, 10.0], 0.025), 0.25);
        assert_eq!(percentile(&[0.0, 10.0], 0.975), 9.75);
        assert_eq!(percentile(&[7.0], 0.5), 7.0);
    }

    #[test]
    fn a_known_case_checked_by_hand() {
        // a: 1 1 0 0 1, b: 0 1 0 1 0 → means 0.6 and 0.4, two gains (q1, q5), one loss (q4).
        let stats =
            paired_stats(&binary(&[1, 1, 0, 0, 1], &[0, 1, 0, 1, 0]), BootstrapSettings::default())
                .unwrap();
        assert_eq!(stats.n, 5);
        assert!((stats.mean_a - 0.6).abs() < 1e-12 && (stats.mean_b - 0.4).abs() < 1e-12);
        assert!((stats.difference - 0.2).abs() < 1e-12);
        assert_eq!(stats.flips, Some(Flips { gained: 2, lost: 1 }));
        // A resample mean of differences in {−1, 0, 1} lies in [−1, 1], around 0.2.
        let Interval { low, high } = stats.interval;
        assert!((-1.0..=0.2).contains(&low) && (0.2..=1.0).contains(&high), "{low} {high}");
        assert!(stats.inside_noise);

        // Two questions with differences 0 and 1: a resample mean is 0, ½ or 1 with
        // probabilities ¼, ½, ¼, so the 2.5th percentile of 2,000 is 0 and the 97.5th is 1.
        let stats = paired_stats(&[(0.5, 0.5), (1.0, 0.0)], BootstrapSettings::default()).unwrap();
        assert_eq!(stats.interval, Interval { low: 0.0, high: 1.0 });
        assert_eq!(stats.flips, None, "0.5 is not a 0/1 value");
        // Every question improves by the same 0.25: the interval is that point.
        let stats =
            paired_stats(&[(0.5, 0.25), (1.0, 0.75), (0.25, 0.0)], BootstrapSettings::default())
                .unwrap();
        assert_eq!(stats.interval, Interval { low: 0.25, high: 0.25 });
        assert!(!stats.inside_noise);
    }

    #[test]
    fn the_same_seed_gives_the_same_interval() {
        let pairs: Vec<(f64, f64)> =
            (0..60).map(|index| (f64::from(index % 3 != 0), f64::from(index % 4 == 0))).collect();
        let settings = BootstrapSettings { resamples: 500, seed: 7 };
        let first = paired_stats(&pairs, settings).unwrap();
        assert_eq!(paired_stats(&pairs, settings).unwrap(), first);
        let other = paired_stats(&pairs, BootstrapSettings { seed: 8, ..settings }).unwrap();
        assert_ne!(other.interval, first.interval);
        assert_eq!(other.difference, first.difference);
    }

    #[test]
    fn an_obvious_improvement_excludes_zero() {
        // 100 questions: a right on 80, b right on 40, a never worse.
        let a: Vec<u8> = (0..100).map(|index| u8::from(index < 80)).collect();
        let b: Vec<u8> = (0..100).map(|index| u8::from(index < 40)).collect();
        let stats = paired_stats(&binary(&a, &b), BootstrapSettings::default()).unwrap();
        assert!((stats.difference - 0.4).abs() < 1e-12);
        assert_eq!(stats.flips, Some(Flips { gained: 40, lost: 0 }));
        assert!(stats.interval.low > 0.25 && stats.interval.high < 0.55, "{:?}", stats.interval);
        assert!(!stats.inside_noise);
    }

    #[test]
    fn identical_runs_differ_by_nothing() {
        let values: Vec<(f64, f64)> =
            [1.0, 0.0, 0.5, 0.25, 1.0].iter().map(|value| (*value, *value)).collect();
        let stats = paired_stats(&values, BootstrapSettings::default()).unwrap();
        assert_eq!(stats.difference, 0.0);
        assert_eq!(stats.interval, Interval { low: 0.0, high: 0.0 });
        assert!(stats.inside_noise);
        let stats =
            paired_stats(&binary(&[1, 0, 1], &[1, 0, 1]), BootstrapSettings::default()).unwrap();
        assert_eq!(stats.flips, Some(Flips { gained: 0, lost: 0 }));
        assert!(paired_stats(&[], BootstrapSettings::default()).is_none());
    }
}
