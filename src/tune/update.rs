//! Knowledge-update questions in the retrieve harness, and the validity-aware ranking
//! ([`crate::retrieval::newer`]) measured on them.
//!
//! In a LongMemEval `knowledge-update` question the answer changed over time: an older evidence
//! session states the outdated value, a newer one the update. For each such question with at
//! least two evidence sessions whose newest is strictly newer than the others (by session date
//! and time), [`UpdateOutcome`] records the 1-based rank of the updating (newest) session and of
//! the best-ranked outdated (older) one; the update is *above* when it ranks first of them.
//!
//! `--prefer-newer` reorders every method's session ranking; each question is then ranked under
//! every candidate setting ([`Variant`]s, the first being the plain ranking), and the setting
//! reported is either fixed, or chosen *held out* ([`choose`]): questions alternate, in run
//! order, between two halves, and each half gets the setting that did best on the other.

use std::collections::BTreeSet;

use chrono::NaiveDateTime;
use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

use crate::dataset::{Category, Conversation, Session};
use crate::retrieval::index::{MemoryIndex, Scored};
use crate::retrieval::newer::{PreferNewer, prefer_newer, word_overlap};
use crate::retrieval::vector::dot_f64;
use crate::text::content_words;
use crate::tune::metrics::{CUTOFFS, MetricTable, QuestionMetrics};

/// The LongMemEval question type measured here.
pub const KNOWLEDGE_UPDATE: &str = "knowledge-update";

/// What makes two sessions "about the same thing" for `--prefer-newer`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SameTopic {
    /// Cosine of the session vectors.
    #[default]
    Vector,
    /// Shared content words over the smaller session's count.
    Words,
}

/// How `retrieve` applies the validity-aware ranking.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PreferNewerMode {
    /// One setting for every question.
    Fixed(PreferNewer),
    /// Each half of the questions gets the [`GRID`] setting that did best on the other half.
    HeldOut,
}

/// Candidate settings of the held-out choice, most conservative first (ties keep the first).
pub fn grid() -> Vec<PreferNewer> {
    let mut grid = Vec::new();
    for margin in [0.05, 0.1, 0.2, 0.35, 0.5, 1.0] {
        for threshold in [0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2] {
            grid.push(PreferNewer { margin, threshold });
        }
    }
    grid
}

/// The candidate settings a run ranks every question under (besides the plain ranking).
pub fn candidates(mode: Option<PreferNewerMode>) -> Vec<PreferNewer> {
    match mode {
        None => Vec::new(),
        Some(PreferNewerMode::Fixed(setting)) => vec![setting],
        Some(PreferNewerMode::HeldOut) => grid(),
    }
}

/// Where a knowledge-update question's updating and outdated sessions rank (1-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpdateOutcome {
    /// Rank of the newest evidence session.
    pub updating_rank: usize,
    /// Rank of the best-ranked older evidence session.
    pub outdated_rank: usize,
}

impl UpdateOutcome {
    /// Whether the update ranks above the outdated session.
    pub fn above(&self) -> bool {
        self.updating_rank < self.outdated_rank
    }
}

/// Knowledge-update aggregates of one method.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UpdateTable {
    /// Questions measured (knowledge-update, ≥2 dated evidence sessions).
    pub n_questions: usize,
    /// Percentage whose updating session ranks above the outdated one.
    pub updating_above: f64,
    /// Mean rank of the updating session.
    pub mean_updating_rank: f64,
    /// Mean rank of the best-ranked outdated session.
    pub mean_outdated_rank: f64,
}

impl UpdateTable {
    /// Aggregate outcomes; `None` when there are none.
    pub fn average<'a>(outcomes: impl IntoIterator<Item = &'a UpdateOutcome>) -> Option<Self> {
        let outcomes: Vec<&UpdateOutcome> = outcomes.into_iter().collect();
        if outcomes.is_empty() {
            return None;
        }
        let n = outcomes.len() as f64;
        let mean = |rank: fn(&UpdateOutcome) -> usize| {
            outcomes.iter().map(|o| rank(o) as f64).sum::<f64>() / n
        };
        Some(Self {
            n_questions: outcomes.len(),
            updating_above: outcomes.iter().filter(|o| o.above()).count() as f64 * 100.0 / n,
            mean_updating_rank: mean(|o| o.updating_rank),
            mean_outdated_rank: mean(|o| o.outdated_rank),
        })
    }
}

