//! The `retrieve --folds` run: build every conversation's index once, run the folds of each
//! tuned method, score the untuned ones as they are, and write `folds.md` / `folds.json`.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use super::{FoldsReport, Prepared, axes, evaluate, run_folds};
use crate::dataset::{self, LoadOptions};
use crate::retrieval::index::{IndexNeeds, Method};
use crate::retrieval::units::Granularity;
use crate::tune::embed::Embedding;
use crate::tune::metrics::{Evidence, MetricTable};
use crate::tune::steps::{Scoreboard, read_llm_units};
use crate::tune::{RetrieveSettings, Timings, session_units};

/// An untuned method scored with its defaults on every conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Untuned {
    /// The method.
    pub method: Method,
    /// Its scores.
    pub overall: MetricTable,
}

/// The outcome of [`run_retrieval_folds`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FoldsOutcome {
    /// Dataset name.
    pub dataset: String,
    /// Conversations (one fold each).
    pub conversations: Vec<String>,
    /// Questions.
    pub n_questions: usize,
    /// Tuned methods.
    pub tuned: Vec<FoldsReport>,
    /// Untuned methods, for comparison.
    pub untuned: Vec<Untuned>,
    /// Seconds for the folds (after indexing).
    pub fold_seconds: f64,
    /// Embedding and indexing costs.
    pub timings: Timings,
    /// The markdown written to `folds.md`.
    pub markdown: String,
    /// Where `folds.md` was written.
    pub markdown_path: PathBuf,
}

/// Leave-one-conversation-out evaluation of every requested method.
pub fn run_retrieval_folds(settings: &RetrieveSettings) -> anyhow::Result<FoldsOutcome> {
    let started = Instant::now();
    let conversations = dataset::load(
        settings.dataset,
        &settings.data_path,
        &LoadOptions { samples: settings.samples.clone(), ..LoadOptions::default() },
    )?;
    anyhow::ensure!(conversations.len() >= 2, "--folds needs at least two conversations");
    let llm_units = read_llm_units(settings)?;
    let mut timings = Timings::default();
    let mut needs = IndexNeeds::for_methods(&settings.methods, &settings.index);
    // The folds try fusion's word channel whatever the defaults say (an axis of `axes`).
    needs.words |= settings.methods.contains(&Method::Fusion);
    // Folds have no stop of their own (they run from the cache in about a minute).
    let never = std::sync::atomic::AtomicBool::new(false);
    let mut embedding = Embedding::new(settings, needs, &conversations, &never);
    let mut board = Scoreboard::new(0, Vec::new());
    let mut prepared = Vec::new();
    for conversation in &conversations {
        let granules = board.granules(settings, conversation)?;
        let units =
            session_units(conversation, llm_units.get(&conversation.sample_id), granules.as_ref());
        let stopped = || anyhow::anyhow!("embedding stopped");
        let index = embedding.index(conversation, &units, &mut timings)?.ok_or_else(stopped)?;
        let (vectors, query_words) =
            embedding.questions(conversation, &index, &mut timings)?.ok_or_else(stopped)?;
        let questions = conversation
            .questions
            .iter()
            .zip(vectors)
            .map(|(q, v)| (q.question.clone(), v, q.category.clone(), Evidence::parse(&q.evidence)))
            .collect();
        prepared.push(Prepared::new(index, questions, query_words));
    }
    embedding.finish();
    let names: Vec<String> = conversations.iter().map(|c| c.sample_id.clone()).collect();
    let folds_started = Instant::now();
    let mut tuned = Vec::new();
    let mut untuned = Vec::new();
    let has_llm_units =
        prepared.iter().all(|p| p.index.granularities().contains(&Granularity::Summary));
    for &method in &settings.methods {
        let needs_llm_units = matches!(method, Method::Summary | Method::Keyword | Method::Hybrid);
        if needs_llm_units && !has_llm_units {
            continue;
        }
        if axes(method).is_empty() {
            let scores = evaluate(&mut prepared, method, &settings.index);
            let overall = MetricTable::average(scores.iter().flatten().map(|(_, m)| m));
            untuned.push(Untuned { method, overall });
        } else {
            tuned.push(run_folds(&mut prepared, &names, method, settings.index));
        }
    }
    let fold_seconds = folds_started.elapsed().as_secs_f64();
    timings.total_seconds = started.elapsed().as_secs_f64();
    let output_dir = settings.output_dir();
    std::fs::create_dir_all(&output_dir)
        .with_context(|| format!("creating {}", output_dir.display()))?;
    let mut outcome = FoldsOutcome {
        dataset: settings.dataset.as_str().to_string(),
        conversations: names,
        n_questions: prepared.iter().map(|p| p.questions.len()).sum(),
        tuned,
        untuned,
        fold_seconds,
        timings,
        markdown: String::new(),
        markdown_path: output_dir.join("folds.md"),
    };
    outcome.markdown = render(&outcome);
    crate::fsutil::write_atomic(&outcome.markdown_path, outcome.markdown.as_bytes())?;
    crate::fsutil::write_atomic(
        &output_dir.join("folds.json"),
        &serde_json::to_vec_pretty(&outcome)?,
    )?;
    Ok(outcome)
}

