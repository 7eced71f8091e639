//! Scoring of answered runs: reads `result/<dataset>/*_result_<model>_<file>.jsonl`, checks
//! the lines against the dataset the run used (every question once, nothing foreign; see
//! `input`), scores every question (official LoCoMo F1 and exact match, evidence recall, LLM
//! judge), and writes `eval/<dataset>/<file>/`: `scores.jsonl` (one scored question per line,
//! in dataset order), `judgements.jsonl` (the judge cache), `summary.json`, `summary.md` and two
//! SVG plots.
//!
//! `eval` reads result files and the dataset only; it never imports `agent`. The scorer (`f1`,
//! `porter`) and the aggregation (`report`) are pure; only [`evaluate`] does IO and only `judge`
//! calls a model.

pub mod audit;
pub mod f1;
pub mod input;
pub mod judge;
pub mod porter;
pub mod recall;
pub mod report;
pub mod svg;

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

use self::audit::{Audit, AuditAction};
use self::input::{Matched, Selection};
use self::judge::{CustomPrompt, JudgeProtocol, Verdict};
use self::recall::EvidenceRecall;
use self::report::{Coverage, Prices, Row, RowOptions};
use crate::dataset::{Category, DatasetKind, LongMemEvalType};
use crate::llm::{ChatModel, Usage};
use crate::results::Status;

/// Everything `eval` needs, resolved by the CLI.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalSettings {
    /// Project root holding `result/` (read) and `eval/` (written).
    pub root: PathBuf,
    /// Dataset (`locomo` or `LM` in paths).
    pub dataset: DatasetKind,
    /// The dataset file the run answered (its questions are the ones expected).
    pub data_file: PathBuf,
    /// The run's `--sample`, if it answered one sample only.
    pub sample: Option<String>,
    /// The run's LongMemEval question type (`--ca`), if any.
    pub question_type: Option<LongMemEvalType>,
    /// Score what is there when questions are missing (tables say `PARTIAL n/N`).
    pub partial: bool,
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
    /// LoCoMo judge protocol.
    pub protocol: JudgeProtocol,
    /// A judge prompt file replacing the built-in prompts.
    pub judge_prompt: Option<PathBuf>,
    /// The LoCoMo audit file; `None` leaves the audit out (ignored for LongMemEval).
    pub audit_file: Option<PathBuf>,
    /// LoCoMo: also report the official overall over categories 1–5 (F1 only).
    pub overall_with_adversarial: bool,
    /// Prices of the answering model, for the cost column; `None` uses the model's list price
    /// when `llm::models` knows it, else leaves the column out.
    pub prices: Option<Prices>,
}

impl EvalSettings {
    /// Defaults for a run: the dataset at `data/dataset_<dataset>.json`, every question
    /// expected, no judge, one judge run, 8 in flight, the `mem0` protocol, the audit at
    /// `data/locomo_audit.json`, no prices.
    pub fn new(root: impl Into<PathBuf>, dataset: DatasetKind, model: &str, file: &str) -> Self {
        let root = root.into();
        Self {
            data_file: root.join("data").join(format!("dataset_{}.json", dataset.as_str())),
            audit_file: Some(root.join("data").join("locomo_audit.json")),
            root,
            dataset,
            sample: None,
            question_type: None,
            partial: false,
            model: model.to_string(),
            file: file.to_string(),
            judge_model: None,
            judge_runs: 1,
            concurrency: 8,
            protocol: JudgeProtocol::default(),
            judge_prompt: None,
            overall_with_adversarial: false,
            prices: None,
        }
    }

    /// `eval/<dataset>/<file>/` under the root.
    pub fn output_dir(&self) -> PathBuf {
        self.root.join("eval").join(self.dataset.as_str()).join(&self.file)
    }

    fn audit_in_use(&self) -> Option<&Path> {
        match self.dataset {
            DatasetKind::Locomo => self.audit_file.as_deref(),
            DatasetKind::LongMemEval => None,
        }
    }
}

