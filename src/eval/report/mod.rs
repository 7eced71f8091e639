//! Aggregation of per-question scores into the rows of `summary.json` / `summary.md`: per
//! category (LoCoMo categories always named by number and name), overall, LoCoMo's overall for
//! categories 1–4, and LongMemEval's task-averaged and abstention accuracy; each with the audited
//! view beside the raw one where an audit applies.
//!
//! LoCoMo rows: categories 1–4, `overall (1–4)` (the headline), category 5 on its own row as
//! the refusal rate, and on request the official all-category overall. Categories keep
//! LoCoMo's own numbering (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5
//! adversarial).
//!
//! Pure: items in, rows and text out. F1 is aggregated as the official `evaluation_stats.py`
//! does: per category, the sum of the per-question values as stored (already rounded to 3
//! decimals) in dataset order, over the category's count; an overall row adds the category
//! sums in the official key order 4, 1, 2, 3, 5, divides by the total count, and every mean is
//! rounded to 3 decimals as Python's `round` does. Judge accuracy is computed per judge run and
//! reported as the mean and population standard deviation over runs, with the numbers of
//! verdicts obtained and judgements that failed.

use serde::{Deserialize, Serialize};

use super::ItemScore;
use super::judge::Verdict;
use super::recall::EvidenceRecall;
use crate::dataset::Category;

mod table;

pub use self::table::{COLUMNS_HELP, Coverage, markdown_table};

/// Prices of the answering model, for the cost column.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Prices {
    /// US dollars per million prompt tokens.
    pub input_per_million: f64,
    /// US dollars per million completion tokens.
    pub output_per_million: f64,
}

/// Judge accuracy over one or more judge runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct JudgeAccuracy {
    /// Mean over runs of the per-run accuracy.
    pub mean: f64,
    /// Population standard deviation of the per-run accuracy (0 for a single run).
    pub std: f64,
    /// Runs that judged at least one question of the row.
    pub runs: usize,
    /// Verdicts obtained, all runs together (questions × runs when nothing failed).
    pub judged: usize,
    /// Judgements that failed, all runs together; the accuracy leaves them out.
    pub failed: usize,
}

/// Evidence recall over the questions of a row that have gold evidence.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RecallStats {
    /// Questions with gold evidence.
    pub questions: usize,
    /// Mean fraction of gold ids found.
    pub mean: f64,
    /// Share of questions with every gold id found.
    pub all: f64,
    /// Share of questions with at least one gold id found.
    pub any: f64,
}

/// The scores of one row under one view (raw or audited).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Metrics {
    /// Questions counted.
    pub count: usize,
    /// Mean official LoCoMo score (token F1; 0/1 for category 5); LoCoMo only.
    pub f1: Option<f64>,
    /// Exact-match rate; LoCoMo only.
    pub exact_match: Option<f64>,
    /// LLM-judge accuracy, when judged.
    pub judge: Option<JudgeAccuracy>,
    /// Evidence recall, when any question has gold evidence.
    pub recall: Option<RecallStats>,
}

/// One row of the summary table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TableRow {
    /// Row key: the category (`1`…`5`, a LongMemEval question type), `overall`,
    /// `overall_1_4`, `task_averaged` or `abstention`.
    pub key: String,
    /// Label shown in tables (`1 multi-hop`, `overall (1–4)`).
    pub label: String,
    /// Raw scores against the dataset's gold answers.
    pub raw: Metrics,
    /// Scores with the LoCoMo audit corrections (LoCoMo with audit on).
    pub audited: Option<Metrics>,
    /// Questions whose answering failed (`status: error`).
    pub errors: usize,
    /// Mean prompt + completion tokens per question spent answering.
    pub tokens_per_question: f64,
    /// Answering cost of the row's questions in US dollars, when prices are known.
    pub cost_usd: Option<f64>,
}

/// Which rows to build.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RowOptions {
    /// LoCoMo (else LongMemEval).
    pub locomo: bool,
    /// Add the audited view (LoCoMo with an audit).
    pub audit: bool,
    /// LoCoMo: also the official overall over all categories, 5 included (F1 only).
    pub overall_with_adversarial: bool,
    /// Answering prices for the cost column.
    pub prices: Option<Prices>,
}

