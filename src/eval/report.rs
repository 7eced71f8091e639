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
pub fn build_rows(items: &[ItemScore], options: RowOptions) -> Vec<Row> {
    let RowOptions { locomo, audit, overall_with_adversarial, prices } = options;
    let mut categories: Vec<&Category> = Vec::new();
    for item in items {
        if !categories.contains(&&item.category) {
            categories.push(&item.category);
        }
    }
    categories.sort_by_key(|category| category_order(category));
    let audit = locomo && audit;

    let mut rows = Vec::new();
    let in_category = |category: &Category| -> Vec<&ItemScore> {
        items.iter().filter(|item| &item.category == category).collect()
    };
    if locomo {
        for category in categories.iter().filter(|category| **category != &Category::Locomo(5)) {
            let selected = in_category(category);
            rows.push(row(
                category.to_string(),
                category_label(category),
                &selected,
                audit,
                prices,
            ));
        }
        let answerable: Vec<&ItemScore> =
            items.iter().filter(|item| matches!(item.category, Category::Locomo(1..=4))).collect();
        if !answerable.is_empty() {
            rows.push(row(
                "overall_1_4".into(),
                "overall (1–4)".into(),
                &answerable,
                audit,
                prices,
            ));
        }
        let adversarial = in_category(&Category::Locomo(5));
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
            let mut overall =
                row("overall_1_5".into(), "overall (1–5)".into(), &all, audit, prices);
            // The judge grades categories 1–4 only: a judge figure over 1–5 does not exist.
            overall.raw.judge = None;
            if let Some(audited) = overall.audited.as_mut() {
                audited.judge = None;
            }
            rows.push(overall);
        }
    } else {
        for category in &categories {
            let selected = in_category(category);
            rows.push(row(
                category.to_string(),
                category_label(category),
                &selected,
                false,
                prices,
            ));
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
    category: &'a Category,
    f1: Option<f64>,
    exact_match: Option<bool>,
    judge: &'a [Verdict],
    judge_failed: usize,
    recall: Option<EvidenceRecall>,
}

fn raw_view(item: &ItemScore) -> View<'_> {
    View {
        category: &item.category,
        f1: item.f1,
        exact_match: item.exact_match,
        judge: &item.judge,
        judge_failed: item.judge_failed.len(),
        recall: item.recall,
    }
}

