//! `mragent retrieve --gate`: choose the answer gate's threshold and context size held out, on
//! gold evidence turns, with no model (issue 43).
//!
//! For every question the harness ranks with fusion, computes the gate's signals
//! ([`crate::retrieval::gate`]) for each candidate context size ([`HEAD_SIZES`]: `k` top turns,
//! each with `window` neighbours), and records whether every evidence turn is in the single-pass
//! context and whether it is within the loop's reach ([`LOOP_REACH`]). A threshold sends the questions at or above it
//! down the single path; it is admissible when, over those questions, the single context holds
//! every evidence turn at least as often as the loop's reach does. On the dev conversations
//! ([`DEV_SAMPLES`], the ones the retrieval defaults were tuned on) the admissible (`k`,
//! threshold) that sends the most questions down the single path is chosen (ties: the smaller
//! `k`, then the higher threshold); it is then reported, unchanged, on the other conversations,
//! per category. Results: `eval/<dataset>/retrieve/gate.md`, `gate.json` and `gate.jsonl` (one
//! line per question).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use anyhow::Context as _;
use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

use super::embed::Embedding;
use super::steps::{Scoreboard, read_llm_units};
use super::{RetrieveSettings, Timings, session_units};
use crate::dataset::{self, LoadOptions, Question};
use crate::retrieval::gate::{
    ContextSize, GateSignals, LOOP_REACH, SINGLE_CONTEXT, assess, context_turns,
};
use crate::retrieval::index::{IndexNeeds, MemoryIndex, Method, QueryWords};
use crate::tune::metrics::Evidence;

/// The conversations the retrieval defaults were tuned on; the gate is chosen on them.
pub const DEV_SAMPLES: [&str; 2] = ["conv-26", "conv-30"];

/// The heads the gate is calibrated on: `k` top turns with `window` neighbours on each side. The
/// gate's signals are computed over the top `k`, and a threshold is admissible on dev when, over
/// the questions at or above it, the head alone holds every evidence turn as often as the
/// loop's reach does: the gate sends down the single path only questions so sure that even the
/// head has what the loop would reach. The single path then shows more than its head
/// ([`SINGLE_CONTEXT`]), as a margin for what calibration on two conversations misses.
pub const HEAD_SIZES: [ContextSize; 3] = [
    ContextSize { k: 5, window: 1 },
    ContextSize { k: 8, window: 1 },
    ContextSize { k: 10, window: 1 },
];

/// One question under one context size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AtSize {
    /// Top turns in the single context.
    pub k: usize,
    /// Neighbours shown on either side of each.
    pub window: usize,
    /// The gate's signals over them.
    pub signals: GateSignals,
    /// Their confidence.
    pub confidence: f64,
    /// Every evidence turn is in the head (the top `k` with their neighbours).
    pub single_holds: bool,
    /// Every evidence turn is among the top `k` alone.
    pub top_k_holds: bool,
}

/// One question's line in `gate.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GateRow {
    /// Question id.
    pub question_id: String,
    /// Its conversation.
    pub sample: String,
    /// Category name.
    pub category: String,
    /// Evidence turns (parsed).
    pub evidence: Vec<String>,
    /// Every evidence turn is within the loop's reach.
    pub loop_holds: bool,
    /// Every evidence turn is in the context the single path shows ([`SINGLE_CONTEXT`]).
    pub shown_holds: bool,
    /// Per context size, in [`HEAD_SIZES`] order.
    pub sizes: Vec<AtSize>,
    /// The fused ranking's top [`LOOP_REACH`] turns.
    pub top: Vec<String>,
}

/// What a gate does on a set of questions.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GateCell {
    /// Questions.
    pub questions: usize,
    /// Of those, sent down the single path.
    pub single: usize,
    /// Single-path questions whose head holds every evidence turn.
    pub single_holds: usize,
    /// Single-path questions whose shown context ([`SINGLE_CONTEXT`]) holds every evidence turn.
    pub shown_holds: usize,
    /// Single-path questions whose evidence is all within the loop's reach.
    pub loop_holds: usize,
    /// All questions: the head holds every evidence turn.
    pub all_single_holds: usize,
    /// All questions: the shown context holds every evidence turn (as if every question took
    /// the single path).
    pub all_shown_holds: usize,
    /// All questions: every evidence turn within the loop's reach.
    pub all_loop_holds: usize,
}