/// Scores of a method over a run's questions under one choice of variants.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PlainScores {
    /// All questions.
    pub overall: MetricTable,
    /// Per category, keyed by category name.
    pub by_category: IndexMap<String, MetricTable>,
    /// Knowledge-update questions, when there are some.
    pub knowledge_update: Option<UpdateTable>,
}

/// What `--prefer-newer` did to a method: the settings used and the plain ranking's scores.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PreferNewerReport {
    /// The setting used (fixed), or the one chosen for each half (held out: questions 1, 3, …
    /// then 2, 4, …).
    pub settings: Vec<PreferNewer>,
    /// What made two sessions about the same thing.
    pub same_topic: SameTopic,
    /// The same questions without the reordering.
    pub plain: PlainScores,
}

/// A session's moment: its date and time when the string has both (LongMemEval's
/// `2023/05/20 (Sat) 02:21`), else its date at midnight.
pub fn session_time(session: &Session) -> Option<NaiveDateTime> {
    session
        .date_time
        .as_deref()
        .and_then(|text| NaiveDateTime::parse_from_str(text.trim(), "%Y/%m/%d (%a) %H:%M").ok())
        .or_else(|| session.date.and_then(|date| date.and_hms_opt(0, 0, 0)))
}

/// The outcome of a ranking (session ids, best first) for a question; `None` unless it is a
/// knowledge-update question with a strictly newest evidence session among ≥2 dated ones.
pub fn update_outcome(
    category: &Category,
    evidence_sessions: &BTreeSet<String>,
    ranking: &[String],
    time_of: impl Fn(&str) -> Option<NaiveDateTime>,
) -> Option<UpdateOutcome> {
    if !matches!(category, Category::LongMemEval(name) if name == KNOWLEDGE_UPDATE) {
        return None;
    }
    let mut dated: Vec<(NaiveDateTime, &str)> = evidence_sessions
        .iter()
        .map(|id| time_of(id).map(|time| (time, id.as_str())))
        .collect::<Option<_>>()?;
    dated.sort();
    let (newest, older) = dated.split_last()?;
    if older.is_empty() || older.iter().any(|(time, _)| *time >= newest.0) {
        return None;
    }
    let rank = |id: &str| ranking.iter().position(|ranked| ranked == id).map(|at| at + 1);
    let updating_rank = rank(newest.1)?;
    let outdated_rank = older.iter().map(|(_, id)| rank(id)).collect::<Option<Vec<_>>>()?;
    Some(UpdateOutcome { updating_rank, outdated_rank: outdated_rank.into_iter().min()? })
}

/// Per conversation: every indexed session's moment and the pairwise similarities.
pub struct SessionContext {
    times: Vec<Option<NaiveDateTime>>,
    similarity: Vec<Vec<f64>>,
}

impl SessionContext {
    /// Times always; similarities only when some setting will read them.
    pub fn new(
        index: &MemoryIndex,
        conversation: &Conversation,
        same_topic: SameTopic,
        needed: bool,
    ) -> Self {
        let sessions: Vec<Option<&Session>> = (0..index.n_sessions())
            .map(|at| conversation.sessions.iter().find(|s| s.id() == index.session_id(at)))
            .collect();
        let times = sessions.iter().map(|session| session.and_then(session_time)).collect();
        if !needed {
            return Self { times, similarity: Vec::new() };
        }
        let words: Vec<BTreeSet<String>> = sessions
            .iter()
            .map(|session| {
                session
                    .map(|s| s.turns.iter().flat_map(|turn| content_words(&turn.text)).collect())
                    .unwrap_or_default()
            })
            .collect();
        let pair = |a: usize, b: usize| match same_topic {
            SameTopic::Vector => match (index.session_vector(a), index.session_vector(b)) {
                (Some(x), Some(y)) => dot_f64(x, y),
                _ => 0.0,
            },
            SameTopic::Words => word_overlap(&words[a], &words[b]),
        };
        let n = sessions.len();
        let similarity = (0..n).map(|a| (0..n).map(|b| pair(a, b)).collect()).collect();
        Self { times, similarity }
    }