/// Columns of the main table: (level, metric, k).
const COLUMNS: [(&str, &str, usize); 6] = [
    ("session", "recall_all", 3),
    ("session", "recall_any", 3),
    ("session", "recall_all", 5),
    ("session", "recall_all", 10),
    ("turn", "recall_any", 5),
    ("turn", "recall_any", 10),
];

fn cell(table: &MetricTable, level: &str, metric: &str, k: usize) -> String {
    let value =
        if level == "session" { table.session_at(metric, k) } else { table.turn_at(metric, k) };
    value.map_or_else(|| "–".to_string(), |v| format!("{v:.2}"))
}

fn row(out: &mut String, name: &str, table: &MetricTable) {
    let cells: Vec<String> = COLUMNS.iter().map(|(l, m, k)| cell(table, l, m, *k)).collect();
    out.push_str(&format!("| {name} | {} |\n", cells.join(" | ")));
}

/// `folds.md`.
pub fn render(outcome: &FoldsOutcome) -> String {
    let mut out = format!(
        "# Leave-one-conversation-out on {}: {} questions, {} conversations\n\n\
         **Held-out** rows: each conversation is ranked with the settings chosen on the other \
         {} (coordinate ascent, objective = mean of session recall_all@3 and turn \
         recall_any@10), and the held-out questions of all folds are pooled. `defaults` rows use \
         the built-in defaults on every conversation (not held-out). Untuned methods have no \
         settings to choose. Scores ×100.\n\n",
        outcome.dataset,
        outcome.n_questions,
        outcome.conversations.len(),
        outcome.conversations.len() - 1
    );
    let header: Vec<String> =
        COLUMNS.iter().map(|(l, m, k)| format!("{} {m}@{k}", &l[..1].to_uppercase())).collect();
    out.push_str(&format!("| method | {} |\n", header.join(" | ")));
    out.push_str(&format!("|---|{}\n", "---|".repeat(COLUMNS.len())));
    for report in &outcome.tuned {
        row(&mut out, &format!("**{} held-out**", report.method), &report.held_out);
        row(&mut out, &format!("{} defaults", report.method), &report.defaults);
    }
    for untuned in &outcome.untuned {
        row(&mut out, &format!("{} (untuned)", untuned.method), &untuned.overall);
    }
    for report in &outcome.tuned {
        categories(&mut out, report);
        chosen(&mut out, report);
    }
    out.push_str(&format!(
        "\nFolds: {:.1} s; embedding {:.1} s ({} texts embedded, {} from cache); index build {:.2} s.\n",
        outcome.fold_seconds,
        outcome.timings.embed_seconds,
        outcome.timings.texts_embedded,
        outcome.timings.texts_cached,
        outcome.timings.index_seconds
    ));
    out
}

fn categories(out: &mut String, report: &FoldsReport) {
    out.push_str(&format!(
        "\n## {}: held-out vs defaults by category (session R_all@3 / turn R_any@10)\n\n",
        report.method
    ));
    out.push_str("| category | held-out S R_all@3 | defaults S R_all@3 | held-out T R_any@10 | defaults T R_any@10 |\n|---|---|---|---|---|\n");
    for (name, held) in &report.held_out_by_category {
        let default = report.defaults_by_category.get(name).cloned().unwrap_or_default();
        out.push_str(&format!(
            "| {name} ({}) | {} | {} | {} | {} |\n",
            held.n_questions,
            cell(held, "session", "recall_all", 3),
            cell(&default, "session", "recall_all", 3),
            cell(held, "turn", "recall_any", 10),
            cell(&default, "turn", "recall_any", 10)
        ));
    }
}

fn chosen(out: &mut String, report: &FoldsReport) {
    let Some(first) = report.folds.first() else { return };
    out.push_str(&format!(
        "\n## {}: settings chosen per fold ({} settings evaluated)\n\n| held-out | {} | train | held-out |\n|---|{}---|---|\n",
        report.method,
        report.settings_evaluated,
        first.chosen.keys().cloned().collect::<Vec<_>>().join(" | "),
        "---|".repeat(first.chosen.len())
    ));
    for fold in &report.folds {
        let values: Vec<String> = fold.chosen.values().map(|v| format!("{v}")).collect();
        out.push_str(&format!(
            "| {} | {} | {:.2} | {:.2} |\n",
            fold.held_out,
            values.join(" | "),
            fold.train_objective,
            fold.held_out_objective
        ));
    }
}