/// Build every row for `items` (in dataset order): categories in their canonical order, then
/// the overall rows. LoCoMo: categories 1–4, `overall (1–4)`, category 5 as the refusal rate,
/// and with `overall_with_adversarial` the official overall over 1–5.
pub fn build_rows(items: &[ItemScore], options: RowOptions) -> Vec<TableRow> {
    let mut categories: Vec<&Category> = Vec::new();
    for item in items {
        if !categories.contains(&&item.category) {
            categories.push(&item.category);
        }
    }
    categories.sort_by_key(|category| category_order(category));
    if options.locomo {
        locomo_rows(items, &categories, options)
    } else {
        longmemeval_rows(items, &categories, options.prices)
    }
}

fn in_category<'a>(items: &'a [ItemScore], category: &Category) -> Vec<&'a ItemScore> {
    items.iter().filter(|item| &item.category == category).collect()
}

/// LoCoMo: categories 1–4, `overall (1–4)`, category 5 as the refusal rate, and on request
/// the official overall over 1–5.
fn locomo_rows(
    items: &[ItemScore],
    categories: &[&Category],
    options: RowOptions,
) -> Vec<TableRow> {
    let RowOptions { audit, overall_with_adversarial, prices, .. } = options;
    let mut rows = Vec::new();
    for category in categories.iter().filter(|category| **category != &Category::Locomo(5)) {
        let selected = in_category(items, category);
        rows.push(row(category.to_string(), category_label(category), &selected, audit, prices));
    }
    let answerable: Vec<&ItemScore> =
        items.iter().filter(|item| matches!(item.category, Category::Locomo(1..=4))).collect();
    if !answerable.is_empty() {
        rows.push(row("overall_1_4".into(), "overall (1–4)".into(), &answerable, audit, prices));
    }
    let adversarial = in_category(items, &Category::Locomo(5));
    if !adversarial.is_empty() {
        rows.push(row(
            "5".into(),
            "5 adversarial: refusal rate".into(),
            &adversarial,
            audit,
            prices,
        ));
    }
    if overall_with_adversarial {
        let all: Vec<&ItemScore> = items.iter().collect();
        let mut overall = row("overall_1_5".into(), "overall (1–5)".into(), &all, audit, prices);
        // The judge grades categories 1–4 only: a judge figure over 1–5 does not exist.
        overall.raw.judge = None;
        if let Some(audited) = overall.audited.as_mut() {
            audited.judge = None;
        }
        rows.push(overall);
    }
    rows
}

/// LongMemEval: question types, `overall`, `task-averaged` and `abstention`.
fn longmemeval_rows(
    items: &[ItemScore],
    categories: &[&Category],
    prices: Option<Prices>,
) -> Vec<TableRow> {
    let mut rows = Vec::new();
    for category in categories {
        let selected = in_category(items, category);
        rows.push(row(category.to_string(), category_label(category), &selected, false, prices));
    }
    let all: Vec<&ItemScore> = items.iter().collect();
    rows.push(row("overall".into(), "overall".into(), &all, false, prices));
    let mut task_averaged =
        row("task_averaged".into(), "task-averaged".into(), &all, false, prices);
    task_averaged.raw.judge = task_averaged_accuracy(items);
    task_averaged.raw.recall = None;
    rows.push(task_averaged);
    let abstention: Vec<&ItemScore> =
        items.iter().filter(|item| item.question_id.ends_with("_abs")).collect();
    if !abstention.is_empty() {
        rows.push(row("abstention".into(), "abstention (_abs)".into(), &abstention, false, prices));
    }
    rows
}

/// `1 multi-hop` for LoCoMo, the question type for LongMemEval.
pub fn category_label(category: &Category) -> String {
    match category {
        Category::Locomo(number) => format!("{number} {}", category.name()),
        Category::LongMemEval(name) => name.clone(),
    }
}

/// LongMemEval question types in the order the benchmark lists them.
const LONGMEMEVAL_TYPES: [&str; 6] = [
    "single-session-user",
    "single-session-assistant",
    "single-session-preference",
    "multi-session",
    "knowledge-update",
    "temporal-reasoning",
];

