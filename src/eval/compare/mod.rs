//! Two scored runs of the same dataset selection compared question by question (`mragent
//! compare RUN_A RUN_B` and `eval --paired-with`): the questions both runs answered
//! successfully are paired, and per category and overall the rows give each run's judge
//! accuracy (J) and official LoCoMo F1, their paired difference with a bootstrap interval (see
//! [`paired`]), the questions that flip each way (J: the majority verdict of the judge runs
//! changes; F1: the question's F1 is higher or lower), and the mean answer length and answering
//! tokens per question of each run (a generous judge rewards longer answers, so the length
//! stands beside J).
//!
//! Per question, J is the share of judge runs that accepted the answer against the dataset's
//! gold (0/1 with one run); a question with a failed judgement in either run leaves J (not F1)
//! until a rerun of `eval` retries it. F1 is the stored per-question official score. Answer
//! length counts the answer's words (runs of letters, digits and apostrophes).
//!
//! Pure: scored items in, rows and Markdown out.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::paired::{self, BootstrapSettings, PairedStats};
use super::report::{category_label, category_order};
use super::{EvalSummary, ItemScore};
use crate::dataset::Category;
use crate::results::Status;

mod markdown;

pub use self::markdown::{COLUMNS_NOTE, paired_markdown};

/// One question answered successfully by both runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pair<'a> {
    /// Run A's scored answer.
    pub a: &'a ItemScore,
    /// Run B's scored answer.
    pub b: &'a ItemScore,
}

/// Questions of either run left out of the pairing, by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeftOut {
    /// A result line in A only.
    pub only_a: usize,
    /// A result line in B only.
    pub only_b: usize,
    /// Answering failed in A (B answered).
    pub failed_a: usize,
    /// Answering failed in B (A answered).
    pub failed_b: usize,
    /// Answering failed in both.
    pub failed_both: usize,
}

impl LeftOut {
    /// Questions left out, every reason together.
    pub fn total(&self) -> usize {
        self.only_a + self.only_b + self.failed_a + self.failed_b + self.failed_both
    }

    /// The reasons with their counts, e.g. `3 answered by A only, 1 failed in B`; `none` when
    /// nothing was left out.
    pub fn describe(&self) -> String {
        let reasons = [
            (self.only_a, "answered by A only"),
            (self.only_b, "answered by B only"),
            (self.failed_a, "failed in A"),
            (self.failed_b, "failed in B"),
            (self.failed_both, "failed in both"),
        ];
        let parts: Vec<String> = reasons
            .iter()
            .filter(|(count, _)| *count > 0)
            .map(|(count, reason)| format!("{count} {reason}"))
            .collect();
        if parts.is_empty() { "none".into() } else { parts.join(", ") }
    }
}

/// Pair the questions both runs answered successfully, in A's order (dataset order), and count
/// the rest by reason.
pub fn pair_items<'a>(a: &'a [ItemScore], b: &'a [ItemScore]) -> (Vec<Pair<'a>>, LeftOut) {
    let by_id: BTreeMap<&str, &ItemScore> =
        b.iter().map(|item| (item.question_id.as_str(), item)).collect();
    let in_a: std::collections::BTreeSet<&str> =
        a.iter().map(|item| item.question_id.as_str()).collect();
    let mut pairs = Vec::new();
    let mut left_out = LeftOut {
        only_b: b.iter().filter(|item| !in_a.contains(item.question_id.as_str())).count(),
        ..LeftOut::default()
    };
    for item_a in a {
        let Some(item_b) = by_id.get(item_a.question_id.as_str()) else {
            left_out.only_a += 1;
            continue;
        };
        match (item_a.status == Status::Ok, item_b.status == Status::Ok) {
            (true, true) => pairs.push(Pair { a: item_a, b: item_b }),
            (false, true) => left_out.failed_a += 1,
            (true, false) => left_out.failed_b += 1,
            (false, false) => left_out.failed_both += 1,
        }
    }
    (pairs, left_out)
}

