//! `summary.md` of a retrieval evaluation: session-level, turn-level and per-category tables.

use super::update::{PlainScores, UpdateTable};
use super::{MethodReport, RetrieveReport};
use crate::tune::metrics::{CUTOFFS, MetricTable};

/// The tables of `summary.md`.
pub fn render_markdown(report: &RetrieveReport) -> String {
    let mut out = String::new();
    push(
        &mut out,
        format!(
            "# Retrieval on {}: {} questions, {} conversations\n",
            report.dataset, report.n_questions, report.n_conversations
        ),
    );
    if let Some(selection) = selection(&report.settings) {
        push(&mut out, format!("Selection: {selection}.\n"));
    }
    let granularities: Vec<&str> = report.granularities.iter().map(|g| g.as_str()).collect();
    let graph = if report.built.graph {
        format!("{} nodes, {} edges", report.graph_nodes, report.graph_edges)
    } else {
        "not built (no requested method reads it)".to_string()
    };
    let embedder = if report.built.vectors.any() {
        format!("Embedder `{}`", report.embedder)
    } else {
        "No embedding (no requested method reads vectors)".to_string()
    };
    push(
        &mut out,
        format!(
            "{embedder}; granularities: {}; association graph: {graph}. Scores ×100.\n",
            granularities.join(", "),
        ),
    );
    let ran: Vec<&MethodReport> = report.methods.iter().filter(|m| m.skipped.is_none()).collect();
    session_table(&mut out, &ran);
    turn_table(&mut out, &ran);
    category_tables(&mut out, &ran, report.n_questions);
    update_tables(&mut out, &ran);

    let t = &report.timings;
    push(
        &mut out,
        format!(
            "\nTimings: model load {:.1} s; embedding {:.1} s ({} texts embedded, {} from cache); index build {:.2} s; total {:.1} s.",
            t.model_load_seconds,
            t.embed_seconds,
            t.texts_embedded,
            t.texts_cached,
            t.index_seconds,
            t.total_seconds
        ),
    );
    for note in &report.notes {
        push(&mut out, format!("\n{note}"));
    }
    out
}

