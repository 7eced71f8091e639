//! Scoring of answered runs: reads `result/<dataset>/*_result_<model>_<file>.jsonl`, scores every
//! question (official LoCoMo F1 and exact match, evidence recall, LLM judge), and writes
//! `eval/<dataset>/<file>/`: `scores.jsonl` (one scored question per line), `judgements.jsonl`
//! (the judge cache), `summary.json`, `summary.md` and two SVG plots.
//!
//! `eval` reads result files only; it never imports `agent`. The scorer (`f1`, `porter`) and the
//! aggregation (`report`) are pure; only [`evaluate`] does IO and only `judge` calls a model.

pub mod audit;
pub mod f1;
pub mod judge;
pub mod porter;
pub mod recall;
pub mod report;
pub mod svg;

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

use self::audit::{AuditAction, AuditEntry};
use self::judge::Verdict;
use self::recall::EvidenceRecall;
use self::report::{Prices, Row};
use crate::dataset::{Category, DatasetKind};
use crate::llm::{ChatModel, Usage};
use crate::results::{ResultLine, Status};

/// Everything `eval` needs, resolved by the CLI.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalSettings {
    /// Project root holding `result/` (read) and `eval/` (written).
    pub root: PathBuf,
    /// Dataset (`locomo` or `LM` in paths).
    pub dataset: DatasetKind,
    /// Model tag of the result files (`--model`).
    pub model: String,
    /// Run tag of the result files (`--file`); also names the output directory.
    pub file: String,
    /// Judge model id sent to the endpoint; `None` skips the LLM judge.
    pub judge_model: Option<String>,
    /// Independent judge runs per question (≥ 1); accuracy is reported as mean ± std over runs.
    pub judge_runs: u32,
    /// Judge requests in flight at once.
    pub concurrency: usize,
    /// Also report LoCoMo scores with the audit corrections (ignored for LongMemEval).
    pub audit: bool,
    /// Prices of the answering model, for the cost column; `None` uses the model's list price
    /// when `llm::models` knows it, else leaves the column out.
    pub prices: Option<Prices>,
}

impl EvalSettings {
    /// Defaults for a run: no judge, one judge run, 8 in flight, audit on, no prices.
    pub fn new(root: impl Into<PathBuf>, dataset: DatasetKind, model: &str, file: &str) -> Self {
        Self {
            root: root.into(),
            dataset,
            model: model.to_string(),
            file: file.to_string(),
            judge_model: None,
            judge_runs: 1,
            concurrency: 8,
            audit: true,
            prices: None,
        }
    }

    /// `eval/<dataset>/<file>/` under the root.
    pub fn output_dir(&self) -> PathBuf {
        self.root.join("eval").join(self.dataset.as_str()).join(&self.file)
    }
}

/// One scored question: a line of `scores.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ItemScore {
    /// Question id.
    pub question_id: String,
    /// Sample id.
    pub sample: String,
    /// Category.
    pub category: Category,
    /// Question text.
    pub question: String,
    /// Gold answer.
    pub answer: Option<String>,
    /// The model's answer.
    pub prediction: String,
    /// Whether answering succeeded.
    pub status: Status,
    /// Official LoCoMo score (LoCoMo only).
    pub f1: Option<f64>,
    /// Exact match (LoCoMo only).
    pub exact_match: Option<bool>,
    /// Recall of the gold evidence in the cited context.
    pub recall: Option<EvidenceRecall>,
    /// Judge verdicts, one per judge run (empty when not judged).
    #[serde(default)]
    pub judge: Vec<Verdict>,
    /// The audit's view of this question, when it is audited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit: Option<AuditedScore>,
    /// Prompt tokens spent answering.
    pub prompt_tokens: u64,
    /// Completion tokens spent answering.
    pub completion_tokens: u64,
}

/// An audited question's scores under the audit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditedScore {
    /// The audit's error type.
    pub error_type: String,
    /// The question leaves the audited scores.
    pub excluded: bool,
    /// Corrected gold answer, when the audit corrects it.
    pub answer: Option<String>,
    /// Score against the corrected answer.
    pub f1: Option<f64>,
    /// Exact match against the corrected answer.
    pub exact_match: Option<bool>,
    /// Judge verdicts against the corrected answer.
    #[serde(default)]
    pub judge: Vec<Verdict>,
    /// Corrected gold evidence, when the audit names different evidence.
    pub evidence: Option<Vec<String>>,
    /// Recall of the corrected evidence.
    pub recall: Option<EvidenceRecall>,
}

