//! Aggregation of per-question scores into the rows of `summary.json` / `summary.md`: per
//! category (LoCoMo categories always named by number and name), overall, LoCoMo's overall for
//! categories 1–4, and LongMemEval's task-averaged and abstention accuracy; each with the audited
//! view beside the raw one where an audit applies.
//!
//! Pure: items in, rows and text out. Averages are micro (sum of item scores / items) as in the
//! official `evaluation_stats.py`; judge accuracy is computed per judge run and reported as the
//! mean and population standard deviation over runs.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::ItemScore;
use super::judge::Verdict;
use super::recall::EvidenceRecall;
use crate::dataset::Category;

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
    /// Questions judged per run (the largest count over runs).
    pub judged: usize,
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
pub struct Row {
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

/// Build every row for `items`: categories in their canonical order, then the overall rows.
pub fn build_rows(
    items: &[ItemScore],
    locomo: bool,
    audit: bool,
    prices: Option<Prices>,
) -> Vec<Row> {
    let mut categories: Vec<&Category> = Vec::new();
    for item in items {
        if !categories.contains(&&item.category) {
            categories.push(&item.category);
        }
    }
    categories.sort_by_key(|category| category_order(category));
    let audit = locomo && audit;

    let mut rows = Vec::new();
    for category in categories {
        let selected: Vec<&ItemScore> =
            items.iter().filter(|item| &item.category == category).collect();
        rows.push(row(category.to_string(), category_label(category), &selected, audit, prices));
    }
    let all: Vec<&ItemScore> = items.iter().collect();
    if locomo {
        let answerable: Vec<&ItemScore> =
            items.iter().filter(|item| matches!(item.category, Category::Locomo(1..=4))).collect();
        rows.push(row("overall_1_4".into(), "overall (1–4)".into(), &answerable, audit, prices));
        rows.push(row("overall".into(), "overall".into(), &all, audit, prices));
    } else {
        rows.push(row("overall".into(), "overall".into(), &all, false, prices));
        let mut task_averaged =
            row("task_averaged".into(), "task-averaged".into(), &all, false, prices);
        task_averaged.raw.judge = task_averaged_accuracy(items);
        task_averaged.raw.recall = None;
        rows.push(task_averaged);
        let abstention: Vec<&ItemScore> =
            items.iter().filter(|item| item.question_id.ends_with("_abs")).collect();
        if !abstention.is_empty() {
            rows.push(row(
                "abstention".into(),
                "abstention (_abs)".into(),
                &abstention,
                false,
                prices,
            ));
        }
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

fn category_order(category: &Category) -> (usize, String) {
    match category {
        Category::Locomo(number) => (usize::from(*number), String::new()),
        Category::LongMemEval(name) => {
            let position = LONGMEMEVAL_TYPES.iter().position(|known| known == name);
            (position.unwrap_or(LONGMEMEVAL_TYPES.len()), name.clone())
        }
    }
}

/// What aggregation needs from one item under one view.
struct View<'a> {
    f1: Option<f64>,
    exact_match: Option<bool>,
    judge: &'a [Verdict],
    recall: Option<EvidenceRecall>,
}

fn raw_view(item: &ItemScore) -> View<'_> {
    View { f1: item.f1, exact_match: item.exact_match, judge: &item.judge, recall: item.recall }
}

/// The audited view: `None` when the audit excludes the item.
fn audited_view(item: &ItemScore) -> Option<View<'_>> {
    let Some(audited) = &item.audit else { return Some(raw_view(item)) };
    if audited.excluded {
        return None;
    }
    let recall = if audited.evidence.is_some() { audited.recall } else { item.recall };
    Some(match &audited.answer {
        Some(_) => {
            View { f1: audited.f1, exact_match: audited.exact_match, judge: &audited.judge, recall }
        }
        None => View { recall, ..raw_view(item) },
    })
}

fn row(
    key: String,
    label: String,
    items: &[&ItemScore],
    audit: bool,
    prices: Option<Prices>,
) -> Row {
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
    Row { key, label, raw, audited, errors, tokens_per_question, cost_usd }
}

