//! The judge matrix (`eval --judge-protocol mem0,strict,…`): the same run judged under several
//! protocols, one table. Per row (category, then the overall) and per protocol: judge accuracy
//! as mean ± population std over `--judge-runs`, a 95% bootstrap interval over questions (see
//! [`paired::bootstrap_interval`]; a question's score is the share of its judge runs that
//! accepted it), and the audit-corrected accuracy beside it. With the LoCoMo audit, each row
//! also has the *ceiling*: the highest raw accuracy the dataset's answer key allows, that is
//! the share of the row's questions whose gold answer the audit does not correct or exclude. A
//! raw accuracy above it means the judge accepted answers that disagree with the audited key.
//!
//! Pure: judged items and summaries in, rows and Markdown out.

use serde::{Deserialize, Serialize};

use super::paired::{self, BootstrapSettings, Interval};
use super::report::{JudgeAccuracy, category_label, category_order};
use super::{EvalSummary, ItemScore};
use crate::dataset::{Category, DatasetKind};

mod markdown;

pub use self::markdown::{MATRIX_NOTE, matrix_markdown};

/// The highest accuracy an answer key allows: questions whose gold is right over all questions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ceiling {
    /// Questions counted.
    pub questions: usize,
    /// Of those, questions whose gold answer the audit corrects or excludes.
    pub wrong_gold: usize,
}

impl Ceiling {
    /// Count the questions; `wrong_gold` says, per question, whether its gold answer is wrong.
    pub fn count(wrong_gold: impl IntoIterator<Item = bool>) -> Self {
        let mut ceiling = Self::default();
        for wrong in wrong_gold {
            ceiling.questions += 1;
            ceiling.wrong_gold += usize::from(wrong);
        }
        ceiling
    }

    /// `(questions − wrong_gold) / questions`; `None` without questions.
    pub fn accuracy(&self) -> Option<f64> {
        (self.questions > 0)
            .then(|| (self.questions - self.wrong_gold) as f64 / self.questions as f64)
    }
}

/// Whether the audit says the item's gold answer is wrong (corrected or excluded).
pub fn gold_is_wrong(item: &ItemScore) -> bool {
    item.audit.as_ref().is_some_and(|audited| audited.excluded || audited.answer.is_some())
}

/// One protocol's cell of a row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MatrixCell {
    /// The protocol (`mem0`, `strict`, `longmemeval`, `custom:<file>`).
    pub protocol: String,
    /// Accuracy against the dataset's gold: mean ± std over judge runs.
    pub judge: Option<JudgeAccuracy>,
    /// 95% bootstrap interval of the accuracy over the row's questions.
    pub interval: Option<Interval>,
    /// Accuracy with the audit's corrections (corrected gold, excluded questions left out).
    pub audited: Option<JudgeAccuracy>,
    /// The raw accuracy is above the row's ceiling.
    pub above_ceiling: bool,
}

/// One row: a category or the overall.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MatrixRow {
    /// Row key, as in `summary.json` (`1`…`4`, `overall_1_4`, a question type, `overall`).
    pub key: String,
    /// Label shown in the table.
    pub label: String,
    /// Questions in the row.
    pub n: usize,
    /// The answer key's ceiling for the row, with the audit.
    pub ceiling: Option<Ceiling>,
    /// One cell per protocol, in the order given.
    pub cells: Vec<MatrixCell>,
}

/// The judge matrix: `matrix.json` is this value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JudgeMatrix {
    /// Dataset name as in paths.
    pub dataset: String,
    /// Model tag.
    pub model: String,
    /// Run tag.
    pub file: String,
    /// Questions scored (of `expected_questions`).
    pub questions: usize,
    /// Questions in the dataset selection.
    pub expected_questions: usize,
    /// `PARTIAL n/N` when questions are missing.
    pub partial: Option<String>,
    /// Judge model.
    pub judge_model: Option<String>,
    /// Judge runs per question and protocol.
    pub judge_runs: u32,
    /// The protocols, in column order.
    pub protocols: Vec<String>,
    /// The audit file, when the ceiling and audited columns apply.
    pub audit_file: Option<String>,
    /// How the intervals were bootstrapped.
    pub bootstrap: BootstrapSettings,
    /// The rows.
    pub rows: Vec<MatrixRow>,
}

/// One protocol's judged run: its summary and its items (in dataset order).
#[derive(Debug, Clone, Copy)]
pub struct ProtocolRun<'a> {
    /// The summary (its rows give mean ± std).
    pub summary: &'a EvalSummary,
    /// The judged items.
    pub items: &'a [ItemScore],
}