/// What `eval` produced: `summary.json` is this value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalSummary {
    /// Dataset name as in paths.
    pub dataset: String,
    /// Model tag.
    pub model: String,
    /// Run tag.
    pub file: String,
    /// Result files read, relative to the root, in reading order.
    pub result_files: Vec<String>,
    /// Questions scored (after dropping repeated ids; the last line for an id wins).
    pub questions: usize,
    /// Judge model, when judged.
    pub judge_model: Option<String>,
    /// Judge runs requested.
    pub judge_runs: u32,
    /// Judgements served from the cache / made now / failed (not cached; a rerun retries).
    pub judge_cached: usize,
    /// Judgements made in this evaluation.
    pub judge_new: usize,
    /// Judgements that failed after retries and re-asks.
    pub judge_failed: usize,
    /// Tokens the judge used in this evaluation.
    pub judge_usage: Usage,
    /// What those tokens cost in US dollars, when the judge model's price is known.
    pub judge_cost_usd: Option<f64>,
    /// Audit counts (LoCoMo with audit on): questions corrected / excluded among those scored.
    pub audit_corrected: usize,
    /// See `audit_corrected`.
    pub audit_excluded: usize,
    /// The table rows.
    pub rows: Vec<Row>,
}

impl EvalSummary {
    /// The summary table as Markdown (what the CLI prints).
    pub fn table(&self) -> String {
        report::markdown_table(&self.rows)
    }
}

/// Find the run's result files: `result/<dataset>/*_result_<model>_<file>.jsonl`, sorted by name.
pub fn find_result_files(settings: &EvalSettings) -> anyhow::Result<Vec<PathBuf>> {
    let directory = settings.root.join("result").join(settings.dataset.as_str());
    let suffix = format!("_result_{}_{}.jsonl", settings.model, settings.file);
    let entries = std::fs::read_dir(&directory)
        .with_context(|| format!("reading result directory {}", directory.display()))?;
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.with_context(|| format!("listing {}", directory.display()))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.ends_with(&suffix) && name.len() > suffix.len() && entry.path().is_file() {
            files.push(entry.path());
        }
    }
    files.sort();
    if files.is_empty() {
        anyhow::bail!("no result files match {}/*{suffix}", directory.display());
    }
    Ok(files)
}

/// Read result lines from `files` in order; a repeated question id keeps its first position
/// and its last line (a resumed run may have answered it again).
pub fn read_results(files: &[PathBuf]) -> anyhow::Result<Vec<ResultLine>> {
    let mut lines: IndexMap<String, ResultLine> = IndexMap::new();
    for path in files {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        for (number, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let result: ResultLine = serde_json::from_str(line)
                .with_context(|| format!("parsing {} line {}", path.display(), number + 1))?;
            lines.insert(result.question_id.clone(), result);
        }
    }
    Ok(lines.into_values().collect())
}

/// Score result lines without a judge: F1, exact match, recall, and the audit view.
pub fn score_results(
    lines: &[ResultLine],
    dataset: DatasetKind,
    audit: Option<&std::collections::BTreeMap<String, AuditEntry>>,
) -> Vec<ItemScore> {
    lines.iter().map(|line| score_line(line, dataset, audit)).collect()
}

