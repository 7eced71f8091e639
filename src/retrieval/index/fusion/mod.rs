//! Fusion ranking: a weighted sum of normalised lexical, dense and (optionally) MemGAS scores, with
//! session↔turn propagation and a date boost.

use super::options::{FusionOptions, Normalisation};
use super::ranking::Ranking;
use super::words::QueryWords;
use super::{IndexError, MemoryIndex, ranked};
use crate::retrieval::dates::{date_affinity, month_mentions, session_month};
use crate::retrieval::router::rank_descending;

/// What fusion reads of a query that no [`FusionOptions`] weight changes: computed once per
/// question, a sweep ([`MemoryIndex::fusion_cached`]) reuses it for every setting. Valid for the
/// index and BM25 parameters it was computed with.
#[derive(Debug, Clone, PartialEq)]
pub struct QueryChannels {
    /// BM25 over turns.
    bm25_turns: Vec<f64>,
    /// BM25 over whole sessions.
    bm25_sessions: Vec<f64>,
    /// Dense similarity of every turn to the query (first pass, before feedback).
    dense_turns: Vec<f64>,
    /// Per turn, 1 when its speaker is named in the question.
    named_speakers: Vec<f64>,
    /// Soft word matching per turn (empty when its weight is 0).
    word_turns: Vec<f64>,
    /// The threshold `word_turns` was computed with.
    word_threshold: f64,
}

/// The query-level inputs of one fusion pass.
struct Channels<'a> {
    query_text: &'a str,
    fixed: &'a QueryChannels,
    /// The dense turn channel of this pass (the feedback pass replaces the first one).
    dense_turns: &'a [f64],
    /// MemGAS mass per session and per turn, when its weight is not 0.
    memgas: Option<&'a (Vec<f64>, Vec<f64>)>,
}

impl MemoryIndex {
    /// Weighted sum of normalised channel scores with the index's [`FusionOptions`].
    pub(super) fn fusion(
        &self,
        query_text: &str,
        query: &[f32],
        words: &QueryWords,
    ) -> Result<Ranking, IndexError> {
        self.fusion_with(&self.options.fusion, query_text, query, words)
    }

    /// The weight-independent channels of a query (see [`QueryChannels`]) for `weights`' word
    /// threshold (the word channel is computed only when `weights` gives it a weight).
    pub fn query_channels(
        &self,
        weights: &FusionOptions,
        query_text: &str,
        query: &[f32],
        words: &QueryWords,
    ) -> Result<QueryChannels, IndexError> {
        let word_turns = if weights.word_match != 0.0 {
            self.words.scores(query_text, words, weights.word_threshold)?
        } else {
            Vec::new()
        };
        Ok(QueryChannels {
            bm25_turns: self.bm25_turns.scores(query_text),
            bm25_sessions: self.bm25_sessions.scores(query_text),
            dense_turns: self.turn_similarities(query),
            named_speakers: self.named_speaker_turns(query_text),
            word_turns,
            word_threshold: weights.word_threshold,
        })
    }

    /// Fusion with explicit settings (a sweep reuses one index for many settings).
    pub fn fusion_with(
        &self,
        weights: &FusionOptions,
        query_text: &str,
        query: &[f32],
        words: &QueryWords,
    ) -> Result<Ranking, IndexError> {
        let channels = self.query_channels(weights, query_text, query, words)?;
        Ok(self.fusion_cached(weights, query_text, query, &channels))
    }

