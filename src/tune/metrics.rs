//! Retrieval metrics exactly as MemGAS's `eval_utils.py` computes them (memgas.md §7.1), at the
//! session level, plus the same three metrics over turns (dia_ids).
//!
//! For a ranking and a set of relevant ids, at cut-off k:
//! - `recall_any@k` = 1 if any relevant id is in the top k;
//! - `recall_all@k` = 1 if every relevant id is in the top k, and 1 when nothing is relevant
//!   (Python's `all([])`);
//! - `ndcg_any@k` with binary relevance and `DCG@k = rel₁ + Σ_{i=2..k} relᵢ / log₂ i` (ranks 1 and
//!   2 both undiscounted, the LongMemEval convention MemGAS copied), IDCG from the relevances
//!   sorted descending, and 0 when IDCG is 0.
//!
//! Aggregates are plain means over questions, reported ×100. Pure functions, no IO.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// Cut-offs reported (memgas.md §7.1 lists 1, 3, 5, 10, 30, 50; 30 and 50 exceed most LoCoMo
/// conversations' session counts, where recall is trivially 1).
pub const CUTOFFS: [usize; 4] = [1, 3, 5, 10];

/// The three metrics of one ranking at one cut-off, each 0..=1.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AtK {
    /// Any relevant id in the top k.
    pub recall_any: f64,
    /// All relevant ids in the top k (1 when none are relevant).
    pub recall_all: f64,
    /// Binary NDCG with the first two ranks undiscounted.
    pub ndcg_any: f64,
}

/// Metrics of `ranking` against `relevant` at cut-off `k`.
pub fn evaluate_at(ranking: &[String], relevant: &BTreeSet<String>, k: usize) -> AtK {
    let top = &ranking[..k.min(ranking.len())];
    let hits = top.iter().filter(|id| relevant.contains(*id)).count();
    let recall_any = if hits > 0 { 1.0 } else { 0.0 };
    let recall_all = if relevant.iter().all(|id| top.contains(id)) { 1.0 } else { 0.0 };
    let relevances: Vec<f64> =
        ranking.iter().map(|id| if relevant.contains(id) { 1.0 } else { 0.0 }).collect();
    AtK { recall_any, recall_all, ndcg_any: ndcg(&relevances, k) }
}

/// `DCG@k / IDCG@k` with MemGAS's discount (ranks 1 and 2 undiscounted); 0 when IDCG is 0.
pub fn ndcg(relevances: &[f64], k: usize) -> f64 {
    let dcg = |values: &[f64]| -> f64 {
        values
            .iter()
            .take(k)
            .enumerate()
            .map(|(index, rel)| if index == 0 { *rel } else { rel / ((index + 1) as f64).log2() })
            .sum()
    };
    let mut ideal = relevances.to_vec();
    ideal.sort_by(|a, b| b.total_cmp(a));
    let best = dcg(&ideal);
    if best == 0.0 { 0.0 } else { dcg(relevances) / best }
}

/// Evidence ids of a question, split into turn ids (`D3:12`) and their session ids (`D3`).
///
/// LoCoMo evidence strings are usually one dia_id each, but a few hold several
/// (`D8:6; D9:17`, `D9:1 D4:4 D4:6`) or are truncated (`D`). MemGAS drops such strings whole;
/// we split them on `;`, `,` and whitespace and keep every well-formed `D<n>:<m>` (a deliberate,
/// documented difference affecting five LoCoMo questions).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Evidence {
    /// Relevant dia_ids.
    pub turns: BTreeSet<String>,
    /// Relevant session ids (`D<n>`).
    pub sessions: BTreeSet<String>,
}

impl Evidence {
    /// Parse evidence strings.
    pub fn parse(evidence: &[String]) -> Self {
        let mut parsed = Evidence::default();
        for item in evidence {
            for piece in item.split(|c: char| c == ';' || c == ',' || c.is_whitespace()) {
                let Some((session, turn)) =
                    piece.strip_prefix('D').and_then(|rest| rest.split_once(':'))
                else {
                    continue;
                };
                let (Ok(session), Ok(turn)) = (session.parse::<u32>(), turn.parse::<u32>()) else {
                    continue;
                };
                parsed.turns.insert(format!("D{session}:{turn}"));
                parsed.sessions.insert(format!("D{session}"));
            }
        }
        parsed
    }
}

/// Per-question metrics at every cut-off of [`CUTOFFS`], for sessions and (when the method ranks
/// turns) turns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuestionMetrics {
    /// Session-level metrics, one per cut-off.
    pub session: Vec<AtK>,
    /// Turn-level metrics, one per cut-off; `None` when the method ranks sessions only.
    pub turn: Option<Vec<AtK>>,
}

impl QuestionMetrics {
    /// Score one question's rankings.
    pub fn score(evidence: &Evidence, sessions: &[String], turns: Option<&[String]>) -> Self {
        Self {
            session: CUTOFFS
                .iter()
                .map(|&k| evaluate_at(sessions, &evidence.sessions, k))
                .collect(),
            turn: turns.map(|turns| {
                CUTOFFS.iter().map(|&k| evaluate_at(turns, &evidence.turns, k)).collect()
            }),
        }
    }
}