/// One scored question: a line of `scores.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ItemScore {
    /// Question id (`<sample>:q<n>` with n counting from 1 for LoCoMo; see `qa_index`).
    pub question_id: String,
    /// LoCoMo: the question's position in its sample's `qa` list, counting from 0 as the
    /// official files and other systems' outputs do (`conv-26:q1` is `qa_index` 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qa_index: Option<usize>,
    /// Sample id.
    pub sample: String,
    /// Category.
    pub category: Category,
    /// Question text (the dataset's).
    pub question: String,
    /// Gold answer (the dataset's).
    pub answer: Option<String>,
    /// The model's answer.
    pub prediction: String,
    /// Whether answering succeeded.
    pub status: Status,
    /// Official LoCoMo score as the official pipeline stores it (rounded to 3 decimals;
    /// LoCoMo only).
    pub f1: Option<f64>,
    /// The same score before rounding.
    #[serde(default)]
    pub f1_unrounded: Option<f64>,
    /// Exact match (LoCoMo only).
    pub exact_match: Option<bool>,
    /// Recall of the gold evidence in the cited context.
    pub recall: Option<EvidenceRecall>,
    /// Judge verdicts, one per judge run (empty when not judged).
    #[serde(default)]
    pub judge: Vec<Verdict>,
    /// Judge runs whose judgement failed (a rerun retries them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub judge_failed: Vec<u32>,
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
    /// Score against the corrected answer (rounded as stored).
    pub f1: Option<f64>,
    /// Exact match against the corrected answer.
    pub exact_match: Option<bool>,
    /// Judge verdicts against the corrected answer.
    #[serde(default)]
    pub judge: Vec<Verdict>,
    /// Judge runs against the corrected answer that failed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub judge_failed: Vec<u32>,
    /// Corrected gold evidence, when the audit names different evidence.
    pub evidence: Option<Vec<String>>,
    /// Recall of the corrected evidence.
    pub recall: Option<EvidenceRecall>,
}

/// One question whose gold the audit changes, and what that did to this run's scores.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditChange {
    /// Question id.
    pub question_id: String,
    /// 0-based position in the sample's `qa` list.
    pub qa_index: Option<usize>,
    /// Category.
    pub category: Category,
    /// The audit's error type.
    pub error_type: String,
    /// The dataset's gold answer.
    pub old_gold: Option<String>,
    /// The corrected gold answer; `None` when the audit excludes the question.
    pub new_gold: Option<String>,
    /// F1 against the old gold.
    pub f1_raw: Option<f64>,
    /// F1 against the new gold (`None` when excluded).
    pub f1_audited: Option<f64>,
    /// Judge runs accepting the answer against the old gold / runs judged.
    pub judge_raw: Option<(usize, usize)>,
    /// The same against the new gold.
    pub judge_audited: Option<(usize, usize)>,
}

/// What `eval` produced: `summary.json` is this value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalSummary {
    /// Dataset name as in paths.
    pub dataset: String,
    /// The dataset file the results were checked against, relative to the root when inside it.
    pub data_file: String,
    /// Model tag.
    pub model: String,
    /// Run tag.
    pub file: String,
    /// Result files read, relative to the root, in reading order.
    pub result_files: Vec<String>,
    /// Questions scored.
    pub questions: usize,
    /// Questions the dataset selection holds (more than `questions` only with `--partial`).
    pub expected_questions: usize,
    /// `PARTIAL n/N` when questions are missing, else `None`.
    pub partial: Option<String>,
    /// Judge model, when judged.
    pub judge_model: Option<String>,
    /// Judge protocol (`mem0`, `strict`, or `custom:<file>` for a prompt file); LongMemEval is
    /// always judged by its per-type rules unless a prompt file is given.
    pub judge_protocol: Option<String>,
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
    /// Tokens of every verdict the report uses, cached ones included.
    pub judge_usage_total: Usage,
    /// What `judge_usage` cost in US dollars, when the judge model's price is known.
    pub judge_cost_usd: Option<f64>,
    /// What `judge_usage_total` cost in US dollars, when the judge model's price is known.
    pub judge_cost_total_usd: Option<f64>,
    /// The audit file used (LoCoMo with the audit on).
    pub audit_file: Option<String>,
    /// Audit counts among the questions scored: corrected / excluded / evidence only.
    pub audit_corrected: usize,
    /// See `audit_corrected`.
    pub audit_excluded: usize,
    /// See `audit_corrected`.
    pub audit_evidence_only: usize,
    /// Every scored question whose gold the audit corrects or excludes.
    pub audit_changes: Vec<AuditChange>,
    /// The table rows.
    pub rows: Vec<Row>,
}