    /// [`MemoryIndex::fusion_with`] from channels computed before by
    /// [`MemoryIndex::query_channels`] for the same query, index, BM25 parameters and word
    /// threshold (and a word weight that was not 0 then, if it is not 0 now): one fused
    /// pass; with pseudo-relevance feedback a second pass whose dense channel uses the query
    /// moved towards the first pass's best turns; then diversity/coverage over the top sessions;
    /// last, the [`speaker`](FusionOptions::speaker) bonus on the turn ranking alone.
    pub fn fusion_cached(
        &self,
        weights: &FusionOptions,
        query_text: &str,
        query: &[f32],
        fixed: &QueryChannels,
    ) -> Ranking {
        let memgas = (weights.memgas != 0.0).then(|| {
            let ranking = self.memgas(query);
            let mut by_session = vec![0.0; self.sessions.len()];
            for hit in &ranking.sessions {
                by_session[hit.index] = hit.score;
            }
            let mut by_turn = vec![0.0; self.turns.len()];
            for hit in ranking.turns.iter().flatten() {
                by_turn[hit.index] = hit.score;
            }
            (by_session, by_turn)
        });
        let mut channels = Channels {
            query_text,
            fixed,
            dense_turns: &fixed.dense_turns,
            memgas: memgas.as_ref(),
        };
        let (mut sessions, mut turns) = self.fuse(weights, &channels);
        let feedback_turns;
        if weights.prf_weight != 0.0 && weights.prf_turns > 0 {
            let moved = self.feedback_query(query, &turns, weights.prf_turns, weights.prf_weight);
            feedback_turns = self.turn_similarities(&moved);
            channels.dense_turns = &feedback_turns;
            (sessions, turns) = self.fuse(weights, &channels);
        }
        let session_order = self.rerank_sessions(weights, query_text, &sessions, &turns);
        // The speaker bonus orders turns only: sessions hold both speakers' turns, and a
        // session-level bonus cost the adversarial questions (which name the other speaker).
        if weights.speaker != 0.0 {
            for (score, bonus) in turns.iter_mut().zip(&fixed.named_speakers) {
                *score += weights.speaker * bonus;
            }
        }
        Ranking { sessions: session_order, turns: Some(ranked(&turns)), router_weights: Vec::new() }
    }

    /// One fused pass: (session scores, turn scores).
    fn fuse(&self, weights: &FusionOptions, channels: &Channels) -> (Vec<f64>, Vec<f64>) {
        let normalise = |values: &[f64]| normalised(values, weights.normalisation);
        let add = |target: &mut Vec<f64>, weight: f64, values: &[f64]| {
            if weight != 0.0 {
                for (t, v) in target.iter_mut().zip(normalise(values)) {
                    *t += weight * v;
                }
            }
        };
        let dense_sessions = self.best_turn_per_session(channels.dense_turns);
        let mut session_scores = vec![0.0; self.sessions.len()];
        let mut turn_scores = vec![0.0; self.turns.len()];
        add(&mut session_scores, weights.session_bm25, &channels.fixed.bm25_sessions);
        add(&mut session_scores, weights.session_dense, &dense_sessions);
        add(&mut turn_scores, weights.bm25, &channels.fixed.bm25_turns);
        add(&mut turn_scores, weights.dense, channels.dense_turns);
        if weights.word_match != 0.0 {
            debug_assert_eq!(channels.fixed.word_turns.len(), self.turns.len());
            debug_assert_eq!(channels.fixed.word_threshold, weights.word_threshold);
            add(&mut turn_scores, weights.word_match, &channels.fixed.word_turns);
        }
        if let Some((by_session, by_turn)) = channels.memgas {
            add(&mut session_scores, weights.memgas, by_session);
            add(&mut turn_scores, weights.memgas, by_turn);
        }
        turn_scores = self.with_neighbours(&turn_scores, weights.previous_turn, weights.next_turn);
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
            let mentions = month_mentions(channels.query_text);
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
        (session_scores, turn_scores)
    }

    /// Each turn's score plus `previous`/`next` times its neighbours' scores in the same session
    /// (a turn at a session's edge has no neighbour there).
    fn with_neighbours(&self, scores: &[f64], previous: f64, next: f64) -> Vec<f64> {
        if previous == 0.0 && next == 0.0 {
            return scores.to_vec();
        }
        let mut out = scores.to_vec();
        for session in &self.sessions {
            let range = session.turns.clone();
            for i in range.clone() {
                if i > range.start {
                    out[i] += previous * scores[i - 1];
                }
                if i + 1 < range.end {
                    out[i] += next * scores[i + 1];
                }
            }
        }
        out
    }

    /// Rocchio feedback: `query + weight · mean(best `n` turns' vectors)`, L2-normalised.
    fn feedback_query(
        &self,
        query: &[f32],
        turn_scores: &[f64],
        n: usize,
        weight: f64,
    ) -> Vec<f32> {
        let top: Vec<usize> = rank_descending(turn_scores).into_iter().take(n).collect();
        let mut moved: Vec<f64> = query.iter().map(|&x| f64::from(x)).collect();
        for &turn in &top {
            let vector = &self.vectors[self.turns[turn].node];
            for (m, &v) in moved.iter_mut().zip(vector) {
                *m += weight * f64::from(v) / top.len() as f64;
            }
        }
        let norm = moved.iter().map(|x| x * x).sum::<f64>().sqrt();
        if norm <= 0.0 || !norm.is_finite() {
            return query.to_vec();
        }
        moved.iter().map(|x| (x / norm) as f32).collect()
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
pub(super) fn min_max(values: &[f64]) -> Vec<f64> {
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
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