impl GateCell {
    fn add(&mut self, row: &GateRow, size: usize, threshold: f64) {
        let at = &row.sizes[size];
        self.questions += 1;
        self.all_single_holds += usize::from(at.single_holds);
        self.all_shown_holds += usize::from(row.shown_holds);
        self.all_loop_holds += usize::from(row.loop_holds);
        if at.confidence >= threshold {
            self.single += 1;
            self.single_holds += usize::from(at.single_holds);
            self.shown_holds += usize::from(row.shown_holds);
            self.loop_holds += usize::from(row.loop_holds);
        }
    }

    /// The calibration rule: on the single-path questions the head alone holds every evidence
    /// turn as often as the loop's reach.
    pub fn admissible(&self) -> bool {
        self.single_holds >= self.loop_holds
    }

    /// The promise: the single-path questions' shown context holds every evidence turn as often
    /// as the loop's reach does for them.
    pub fn keeps_promise(&self) -> bool {
        self.shown_holds >= self.loop_holds
    }

    /// Share of questions on the single path, in percent.
    pub fn single_share(&self) -> f64 {
        percent(self.single, self.questions)
    }
}

/// The chosen gate.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GateChoice {
    /// Top turns in the context.
    pub k: usize,
    /// Neighbours of each.
    pub window: usize,
    /// Threshold (`f64::INFINITY` serialises as null: nothing is admissible).
    pub threshold: f64,
}

/// The outcome of [`run_gate_eval`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GateReport {
    /// The chosen gate.
    pub choice: GateChoice,
    /// The dev conversations, all questions.
    pub dev: GateCell,
    /// The held-out conversations, all questions.
    pub held_out: GateCell,
    /// The held-out conversations per category.
    pub held_out_by_category: IndexMap<String, GateCell>,
    /// Per context size: the best admissible threshold on dev and what it does held out.
    pub sizes: Vec<(GateChoice, GateCell, GateCell)>,
    /// The loop's reach (turns).
    pub loop_reach: usize,
    /// Conversations and questions.
    pub conversations: usize,
    /// Questions.
    pub questions: usize,
    /// Seconds.
    pub seconds: f64,
    /// Rendered `gate.md`.
    pub markdown: String,
}

/// Chooses, on `dev`, for context size slot `size`, the threshold that sends the most
/// questions down the single path while staying admissible (ties: the higher threshold).
/// `INFINITY` when no threshold is admissible but the empty one.
pub fn best_threshold(dev: &[&GateRow], size: usize) -> (f64, GateCell) {
    let mut thresholds: Vec<f64> = dev.iter().map(|row| row.sizes[size].confidence).collect();
    thresholds.sort_by(|a, b| b.total_cmp(a));
    thresholds.dedup();
    let mut best = (f64::INFINITY, cell(dev, size, f64::INFINITY));
    for threshold in thresholds {
        let candidate = cell(dev, size, threshold);
        if candidate.admissible() && candidate.single > best.1.single {
            best = (threshold, candidate);
        }
    }
    best
}

/// The gate on `rows`.
pub fn cell(rows: &[&GateRow], size: usize, threshold: f64) -> GateCell {
    let mut cell = GateCell::default();
    for row in rows {
        cell.add(row, size, threshold);
    }
    cell
}

/// Chooses the gate on the dev rows: the admissible (size, threshold) with the most single-path
/// questions; ties keep the earlier size in [`HEAD_SIZES`].
pub fn choose(dev: &[&GateRow]) -> (usize, f64) {
    let mut best = (0, f64::INFINITY, 0);
    for size in 0..HEAD_SIZES.len() {
        let (threshold, found) = best_threshold(dev, size);
        if found.single > best.2 {
            best = (size, threshold, found.single);
        }
    }
    (best.0, best.1)
}