impl EvalSummary {
    /// The summary table as Markdown (what the CLI prints).
    pub fn table(&self) -> String {
        report::markdown_table(&self.rows, self.coverage())
    }

    /// Questions scored out of those expected.
    pub fn coverage(&self) -> Coverage {
        Coverage { scored: self.questions, expected: self.expected_questions }
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

/// Score matched result lines without a judge: F1, exact match, recall, and the audit view.
/// Gold answers, evidence and categories are the dataset's.
pub fn score_results(
    matched: &[Matched],
    dataset: DatasetKind,
    audit: Option<&Audit>,
) -> Vec<ItemScore> {
    matched.iter().map(|entry| score_item(entry, dataset, audit)).collect()
}

fn score_item(entry: &Matched, dataset: DatasetKind, audit: Option<&Audit>) -> ItemScore {
    let Matched { line, question, qa_index } = entry;
    let locomo_category = match (dataset, &question.category) {
        (DatasetKind::Locomo, Category::Locomo(number)) => Some(*number),
        _ => None,
    };
    let score = locomo_category
        .and_then(|number| f1::score_locomo(number, &line.prediction, question.answer.as_deref()));
    let recall = recall::evidence_recall(&question.evidence, &line.prediction_context);
    let audit =
        audit.and_then(|audit| audit.get(&question.id)).map(|entry| {
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
                f1: corrected.map(|score| score.stored),
                exact_match: corrected.map(|score| score.exact_match),
                judge: Vec::new(),
                judge_failed: Vec::new(),
                evidence: entry.evidence.clone(),
                recall: entry.evidence.as_ref().and_then(|evidence| {
                    recall::evidence_recall(evidence, &line.prediction_context)
                }),
            }
        });
    ItemScore {
        question_id: question.id.clone(),
        qa_index: (dataset == DatasetKind::Locomo).then_some(*qa_index),
        sample: question.sample_id.clone(),
        category: question.category.clone(),
        question: question.question.clone(),
        answer: question.answer.clone(),
        prediction: line.prediction.clone(),
        status: line.status,
        f1: score.map(|score| score.stored),
        f1_unrounded: score.map(|score| score.f1),
        exact_match: score.map(|score| score.exact_match),
        recall,
        judge: Vec::new(),
        judge_failed: Vec::new(),
        audit,
        prompt_tokens: line.prompt_tokens,
        completion_tokens: line.completion_tokens,
    }
}

/// Every audit entry must name a question of the selection with the same category, or lie
/// outside the selection's samples; anything else means the audit file belongs to another
/// dataset version.
fn check_audit(
    audit: &Audit,
    audit_path: &Path,
    expected: &[input::ExpectedQuestion],
) -> anyhow::Result<()> {
    let samples: std::collections::BTreeSet<&str> =
        expected.iter().map(|entry| entry.question.sample_id.as_str()).collect();
    let mut problems = Vec::new();
    for entry in audit.values() {
        let sample = entry.question_id.split_once(":q").map_or("", |(sample, _)| sample);
        if !samples.contains(sample) {
            continue;
        }
        match expected.iter().find(|known| known.question.id == entry.question_id) {
            None => problems.push(format!("{} is not in the dataset", entry.question_id)),
            Some(known) if known.question.category != Category::Locomo(entry.category) => problems
                .push(format!(
                    "{} has category {} in the audit but {} in the dataset",
                    entry.question_id, entry.category, known.question.category
                )),
            Some(_) => {}
        }
    }
    if !problems.is_empty() {
        anyhow::bail!(
            "the audit file {} does not match the dataset: {}",
            audit_path.display(),
            problems.join("; ")
        );
    }
    Ok(())
}

/// Evaluate a run: check its result lines against the dataset, score them, judge them when
/// `judge` is given (with `settings.judge_model` naming the model to request), and write
/// `eval/<dataset>/<file>/`.
///
/// Returns the summary; the caller prints [`EvalSummary::table`]. Result files that do not
/// match the dataset selection are an [`input::RunError`].
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
    let custom = settings.judge_prompt.as_deref().map(CustomPrompt::load).transpose()?;
    let relative =
        |path: &Path| path.strip_prefix(&settings.root).unwrap_or(path).display().to_string();

