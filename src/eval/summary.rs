//! The run's summary: built from its scored items (`summary.json`), and `summary.md`, section
//! by section.

use std::fmt::Write as _;
use std::path::Path;

use super::judge::{self, Verdict};
use super::report::{self, Coverage, Prices, RowOptions};
use super::{AuditChange, AuditedScore, EvalSettings, EvalSummary, ItemScore};
use crate::dataset::DatasetKind;
use crate::llm::Usage;

/// `summary.md`: a short header, the table, the audit's changes, and what the columns mean.
pub fn summary_markdown(summary: &EvalSummary) -> String {
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
    judge_lines(&mut out, summary);
    if locomo {
        locomo_notes(&mut out, summary);
    }
    let _ = writeln!(out, "\n{}", summary.table());
    if !summary.audit_changes.is_empty() {
        audit_changes_table(&mut out, summary);
    }
    let _ = writeln!(out, "## Columns\n\n```text\n{}```\n", report::COLUMNS_HELP);
    let _ = writeln!(out, "![accuracy](accuracy.svg)\n\n![tokens per question](tokens.svg)");
    out
}

/// The judge: model, protocol, runs, verdict counts and tokens.
fn judge_lines(out: &mut String, summary: &EvalSummary) {
    match (&summary.judge_model, &summary.judge_protocol) {
        (Some(model), Some(protocol)) => {
            let rules = match protocol.as_str() {
                "mem0" => {
                    "the published LoCoMo J protocol: categories 1–4, a generous CORRECT/WRONG grade with a one-sentence reason"
                }
                "strict" => {
                    "ours: categories 1–4, CORRECT only for the gold fact at the gold answer's precision"
                }
                "longmemeval" if summary.dataset == DatasetKind::Locomo.as_str() => {
                    "LongMemEval's standard rule on categories 1–4: CORRECT when the response contains the correct answer or an equivalent"
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
                "- Judge verdicts: {} from the judge's tape, {} new, {} failed. Judge tokens for this report: {} ({} prompt + {} completion{}); spent now: {}{}.",
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
}

/// LoCoMo: category numbering, the headline, and the audit in use.
fn locomo_notes(out: &mut String, summary: &EvalSummary) {
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

/// The questions whose gold the audit corrects or excludes.
fn audit_changes_table(out: &mut String, summary: &EvalSummary) {
    let _ = writeln!(out, "## Gold answers the audit changes\n");
    let _ = writeln!(
        out,
        "| question | qa_index | category | error | old gold | new gold | F1 % raw → audited | judge raw → audited |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|");
    let f1 =
        |value: Option<f64>| value.map_or("–".into(), |value| format!("{:.1}", value * 100.0));
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

/// Text safe inside a Markdown table cell.
fn table_text(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

/// What the summary records about the run's inputs.
pub(super) struct RunFacts {
    pub(super) files: Vec<String>,
    pub(super) expected: usize,
    pub(super) protocol_name: String,
    pub(super) audit_file: Option<String>,
}

/// The summary of a scored (and maybe judged) run.
pub(super) fn build_summary(
    settings: &EvalSettings,
    items: &[ItemScore],
    facts: RunFacts,
    judge_stats: &judge::JudgeStats,
    relative: &dyn Fn(&Path) -> String,
) -> EvalSummary {
    // Without explicit prices, the answering model's list price is used when known.
    let prices = settings.prices.or_else(|| {
        crate::llm::models::model_price(&settings.model).map(|price| Prices {
            input_per_million: price.prompt_per_million,
            output_per_million: price.completion_per_million,
        })
    });
    let locomo = settings.dataset == DatasetKind::Locomo;
    let rows = report::build_rows(
        items,
        RowOptions {
            locomo,
            audit: facts.audit_file.is_some(),
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
    let coverage = Coverage { scored: items.len(), expected: facts.expected };
    EvalSummary {
        dataset: settings.dataset.as_str().to_string(),
        data_file: relative(&settings.data_file),
        model: settings.model.clone(),
        file: settings.file.clone(),
        result_files: facts.files,
        questions: items.len(),
        expected_questions: facts.expected,
        partial: coverage.label(),
        judge_model: settings.judge_model.clone(),
        judge_protocol: settings.judge_model.as_ref().map(|_| facts.protocol_name),
        judge_runs: settings.judge_runs,
        judge_cached: judge_stats.cached,
        judge_new: judge_stats.new,
        judge_failed: judge_stats.failed,
        judge_usage: judge_stats.usage,
        judge_usage_total: judge_stats.usage_total,
        judge_cost_usd: judge_cost(judge_stats.usage),
        judge_cost_total_usd: judge_cost(judge_stats.usage_total),
        audit_file: facts.audit_file,
        audit_corrected: count_audit(items, |audited| audited.answer.is_some()),
        audit_excluded: count_audit(items, |audited| audited.excluded),
        audit_evidence_only: count_audit(items, |audited| {
            audited.answer.is_none() && !audited.excluded
        }),
        audit_changes: audit_changes(items),
        rows,
    }
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