/// Runs the gate evaluation over the selected conversations and writes `gate.md`, `gate.json`
/// and `gate.jsonl`.
pub fn run_gate_eval(settings: &RetrieveSettings) -> anyhow::Result<GateReport> {
    let started = Instant::now();
    let options = LoadOptions {
        samples: settings.samples.clone(),
        question_type: settings.question_type,
        drop_assistant_turns: settings.drop_assistant_turns,
    };
    let conversations = dataset::load(settings.dataset, &settings.data_path, &options)?;
    let llm_units = read_llm_units(settings)?;
    let needs =
        IndexNeeds::for_methods(&[Method::Fusion, Method::Bm25, Method::Turn], &settings.index);
    let stop = AtomicBool::new(false);
    let mut timings = Timings::default();
    let mut embedding = Embedding::new(settings, needs, &conversations, &stop);
    let mut board = Scoreboard::new(0, Vec::new());
    let mut rows = Vec::new();
    for conversation in &conversations {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let granules = board.granules(settings, conversation)?;
        let units =
            session_units(conversation, llm_units.get(&conversation.sample_id), granules.as_ref());
        let Some(index) = embedding.index(conversation, &units, &mut timings)? else { break };
        let Some((vectors, words)) = embedding.questions(conversation, &index, &mut timings)?
        else {
            break;
        };
        for (question, vector) in conversation.questions.iter().zip(&vectors) {
            rows.push(gate_row(&index, &conversation.sample_id, question, vector, &words)?);
        }
    }
    embedding.finish();
    let report = gate_report(&rows, conversations.len(), started.elapsed().as_secs_f64());
    write_gate_files(settings, &rows, &report)?;
    Ok(report)
}

/// One question's row: ranked with fusion, the gate's signals and what each head size holds,
/// what the shown context holds and what the loop reaches.
fn gate_row(
    index: &MemoryIndex,
    sample: &str,
    question: &Question,
    vector: &[f32],
    words: &QueryWords,
) -> anyhow::Result<GateRow> {
    let evidence = Evidence::parse(&question.evidence).turns;
    let holds = |turns: &[crate::retrieval::Scored], k: usize| {
        let top: BTreeSet<&str> =
            turns.iter().take(k).map(|hit| index.turn_id(hit.index)).collect();
        evidence.iter().all(|turn| top.contains(turn.as_str()))
    };
    let mut sizes = Vec::new();
    let (mut loop_holds, mut shown_holds) = (false, false);
    let mut top = Vec::new();
    for ContextSize { k, window } in HEAD_SIZES {
        let assessed = assess(index, &question.question, vector, words, k)
            .with_context(|| format!("ranking {}", question.id))?;
        loop_holds = holds(&assessed.turns, LOOP_REACH);
        let ContextSize { k: shown_k, window: shown_window } = SINGLE_CONTEXT;
        let shown = context_turns(index, &assessed.turns, shown_k, shown_window);
        shown_holds = holds(&shown, shown.len());
        top = assessed
            .turns
            .iter()
            .take(LOOP_REACH)
            .map(|hit| index.turn_id(hit.index).to_string())
            .collect();
        let context = context_turns(index, &assessed.turns, k, window);
        sizes.push(AtSize {
            k,
            window,
            signals: assessed.signals,
            confidence: assessed.confidence(),
            single_holds: holds(&context, context.len()),
            top_k_holds: holds(&assessed.turns, k),
        });
    }
    Ok(GateRow {
        question_id: question.id.clone(),
        sample: sample.to_string(),
        category: question.category.name().to_string(),
        evidence: evidence.into_iter().collect(),
        loop_holds,
        shown_holds,
        sizes,
        top,
    })
}

/// Writes `gate.jsonl` (one line per question), `gate.md` and `gate.json` into the output folder.
fn write_gate_files(
    settings: &RetrieveSettings,
    rows: &[GateRow],
    report: &GateReport,
) -> anyhow::Result<()> {
    let output_dir = settings.output_dir();
    std::fs::create_dir_all(&output_dir)
        .with_context(|| format!("creating {}", output_dir.display()))?;
    let mut lines = Vec::new();
    for row in rows {
        serde_json::to_writer(&mut lines, row)?;
        lines.push(b'\n');
    }
    crate::fsutil::write_atomic(&output_dir.join("gate.jsonl"), &lines)?;
    crate::fsutil::write_atomic(&output_dir.join("gate.md"), report.markdown.as_bytes())?;
    crate::fsutil::write_atomic(
        &output_dir.join("gate.json"),
        &serde_json::to_vec_pretty(report)?,
    )?;
    Ok(())
}

