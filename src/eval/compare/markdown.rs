//! The paired table as Markdown, and the `<model>_<A>_vs_<B>.md` page around it.

use std::fmt::Write as _;

use super::{PairedRow, PairedSummary};
use crate::eval::paired::{CONFIDENCE, PairedStats};

/// What the columns of the paired table mean.
pub const COLUMNS_NOTE: &str = "\
Columns of the paired table (A = the first run, B = the second, on the questions both answered):
  n          questions paired in the row; `n (J: m)` when only m of them have every judge
             verdict in both runs (a failed judgement leaves J until eval is rerun).
  J % A / B  LLM-judge accuracy of each run against the dataset's gold; per question the share
             of judge runs that accepted the answer.
  ΔJ         J of A minus J of B in percentage points, with its 95% paired bootstrap interval
             (questions resampled with replacement); `(noise)`: the interval contains 0, so
             these questions do not show that the runs differ.
  flips +/−  questions right in A and wrong in B / wrong in A and right in B, a question being
             right when most of its judge runs accept it.
  F1 % A / B official LoCoMo F1 of each run (category 5: the refusal rate); ΔF1 as ΔJ.
  F1 +/−     questions whose F1 is higher in A / lower in A.
  tokens/q   answering tokens (prompt + completion) per question of each run.
  words A/B  mean answer length in words. A generous judge rewards longer answers: read J
             beside the length.
";

/// The paired table: J columns when a judge was used, F1 columns when any row has F1.
pub(super) fn table(summary: &PairedSummary) -> String {
    let with_judge = summary.judge_model.is_some();
    let with_f1 = summary.rows.iter().any(|row| row.f1.is_some());
    let mut header = vec!["category", "n"];
    if with_judge {
        header.extend(["J % A", "J % B", "ΔJ [95% CI]", "flips +/−"]);
    }
    if with_f1 {
        header.extend(["F1 % A", "F1 % B", "ΔF1 [95% CI]", "F1 +/−"]);
    }
    header.extend(["tokens/q A", "tokens/q B", "words A", "words B"]);
    let mut out = String::new();
    let _ = writeln!(out, "| {} |", header.join(" | "));
    let _ = writeln!(out, "|{}|", header.iter().map(|_| "---").collect::<Vec<_>>().join("|"));
    for row in &summary.rows {
        let _ = writeln!(out, "| {} |", cells(row, with_judge, with_f1).join(" | "));
    }
    out
}

fn cells(row: &PairedRow, with_judge: bool, with_f1: bool) -> Vec<String> {
    let judged = row.judge.map_or(0, |stats| stats.n);
    let n = if with_judge && row.judge.is_some() && judged != row.n {
        format!("{} (J: {judged})", row.n)
    } else {
        row.n.to_string()
    };
    let mut cells = vec![row.label.clone(), n];
    if with_judge {
        match row.judge {
            Some(stats) => cells.extend([
                percent(stats.mean_a, 2),
                percent(stats.mean_b, 2),
                difference(&stats, 2),
                changes(&stats),
            ]),
            None if row.judge_failed > 0 => {
                cells.extend(["–".into(), "–".into(), "–".into(), "–".into()]);
            }
            None => cells.extend(["not judged".into(), "–".into(), "–".into(), "–".into()]),
        }
    }
    if with_f1 {
        match row.f1 {
            Some(stats) => cells.extend([
                percent(stats.mean_a, 1),
                percent(stats.mean_b, 1),
                difference(&stats, 1),
                changes(&stats),
            ]),
            None => cells.extend(["–".into(), "–".into(), "–".into(), "–".into()]),
        }
    }
    cells.push(format!("{:.0}", row.tokens_a));
    cells.push(format!("{:.0}", row.tokens_b));
    cells.push(format!("{:.1}", row.words_a));
    cells.push(format!("{:.1}", row.words_b));
    cells
}

/// `+5 / −1`: questions that moved each way.
fn changes(stats: &PairedStats) -> String {
    stats.flips.map_or("–".into(), |flips| format!("+{} / −{}", flips.gained, flips.lost))
}

/// See [`PairedSummary::noise_lines`].
pub(super) fn noise_lines(summary: &PairedSummary) -> Vec<String> {
    let mut lines = Vec::new();
    if summary.judge_model.is_none() {
        lines.push("No judge model (--judge-model): only F1 is compared, not J.".to_string());
    }
    for row in &summary.rows {
        for (metric, stats, decimals) in [("J", row.judge, 2), ("F1", row.f1, 1)] {
            let Some(stats) = stats else { continue };
            let verdict = if stats.inside_noise {
                format!(
                    "inside the noise: the interval contains 0, so these {} question(s) do not show that A and B differ",
                    stats.n
                )
            } else if stats.difference > 0.0 {
                "A is higher, outside the noise".to_string()
            } else {
                "A is lower, outside the noise".to_string()
            };
            lines.push(format!(
                "{metric}, {}: {}: {verdict}.",
                row.label,
                difference_plain(&stats, decimals)
            ));
        }
    }
    lines
}