/// Mean metrics (×100) over a group of questions, keyed `recall_all@3`, `ndcg_any@10`, ….
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MetricTable {
    /// Questions averaged.
    pub n_questions: usize,
    /// Session-level means.
    pub session: BTreeMap<String, f64>,
    /// Turn-level means (empty when the method ranks sessions only).
    pub turn: BTreeMap<String, f64>,
}

impl MetricTable {
    /// Average per-question metrics (×100, unrounded).
    pub fn average<'a>(metrics: impl IntoIterator<Item = &'a QuestionMetrics>) -> Self {
        let mut table = MetricTable::default();
        let mut turn_questions = 0usize;
        for question in metrics {
            table.n_questions += 1;
            accumulate(&mut table.session, &question.session);
            if let Some(turn) = &question.turn {
                turn_questions += 1;
                accumulate(&mut table.turn, turn);
            }
        }
        scale(&mut table.session, table.n_questions);
        scale(&mut table.turn, turn_questions);
        table
    }

    /// A session-level value, e.g. `("recall_all", 3)`.
    pub fn session_at(&self, metric: &str, k: usize) -> Option<f64> {
        self.session.get(&key(metric, k)).copied()
    }

    /// A turn-level value, e.g. `("recall_any", 10)`.
    pub fn turn_at(&self, metric: &str, k: usize) -> Option<f64> {
        self.turn.get(&key(metric, k)).copied()
    }
}

/// Map key of a metric at a cut-off (`recall_all@3`).
pub fn key(metric: &str, k: usize) -> String {
    format!("{metric}@{k}")
}

fn accumulate(sums: &mut BTreeMap<String, f64>, values: &[AtK]) {
    for (k, at) in CUTOFFS.iter().zip(values) {
        *sums.entry(key("recall_any", *k)).or_default() += at.recall_any;
        *sums.entry(key("recall_all", *k)).or_default() += at.recall_all;
        *sums.entry(key("ndcg_any", *k)).or_default() += at.ndcg_any;
    }
}

fn scale(sums: &mut BTreeMap<String, f64>, count: usize) {
    for value in sums.values_mut() {
        *value = if count == 0 { 0.0 } else { *value * 100.0 / count as f64 };
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn ids(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    fn set(items: &[&str]) -> BTreeSet<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    // The checks listed in memgas.md §7.1.
    #[test]
    fn ndcg_matches_the_reference_convention() {
        assert_eq!(ndcg(&[1.0, 0.0, 0.0], 3), 1.0);
        assert_eq!(ndcg(&[0.0, 1.0, 0.0], 3), 1.0);
        assert!((ndcg(&[0.0, 0.0, 1.0], 3) - 0.6309).abs() < 1e-4);
        assert!((ndcg(&[0.0, 0.0, 0.0, 1.0], 4) - 0.5).abs() < 1e-12);
        assert!((ndcg(&[0.0, 1.0, 1.0], 3) - 0.8155).abs() < 1e-4);
        assert_eq!(ndcg(&[0.0, 0.0], 2), 0.0);
    }

    #[test]
    fn recall_any_and_all() {
        let ranking = ids(&["D2", "D5", "D1", "D3"]);
        let at = evaluate_at(&ranking, &set(&["D1", "D5"]), 2);
        assert_eq!((at.recall_any, at.recall_all), (1.0, 0.0));
        let at = evaluate_at(&ranking, &set(&["D1", "D5"]), 3);
        assert_eq!((at.recall_any, at.recall_all), (1.0, 1.0));
        // No evidence: recall_all is 1 (all([])), recall_any and NDCG are 0.
        let at = evaluate_at(&ranking, &BTreeSet::new(), 1);
        assert_eq!((at.recall_any, at.recall_all, at.ndcg_any), (0.0, 1.0, 0.0));
        // k beyond the ranking length.
        assert_eq!(evaluate_at(&ranking, &set(&["D3"]), 10).recall_all, 1.0);
    }

    #[test]
    fn evidence_splits_joined_ids_and_drops_malformed_ones() {
        let evidence = Evidence::parse(&ids(&["D8:6; D9:17", "D", "D9:1 D4:4", "D3:12", "D1:x"]));
        assert_eq!(evidence.turns, set(&["D8:6", "D9:17", "D9:1", "D4:4", "D3:12"]));
        assert_eq!(evidence.sessions, set(&["D8", "D9", "D4", "D3"]));
    }

    #[test]
    fn tables_average_and_scale() {
        let evidence = Evidence::parse(&ids(&["D1:2"]));
        let hit =
            QuestionMetrics::score(&evidence, &ids(&["D1", "D2"]), Some(&ids(&["D1:2", "D1:1"])));
        let miss = QuestionMetrics::score(&evidence, &ids(&["D2", "D1"]), None);
        let table = MetricTable::average([&hit, &miss]);
        assert_eq!(table.n_questions, 2);
        assert_eq!(table.session_at("recall_all", 1), Some(50.0));
        assert_eq!(table.session_at("recall_all", 3), Some(100.0));
        // Turn metrics average over the questions that have them.
        assert_eq!(table.turn_at("recall_any", 1), Some(100.0));
    }
}
