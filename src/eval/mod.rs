//! Scoring of answered runs: reads `result/<dataset>/*_result_<model>_<file>.jsonl`, checks
//! the lines against the dataset the run used (every question once, nothing foreign; see
//! `input`), scores every question (official LoCoMo F1 and exact match, evidence recall, LLM
//! judge), and writes `eval/<dataset>/<file>/`: `scores.jsonl` (one scored question per line,
//! in dataset order), `summary.json`, `summary.md` and two SVG plots. The verdicts are not kept
//! here: the judge's calls are, on its tape (`record/<dataset>/<model>_<file>.judge.sqlite`),
//! which answers a rerun.
//!
//! [`evaluate_matrix`] (`eval --judge-protocol mem0,strict`) judges the run once per protocol
//! and writes the judge matrix (`matrix`) to `matrix.md` and `matrix.json` beside the summary
//! (a single protocol writes its one-protocol matrix there too).
//!
//! [`evaluate_paired`] (`eval --paired-with`, `compare`) scores a run and its twin that way and compares
//! them question by question (`compare`, with the paired bootstrap of `paired`), writing
//! `eval/<dataset>/<model>_<A>_vs_<B>.md` and `.json`.
//!
//! `eval` reads result files and the dataset only; it never imports `agent`. The scorer (`f1`,
//! stemming with `text::porter`), the aggregation (`report`) and the comparison (`compare`,
//! `paired`, `matrix`) are pure; only the `evaluate*` functions do IO and only `judge` calls a
//! model.

pub mod audit;
pub mod compare;
mod evaluate;
pub mod f1;
pub mod input;
pub mod judge;
pub mod matrix;
pub mod paired;
pub mod recall;
pub mod report;
mod summary;
pub mod svg;

pub use self::evaluate::{
    MatrixEvaluation, PairedEvaluation, evaluate, evaluate_latched, evaluate_matrix,
    evaluate_paired, find_result_files, write_matrix_files,
};
pub use self::summary::summary_markdown;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use self::audit::{Audit, AuditAction};
use self::input::Matched;
use self::judge::{JudgeProtocol, Verdict};
use self::recall::EvidenceRecall;
use self::report::{Coverage, Prices, TableRow};
use crate::dataset::{Category, DatasetKind, LongMemEvalType};
use crate::llm::Usage;
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
    /// Independent judge runs per question (≥ 1; 3 by default, the published setting);
    /// accuracy is reported as mean ± std over runs.
    pub judge_runs: u32,
    /// Judge requests in flight at once.
    pub concurrency: usize,
    /// Judge protocol (must apply to the dataset: LongMemEval takes `longmemeval` only).
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
    /// Where the outputs go; `None`: the run's own
    /// `eval/<dataset>/<file>/`. `compare` scores into its own folder, never into a run's.
    pub output: Option<PathBuf>,
}

impl EvalSettings {
    /// Defaults for a run: the dataset at `data/dataset_<dataset>.json`, every question
    /// expected, no judge, three judge runs, 8 in flight, the dataset's default protocol
    /// (`mem0`; LongMemEval its per-type rules), the audit at
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
            judge_runs: 3,
            concurrency: 8,
            protocol: JudgeProtocol::default_for(dataset),
            judge_prompt: None,
            overall_with_adversarial: false,
            prices: None,
            output: None,
        }
    }

    /// `eval/<dataset>/<file>/` under the root, or [`EvalSettings::output`] when set.
    pub fn output_dir(&self) -> PathBuf {
        self.output.clone().unwrap_or_else(|| self.run_dir())
    }

    /// The run's own eval folder, `eval/<dataset>/<file>/` under the root.
    pub fn run_dir(&self) -> PathBuf {
        self.root.join("eval").join(self.dataset.as_str()).join(&self.file)
    }

    fn audit_in_use(&self) -> Option<&Path> {
        match self.dataset {
            DatasetKind::Locomo => self.audit_file.as_deref(),
            DatasetKind::LongMemEval | DatasetKind::Own => None,
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
    /// Judgements answered from the judge's tape / made now / failed (a rerun asks again).
    pub judge_cached: usize,
    /// Judgements made in this evaluation.
    pub judge_new: usize,
    /// Judgements that failed after retries and re-asks.
    pub judge_failed: usize,
    /// Tokens the judge used in this evaluation.
    pub judge_usage: Usage,
    /// Tokens of every verdict the report uses, taped ones included.
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
    pub rows: Vec<TableRow>,
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

/// Permissions of every file `eval` writes (what `fsutil::write_atomic` gives every file).
pub const OUTPUT_MODE: u32 = 0o644;