fn score_line(
    line: &ResultLine,
    dataset: DatasetKind,
    audit: Option<&std::collections::BTreeMap<String, AuditEntry>>,
) -> ItemScore {
    let locomo_category = match (dataset, &line.category) {
        (DatasetKind::Locomo, Category::Locomo(number)) => Some(*number),
        _ => None,
    };
    let score = locomo_category
        .and_then(|number| f1::score_locomo(number, &line.prediction, line.answer.as_deref()));
    let recall = recall::evidence_recall(&line.evidence, &line.prediction_context);
    let audit =
        audit.and_then(|audit| audit.get(&line.question_id)).map(|entry| {
            let (excluded, answer) = match &entry.action {
                AuditAction::Corrected { answer } => (false, Some(answer.clone())),
                AuditAction::Excluded => (true, None),
                AuditAction::EvidenceOnly => (false, None),
            };
            let corrected = answer.as_deref().zip(locomo_category).and_then(|(answer, number)| {
                f1::score_locomo(number, &line.prediction, Some(answer))
            });
            AuditedScore {
                error_type: entry.error_type.clone(),
                excluded,
                answer,
                f1: corrected.map(|score| score.f1),
                exact_match: corrected.map(|score| score.exact_match),
                judge: Vec::new(),
                evidence: entry.evidence.clone(),
                recall: entry.evidence.as_ref().and_then(|evidence| {
                    recall::evidence_recall(evidence, &line.prediction_context)
                }),
            }
        });
    ItemScore {
        question_id: line.question_id.clone(),
        sample: line.sample.clone(),
        category: line.category.clone(),
        question: line.question.clone(),
        answer: line.answer.clone(),
        prediction: line.prediction.clone(),
        status: line.status,
        f1: score.map(|score| score.f1),
        exact_match: score.map(|score| score.exact_match),
        recall,
        judge: Vec::new(),
        audit,
        prompt_tokens: line.prompt_tokens,
        completion_tokens: line.completion_tokens,
    }
}

/// Evaluate a run: score every result line, judge it when `judge` is given (with
/// `settings.judge_model` naming the model to request), and write `eval/<dataset>/<file>/`.
///
/// Returns the summary; the caller prints [`EvalSummary::table`].
pub async fn evaluate<M: ChatModel>(
    settings: &EvalSettings,
    judge: Option<&M>,
) -> anyhow::Result<EvalSummary> {
    let judging = match (judge, &settings.judge_model) {
        (Some(model), Some(name)) => Some((model, name.clone())),
        (None, None) => None,
        (Some(_), None) => anyhow::bail!("a judge client was given but no judge model name"),
        (None, Some(name)) => {
            anyhow::bail!("judge model {name} is set but no judge client was given")
        }
    };
    if settings.judge_runs == 0 {
        anyhow::bail!("judge runs must be at least 1");
    }
    let files = find_result_files(settings)?;
    let lines = read_results(&files)?;
    let locomo = settings.dataset == DatasetKind::Locomo;
    let audit = if locomo && settings.audit { Some(audit::locomo_audit()?) } else { None };
    let mut items = score_results(&lines, settings.dataset, audit);
    tracing::info!(questions = items.len(), files = files.len(), "scored result lines");

    let output_dir = settings.output_dir();
    std::fs::create_dir_all(&output_dir)
        .with_context(|| format!("creating {}", output_dir.display()))?;
    let mut judge_stats = judge::JudgeStats::default();
    if let Some((model, name)) = judging {
        let judge_settings = judge::JudgeSettings {
            model: name,
            runs: settings.judge_runs,
            concurrency: settings.concurrency,
            dataset: settings.dataset,
        };
        judge_stats = judge::judge_items(
            model,
            &judge_settings,
            &mut items,
            &output_dir.join("judgements.jsonl"),
        )
        .await?;
        tracing::info!(
            cached = judge_stats.cached,
            new = judge_stats.new,
            failed = judge_stats.failed,
            "judged answers"
        );
    }

    // Without explicit prices, the answering model's list price is used when known.
    let prices = settings.prices.or_else(|| {
        crate::llm::models::model_price(&settings.model).map(|price| Prices {
            input_per_million: price.prompt_per_million,
            output_per_million: price.completion_per_million,
        })
    });
    let rows = report::build_rows(&items, locomo, settings.audit, prices);
    let relative =
        |path: &PathBuf| path.strip_prefix(&settings.root).unwrap_or(path).display().to_string();
    let summary = EvalSummary {
        dataset: settings.dataset.as_str().to_string(),
        model: settings.model.clone(),
        file: settings.file.clone(),
        result_files: files.iter().map(relative).collect(),
        questions: items.len(),
        judge_model: settings.judge_model.clone(),
        judge_runs: settings.judge_runs,
        judge_cached: judge_stats.cached,
        judge_new: judge_stats.new,
        judge_failed: judge_stats.failed,
        judge_usage: judge_stats.usage,
        judge_cost_usd: settings
            .judge_model
            .as_deref()
            .and_then(|model| crate::llm::models::estimate_cost_usd(model, judge_stats.usage)),
        audit_corrected: count_audit(&items, |audited| audited.answer.is_some()),
        audit_excluded: count_audit(&items, |audited| audited.excluded),
        rows,
    };
    write_outputs(&output_dir, &items, &summary)?;
    Ok(summary)
}

