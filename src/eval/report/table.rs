//! The summary table as Markdown, and what its columns mean.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::{JudgeAccuracy, TableRow};

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
pub fn markdown_table(rows: &[TableRow], coverage: Coverage) -> String {
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