/// The audited view: `None` when the audit excludes the item.
fn audited_view(item: &ItemScore) -> Option<View<'_>> {
    let Some(audited) = &item.audit else { return Some(raw_view(item)) };
    if audited.excluded {
        return None;
    }
    let recall = if audited.evidence.is_some() { audited.recall } else { item.recall };
    Some(match &audited.answer {
        Some(_) => View {
            category: &item.category,
            f1: audited.f1,
            exact_match: audited.exact_match,
            judge: &audited.judge,
            judge_failed: audited.judge_failed.len(),
            recall,
        },
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

/// What every column of the table means: `eval --help` and `summary.md` print it.
pub const COLUMNS_HELP: &str = "\
Columns of the eval table (printed, and in summary.md / summary.json):
  category   LoCoMo, by its own category numbers: 1 multi-hop, 2 temporal, 3 open-domain,
             4 single-hop; `overall (1–4)` is the headline; `5 adversarial: refusal rate` is
             the share of category-5 answers that refuse (they contain \"not mentioned\" or
             \"no information available\"); `overall (1–5)` (--overall-with-5) is the
             official LoCoMo overall with category 5 included. Mem0's paper names the
             categories differently (1 single-hop, 3 multi-hop, 4 open-domain): compare by
             number. LongMemEval: question types, `overall` (micro mean), `task-averaged`
             (mean of the per-type accuracies), `abstention` (the `_abs` questions).
             A partial run (--partial) shows `PARTIAL n/N` in this header.
  n          questions in the row.
  F1 %       official LoCoMo score (task_eval/evaluation.py): token F1 over Porter stems
             after the official normalisation; category 1 split on commas, category 3 gold
             cut at `;`, category 5 the refusal check. Each question is rounded to 3
             decimals as the official pipeline stores it, then averaged as
             evaluation_stats.py does; shown as a percentage.
  EM %       exact match: equal sets of normalised tokens.
  judge % [judged, failed]
             LLM-judge accuracy (mean ± population std over --judge-runs), then the verdicts
             obtained and the judgements that failed, all runs together. Failed judgements
             are left out of the accuracy and retried by the next eval (exit code 2).
             `not judged`: the protocol does not judge the row (LoCoMo category 5).
  n / F1 % / judge % (audited)
             the same with the LoCoMo audit: corrected gold answers replace the dataset's,
             excluded questions leave the row (--no-audit drops these columns).
  recall all/any %
             questions whose cited context holds all / at least one gold evidence turn.
  errors     questions whose answering failed (they score 0 and are judged WRONG).
  tokens/q   answering tokens (prompt + completion) per question.
  cost $     answering cost of the row at the answering model's list price.
";

/// How many of the selection's questions the table covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Coverage {
    /// Questions scored.
    pub scored: usize,
    /// Questions in the dataset selection.
    pub expected: usize,
}

impl Coverage {
    /// `PARTIAL n/N` when questions are missing.
    pub fn label(&self) -> Option<String> {
        (self.scored < self.expected).then(|| format!("PARTIAL {}/{}", self.scored, self.expected))
    }
}

/// The summary table as Markdown: one line per row; audited columns when any row has them. A
/// partial run says so in the first header cell.
pub fn markdown_table(rows: &[Row], coverage: Coverage) -> String {
    let audited = rows.iter().any(|row| row.audited.is_some());
    let with_f1 = rows.iter().any(|row| row.raw.f1.is_some());
    let with_cost = rows.iter().any(|row| row.cost_usd.is_some());
    let with_judge = rows.iter().any(|row| row.raw.judge.is_some());
    let first = match coverage.label() {
        Some(label) => format!("category ({label})"),
        None => "category".to_string(),
    };
    let mut header = vec![first.as_str(), "n"];
    if with_f1 {
        header.extend(["F1 %", "EM %"]);
    }
    if with_judge {
        header.push("judge % [judged, failed]");
    }
    if audited {
        header.extend(["n (audited)", "F1 % (audited)"]);
        if with_judge {
            header.push("judge % (audited) [judged, failed]");
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
            cells.push(f1_cell(row.raw.f1));
            cells.push(percent(row.raw.exact_match));
        }
        if with_judge {
            cells.push(judge_cell(row.raw.judge));
        }
        if audited {
            let metrics = row.audited.as_ref();
            cells.push(metrics.map_or("–".into(), |metrics| metrics.count.to_string()));
            cells.push(f1_cell(metrics.and_then(|metrics| metrics.f1)));
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

/// F1 as the official scorer reports it: 3 decimals of a fraction, shown as a percentage with
/// one decimal.
fn f1_cell(value: Option<f64>) -> String {
    value.map_or("–".into(), |value| format!("{:.1}", value * 100.0))
}

fn percent(value: Option<f64>) -> String {
    value.map_or("–".into(), |value| format!("{:.2}", value * 100.0))
}

fn judge_cell(judge: Option<JudgeAccuracy>) -> String {
    match judge {
        Some(judge) if judge.judged == 0 => format!("– [0, {} failed]", judge.failed),
        Some(judge) if judge.runs > 1 => format!(
            "{:.2} ± {:.2} [{}, {} failed]",
            judge.mean * 100.0,
            judge.std * 100.0,
            judge.judged,
            judge.failed
        ),
        Some(judge) => {
            format!("{:.2} [{}, {} failed]", judge.mean * 100.0, judge.judged, judge.failed)
        }
        None => "not judged".into(),
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