fn count_audit(items: &[ItemScore], wanted: fn(&AuditedScore) -> bool) -> usize {
    items.iter().filter(|item| item.audit.as_ref().is_some_and(wanted)).count()
}

/// Write `scores.jsonl`, `summary.json`, `summary.md` and the plots, each through a temporary
/// file renamed into place.
fn write_outputs(
    output_dir: &Path,
    items: &[ItemScore],
    summary: &EvalSummary,
) -> anyhow::Result<()> {
    let mut scores = String::new();
    for item in items {
        scores.push_str(&serde_json::to_string(item).context("serialising a score")?);
        scores.push('\n');
    }
    crate::fsutil::write_atomic(&output_dir.join("scores.jsonl"), &scores)?;
    let json = serde_json::to_string_pretty(summary).context("serialising the summary")?;
    crate::fsutil::write_atomic(&output_dir.join("summary.json"), &(json + "\n"))?;
    crate::fsutil::write_atomic(&output_dir.join("summary.md"), summary_markdown(summary))?;
    let title = format!("{} / {} / {}", summary.dataset, summary.model, summary.file);
    crate::fsutil::write_atomic(
        &output_dir.join("accuracy.svg"),
        svg::accuracy_chart(&format!("Accuracy: {title}"), &summary.rows),
    )?;
    crate::fsutil::write_atomic(
        &output_dir.join("tokens.svg"),
        svg::tokens_chart(&format!("Tokens per question: {title}"), &summary.rows),
    )?;
    Ok(())
}

/// `summary.md`: a short header, the table, and what the columns mean.
pub fn summary_markdown(summary: &EvalSummary) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ =
        writeln!(out, "# Evaluation: {} / {} / {}\n", summary.dataset, summary.model, summary.file);
    let _ = writeln!(
        out,
        "- Questions: {} from {} result file(s).",
        summary.questions,
        summary.result_files.len()
    );
    match &summary.judge_model {
        Some(model) => {
            let _ = writeln!(
                out,
                "- Judge: `{model}`, {} run(s){}; {} verdict(s) from cache, {} new, {} failed; {} judge tokens spent now{}.",
                summary.judge_runs,
                if summary.judge_runs > 1 { " (accuracy as mean ± std over runs)" } else { "" },
                summary.judge_cached,
                summary.judge_new,
                summary.judge_failed,
                summary.judge_usage.total(),
                summary.judge_cost_usd.map_or(String::new(), |cost| format!(" (${cost:.4})"))
            );
        }
        None => {
            let _ = writeln!(out, "- Judge: none.");
        }
    }
    if summary.dataset == DatasetKind::Locomo.as_str() {
        let _ = writeln!(
            out,
            "- Categories (LoCoMo numbering): 1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adversarial."
        );
        if summary.rows.iter().any(|row| row.audited.is_some()) {
            let _ = writeln!(
                out,
                "- Audited columns apply the LoCoMo audit (dial481/locomo-audit, CC BY-NC 4.0): {} answer(s) corrected, {} question(s) excluded.",
                summary.audit_corrected, summary.audit_excluded
            );
        }
    }
    let _ = writeln!(out, "\n{}", summary.table());
    if summary.dataset == DatasetKind::Locomo.as_str() {
        let _ = writeln!(
            out,
            "F1 is the official LoCoMo score (Porter-stemmed token F1; category 1 split on commas; category 3 gold cut at `;`; category 5 scores a refusal). EM compares sets of normalised tokens. The judge grades categories 1–4."
        );
    } else {
        let _ = writeln!(
            out,
            "Overall is the micro mean over questions; task-averaged is the mean of the per-type accuracies; abstention covers the `_abs` questions."
        );
    }
    let _ = writeln!(
        out,
        "Recall: share of questions whose cited context holds all / any of the gold evidence. Tokens/q: answering tokens (prompt + completion) per question.\n"
    );
    let _ = writeln!(out, "![accuracy](accuracy.svg)\n\n![tokens per question](tokens.svg)");
    out
}