    /// The moment of session `id` (`D<n>`), by the index's session order.
    pub fn time_of(&self, index: &MemoryIndex, id: &str) -> Option<NaiveDateTime> {
        (0..index.n_sessions())
            .find(|&at| index.session_id(at) == id)
            .and_then(|at| self.times.get(at).copied().flatten())
    }

    /// `ranking` reordered under `setting`.
    pub fn reorder(&self, ranking: &[Scored], setting: PreferNewer) -> Vec<Scored> {
        let similarity = |a: usize, b: usize| {
            self.similarity.get(a).and_then(|row| row.get(b)).copied().unwrap_or(0.0)
        };
        prefer_newer(ranking, &self.times, similarity, setting)
    }
}

/// One question ranked under one setting.
#[derive(Debug, Clone, PartialEq)]
pub struct Variant {
    /// Its metrics.
    pub metrics: QuestionMetrics,
    /// Its knowledge-update outcome, for knowledge-update questions.
    pub update: Option<UpdateOutcome>,
    /// Its top sessions (10).
    pub top_sessions: Vec<String>,
}

/// Which variant each question reports (0 = plain), and the settings chosen (one per half when
/// held out). `variants[q]` are question q's variants: plain, then one per candidate.
pub fn choose(
    mode: Option<PreferNewerMode>,
    variants: &[&[Variant]],
) -> (Vec<usize>, Vec<PreferNewer>) {
    match mode {
        None => (vec![0; variants.len()], Vec::new()),
        Some(PreferNewerMode::Fixed(setting)) => (vec![1; variants.len()], vec![setting]),
        Some(PreferNewerMode::HeldOut) => {
            let grid = grid();
            let best: Vec<usize> = (0..2).map(|half| best_candidate(variants, half)).collect();
            let chosen = (0..variants.len()).map(|q| best[q % 2]).collect();
            let settings = best.iter().filter_map(|&at| grid.get(at - 1).copied()).collect();
            (chosen, settings)
        }
    }
}

