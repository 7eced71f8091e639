//! The answer gate: how sure one retrieval pass is, from the rankings alone, before any model
//! call. `--answer adaptive` answers in one model call from the fusion ranking's top turns when
//! the confidence reaches a threshold, and runs the tool loop below it.
//!
//! Three signals, each in `[0, 1]`, over the fusion ranking's top `k` turns (the single-pass
//! context):
//! - **coverage**: the share of the question's content terms (BM25's analysis: stop words and
//!   question boilerplate dropped, Porter-stemmed) that occur in those turns. A question whose
//!   words the context does not hold asks about something the pass did not find.
//! - **margin**: how far the context stands above the rest, `(s₁ − s_{k+1}) / (s₁ − s_n)` over
//!   the fused turn scores `s₁ ≥ … ≥ s_n`; 0 when the ranking is flat.
//! - **agreement**: the overlap of the lexical (BM25) and dense channels' own top `k` turns,
//!   `|top_k(bm25) ∩ top_k(dense)| / k`: the two ways of reading the question point at the same
//!   turns.
//!
//! The confidence is their mean. The threshold and `k` are chosen held out on LoCoMo's gold
//! evidence turns (`mragent retrieve --gate`, `tune::gate`): tuned on the conv-26/conv-30 dev
//! split, reported on the other eight. Pure and deterministic: ties keep the rankings' order.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::bm25::Analyzer;
use super::index::{
    IndexError, IndexNeeds, IndexOptions, MemoryIndex, Method, QueryWords, Ranking, Scored,
};
use crate::text::stop_words::BM25_QUESTION_WORDS;

/// How much the single-pass context shows: the fusion ranking's top `k` turns, each with up to
/// `window` turns on either side from its session (a question and its reply are usually next to
/// each other; the loop reaches them with `query_event_context`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextSize {
    /// Top turns.
    pub k: usize,
    /// Neighbours on either side of each.
    pub window: usize,
}

/// The head the gate's signals are computed over and its threshold calibrated on
/// ([`GATE_THRESHOLD`]).
pub const GATE_HEAD: ContextSize = ContextSize { k: 10, window: 1 };

/// What the single path shows by default: the loop's whole reach ([`LOOP_REACH`] top turns), not
/// just the head the gate was calibrated on. Held out, a threshold calibrated on two
/// conversations sends questions whose head misses evidence that ranks lower (2.7 points at
/// the default), while a context as wide as the reach holds all of it; at 30 turns it is no
/// larger than the head with its neighbours (up to 30 turns), so it costs about the same
/// tokens (docs/answering.md).
pub const SINGLE_CONTEXT: ContextSize = ContextSize { k: LOOP_REACH, window: 0 };

/// The default confidence at or above which `adaptive` answers in one pass: calibrated on
/// [`GATE_HEAD`] by `retrieve --gate` on the dev split, as the threshold that sends the most
/// questions down the single path while their heads alone hold every evidence turn as often as
/// the loop's reach ([`LOOP_REACH`]) does (26.6 % of the dev questions). Held out it sends
/// 22.2 %; their heads lose 2.7 points of evidence (94.9 against 97.6), the context the single
/// path shows ([`SINGLE_CONTEXT`]) none (97.6 against 97.6): docs/answering.md.
pub const GATE_THRESHOLD: f64 = 0.5998;

/// What the tool loop's retrieval is taken to reach when the gate is tuned offline: the fusion
/// ranking's top 30 turns, the `query_memgas` tool at its largest `k` (10) over the three rounds
/// a loop takes at most on LoCoMo before it answers. A proxy: the loop's keyword tools read the
/// LLM-built graph, which needs a model to build.
pub const LOOP_REACH: usize = 30;

/// The gate's signals for one question (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GateSignals {
    /// Share of the question's content terms found in the top turns.
    pub coverage: f64,
    /// Separation of the top turns from the rest of the fused ranking.
    pub margin: f64,
    /// Overlap of the lexical and dense channels' top turns.
    pub agreement: f64,
}

impl GateSignals {
    /// The confidence: the mean of the three signals, in `[0, 1]`.
    pub fn confidence(&self) -> f64 {
        ((self.coverage + self.margin + self.agreement) / 3.0).clamp(0.0, 1.0)
    }
}

/// One question assessed: the fused turn ranking (best first) and the gate's signals over its
/// top `k`.
#[derive(Debug, Clone, PartialEq)]
pub struct Assessment {
    /// Every turn, best first, as the index's query method ranks them.
    pub turns: Vec<Scored>,
    /// The signals over the top `k`.
    pub signals: GateSignals,
}