/// Sort key of a category: LoCoMo by number, LongMemEval in the benchmark's type order.
pub(super) fn category_order(category: &Category) -> (usize, String) {
    match category {
        Category::Locomo(number) => (usize::from(*number), String::new()),
        Category::LongMemEval(name) => {
            let position = LONGMEMEVAL_TYPES.iter().position(|known| known == name);
            (position.unwrap_or(LONGMEMEVAL_TYPES.len()), name.clone())
        }
    }
}

/// What aggregation needs from one item under one view.
struct ReportView<'a> {
    category: &'a Category,
    f1: Option<f64>,
    exact_match: Option<bool>,
    judge: &'a [Verdict],
    judge_failed: usize,
    recall: Option<EvidenceRecall>,
}

fn raw_view(item: &ItemScore) -> ReportView<'_> {
    ReportView {
        category: &item.category,
        f1: item.f1,
        exact_match: item.exact_match,
        judge: &item.judge,
        judge_failed: item.judge_failed.len(),
        recall: item.recall,
    }
}

/// The audited view: `None` when the audit excludes the item.
fn audited_view(item: &ItemScore) -> Option<ReportView<'_>> {
    let Some(audited) = &item.audit else { return Some(raw_view(item)) };
    if audited.excluded {
        return None;
    }
    let recall = if audited.evidence.is_some() { audited.recall } else { item.recall };
    Some(match &audited.answer {
        Some(_) => ReportView {
            category: &item.category,
            f1: audited.f1,
            exact_match: audited.exact_match,
            judge: &audited.judge,
            judge_failed: audited.judge_failed.len(),
            recall,
        },
        None => ReportView { recall, ..raw_view(item) },
    })
}

fn row(
    key: String,
    label: String,
    items: &[&ItemScore],
    audit: bool,
    prices: Option<Prices>,
) -> TableRow {
    let raw = metrics(items.iter().map(|item| raw_view(item)));
    let audited = audit.then(|| metrics(items.iter().filter_map(|item| audited_view(item))));
    let errors = items.iter().filter(|item| item.status == crate::results::Status::Error).count();
    let tokens: u64 = items.iter().map(|item| item.prompt_tokens + item.completion_tokens).sum();
    let tokens_per_question =
        if items.is_empty() { 0.0 } else { tokens as f64 / items.len() as f64 };
    let cost_usd = prices.map(|prices| {
        let prompt: u64 = items.iter().map(|item| item.prompt_tokens).sum();
        let completion: u64 = items.iter().map(|item| item.completion_tokens).sum();
        (prompt as f64 * prices.input_per_million + completion as f64 * prices.output_per_million)
            / 1e6
    });
    TableRow { key, label, raw, audited, errors, tokens_per_question, cost_usd }
}

fn metrics<'a>(views: impl Iterator<Item = ReportView<'a>>) -> Metrics {
    let views: Vec<ReportView<'a>> = views.collect();
    let mean = |values: Vec<f64>| {
        (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
    };
    let f1 = official_mean(views.iter().filter_map(|view| view.f1.map(|f1| (view.category, f1))));
    let exact_match = mean(
        views
            .iter()
            .filter_map(|view| view.exact_match.map(|hit| if hit { 1.0 } else { 0.0 }))
            .collect(),
    );
    let failed: usize = views.iter().map(|view| view.judge_failed).sum();
    let judge = judge_accuracy(views.iter().map(|view| view.judge), failed);
    let recalls: Vec<EvidenceRecall> = views.iter().filter_map(|view| view.recall).collect();
    let recall = (!recalls.is_empty()).then(|| {
        let n = recalls.len() as f64;
        RecallStats {
            questions: recalls.len(),
            mean: recalls.iter().map(|r| r.fraction).sum::<f64>() / n,
            all: recalls.iter().filter(|r| r.all).count() as f64 / n,
            any: recalls.iter().filter(|r| r.any).count() as f64 / n,
        }
    });
    Metrics { count: views.len(), f1, exact_match, judge, recall }
}

/// The official LoCoMo aggregation of per-question values (as stored, in dataset order): a sum
/// per category in order of appearance, the category sums added in the key order 4, 1, 2, 3, 5
/// (other categories after, by number), divided by the count and rounded to 3 decimals.
fn official_mean<'a>(values: impl Iterator<Item = (&'a Category, f64)>) -> Option<f64> {
    let mut sums: Vec<(&Category, f64)> = Vec::new();
    let mut count = 0usize;
    for (category, value) in values {
        count += 1;
        match sums.iter_mut().find(|(known, _)| *known == category) {
            Some((_, sum)) => *sum += value,
            None => sums.push((category, 0.0 + value)),
        }
    }
    if count == 0 {
        return None;
    }
    sums.sort_by_key(|(category, _)| official_key(category));
    let total = sums.iter().fold(0.0, |total, (_, sum)| total + sum);
    Some(super::f1::python_round3(total / count as f64))
}