impl JudgeMatrix {
    /// Build the matrix from one judged run per protocol (the same items, judged under each);
    /// `None` without runs.
    pub fn new(runs: &[ProtocolRun<'_>], bootstrap: BootstrapSettings) -> Option<Self> {
        let first = runs.first()?;
        let summary = first.summary;
        let with_audit = summary.audit_file.is_some();
        let rows = row_selections(first.items, summary.dataset == DatasetKind::Locomo.as_str())
            .into_iter()
            .map(|(key, label, indices)| {
                let ceiling = with_audit.then(|| {
                    Ceiling::count(indices.iter().map(|&i| gold_is_wrong(&first.items[i])))
                });
                let cells =
                    runs.iter().map(|run| cell(run, &key, &indices, ceiling, bootstrap)).collect();
                MatrixRow { key, label, n: indices.len(), ceiling, cells }
            })
            .collect();
        Some(Self {
            dataset: summary.dataset.clone(),
            model: summary.model.clone(),
            file: summary.file.clone(),
            questions: summary.questions,
            expected_questions: summary.expected_questions,
            partial: summary.partial.clone(),
            judge_model: summary.judge_model.clone(),
            judge_runs: summary.judge_runs,
            protocols: runs
                .iter()
                .map(|run| run.summary.judge_protocol.clone().unwrap_or_default())
                .collect(),
            audit_file: summary.audit_file.clone(),
            bootstrap,
            rows,
        })
    }

    /// The matrix table as Markdown (what the CLI prints).
    pub fn table(&self) -> String {
        markdown::table(self)
    }

    /// `(protocol, row label, accuracy, ceiling)` of every cell above its row's ceiling.
    pub fn above_ceiling(&self) -> Vec<(String, String, f64, f64)> {
        let mut found = Vec::new();
        for row in &self.rows {
            let Some(ceiling) = row.ceiling.and_then(|ceiling| ceiling.accuracy()) else {
                continue;
            };
            for cell in row.cells.iter().filter(|cell| cell.above_ceiling) {
                if let Some(judge) = cell.judge {
                    found.push((cell.protocol.clone(), row.label.clone(), judge.mean, ceiling));
                }
            }
        }
        found
    }
}

/// The judged rows and the indices of their items: LoCoMo categories 1–4 then `overall (1–4)`
/// (category 5 is never judged); other datasets their categories then `overall`.
fn row_selections(items: &[ItemScore], locomo: bool) -> Vec<(String, String, Vec<usize>)> {
    let judged = |category: &Category| !locomo || matches!(category, Category::Locomo(1..=4));
    let mut categories: Vec<&Category> = Vec::new();
    for item in items.iter().filter(|item| judged(&item.category)) {
        if !categories.contains(&&item.category) {
            categories.push(&item.category);
        }
    }
    categories.sort_by_key(|category| category_order(category));
    let indices = |wanted: &dyn Fn(&Category) -> bool| -> Vec<usize> {
        (0..items.len()).filter(|&index| wanted(&items[index].category)).collect()
    };
    let mut rows: Vec<(String, String, Vec<usize>)> = categories
        .iter()
        .map(|category| {
            let selected = indices(&|other| other == *category);
            (category.to_string(), category_label(category), selected)
        })
        .collect();
    let all = indices(&judged);
    if !all.is_empty() {
        let (key, label) =
            if locomo { ("overall_1_4", "overall (1–4)") } else { ("overall", "overall") };
        rows.push((key.to_string(), label.to_string(), all));
    }
    rows
}

/// A question's score under one protocol: the share of its judge runs that accepted it; `None`
/// when it was not judged or a judgement failed (a rerun retries it).
fn question_score(item: &ItemScore) -> Option<f64> {
    if item.judge.is_empty() || !item.judge_failed.is_empty() {
        return None;
    }
    let correct = item.judge.iter().filter(|verdict| verdict.correct).count();
    Some(correct as f64 / item.judge.len() as f64)
}

fn cell(
    run: &ProtocolRun<'_>,
    key: &str,
    indices: &[usize],
    ceiling: Option<Ceiling>,
    bootstrap: BootstrapSettings,
) -> MatrixCell {
    let row = run.summary.rows.iter().find(|row| row.key == key);
    let judge = row.and_then(|row| row.raw.judge).filter(|judge| judge.judged > 0);
    let audited = row
        .and_then(|row| row.audited.as_ref())
        .and_then(|metrics| metrics.judge)
        .filter(|judge| judge.judged > 0);
    let scores: Vec<f64> =
        indices.iter().filter_map(|&index| run.items.get(index).and_then(question_score)).collect();
    let limit = ceiling.and_then(|ceiling| ceiling.accuracy());
    MatrixCell {
        protocol: run.summary.judge_protocol.clone().unwrap_or_default(),
        judge,
        interval: paired::bootstrap_interval(&scores, bootstrap),
        audited,
        // A margin below display precision keeps an accuracy equal to the ceiling unflagged.
        above_ceiling: judge.zip(limit).is_some_and(|(judge, limit)| judge.mean > limit + 1e-9),
    }
}

#[cfg(test)]
mod tests;