impl Assessment {
    /// The confidence of [`Assessment::signals`].
    pub fn confidence(&self) -> f64 {
        self.signals.confidence()
    }
}

/// The channels [`assess`] ranks with besides the index's query method: lexical and dense.
pub const CHANNELS: [Method; 2] = [Method::Bm25, Method::Turn];

/// What an index must hold to be queried with `options`' query method and assessed by the
/// gate: an own conversation's index (the service's cache) holds just that, no more (the
/// MemGAS graph and the other granularities' vectors only when the query method reads them).
pub fn served_needs(options: &IndexOptions) -> IndexNeeds {
    let mut methods = vec![options.query_method];
    methods.extend(CHANNELS);
    IndexNeeds::for_methods(&methods, options)
}

/// Ranks the question with the index's query method and with its lexical and dense channels
/// ([`CHANNELS`]), and computes the gate's signals over the top `k` turns.
pub fn assess(
    index: &MemoryIndex,
    query_text: &str,
    query_vector: &[f32],
    query_words: &QueryWords,
    k: usize,
) -> Result<Assessment, IndexError> {
    let method = index.options().query_method;
    let fused = index.rank_with_words(method, query_text, query_vector, query_words)?;
    let [lexical, dense] = CHANNELS
        .map(|channel| index.rank_with_words(channel, query_text, query_vector, query_words));
    let (lexical, dense) = (lexical?, dense?);
    let turns = turn_order(&fused);
    let signals = GateSignals {
        coverage: coverage(index, query_text, &turns, k),
        margin: margin(&turns, k),
        agreement: agreement(&turn_order(&lexical), &turn_order(&dense), k),
    };
    Ok(Assessment { turns, signals })
}

/// The single-pass context: each of the top `k` turns of `ranked` with up to `window` turns on
/// either side from its session, the groups in rank order, each in conversation order, no turn
/// twice. A neighbour carries its own score from `ranked`.
pub fn context_turns(
    index: &MemoryIndex,
    ranked: &[Scored],
    k: usize,
    window: usize,
) -> Vec<Scored> {
    let scores: std::collections::BTreeMap<usize, f64> =
        ranked.iter().map(|hit| (hit.index, hit.score)).collect();
    let mut shown = BTreeSet::new();
    let mut context = Vec::new();
    for hit in ranked.iter().take(k) {
        let session = index.turn_session(hit.index);
        let first = hit.index.saturating_sub(window);
        let last = (hit.index + window).min(index.n_turns().saturating_sub(1));
        for turn in first..=last {
            if index.turn_session(turn) == session && shown.insert(turn) {
                let score = scores.get(&turn).copied().unwrap_or(0.0);
                context.push(Scored { index: turn, score });
            }
        }
    }
    context
}

/// A ranking's turns, best first (a session-only ranking has none).
fn turn_order(ranking: &Ranking) -> Vec<Scored> {
    ranking.turns.clone().unwrap_or_default()
}

/// The question's distinct content terms, as BM25 reads a query without its boilerplate.
pub fn question_terms(query_text: &str) -> BTreeSet<String> {
    Analyzer.terms_without(query_text, BM25_QUESTION_WORDS).into_iter().collect()
}

/// Share of the question's content terms that occur in the top `k` turns; 0 when the question
/// has none (nothing to check it against is no evidence of a good pass).
fn coverage(index: &MemoryIndex, query_text: &str, turns: &[Scored], k: usize) -> f64 {
    let wanted = question_terms(query_text);
    if wanted.is_empty() {
        return 0.0;
    }
    let mut found: BTreeSet<String> = BTreeSet::new();
    for hit in turns.iter().take(k) {
        found.extend(Analyzer.terms(index.turn_text(hit.index)));
    }
    ratio(wanted.iter().filter(|term| found.contains(*term)).count(), wanted.len())
}

/// `(s₁ − s_{k+1}) / (s₁ − s_n)`: 1 when everything after the top `k` scores as low as the
/// worst turn, 0 when the ranking is flat; 1 when there is no `k+1`-th turn (the context holds
/// the whole memory).
fn margin(turns: &[Scored], k: usize) -> f64 {
    let (Some(first), Some(last)) = (turns.first(), turns.last()) else { return 0.0 };
    let Some(next) = turns.get(k) else { return 1.0 };
    let range = first.score - last.score;
    if !range.is_finite() || range <= f64::EPSILON {
        return 0.0;
    }
    ((first.score - next.score) / range).clamp(0.0, 1.0)
}

