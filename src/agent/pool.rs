//! The worker pool of a run: which questions are left (resume by question id), `workers` of
//! them in flight across all samples, one result line appended per finished question, Ctrl-C,
//! the progress bar and the summary.

use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt as _};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;
use tracing::Instrument as _;

use crate::agent::answer::answer_question;
use crate::agent::resume;
use crate::agent::sample::SampleMemory;
use crate::agent::settings::{AnswerSettings, Shared};
use crate::dataset::Question;
use crate::llm::{ChatModel, Embedder, Usage};
use crate::results::{ResultLine, Status};

/// What a run did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunSummary {
    /// Questions in scope.
    pub total: usize,
    /// Questions already answered by an earlier run (skipped).
    pub resumed: usize,
    /// Questions answered by this run (errors included).
    pub answered: usize,
    /// Of those, how many failed.
    pub errors: usize,
    /// Questions not started because the run was interrupted.
    pub remaining: usize,
    /// Whether the run was stopped before the end.
    pub interrupted: bool,
    /// Tokens of this run.
    pub usage: Usage,
    /// Retrieval steps of this run that fell back to a deterministic substitute for the
    /// model's reply (question keywords, re-rank, tag scoring); each is a `fallback` record in
    /// its question's trace.
    pub fallbacks: u64,
    /// Estimated cost in USD of this run, when the model's price is known.
    pub cost_usd: Option<f64>,
    /// Wall time.
    pub elapsed: Duration,
    /// Result files, one per sample.
    pub result_files: Vec<PathBuf>,
}

impl RunSummary {
    /// A one-line hint on how to finish an interrupted or partly failed run.
    pub fn resume_hint(&self) -> Option<String> {
        let left = self.remaining + self.errors;
        (left > 0).then(|| {
            format!(
                "{left} questions are not answered yet ({} not started, {} failed); run the same command again to answer only those",
                self.remaining, self.errors
            )
        })
    }
}

impl std::fmt::Display for RunSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} questions: {} answered now ({} failed), {} from earlier runs, {} not started; {} prompt + {} completion tokens",
            self.total,
            self.answered,
            self.errors,
            self.resumed,
            self.remaining,
            self.usage.prompt_tokens,
            self.usage.completion_tokens
        )?;
        write!(f, "; {} retrieval fallbacks", self.fallbacks)?;
        if let Some(cost) = self.cost_usd {
            write!(f, " (about ${cost:.2})")?;
        }
        write!(f, " in {:.1}s", self.elapsed.as_secs_f64())
    }
}

/// Answers every question of `samples` that the result files do not hold yet.
///
/// `stop` resolves when the run should wind down (Ctrl-C): no new question starts, the ones in
/// flight finish and are written, and the summary says what is left. Per-question failures are
/// written as `status: "error"` lines and never stop the run; only IO errors on the result files
/// do.
pub async fn answer_all<M: ChatModel, E: Embedder>(
    settings: &AnswerSettings,
    samples: &[SampleMemory],
    model: &M,
    embedder: &E,
    stop: impl Future<Output = ()>,
) -> anyhow::Result<RunSummary> {
    let started = Instant::now();
    let Scan { total, resumed, pending, result_files } = scan_results(settings, samples)?;
    tracing::info!(
        total,
        resumed,
        pending = pending.len(),
        workers = settings.workers,
        "answering started"
    );

    let progress = Progress::new(settings, total as u64, resumed as u64);
    let shared = Shared::new(settings, model, embedder);

    // Set once `stop` resolves; the question stream checks it before starting each question.
    let stopped = AtomicBool::new(false);
    let stopped_ref = &stopped;
    let shared_ref = &shared;
    let pending_ref = &pending;
    // The stream yields indices, not references: closures over plain values keep the future
    // `Send` (closures taking references trip the compiler's higher-ranked lifetime inference).
    let finished = futures::stream::iter(0..pending.len())
        .take_while(move |_| std::future::ready(!stopped_ref.load(Ordering::SeqCst)))
        .map(move |index| {
            let (sample, question) = pending_ref[index];
            let span = tracing::info_span!("question", id = %question.id);
            answer_question(shared_ref, sample, question).instrument(span)
        })
        .buffer_unordered(settings.workers.max(1));
    let tally = write_lines(settings, finished, stop, &stopped, &progress).await?;
    progress.finish();
    let interrupted = stopped.load(Ordering::SeqCst);
    let Tally { answered, errors, usage } = tally;
    let summary = RunSummary {
        total,
        resumed,
        answered,
        errors,
        remaining: pending.len() - answered,
        interrupted,
        usage,
        fallbacks: shared.fallbacks.load(Ordering::Relaxed),
        cost_usd: crate::llm::models::estimate_cost_usd(&settings.model, usage),
        elapsed: started.elapsed(),
        result_files,
    };
    tracing::info!(%summary, "answering finished");
    if let Some(hint) = summary.resume_hint() {
        tracing::warn!("{hint}");
    }
    Ok(summary)
}