/// One row of the paired table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairedRow {
    /// Row key: the category, `overall_1_4` (LoCoMo) or `overall`.
    pub key: String,
    /// Label shown in the table.
    pub label: String,
    /// Questions paired in the row.
    pub n: usize,
    /// J of A against J of B over the pairs judged in both runs; `None` when not judged.
    pub judge: Option<PairedStats>,
    /// Pairs left out of J because a judgement failed in either run.
    pub judge_failed: usize,
    /// Official LoCoMo F1 of A against B (LoCoMo only).
    pub f1: Option<PairedStats>,
    /// Mean answer length of A in words.
    pub words_a: f64,
    /// Mean answer length of B in words.
    pub words_b: f64,
    /// Answering tokens (prompt + completion) per question of A.
    #[serde(default)]
    pub tokens_a: f64,
    /// Answering tokens (prompt + completion) per question of B.
    #[serde(default)]
    pub tokens_b: f64,
}

/// The paired rows: LoCoMo categories 1–4, `overall (1–4)`, then category 5 (its F1 is the
/// refusal rate; it is never judged); other datasets their categories, then `overall`.
pub fn paired_rows(
    pairs: &[Pair<'_>],
    locomo: bool,
    bootstrap: BootstrapSettings,
) -> Vec<PairedRow> {
    let mut categories: Vec<&Category> = Vec::new();
    for pair in pairs {
        if !categories.contains(&&pair.a.category) {
            categories.push(&pair.a.category);
        }
    }
    categories.sort_by_key(|category| category_order(category));
    let in_category = |category: &Category| -> Vec<Pair<'_>> {
        pairs.iter().filter(|pair| &pair.a.category == category).copied().collect()
    };
    let mut rows = Vec::new();
    let adversarial = Category::Locomo(5);
    for category in categories.iter().filter(|category| !locomo || ***category != adversarial) {
        let selected = in_category(category);
        rows.push(row(category.to_string(), category_label(category), &selected, bootstrap));
    }
    if locomo {
        let answerable: Vec<Pair<'_>> = pairs
            .iter()
            .filter(|pair| matches!(pair.a.category, Category::Locomo(1..=4)))
            .copied()
            .collect();
        if !answerable.is_empty() {
            rows.push(row("overall_1_4".into(), "overall (1–4)".into(), &answerable, bootstrap));
        }
        let refusals = in_category(&adversarial);
        if !refusals.is_empty() {
            let label = "5 adversarial: refusal rate".to_string();
            rows.push(row("5".into(), label, &refusals, bootstrap));
        }
    } else if !pairs.is_empty() {
        rows.push(row("overall".into(), "overall".into(), pairs, bootstrap));
    }
    rows
}

/// A question's J under the run's verdicts.
enum JudgeShare {
    /// Not judged (LoCoMo category 5, or no judge).
    No,
    /// A judgement failed; a rerun of `eval` retries it.
    Failed,
    /// The share of judge runs that accepted the answer.
    Value(f64),
}

fn judged(item: &ItemScore) -> JudgeShare {
    if !item.judge_failed.is_empty() {
        return JudgeShare::Failed;
    }
    if item.judge.is_empty() {
        return JudgeShare::No;
    }
    let correct = item.judge.iter().filter(|verdict| verdict.correct).count();
    JudgeShare::Value(correct as f64 / item.judge.len() as f64)
}

/// Words of an answer: its runs of letters, digits and apostrophes.
pub fn answer_words(prediction: &str) -> usize {
    crate::text::apostrophe_words(prediction).count()
}