/// `+12.50 points, 95% interval [+3.10, +21.90]`.
fn difference_plain(stats: &PairedStats, decimals: usize) -> String {
    let cell = difference(&PairedStats { inside_noise: false, ..*stats }, decimals);
    let (value, interval) = cell.split_once(' ').unwrap_or((cell.as_str(), ""));
    format!("{value} points, {:.0}% interval {interval}", CONFIDENCE * 100.0)
}

fn percent(value: f64, decimals: usize) -> String {
    format!("{:.decimals$}", value * 100.0)
}

/// `+12.50 [+3.10, +21.90]`, with `(noise)` when the interval contains 0.
fn difference(stats: &PairedStats, decimals: usize) -> String {
    let points = |value: f64| {
        // Print a difference that rounds to zero as +0, never -0.
        let value = value * 100.0;
        let value = if format!("{:.decimals$}", value.abs()).trim_matches(['0', '.']).is_empty() {
            0.0
        } else {
            value
        };
        format!("{value:+.decimals$}")
    };
    let mut cell = format!(
        "{} [{}, {}]",
        points(stats.difference),
        points(stats.interval.low),
        points(stats.interval.high)
    );
    if stats.inside_noise {
        cell.push_str(" (noise)");
    }
    cell
}

/// `<model>_<A>_vs_<B>.md`: what was compared and how, the table, and what the columns mean.
pub fn paired_markdown(summary: &PairedSummary) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Paired evaluation: {} / {} / {} vs {}\n",
        summary.dataset, summary.model, summary.file_a, summary.file_b
    );
    let _ = writeln!(out, "- Dataset: `{}`.", summary.data_file);
    let _ = writeln!(out, "- {}", summary.pairing_line());
    match (&summary.judge_model, &summary.judge_protocol) {
        (Some(model), Some(protocol)) => {
            let _ = writeln!(
                out,
                "- Judge: `{model}`, protocol `{protocol}`, {} run(s), the same for both runs (each run's verdicts are cached in its own folder).",
                summary.judge_runs
            );
        }
        _ => {
            let _ = writeln!(out, "- Judge: none (F1 only).");
        }
    }
    if summary.judge_failed > 0 {
        let _ = writeln!(
            out,
            "- {} judgement(s) failed: their questions leave J; rerun the same eval to retry them.",
            summary.judge_failed
        );
    }
    let _ = writeln!(
        out,
        "- Intervals: {:.0}% paired bootstrap, {} resamples of the questions, seed {}.",
        CONFIDENCE * 100.0,
        summary.bootstrap.resamples,
        summary.bootstrap.seed
    );
    let _ = writeln!(
        out,
        "- Each run's own report: `eval/{0}/{1}/summary.md` and `eval/{0}/{2}/summary.md`.",
        summary.dataset, summary.file_a, summary.file_b
    );
    let _ = writeln!(out, "\n{}", table(summary));
    for line in noise_lines(summary) {
        let _ = writeln!(out, "- {line}");
    }
    let _ = writeln!(out, "\n## Columns\n\n```text\n{COLUMNS_NOTE}```");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::paired::{Flips, Interval};

    fn stats(difference: f64, low: f64, high: f64) -> PairedStats {
        PairedStats {
            n: 10,
            mean_a: 0.5 + difference,
            mean_b: 0.5,
            difference,
            interval: Interval { low, high },
            inside_noise: low <= 0.0 && 0.0 <= high,
            flips: Some(Flips { gained: 3, lost: 1 }),
        }
    }

    #[test]
    fn differences_are_signed_points_and_say_when_they_are_noise() {
        assert_eq!(difference(&stats(0.125, 0.031, 0.219), 2), "+12.50 [+3.10, +21.90]");
        assert_eq!(difference(&stats(0.02, -0.01, 0.05), 1), "+2.0 [-1.0, +5.0] (noise)");
        assert_eq!(difference(&stats(-0.00001, 0.0, 0.0), 2), "+0.00 [+0.00, +0.00] (noise)");
        assert_eq!(
            difference_plain(&stats(0.02, -0.01, 0.05), 1),
            "+2.0 points, 95% interval [-1.0, +5.0]"
        );
    }
}