/// The run's selection flags as a phrase, when it did not take the whole file.
fn selection(settings: &super::RetrieveSettings) -> Option<String> {
    let mut parts = Vec::new();
    if !settings.samples.is_empty() {
        parts.push(format!("samples {}", settings.samples.join(", ")));
    }
    if let Some(question_type) = settings.question_type {
        parts.push(format!("question type {}", question_type.as_str()));
    }
    if settings.drop_assistant_turns {
        parts.push("assistant turns dropped".to_string());
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

fn push(out: &mut String, line: String) {
    out.push_str(&line);
    out.push('\n');
}

/// `<metric>@k` for every cutoff, for each metric label.
fn cutoff_header(labels: [&str; 3]) -> Vec<String> {
    let mut header = vec!["method".to_string()];
    for metric in labels {
        header.extend(CUTOFFS.iter().map(|k| format!("{metric}@{k}")));
    }
    header
}

fn session_table(out: &mut String, ran: &[&MethodReport]) {
    push(out, "## Session level\n".to_string());
    let mut header = cutoff_header(["R_all", "R_any", "NDCG"]);
    header.push("query s".to_string());
    table_header(out, &header);
    for method in ran {
        let mut row = vec![method.method.to_string()];
        for metric in ["recall_all", "recall_any", "ndcg_any"] {
            row.extend(CUTOFFS.iter().map(|&k| fmt(method.overall.session_at(metric, k))));
        }
        row.push(format!("{:.2}", method.query_seconds));
        table_row(out, &row);
    }
}

fn turn_table(out: &mut String, ran: &[&MethodReport]) {
    push(out, "\n## Turn level (evidence dia_ids)\n".to_string());
    table_header(out, &cutoff_header(["R_any", "R_all", "NDCG"]));
    for method in ran.iter().filter(|m| !m.overall.turn.is_empty()) {
        let mut row = vec![method.method.to_string()];
        for metric in ["recall_any", "recall_all", "ndcg_any"] {
            row.extend(CUTOFFS.iter().map(|&k| fmt(method.overall.turn_at(metric, k))));
        }
        table_row(out, &row);
    }
}

/// Session recall_all@3 and turn recall_any@10 per category (the categories of the first method
/// that ran).
fn category_tables(out: &mut String, ran: &[&MethodReport], n_questions: usize) {
    let categories: Vec<(String, usize)> = ran
        .first()
        .map(|m| {
            m.by_category.iter().map(|(name, table)| (name.clone(), table.n_questions)).collect()
        })
        .unwrap_or_default();
    for (title, level, metric, k) in [
        ("Session recall_all@3", "session", "recall_all", 3),
        ("Turn recall_any@10", "turn", "recall_any", 10),
    ] {
        push(out, format!("\n## {title} by category\n"));
        let mut header = vec!["method".to_string()];
        header.extend(categories.iter().map(|(name, n)| format!("{name} ({n})")));
        header.push(format!("all ({n_questions})"));
        table_header(out, &header);
        for method in ran {
            let value = |table: &MetricTable| {
                if level == "session" {
                    table.session_at(metric, k)
                } else {
                    table.turn_at(metric, k)
                }
            };
            if value(&method.overall).is_none() {
                continue;
            }
            let mut row = vec![method.method.to_string()];
            row.extend(
                categories
                    .iter()
                    .map(|(name, _)| fmt(method.by_category.get(name).and_then(value))),
            );
            row.push(fmt(value(&method.overall)));
            table_row(out, &row);
        }
    }
}

/// The knowledge-update table (and, with `--prefer-newer`, the plain and reordered rankings side
/// by side, by category), when some method measured it.
fn update_tables(out: &mut String, ran: &[&MethodReport]) {
    if ran.iter().all(|m| m.knowledge_update.is_none() && m.prefer_newer.is_none()) {
        return;
    }
    let mut rows: Vec<(String, PlainScores)> = Vec::new();
    for method in ran {
        let with = PlainScores {
            overall: method.overall.clone(),
            by_category: method.by_category.clone(),
            knowledge_update: method.knowledge_update.clone(),
        };
        match &method.prefer_newer {
            Some(newer) => {
                let settings: Vec<String> = newer
                    .settings
                    .iter()
                    .map(|s| format!("{}/{}", s.margin, s.threshold))
                    .collect();
                rows.push((method.method.to_string(), newer.plain.clone()));
                let label = format!(
                    "{} + prefer-newer ({:?}, margin/threshold {})",
                    method.method,
                    newer.same_topic,
                    settings.join(", ")
                );
                rows.push((label, with));
            }
            None => rows.push((method.method.to_string(), with)),
        }
    }
    push(out, "\n## Knowledge update: the updating session above the outdated one\n".to_string());
    let header = [
        "ranking",
        "KU n",
        "above %",
        "rank updating",
        "rank outdated",
        "R_any@1",
        "R_any@3",
        "R_any@5",
        "R_all@5",
    ];
    table_header(out, &header.map(String::from));
    for (label, scores) in &rows {
        let update = scores.knowledge_update.clone().unwrap_or_default();
        let mut row = vec![label.clone(), update.n_questions.to_string()];
        row.extend(ku_cells(&update));
        for (metric, k) in
            [("recall_any", 1), ("recall_any", 3), ("recall_any", 5), ("recall_all", 5)]
        {
            row.push(fmt(scores.overall.session_at(metric, k)));
        }
        table_row(out, &row);
    }
    if ran.iter().any(|m| m.prefer_newer.is_some()) {
        by_category_side_by_side(out, &rows);
    }
}

fn ku_cells(update: &UpdateTable) -> [String; 3] {
    if update.n_questions == 0 {
        return ["–".to_string(), "–".to_string(), "–".to_string()];
    }
    [
        format!("{:.2}", update.updating_above),
        format!("{:.2}", update.mean_updating_rank),
        format!("{:.2}", update.mean_outdated_rank),
    ]
}

/// Session recall_any@1 and recall_all@5 per category, plain and reordered.
fn by_category_side_by_side(out: &mut String, rows: &[(String, PlainScores)]) {
    let categories: Vec<String> =
        rows.first().map(|(_, s)| s.by_category.keys().cloned().collect()).unwrap_or_default();
    for (metric, k) in [("recall_any", 1), ("recall_all", 5)] {
        push(
            out,
            format!("\n### Session {metric}@{k} by category, with and without prefer-newer\n"),
        );
        let mut header = vec!["ranking".to_string()];
        header.extend(categories.iter().cloned());
        header.push("all".to_string());
        table_header(out, &header);
        for (label, scores) in rows {
            let mut row = vec![label.clone()];
            row.extend(categories.iter().map(|name| {
                fmt(scores.by_category.get(name).and_then(|t| t.session_at(metric, k)))
            }));
            row.push(fmt(scores.overall.session_at(metric, k)));
            table_row(out, &row);
        }
    }
}

fn fmt(value: Option<f64>) -> String {
    value.map_or_else(|| "–".to_string(), |v| format!("{v:.2}"))
}

fn table_header(out: &mut String, cells: &[String]) {
    table_row(out, cells);
    table_row(out, &cells.iter().map(|_| "---".to_string()).collect::<Vec<_>>());
}

fn table_row(out: &mut String, cells: &[String]) {
    out.push_str("| ");
    out.push_str(&cells.join(" | "));
    out.push_str(" |\n");
}