fn row(key: String, label: String, pairs: &[Pair<'_>], bootstrap: BootstrapSettings) -> PairedRow {
    let mut values = Vec::new();
    let mut judge_failed = 0;
    for pair in pairs {
        match (judged(pair.a), judged(pair.b)) {
            (JudgeShare::Value(a), JudgeShare::Value(b)) => values.push((a, b)),
            (JudgeShare::Failed, _) | (_, JudgeShare::Failed) => judge_failed += 1,
            _ => {}
        }
    }
    let f1: Vec<(f64, f64)> = pairs.iter().filter_map(|pair| pair.a.f1.zip(pair.b.f1)).collect();
    let mean = |side: fn(Pair<'_>) -> &ItemScore, value: fn(&ItemScore) -> f64| {
        let total: f64 = pairs.iter().map(|pair| value(side(*pair))).sum();
        if pairs.is_empty() { 0.0 } else { total / pairs.len() as f64 }
    };
    let words = |item: &ItemScore| answer_words(&item.prediction) as f64;
    let tokens = |item: &ItemScore| (item.prompt_tokens + item.completion_tokens) as f64;
    // J flips: the majority verdict over the judge runs changes (with one run, the verdict).
    let judge = paired::paired_stats(&values, bootstrap)
        .map(|stats| PairedStats { flips: Some(paired::majority_flips(&values)), ..stats });
    // F1 flips: the question's F1 is higher in A, or lower.
    let f1 = paired::paired_stats(&f1, bootstrap)
        .map(|stats| PairedStats { flips: Some(paired::value_changes(&f1)), ..stats });
    PairedRow {
        key,
        label,
        n: pairs.len(),
        judge,
        judge_failed,
        f1,
        words_a: mean(|pair| pair.a, words),
        words_b: mean(|pair| pair.b, words),
        tokens_a: mean(|pair| pair.a, tokens),
        tokens_b: mean(|pair| pair.b, tokens),
    }
}

/// Two runs compared: `<model>_<A>_vs_<B>.json` is this value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairedSummary {
    /// Dataset name as in paths.
    pub dataset: String,
    /// The dataset file both runs were checked against.
    pub data_file: String,
    /// Model tag of both runs' result files.
    pub model: String,
    /// Run tag of A (`--file`).
    pub file_a: String,
    /// Run tag of B (`--paired-with`).
    pub file_b: String,
    /// Questions the dataset selection holds.
    pub expected_questions: usize,
    /// Questions with a result line in A.
    pub questions_a: usize,
    /// Questions with a result line in B.
    pub questions_b: usize,
    /// Questions paired: answered successfully by both.
    pub paired: usize,
    /// Questions left out of the pairing, by reason.
    pub left_out: LeftOut,
    /// Judge model, when judged.
    pub judge_model: Option<String>,
    /// Judge protocol, when judged.
    pub judge_protocol: Option<String>,
    /// Judge runs per question.
    pub judge_runs: u32,
    /// Judgements that failed, both runs together (a rerun of `eval` retries them).
    pub judge_failed: usize,
    /// How the intervals were bootstrapped.
    pub bootstrap: BootstrapSettings,
    /// The table rows.
    pub rows: Vec<PairedRow>,
}

impl PairedSummary {
    /// Compare two scored runs of the same selection (A's summary names the dataset, model and
    /// judge; both were scored with the same settings).
    pub fn new(
        a: (&EvalSummary, &[ItemScore]),
        b: (&EvalSummary, &[ItemScore]),
        bootstrap: BootstrapSettings,
    ) -> Self {
        let ((summary_a, items_a), (summary_b, items_b)) = (a, b);
        let (pairs, left_out) = pair_items(items_a, items_b);
        let locomo = summary_a.dataset == crate::dataset::DatasetKind::Locomo.as_str();
        Self {
            dataset: summary_a.dataset.clone(),
            data_file: summary_a.data_file.clone(),
            model: summary_a.model.clone(),
            file_a: summary_a.file.clone(),
            file_b: summary_b.file.clone(),
            expected_questions: summary_a.expected_questions,
            questions_a: items_a.len(),
            questions_b: items_b.len(),
            paired: pairs.len(),
            left_out,
            judge_model: summary_a.judge_model.clone(),
            judge_protocol: summary_a.judge_protocol.clone(),
            judge_runs: summary_a.judge_runs,
            judge_failed: summary_a.judge_failed + summary_b.judge_failed,
            bootstrap,
            rows: paired_rows(&pairs, locomo, bootstrap),
        }
    }

    /// The paired table as Markdown (what the CLI prints).
    pub fn table(&self) -> String {
        markdown::table(self)
    }

    /// `<model>_<A>_vs_<B>`: the stem of the files written beside the runs' folders.
    pub fn file_stem(&self) -> String {
        format!("{}_{}_vs_{}", self.model, self.file_a, self.file_b)
    }

    /// What the table says, in plain words: per row and metric, the difference and whether
    /// its interval excludes 0 (a difference) or contains it (inside the noise); first, when
    /// there was no judge, that only F1 is compared.
    pub fn noise_lines(&self) -> Vec<String> {
        markdown::noise_lines(self)
    }

    /// One line on the pairing: how many were paired and what was left out, and why.
    pub fn pairing_line(&self) -> String {
        format!(
            "A = {}, B = {}: {} question(s) paired of {} expected ({} with a line in A, {} in B); left out: {}.",
            self.file_a,
            self.file_b,
            self.paired,
            self.expected_questions,
            self.questions_a,
            self.questions_b,
            self.left_out.describe()
        )
    }
}

#[cfg(test)]
mod tests;