/// Appends the line of each finished question until the stream ends. When `stop` resolves,
/// `stopped` is set (no new question starts) and the questions in flight are still written.
async fn write_lines(
    settings: &AnswerSettings,
    finished: impl Stream<Item = ResultLine>,
    stop: impl Future<Output = ()>,
    stopped: &AtomicBool,
    progress: &Progress,
) -> anyhow::Result<Tally> {
    let writer = resume::ResultWriter::new();
    let mut finished = std::pin::pin!(finished);
    let mut stop = std::pin::pin!(stop);
    let mut tally = Tally::default();
    loop {
        // Polled together so that an interrupt is acknowledged at once, even while every
        // worker is busy.
        let line = tokio::select! {
            () = &mut stop, if !stopped.load(Ordering::SeqCst) => {
                stopped.store(true, Ordering::SeqCst);
                progress.println(
                    "interrupted: no new questions start; waiting for the ones in flight to finish",
                );
                continue;
            }
            line = finished.next() => line,
        };
        let Some(line) = line else { break };
        let path = settings.result_path(&line.sample);
        writer.append(&path, &line)?;
        tally.add(&line);
        progress.update(
            tally.errors,
            tally.usage,
            crate::llm::models::estimate_cost_usd(&settings.model, tally.usage),
        );
    }
    Ok(tally)
}

/// The questions of a run, split by the result files into done and pending.
struct Scan<'a> {
    total: usize,
    resumed: usize,
    pending: Vec<(&'a SampleMemory, &'a Question)>,
    result_files: Vec<PathBuf>,
}

/// Reads (and repairs) every sample's result file: questions with a successful line are done.
fn scan_results<'a>(
    settings: &AnswerSettings,
    samples: &'a [SampleMemory],
) -> anyhow::Result<Scan<'a>> {
    let mut total = 0;
    let mut resumed = 0;
    let mut pending: Vec<(&SampleMemory, &Question)> = Vec::new();
    let mut result_files = Vec::new();
    for sample in samples {
        let path = settings.result_path(&sample.conversation.sample_id);
        let state = resume::load_results(&path)?;
        if state.dropped_errors + state.dropped_invalid > 0 {
            tracing::info!(
                file = %path.display(),
                failed = state.dropped_errors,
                invalid = state.dropped_invalid,
                "result file repaired; failed questions will be answered again"
            );
        }
        for question in &sample.conversation.questions {
            total += 1;
            if state.done.contains(&question.id) {
                resumed += 1;
            } else {
                pending.push((sample, question));
            }
        }
        result_files.push(path);
    }
    Ok(Scan { total, resumed, pending, result_files })
}

/// Counts of the lines written by this run.
#[derive(Default)]
struct Tally {
    answered: usize,
    errors: usize,
    usage: Usage,
}

impl Tally {
    fn add(&mut self, line: &ResultLine) {
        self.answered += 1;
        if line.status == Status::Error {
            self.errors += 1;
        }
        self.usage +=
            Usage { prompt_tokens: line.prompt_tokens, completion_tokens: line.completion_tokens };
    }
}

/// The progress bar: questions done/total, errors, tokens, estimated cost, ETA.
struct Progress {
    bar: ProgressBar,
}

impl Progress {
    fn new(settings: &AnswerSettings, total: u64, done: u64) -> Self {
        let bar = if settings.progress {
            ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr())
        } else {
            ProgressBar::hidden()
        };
        let style = ProgressStyle::with_template(
            "{spinner} answering [{bar:30}] {pos}/{len} questions · {msg} · {elapsed} elapsed, ETA {eta}",
        )
        .map(|style| style.progress_chars("=> "))
        .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        bar.set_position(done);
        bar.reset_eta();
        bar.set_message("0 errors · 0 tokens");
        bar.enable_steady_tick(Duration::from_millis(250));
        Self { bar }
    }

    fn update(&self, errors: usize, usage: Usage, cost: Option<f64>) {
        self.bar.inc(1);
        let cost = cost.map(|cost| format!(" · ~${cost:.2}")).unwrap_or_default();
        self.bar
            .set_message(format!("{errors} errors · {} tokens{cost}", human_tokens(usage.total())));
    }

    fn println(&self, message: &str) {
        if self.bar.is_hidden() {
            tracing::warn!("{message}");
        } else {
            self.bar.println(message);
        }
    }

    fn finish(&self) {
        self.bar.finish();
    }
}

fn human_tokens(tokens: u64) -> String {
    match tokens {
        0..1_000 => tokens.to_string(),
        1_000..1_000_000 => format!("{:.1}k", tokens as f64 / 1e3),
        _ => format!("{:.2}M", tokens as f64 / 1e6),
    }
}
