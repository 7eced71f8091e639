//! The judge matrix as Markdown, and the `matrix.md` page around it.

use std::fmt::Write as _;

use super::{JudgeMatrix, MatrixCell, MatrixRow};
use crate::eval::paired::CONFIDENCE;
use crate::eval::report::JudgeAccuracy;

/// What the matrix's columns mean.
pub const MATRIX_NOTE: &str = "\
Columns of the judge matrix (one column group per --judge-protocol):
  n            questions in the row (LoCoMo: categories 1–4; category 5 is never judged).
  ceiling %    the highest raw accuracy the answer key allows: the share of the row's
               questions whose gold answer the audit neither corrects nor excludes. Marked ▲:
               a raw accuracy above it, so the judge accepted answers that disagree with the
               audited key.
  <p> J %      LLM-judge accuracy against the dataset's gold, mean ± population std over
               --judge-runs.
  <p> 95% CI   bootstrap interval over questions (resampled with replacement; a question's
               score is the share of its judge runs that accepted it).
  <p> J % (audited)
               the same with the audit's corrected gold; excluded questions leave the row.
";

/// The matrix table: ceiling and audited columns when the audit applies.
pub(super) fn table(matrix: &JudgeMatrix) -> String {
    let audit = matrix.audit_file.is_some();
    let first = match &matrix.partial {
        Some(label) => format!("category ({label})"),
        None => "category".to_string(),
    };
    let mut header = vec![first, "n".to_string()];
    if audit {
        header.push("ceiling %".into());
    }
    for protocol in &matrix.protocols {
        header.push(format!("{protocol} J %"));
        header.push(format!("{protocol} 95% CI"));
        if audit {
            header.push(format!("{protocol} J % (audited)"));
        }
    }
    let mut out = String::new();
    let _ = writeln!(out, "| {} |", header.join(" | "));
    let _ = writeln!(out, "|{}|", header.iter().map(|_| "---").collect::<Vec<_>>().join("|"));
    for row in &matrix.rows {
        let _ = writeln!(out, "| {} |", cells(row, audit).join(" | "));
    }
    let _ = writeln!(out, "\n{}", ceiling_line(matrix));
    out
}

fn cells(row: &MatrixRow, audit: bool) -> Vec<String> {
    let mut cells = vec![row.label.clone(), row.n.to_string()];
    if audit {
        let ceiling = row.ceiling.and_then(|ceiling| ceiling.accuracy());
        cells.push(ceiling.map_or("–".into(), |value| format!("{:.2}", value * 100.0)));
    }
    for cell in &row.cells {
        cells.extend(protocol_cells(cell, audit));
    }
    cells
}

fn protocol_cells(cell: &MatrixCell, audit: bool) -> Vec<String> {
    let mut judge = accuracy(cell.judge);
    if cell.above_ceiling {
        judge.push_str(" ▲");
    }
    let interval = cell.interval.map_or("–".into(), |interval| {
        format!("[{:.2}, {:.2}]", interval.low * 100.0, interval.high * 100.0)
    });
    let mut cells = vec![judge, interval];
    if audit {
        cells.push(accuracy(cell.audited));
    }
    cells
}

/// `74.51 ± 0.30` (the std only with several runs); `–` when nothing was judged.
fn accuracy(judge: Option<JudgeAccuracy>) -> String {
    match judge {
        Some(judge) if judge.runs > 1 => {
            format!("{:.2} ± {:.2}", judge.mean * 100.0, judge.std * 100.0)
        }
        Some(judge) => format!("{:.2}", judge.mean * 100.0),
        None => "–".into(),
    }
}

/// Which rows are above the ceiling, or that none is.
fn ceiling_line(matrix: &JudgeMatrix) -> String {
    if matrix.audit_file.is_none() {
        return "Ceiling: not shown (no audit: pass the LoCoMo audit to see which categories the answer key caps).".into();
    }
    let above = matrix.above_ceiling();
    if above.is_empty() {
        return "Above the ceiling the audited answer key allows: none.".into();
    }
    let listed: Vec<String> = above
        .iter()
        .map(|(protocol, label, mean, ceiling)| {
            format!("{protocol} on {label} ({:.2} > {:.2})", mean * 100.0, ceiling * 100.0)
        })
        .collect();
    format!(
        "Above the ceiling the audited answer key allows (▲): {}. The judge accepted answers that disagree with the audited key there.",
        listed.join("; ")
    )
}

/// `matrix.md`: what was judged and how, the table, and what the columns mean.
pub fn matrix_markdown(matrix: &JudgeMatrix) -> String {
    let mut out = String::new();
    let _ =
        writeln!(out, "# Judge matrix: {} / {} / {}\n", matrix.dataset, matrix.model, matrix.file);
    if let Some(label) = &matrix.partial {
        let _ = writeln!(
            out,
            "**{label}**: {} of the {} questions of the selection are scored; the ceiling is that of the scored questions.\n",
            matrix.questions, matrix.expected_questions
        );
    }
    let _ = writeln!(
        out,
        "- Judge: `{}`, protocols {}, {} run(s) each, temperature 0.",
        matrix.judge_model.as_deref().unwrap_or("none"),
        matrix.protocols.iter().map(|p| format!("`{p}`")).collect::<Vec<_>>().join(", "),
        matrix.judge_runs
    );
    let _ = writeln!(
        out,
        "- Intervals: {:.0}% bootstrap over questions, {} resamples, seed {}.",
        CONFIDENCE * 100.0,
        matrix.bootstrap.resamples,
        matrix.bootstrap.seed
    );
    if let Some(file) = &matrix.audit_file {
        let _ = writeln!(out, "- Audit: `{file}` (ceiling and audited columns).");
    }
    let _ = writeln!(out, "\n{}", table(matrix));
    let _ = writeln!(out, "## Columns\n\n```text\n{MATRIX_NOTE}```");
    out
}
