//! Validity-aware ranking: among sessions about the same thing, the newer one first.
//!
//! A memory that changed over time ("I moved to Berlin", months after "I live in Paris") holds
//! two sessions that both match a question about it, and the older one states an outdated fact.
//! [`prefer_newer`] reorders a ranking after the fact: a session in the *window* (scoring
//! within [`PreferNewer::margin`] of the top, as a fraction of the ranking's score range) is
//! moved above every higher-ranked, older session of the window that is about the same thing
//! (similarity at least [`PreferNewer::threshold`]). What "similar" means is the caller's
//! (cosine of session vectors, or content-word overlap, [`word_overlap`]).
//!
//! Pure and deterministic: the order depends only on the ranking, the times and the
//! similarities; sessions without a time never move and never make another move; a moved
//! session keeps its own score, so the result is no longer sorted by score. Sessions outside the
//! window keep their positions.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::index::Scored;

/// How [`prefer_newer`] decides.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PreferNewer {
    /// Window: sessions scoring at least `top − margin · (top − lowest)` may be reordered
    /// (0 keeps only ties with the top, 1 the whole ranking).
    pub margin: f64,
    /// Two sessions are about the same thing when their similarity is at least this.
    pub threshold: f64,
}

/// `ranking` (best first) with, inside the window, each session moved above the highest-ranked
/// older session it is similar to. `times[i]` orders session `i` (index into the memory's
/// sessions; `None` when unknown); `similarity(a, b)` compares sessions `a` and `b`.
pub fn prefer_newer<T: Ord>(
    ranking: &[Scored],
    times: &[Option<T>],
    similarity: impl Fn(usize, usize) -> f64,
    options: PreferNewer,
) -> Vec<Scored> {
    let window = window_len(ranking, options.margin);
    let time = |index: usize| times.get(index).and_then(Option::as_ref);
    let mut reordered: Vec<Scored> = Vec::with_capacity(ranking.len());
    for hit in &ranking[..window] {
        let target = time(hit.index).and_then(|newer| {
            reordered.iter().position(|above| {
                time(above.index).is_some_and(|older| older < newer)
                    && similarity(above.index, hit.index) >= options.threshold
            })
        });
        match target {
            Some(position) => reordered.insert(position, *hit),
            None => reordered.push(*hit),
        }
    }
    reordered.extend_from_slice(&ranking[window..]);
    reordered
}

/// How many leading hits score within the margin of the top (finite scores only).
fn window_len(ranking: &[Scored], margin: f64) -> usize {
    let finite = || ranking.iter().map(|hit| hit.score).filter(|score| score.is_finite());
    let (Some(top), Some(lowest)) = (finite().reduce(f64::max), finite().reduce(f64::min)) else {
        return 0;
    };
    let floor = top - margin.max(0.0) * (top - lowest);
    ranking.iter().take_while(|hit| hit.score.is_finite() && hit.score >= floor).count()
}

/// Overlap of two word sets: shared words over the smaller set's size (0 when either is empty).
pub fn word_overlap(a: &BTreeSet<String>, b: &BTreeSet<String>) -> f64 {
    let smaller = a.len().min(b.len());
    if smaller == 0 {
        return 0.0;
    }
    a.intersection(b).count() as f64 / smaller as f64
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn ranking(items: &[(usize, f64)]) -> Vec<Scored> {
        items.iter().map(|&(index, score)| Scored { index, score }).collect()
    }

    fn order(ranking: &[Scored]) -> Vec<usize> {
        ranking.iter().map(|hit| hit.index).collect()
    }

    const ALL_SIMILAR: fn(usize, usize) -> f64 = |_, _| 1.0;
    const WIDE: PreferNewer = PreferNewer { margin: 1.0, threshold: 0.5 };

    #[test]
    fn the_newer_of_two_similar_sessions_moves_above_the_older() {
        let ranked = ranking(&[(0, 0.9), (1, 0.8), (2, 0.1)]);
        let times = [Some(1), Some(5), Some(3)];
        let similar = |a: usize, b: usize| if a + b == 1 { 0.9 } else { 0.0 };
        let out = prefer_newer(&ranked, &times, similar, WIDE);
        assert_eq!(order(&out), vec![1, 0, 2]);
        // Scores travel with their sessions.
        assert_eq!(out[0].score, 0.8);
    }

    #[test]
    fn dissimilar_or_older_sessions_stay() {
        let ranked = ranking(&[(0, 0.9), (1, 0.8)]);
        let out = prefer_newer(&ranked, &[Some(1), Some(5)], |_, _| 0.2, WIDE);
        assert_eq!(order(&out), vec![0, 1]);
        let out = prefer_newer(&ranked, &[Some(5), Some(1)], ALL_SIMILAR, WIDE);
        assert_eq!(order(&out), vec![0, 1]);
    }

    #[test]
    fn only_the_window_within_the_margin_is_reordered() {
        // Range 1.0 − 0.0; margin 0.3 keeps scores ≥ 0.7: sessions 0 and 1.
        let ranked = ranking(&[(0, 1.0), (1, 0.75), (2, 0.5), (3, 0.0)]);
        let times = [Some(1), Some(2), Some(9), Some(0)];
        let narrow = PreferNewer { margin: 0.3, threshold: 0.5 };
        assert_eq!(order(&prefer_newer(&ranked, &times, ALL_SIMILAR, narrow)), vec![1, 0, 2, 3]);
        // The whole ranking: newest first among all of them (3 has the oldest time).
        assert_eq!(order(&prefer_newer(&ranked, &times, ALL_SIMILAR, WIDE)), vec![2, 1, 0, 3]);
    }

    #[test]
    fn sessions_without_a_time_neither_move_nor_are_passed() {
        let ranked = ranking(&[(0, 0.9), (1, 0.8), (2, 0.7)]);
        let times = [None, Some(5), Some(7)];
        assert_eq!(order(&prefer_newer(&ranked, &times, ALL_SIMILAR, WIDE)), vec![0, 2, 1]);
        let times: [Option<i32>; 3] = [None, None, None];
        assert_eq!(order(&prefer_newer(&ranked, &times, ALL_SIMILAR, WIDE)), vec![0, 1, 2]);
    }

    #[test]
    fn equal_times_and_empty_or_infinite_rankings_are_left_alone() {
        let ranked = ranking(&[(0, 0.9), (1, 0.8)]);
        assert_eq!(
            order(&prefer_newer(&ranked, &[Some(2), Some(2)], ALL_SIMILAR, WIDE)),
            vec![0, 1]
        );
        let empty: Vec<Scored> = Vec::new();
        assert!(prefer_newer(&empty, &[Some(1)], ALL_SIMILAR, WIDE).is_empty());
        let ranked = ranking(&[(0, 0.9), (1, f64::NEG_INFINITY)]);
        assert_eq!(
            order(&prefer_newer(&ranked, &[Some(1), Some(2)], ALL_SIMILAR, WIDE)),
            vec![0, 1]
        );
    }

    #[test]
    fn word_overlap_is_shared_over_the_smaller_set() {
        let set = |words: &[&str]| words.iter().map(|w| w.to_string()).collect::<BTreeSet<_>>();
        assert_eq!(word_overlap(&set(&["job", "berlin"]), &set(&["job", "paris", "move"])), 0.5);
        assert_eq!(word_overlap(&set(&[]), &set(&["job"])), 0.0);
    }
}