    let files = find_result_files(settings)?;
    let selection = Selection {
        dataset: settings.dataset,
        file: &settings.data_file,
        sample: settings.sample.as_deref(),
        question_type: settings.question_type,
    };
    let expected = input::load_expected(&selection)?;
    let lines = input::read_result_lines(&files)?;
    let matched = input::match_results(
        &relative(&settings.data_file),
        &expected,
        &files,
        lines,
        settings.partial,
        &relative,
    )?;
    let coverage = Coverage { scored: matched.len(), expected: expected.len() };
    if let Some(label) = coverage.label() {
        tracing::warn!(
            scored = coverage.scored,
            expected = coverage.expected,
            "{label}: scoring the questions that have a result line"
        );
    }

    let audit = match settings.audit_in_use() {
        Some(path) => {
            let audit = audit::load_audit(path)?;
            check_audit(&audit, path, &expected)?;
            Some(audit)
        }
        None => None,
    };
    let mut items = score_results(&matched, settings.dataset, audit.as_ref());
    tracing::info!(questions = items.len(), files = files.len(), "scored result lines");

    let output_dir = settings.output_dir();
    std::fs::create_dir_all(&output_dir)
        .with_context(|| format!("creating {}", output_dir.display()))?;
    let mut judge_stats = judge::JudgeStats::default();
    let protocol_name = custom.as_ref().map_or_else(
        || match settings.dataset {
            DatasetKind::Locomo => settings.protocol.as_str().to_string(),
            DatasetKind::LongMemEval => "longmemeval".to_string(),
        },
        |custom| custom.name.clone(),
    );
    if let Some((model, name)) = judging {
        let judge_settings = judge::JudgeSettings {
            model: name,
            runs: settings.judge_runs,
            concurrency: settings.concurrency,
            dataset: settings.dataset,
            protocol: settings.protocol,
            custom: custom.map(std::sync::Arc::new),
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
    let locomo = settings.dataset == DatasetKind::Locomo;
    let rows = report::build_rows(
        &items,
        RowOptions {
            locomo,
            audit: audit.is_some(),
            overall_with_adversarial: settings.overall_with_adversarial,
            prices,
        },
    );
    let judge_cost = |usage: Usage| {
        settings
            .judge_model
            .as_deref()
            .and_then(|model| crate::llm::models::estimate_cost_usd(model, usage))
    };
    let summary = EvalSummary {
        dataset: settings.dataset.as_str().to_string(),
        data_file: relative(&settings.data_file),
        model: settings.model.clone(),
        file: settings.file.clone(),
        result_files: files.iter().map(|file| relative(file)).collect(),
        questions: items.len(),
        expected_questions: expected.len(),
        partial: coverage.label(),
        judge_model: settings.judge_model.clone(),
        judge_protocol: settings.judge_model.as_ref().map(|_| protocol_name),
        judge_runs: settings.judge_runs,
        judge_cached: judge_stats.cached,
        judge_new: judge_stats.new,
        judge_failed: judge_stats.failed,
        judge_usage: judge_stats.usage,
        judge_usage_total: judge_stats.usage_total,
        judge_cost_usd: judge_cost(judge_stats.usage),
        judge_cost_total_usd: judge_cost(judge_stats.usage_total),
        audit_file: audit.as_ref().and(settings.audit_in_use()).map(relative),
        audit_corrected: count_audit(&items, |audited| audited.answer.is_some()),
        audit_excluded: count_audit(&items, |audited| audited.excluded),
        audit_evidence_only: count_audit(&items, |audited| {
            audited.answer.is_none() && !audited.excluded
        }),
        audit_changes: audit_changes(&items),
        rows,
    };
    write_outputs(&output_dir, &items, &summary)?;
    Ok(summary)
}

fn count_audit(items: &[ItemScore], wanted: fn(&AuditedScore) -> bool) -> usize {
    items.iter().filter(|item| item.audit.as_ref().is_some_and(wanted)).count()
}

/// Accepted / judged verdicts.
fn tally(verdicts: &[Verdict]) -> Option<(usize, usize)> {
    (!verdicts.is_empty())
        .then(|| (verdicts.iter().filter(|verdict| verdict.correct).count(), verdicts.len()))
}

fn audit_changes(items: &[ItemScore]) -> Vec<AuditChange> {
    items
        .iter()
        .filter_map(|item| {
            let audited = item.audit.as_ref()?;
            if audited.answer.is_none() && !audited.excluded {
                return None;
            }
            Some(AuditChange {
                question_id: item.question_id.clone(),
                qa_index: item.qa_index,
                category: item.category.clone(),
                error_type: audited.error_type.clone(),
                old_gold: item.answer.clone(),
                new_gold: audited.answer.clone(),
                f1_raw: item.f1,
                f1_audited: audited.f1,
                judge_raw: tally(&item.judge),
                judge_audited: tally(&audited.judge),
            })
        })
        .collect()
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
    crate::fsutil::write_atomic(&output_dir.join("summary.json"), json + "\n")?;
    crate::fsutil::write_atomic(&output_dir.join("summary.md"), summary_markdown(summary))?;
    let mut title = format!("{} / {} / {}", summary.dataset, summary.model, summary.file);
    if let Some(label) = &summary.partial {
        title = format!("{title} ({label})");
    }
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

/// Permissions of every file `eval` writes (what `fsutil::write_atomic` gives every file).
pub const OUTPUT_MODE: u32 = 0o644;

/// `summary.md`: a short header, the table, the audit's changes, and what the columns mean.
pub fn summary_markdown(summary: &EvalSummary) -> String {
    use std::fmt::Write as _;
    let locomo = summary.dataset == DatasetKind::Locomo.as_str();
    let mut out = String::new();
    let _ =
        writeln!(out, "# Evaluation: {} / {} / {}\n", summary.dataset, summary.model, summary.file);
    if let Some(label) = &summary.partial {
        let _ = writeln!(
            out,
            "**{label}**: only {} of the {} questions of the dataset selection have a result line; every figure below covers those only.\n",
            summary.questions, summary.expected_questions
        );
    }
    let _ = writeln!(
        out,
        "- Dataset: `{}`; {} question(s) scored of {} expected, from {} result file(s).",
        summary.data_file,
        summary.questions,
        summary.expected_questions,
        summary.result_files.len()
    );
    match (&summary.judge_model, &summary.judge_protocol) {
        (Some(model), Some(protocol)) => {
            let rules = match protocol.as_str() {
                "mem0" => {
                    "the published LoCoMo J protocol: categories 1–4, a generous CORRECT/WRONG grade with a one-sentence reason"
                }
                "strict" => {
                    "ours: categories 1–4, CORRECT only for the gold fact at the gold answer's precision"
                }
                "longmemeval" => {
                    "LongMemEval's per-type rules (abstention questions by the abstention rule)"
                }
                _ => "a prompt file given with --judge-prompt",
            };
            let _ = writeln!(
                out,
                "- Judge: `{model}`, protocol `{protocol}` ({rules}), {} run(s){}, temperature 0.",
                summary.judge_runs,
                if summary.judge_runs > 1 {
                    ", accuracy as mean ± population std over runs"
                } else {
                    ""
                },
            );
            let cost =
                |cost: Option<f64>| cost.map_or(String::new(), |cost| format!(", ${cost:.4}"));
            let _ = writeln!(
                out,
                "- Judge verdicts: {} from the cache, {} new, {} failed. Judge tokens for this report: {} ({} prompt + {} completion{}); spent now: {}{}.",
                summary.judge_cached,
                summary.judge_new,
                summary.judge_failed,
                summary.judge_usage_total.total(),
                summary.judge_usage_total.prompt_tokens,
                summary.judge_usage_total.completion_tokens,
                cost(summary.judge_cost_total_usd),
                summary.judge_usage.total(),
                cost(summary.judge_cost_usd),
            );
        }
        _ => {
            let _ = writeln!(out, "- Judge: none.");
        }
    }
    if locomo {
        let _ = writeln!(
            out,
            "- Categories use LoCoMo's own numbering: 1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adversarial. Mem0's paper, and many tables copied from it, name them differently (1 single-hop, 2 temporal, 3 multi-hop, 4 open-domain); compare such tables by category number, not by name."
        );
        let _ = writeln!(
            out,
            "- Headline: `overall (1–4)`, F1 and judge over categories 1–4 (1,540 questions in the full dataset). Category 5 is its own row: the refusal rate, never judged."
        );
        if let Some(file) = &summary.audit_file {
            let _ = writeln!(
                out,
                "- Audited columns apply `{file}` (dial481/locomo-audit, CC BY-NC 4.0): {} gold answer(s) corrected, {} question(s) excluded, {} with corrected evidence only, among the questions scored.",
                summary.audit_corrected, summary.audit_excluded, summary.audit_evidence_only
            );
        }
    }
    let _ = writeln!(out, "\n{}", summary.table());
    if !summary.audit_changes.is_empty() {
        let _ = writeln!(out, "## Gold answers the audit changes\n");
        let _ = writeln!(
            out,
            "| question | qa_index | category | error | old gold | new gold | F1 % raw → audited | judge raw → audited |"
        );
        let _ = writeln!(out, "|---|---|---|---|---|---|---|---|");
        let f1 = |value: Option<f64>| {
            value.map_or("–".into(), |value| format!("{:.1}", value * 100.0))
        };
        let judged = |tally: Option<(usize, usize)>| {
            tally.map_or("–".into(), |(correct, judged)| format!("{correct}/{judged}"))
        };
        for change in &summary.audit_changes {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} → {} | {} → {} |",
                change.question_id,
                change.qa_index.map_or("–".into(), |index| index.to_string()),
                change.category,
                change.error_type,
                table_text(change.old_gold.as_deref().unwrap_or("–")),
                change.new_gold.as_deref().map_or("(excluded)".into(), table_text),
                f1(change.f1_raw),
                if change.new_gold.is_some() { f1(change.f1_audited) } else { "excluded".into() },
                judged(change.judge_raw),
                if change.new_gold.is_some() {
                    judged(change.judge_audited)
                } else {
                    "excluded".into()
                },
            );
        }
        let _ = writeln!(out);
    }
    let _ = writeln!(out, "## Columns\n\n```text\n{}```\n", report::COLUMNS_HELP);
    let _ = writeln!(out, "![accuracy](accuracy.svg)\n\n![tokens per question](tokens.svg)");
    out
}

/// Text safe inside a Markdown table cell.
fn table_text(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}