/// Chooses on the dev rows and reports on the others.
pub fn gate_report(rows: &[GateRow], conversations: usize, seconds: f64) -> GateReport {
    let (dev, held): (Vec<&GateRow>, Vec<&GateRow>) =
        rows.iter().partition(|row| DEV_SAMPLES.contains(&row.sample.as_str()));
    let (size, threshold) = choose(&dev);
    let mut by_category: IndexMap<String, GateCell> = IndexMap::new();
    let mut categories: Vec<&str> = held.iter().map(|row| row.category.as_str()).collect();
    categories.sort_unstable();
    categories.dedup();
    for category in categories {
        let rows: Vec<&GateRow> =
            held.iter().copied().filter(|row| row.category == category).collect();
        by_category.insert(category.to_string(), cell(&rows, size, threshold));
    }
    let choice = |slot: usize, threshold| {
        let ContextSize { k, window } = HEAD_SIZES[slot];
        GateChoice { k, window, threshold }
    };
    let sizes = (0..HEAD_SIZES.len())
        .map(|slot| {
            let (threshold, on_dev) = best_threshold(&dev, slot);
            (choice(slot, threshold), on_dev, cell(&held, slot, threshold))
        })
        .collect();
    let mut report = GateReport {
        choice: choice(size, threshold),
        dev: cell(&dev, size, threshold),
        held_out: cell(&held, size, threshold),
        held_out_by_category: by_category,
        sizes,
        loop_reach: LOOP_REACH,
        conversations,
        questions: rows.len(),
        seconds,
        markdown: String::new(),
    };
    report.markdown = render(&report);
    report
}

fn percent(part: usize, whole: usize) -> f64 {
    if whole == 0 { 0.0 } else { 100.0 * part as f64 / whole as f64 }
}

fn row(name: &str, cell: &GateCell) -> String {
    format!(
        "| {name} | {} | {} ({:.1} %) | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} |\n",
        cell.questions,
        cell.single,
        cell.single_share(),
        percent(cell.single_holds, cell.single),
        percent(cell.shown_holds, cell.single),
        percent(cell.loop_holds, cell.single),
        percent(cell.all_shown_holds, cell.questions),
        percent(cell.all_loop_holds, cell.questions),
    )
}

fn render(report: &GateReport) -> String {
    let choice = report.choice;
    let threshold = if choice.threshold.is_finite() {
        format!("{:.4}", choice.threshold)
    } else {
        "none (no threshold is admissible)".to_string()
    };
    let mut out = format!(
        "# Answer gate, chosen on {} and held out on the rest\n\n\
         {} questions over {} conversations; the loop's reach is the fusion top {} turns.\n\
         Calibrated on dev: head k = {} (window {}), threshold {threshold}. The single path \
         shows the top {} turns (window {}).\n\n\
         Columns: questions; sent down the single path; of those, the share whose head holds every \
         evidence turn, whose shown context does, and whose evidence is within the loop's reach; \
         over all questions, the last two shares (as if every question took each path).\n\n\
         | set | questions | single path | head holds | shown holds | loop holds | all: shown | all: loop |\n\
         |---|---|---|---|---|---|---|---|\n",
        DEV_SAMPLES.join("/"),
        report.questions,
        report.conversations,
        report.loop_reach,
        choice.k,
        choice.window,
        SINGLE_CONTEXT.k,
        SINGLE_CONTEXT.window,
    );
    out.push_str(&row("dev", &report.dev));
    out.push_str(&row("held-out", &report.held_out));
    for (category, cell) in &report.held_out_by_category {
        out.push_str(&row(&format!("held-out {category}"), cell));
    }
    out.push_str(&format!(
        "\nHeld out, the single path {} its promise (shown holds ≥ loop holds); its head {} \
         the calibration rule (head holds ≥ loop holds).\n\n",
        if report.held_out.keeps_promise() { "keeps" } else { "breaks" },
        if report.held_out.admissible() { "keeps" } else { "breaks" }
    ));
    out.push_str("Per head (best admissible threshold on dev):\n\n| k | window | threshold | dev single | held-out single | held-out head holds | held-out shown holds | held-out loop holds |\n|---|---|---|---|---|---|---|---|\n");
    for (choice, dev, held) in &report.sizes {
        out.push_str(&format!(
            "| {} | {} | {:.4} | {:.1} % | {:.1} % | {:.1} | {:.1} | {:.1} |\n",
            choice.k,
            choice.window,
            choice.threshold,
            dev.single_share(),
            held.single_share(),
            percent(held.single_holds, held.single),
            percent(held.shown_holds, held.single),
            percent(held.loop_holds, held.single),
        ));
    }
    out
}

#[cfg(test)]
#[path = "gate_tests.rs"]
mod tests;