/// `|top_k(a) ∩ top_k(b)| / k`, over at most the turns there are.
fn agreement(lexical: &[Scored], dense: &[Scored], k: usize) -> f64 {
    let take = k.min(lexical.len()).min(dense.len());
    if take == 0 {
        return 0.0;
    }
    let top: BTreeSet<usize> = lexical.iter().take(take).map(|hit| hit.index).collect();
    ratio(dense.iter().take(take).filter(|hit| top.contains(&hit.index)).count(), take)
}

fn ratio(part: usize, whole: usize) -> f64 {
    if whole == 0 { 0.0 } else { part as f64 / whole as f64 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scored(scores: &[f64]) -> Vec<Scored> {
        scores.iter().enumerate().map(|(index, &score)| Scored { index, score }).collect()
    }

    #[test]
    fn margin_is_the_separation_of_the_top_k_from_the_rest() {
        assert_eq!(margin(&scored(&[1.0, 0.9, 0.1, 0.0]), 2), 0.9);
        assert_eq!(margin(&scored(&[0.5, 0.5, 0.5]), 1), 0.0, "a flat ranking");
        assert_eq!(margin(&scored(&[0.5, 0.2]), 2), 1.0, "the context holds every turn");
        assert_eq!(margin(&[], 3), 0.0);
        assert_eq!(margin(&scored(&[f64::NAN, 0.1, 0.0]), 1), 0.0);
    }

    #[test]
    fn agreement_counts_shared_top_turns() {
        let lexical = scored(&[3.0, 2.0, 1.0, 0.0]);
        let dense: Vec<Scored> =
            [1, 0, 3, 2].iter().map(|&index| Scored { index, score: 1.0 }).collect();
        assert_eq!(agreement(&lexical, &dense, 2), 1.0);
        assert_eq!(agreement(&lexical, &dense, 1), 0.0);
        assert_eq!(agreement(&lexical, &dense, 3), 2.0 / 3.0);
        assert_eq!(agreement(&lexical, &[], 3), 0.0);
    }

    #[test]
    fn signals_stay_in_the_unit_interval_whatever_the_scores() {
        // A seeded walk over rankings of every shape (ties, negatives, one turn, empty).
        let mut state = 0x5eed_u64;
        let mut next = || {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 33) as f64 / f64::from(u32::MAX >> 1) * 4.0 - 2.0
        };
        for length in 0..40 {
            let mut scores: Vec<f64> = (0..length).map(|_| next()).collect();
            scores.sort_by(|a, b| b.total_cmp(a));
            let turns = scored(&scores);
            for k in [1, 3, 10, 50] {
                let value = margin(&turns, k);
                assert!((0.0..=1.0).contains(&value), "margin {value} for {scores:?}");
                let value = agreement(&turns, &turns, k);
                assert!((0.0..=1.0).contains(&value), "agreement {value}");
                let signals = GateSignals { coverage: 1.0, margin: value, agreement: 0.0 };
                assert!((0.0..=1.0).contains(&signals.confidence()));
            }
        }
    }

    #[test]
    fn question_terms_drop_boilerplate_and_stem() {
        let terms = question_terms("What kind of paintings did Caroline paint?");
        assert_eq!(terms, BTreeSet::from(["carolin".to_string(), "paint".to_string()]));
        assert!(!terms.contains("kind") && !terms.contains("what"), "{terms:?}");
    }

    #[test]
    fn an_own_index_holds_what_its_queries_and_the_gate_read_and_no_graph() {
        use crate::retrieval::units::VectorNeeds;
        let options = IndexOptions::default();
        let needs = served_needs(&options);
        assert!(!needs.graph, "fusion with no MemGAS weight reads no graph");
        assert_eq!(needs.vectors, VectorNeeds { turns: true, ..VectorNeeds::NONE });
        let index = MemoryIndex::with_needs(options, needs).test_circle(3);
        assert_eq!(index.graph().n_nodes(), 0);
        let query = [0.12f32.cos(), 0.12f32.sin(), 0.0, 0.0];
        let assessed = assess(&index, "t12", &query, &QueryWords::new(), 10).unwrap();
        assert_eq!(index.turn_id(assessed.turns[0].index), "D2:3");
        let hits = index.query("t12", &query, 5).unwrap();
        assert_eq!(hits.turns[0].dia_id, "D2:3");
        // A query method that reads the graph gets it.
        let mut with_memgas = options;
        with_memgas.fusion.memgas = 0.5;
        assert!(served_needs(&with_memgas).graph);
    }
}