fn metrics<'a>(views: impl Iterator<Item = View<'a>>) -> Metrics {
    let views: Vec<View<'a>> = views.collect();
    let mean = |values: Vec<f64>| {
        (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
    };
    let f1 = mean(views.iter().filter_map(|view| view.f1).collect());
    let exact_match = mean(
        views
            .iter()
            .filter_map(|view| view.exact_match.map(|hit| if hit { 1.0 } else { 0.0 }))
            .collect(),
    );
    let judge = judge_accuracy(views.iter().map(|view| view.judge));
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

/// Per-run accuracy over the verdicts given, then mean and population std over runs.
fn judge_accuracy<'a>(verdicts: impl Iterator<Item = &'a [Verdict]>) -> Option<JudgeAccuracy> {
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
    let judged = per_run.values().map(|(_, judged)| *judged).max()?;
    let (mean, std) = mean_std(&accuracies);
    Some(JudgeAccuracy { mean, std, runs: accuracies.len(), judged })
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
    let judged =
        per_run_type.values().map(|(_, judged)| judged).sum::<usize>() / per_run.len().max(1);
    if accuracies.is_empty() {
        return None;
    }
    let (mean, std) = mean_std(&accuracies);
    Some(JudgeAccuracy { mean, std, runs: accuracies.len(), judged })
}

fn mean_std(values: &[f64]) -> (f64, f64) {
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let variance = values.iter().map(|value| (value - mean).powi(2)).sum::<f64>() / n;
    (mean, variance.sqrt())
}

/// The summary table as Markdown: one line per row; audited columns when any row has them.
pub fn markdown_table(rows: &[Row]) -> String {
    let audited = rows.iter().any(|row| row.audited.is_some());
    let with_f1 = rows.iter().any(|row| row.raw.f1.is_some());
    let with_cost = rows.iter().any(|row| row.cost_usd.is_some());
    let with_judge = rows.iter().any(|row| row.raw.judge.is_some());
    let mut header = vec!["category", "n"];
    if with_f1 {
        header.extend(["F1 %", "EM %"]);
    }
    if with_judge {
        header.push("judge %");
    }
    if audited {
        header.extend(["n (audited)", "F1 % (audited)"]);
        if with_judge {
            header.push("judge % (audited)");
        }
    }
    header.extend(["recall all/any %", "errors", "tokens/q"]);
    if with_cost {
        header.push("cost $");
    }
    let mut out = String::new();
    let _ = writeln!(out, "| {} |", header.join(" | "));
    let _ = writeln!(out, "|{}|", header.iter().map(|_| "---").collect::<Vec<_>>().join("|"));
    for row in rows {
        let mut cells = vec![row.label.clone(), row.raw.count.to_string()];
        if with_f1 {
            cells.push(percent(row.raw.f1));
            cells.push(percent(row.raw.exact_match));
        }
        if with_judge {
            cells.push(judge_cell(row.raw.judge));
        }
        if audited {
            let metrics = row.audited.as_ref();
            cells.push(metrics.map_or("–".into(), |metrics| metrics.count.to_string()));
            cells.push(percent(metrics.and_then(|metrics| metrics.f1)));
            if with_judge {
                cells.push(judge_cell(metrics.and_then(|metrics| metrics.judge)));
            }
        }
        cells.push(match row.raw.recall {
            Some(recall) => format!("{:.2} / {:.2}", recall.all * 100.0, recall.any * 100.0),
            None => "–".into(),
        });
        cells.push(row.errors.to_string());
        cells.push(format!("{:.0}", row.tokens_per_question));
        if with_cost {
            cells.push(row.cost_usd.map_or("–".into(), |cost| format!("{cost:.4}")));
        }
        let _ = writeln!(out, "| {} |", cells.join(" | "));
    }
    out
}

fn percent(value: Option<f64>) -> String {
    value.map_or("–".into(), |value| format!("{:.2}", value * 100.0))
}

fn judge_cell(judge: Option<JudgeAccuracy>) -> String {
    match judge {
        Some(judge) if judge.runs > 1 => {
            format!("{:.2} ± {:.2}", judge.mean * 100.0, judge.std * 100.0)
        }
        Some(judge) => format!("{:.2}", judge.mean * 100.0),
        None => "–".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_and_population_std() {
        let (mean, std) = mean_std(&[0.5, 0.7, 0.6]);
        assert!((mean - 0.6).abs() < 1e-12);
        assert!((std - (0.02f64 / 3.0).sqrt()).abs() < 1e-12);
        assert_eq!(mean_std(&[0.25]), (0.25, 0.0));
    }

    #[test]
    fn categories_sort_by_number_then_known_types() {
        let mut locomo = [Category::Locomo(5), Category::Locomo(1), Category::Locomo(3)];
        locomo.sort_by_key(category_order);
        let labels: Vec<String> = locomo.iter().map(category_label).collect();
        assert_eq!(labels, ["1 multi-hop", "3 open-domain", "5 adversarial"]);
        let mut types = [
            Category::LongMemEval("some-new-type".into()),
            Category::LongMemEval("temporal-reasoning".into()),
            Category::LongMemEval("single-session-user".into()),
        ];
        types.sort_by_key(category_order);
        let labels: Vec<String> = types.iter().map(category_label).collect();
        assert_eq!(labels, ["single-session-user", "temporal-reasoning", "some-new-type"]);
    }
}