/// Position in `evaluation_stats.py`'s category order [4, 1, 2, 3, 5].
fn official_key(category: &Category) -> (usize, String) {
    match category {
        Category::Locomo(number) => {
            let order = [4u8, 1, 2, 3, 5];
            let position = order.iter().position(|known| known == number);
            (position.unwrap_or(order.len() + usize::from(*number)), String::new())
        }
        Category::LongMemEval(name) => (0, name.clone()),
    }
}

/// Per-run accuracy over the verdicts given, then mean and population std over runs; `failed`
/// judgements are counted but not scored.
fn judge_accuracy<'a>(
    verdicts: impl Iterator<Item = &'a [Verdict]>,
    failed: usize,
) -> Option<JudgeAccuracy> {
    // run index → (correct, judged); BTreeMap keeps runs in order.
    let mut per_run: std::collections::BTreeMap<u32, (usize, usize)> =
        std::collections::BTreeMap::new();
    for item_verdicts in verdicts {
        for verdict in item_verdicts {
            let entry = per_run.entry(verdict.run).or_default();
            entry.0 += usize::from(verdict.correct);
            entry.1 += 1;
        }
    }
    let accuracies: Vec<f64> =
        per_run.values().map(|(correct, judged)| *correct as f64 / *judged as f64).collect();
    let judged: usize = per_run.values().map(|(_, judged)| *judged).sum();
    if judged == 0 && failed == 0 {
        return None;
    }
    let (mean, std) = if accuracies.is_empty() { (0.0, 0.0) } else { mean_std(&accuracies) };
    Some(JudgeAccuracy { mean, std, runs: accuracies.len(), judged, failed })
}

/// LongMemEval's task-averaged accuracy: per run, the mean of the per-type accuracies; then
/// mean and std over runs.
fn task_averaged_accuracy(items: &[ItemScore]) -> Option<JudgeAccuracy> {
    let mut per_run_type: std::collections::BTreeMap<(u32, (usize, String)), (usize, usize)> =
        std::collections::BTreeMap::new();
    for item in items {
        for verdict in &item.judge {
            let entry =
                per_run_type.entry((verdict.run, category_order(&item.category))).or_default();
            entry.0 += usize::from(verdict.correct);
            entry.1 += 1;
        }
    }
    let mut per_run: std::collections::BTreeMap<u32, Vec<f64>> = std::collections::BTreeMap::new();
    for ((run, _), (correct, judged)) in &per_run_type {
        per_run.entry(*run).or_default().push(*correct as f64 / *judged as f64);
    }
    let accuracies: Vec<f64> = per_run
        .values()
        .map(|per_type| per_type.iter().sum::<f64>() / per_type.len() as f64)
        .collect();
    let judged = per_run_type.values().map(|(_, judged)| judged).sum::<usize>();
    let failed = items.iter().map(|item| item.judge_failed.len()).sum();
    if accuracies.is_empty() && failed == 0 {
        return None;
    }
    let (mean, std) = if accuracies.is_empty() { (0.0, 0.0) } else { mean_std(&accuracies) };
    Some(JudgeAccuracy { mean, std, runs: accuracies.len(), judged, failed })
}

fn mean_std(values: &[f64]) -> (f64, f64) {
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let variance = values.iter().map(|value| (value - mean).powi(2)).sum::<f64>() / n;
    (mean, variance.sqrt())
}

#[cfg(test)]
mod tests;