/// The candidate (1-based variant) that does best on the questions outside `half`: among those
/// keeping the plain ranking's recall_any@5, the most updates above, then recall_any@1; if none
/// keeps it, the best recall_any@5. Ties keep the earliest (most conservative) candidate.
fn best_candidate(variants: &[&[Variant]], half: usize) -> usize {
    let tuning: Vec<&[Variant]> =
        variants.iter().enumerate().filter(|(q, _)| q % 2 != half).map(|(_, v)| *v).collect();
    let recall = |variant: usize, k: usize| -> i64 {
        let Some(at) = CUTOFFS.iter().position(|&cutoff| cutoff == k) else { return 0 };
        tuning
            .iter()
            .filter(|v| v.get(variant).is_some_and(|v| v.metrics.session[at].recall_any > 0.5))
            .count() as i64
    };
    let above = |variant: usize| -> i64 {
        tuning
            .iter()
            .filter(|v| v.get(variant).and_then(|v| v.update).is_some_and(|o| o.above()))
            .count() as i64
    };
    let plain_r5 = recall(0, 5);
    let n_candidates = tuning.first().map_or(grid().len() + 1, |v| v.len());
    let mut best = (1, (i64::MIN, i64::MIN, i64::MIN, i64::MIN));
    for candidate in 1..n_candidates {
        let r5 = recall(candidate, 5);
        let key = if r5 >= plain_r5 {
            (1, above(candidate), recall(candidate, 1), r5)
        } else {
            (0, r5, above(candidate), recall(candidate, 1))
        };
        if key > best.1 {
            best = (candidate, key);
        }
    }
    best.0
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::tune::metrics::Evidence;

    fn ids(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    fn ku() -> Category {
        Category::LongMemEval(KNOWLEDGE_UPDATE.to_string())
    }

    fn at(text: &str) -> Option<NaiveDateTime> {
        NaiveDateTime::parse_from_str(text, "%Y/%m/%d %H:%M").ok()
    }

    /// D1 oldest, D3 newest, D2 in between.
    fn time_of(id: &str) -> Option<NaiveDateTime> {
        match id {
            "D1" => at("2023/01/01 10:00"),
            "D2" => at("2023/05/01 10:00"),
            "D3" => at("2023/05/01 11:00"),
            _ => None,
        }
    }

    fn evidence(items: &[&str]) -> BTreeSet<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_updating_session_is_the_newest_evidence_session() {
        let ranking = ids(&["D2", "D9", "D3", "D1"]);
        let outcome = update_outcome(&ku(), &evidence(&["D1", "D3"]), &ranking, time_of).unwrap();
        assert_eq!(outcome, UpdateOutcome { updating_rank: 3, outdated_rank: 4 });
        assert!(outcome.above());
        // Two outdated sessions: the best-ranked one counts (same day, earlier hour is older).
        let all = evidence(&["D1", "D2", "D3"]);
        let outcome = update_outcome(&ku(), &all, &ranking, time_of).unwrap();
        assert_eq!(outcome, UpdateOutcome { updating_rank: 3, outdated_rank: 1 });
        assert!(!outcome.above());
    }

    #[test]
    fn other_types_single_or_undated_evidence_are_not_measured() {
        let ranking = ids(&["D1", "D2", "D3"]);
        let other = Category::LongMemEval("multi-session".to_string());
        assert_eq!(update_outcome(&other, &evidence(&["D1", "D3"]), &ranking, time_of), None);
        assert_eq!(update_outcome(&ku(), &evidence(&["D3"]), &ranking, time_of), None);
        assert_eq!(update_outcome(&ku(), &evidence(&["D1", "D9"]), &ranking, time_of), None);
        let same = |_: &str| at("2023/01/01 10:00");
        assert_eq!(update_outcome(&ku(), &evidence(&["D1", "D2"]), &ranking, same), None);
    }

    #[test]
    fn update_tables_average_ranks_and_count_updates_above() {
        let outcomes = [
            UpdateOutcome { updating_rank: 1, outdated_rank: 2 },
            UpdateOutcome { updating_rank: 3, outdated_rank: 1 },
        ];
        let table = UpdateTable::average(&outcomes).unwrap();
        assert_eq!(table.n_questions, 2);
        assert_eq!(table.updating_above, 50.0);
        assert_eq!((table.mean_updating_rank, table.mean_outdated_rank), (2.0, 1.5));
        assert_eq!(UpdateTable::average(&[]), None);
    }

    #[test]
    fn session_times_read_the_hour_when_given() {
        let session = |text: &str| Session {
            index: 1,
            date_time: Some(text.to_string()),
            date: chrono::NaiveDate::from_ymd_opt(2023, 5, 20),
            turns: Vec::new(),
        };
        assert_eq!(session_time(&session("2023/05/20 (Sat) 02:21")), at("2023/05/20 02:21"));
        assert_eq!(session_time(&session("1:56 pm on 20 May, 2023")), at("2023/05/20 00:00"));
    }

    /// Question `q` of a KU test: variant 0 (plain) puts the outdated session first, variant 1
    /// the update, variant 2 the update too but loses the evidence from the top 5.
    fn variants() -> Vec<Variant> {
        let evidence = Evidence::parse(&ids(&["D1:1", "D3:1"]));
        let variant = |ranking: &[&str]| {
            let ranking = ids(ranking);
            Variant {
                metrics: QuestionMetrics::score(&evidence, &ranking, None),
                update: update_outcome(&ku(), &evidence.sessions, &ranking, time_of),
                top_sessions: ranking,
            }
        };
        vec![
            variant(&["D1", "D3", "D2"]),
            variant(&["D3", "D1", "D2"]),
            variant(&["D2", "D4", "D5", "D6", "D7", "D3", "D1"]),
        ]
    }

    #[test]
    fn held_out_choice_tunes_each_half_on_the_other() {
        let questions = [variants(), variants(), variants()];
        let all: Vec<&[Variant]> = questions.iter().map(Vec::as_slice).collect();
        let (chosen, _) = choose(None, &all);
        assert_eq!(chosen, vec![0, 0, 0]);
        let fixed = PreferNewer { margin: 0.1, threshold: 0.5 };
        let (chosen, settings) = choose(Some(PreferNewerMode::Fixed(fixed)), &all);
        assert_eq!((chosen, settings), (vec![1, 1, 1], vec![fixed]));
        // Only candidates 1 and 2 exist here: 1 keeps recall@5 and puts the update first.
        let (chosen, settings) = choose(Some(PreferNewerMode::HeldOut), &all);
        assert_eq!(chosen, vec![1, 1, 1]);
        assert_eq!(settings, vec![grid()[0], grid()[0]]);
    }
}
