//! The worker pool of a run: which questions are left (resume by question id and provenance),
//! `workers` of them in flight across all samples, one result line appended per finished
//! question, Ctrl-C, a fatal endpoint error, and the summary.

use std::borrow::Borrow;
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt as _};
use serde::Serialize;

use crate::agent::answer::answer_question;
use crate::agent::counts::Counts;
use crate::agent::progress::AnswerProgress;
use crate::agent::resume;
pub use crate::agent::scan::PendingSample;
use crate::agent::scan::{Arrival, Scan};
use crate::agent::settings::{AnswerPass, AnswerSettings, RunShared};
use crate::llm::fatal::{AfterFatal, FatalLatch, Latched};
use crate::llm::{ChatModel, Embedder, Usage};
use crate::results::{ResultLine, Status};
use crate::snapshot::Snapshot;

/// What an answer run did (`run`, `ask`): the questions, tokens, counts and result files.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AnswerSummary {
    /// Questions in scope.
    pub total: usize,
    /// Questions already answered by an earlier run (skipped).
    pub resumed: usize,
    /// Questions answered by this run (errors included).
    pub answered: usize,
    /// Of those, how many failed.
    pub errors: usize,
    /// Questions not started because the run was interrupted or stopped.
    pub remaining: usize,
    /// Questions not answered because their conversation's memory is incomplete.
    pub pending: usize,
    /// The conversations those belong to.
    pub pending_samples: Vec<PendingSample>,
    /// Whether the run was stopped before the end.
    pub interrupted: bool,
    /// The error that stopped the run, when the endpoint refused the key or the model.
    pub fatal: Option<String>,
    /// Tokens of this run.
    pub usage: Usage,
    /// Sessions left out of the memory because they have no turns, as `<sample> <field>`
    /// ([`Conversation::empty_sessions`](crate::dataset::Conversation::empty_sessions)).
    pub empty_sessions: Vec<String>,
    /// What this run's questions counted (fallbacks, rejected replies, skipped calls, retries,
    /// hedges), the sum of their traces' `finish` records; the manifest writes the first three
    /// (see [`Counts::serialize_run`]).
    #[serde(flatten, serialize_with = "Counts::serialize_run")]
    pub counts: Counts,
    /// How many of this run's questions each path answered (`--answer`); written only when
    /// some question did not take the loop.
    #[serde(skip_serializing_if = "PathCounts::loop_only")]
    pub paths: PathCounts,
    /// Estimated cost in USD of this run, when the model's price is known.
    pub cost_usd: Option<f64>,
    /// Wall time.
    pub elapsed: Duration,
    /// Result files, one per sample.
    pub result_files: Vec<PathBuf>,
}

impl AnswerSummary {
    /// A hint on how to finish an interrupted, partly failed or incomplete run.
    pub fn resume_hint(&self) -> Option<String> {
        let mut hints = Vec::new();
        let left = self.remaining + self.errors;
        if left > 0 {
            hints.push(format!(
                "{left} questions are not answered yet ({} not started, {} failed); run the same command again to answer only those",
                self.remaining, self.errors
            ));
        }
        for sample in &self.pending_samples {
            hints.push(format!(
                "{} questions of {} are pending: sessions {:?} are not in its memory (their build failed; run again to retry the build, then they are answered)",
                sample.questions, sample.sample, sample.missing_sessions
            ));
        }
        (!hints.is_empty()).then(|| hints.join("\n"))
    }
}

impl std::fmt::Display for AnswerSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} questions: {} answered now ({} failed), {} from earlier runs, {} not started, {} pending an incomplete memory; {} prompt + {} completion tokens",
            self.total,
            self.answered,
            self.errors,
            self.resumed,
            self.remaining,
            self.pending,
            self.usage.prompt_tokens,
            self.usage.completion_tokens
        )?;
        f.write_str(&self.counts.run_line())?;
        if !self.paths.loop_only() {
            let PathCounts { single, looped, escalated } = self.paths;
            write!(f, "; paths: {single} single, {looped} loop, {escalated} escalated")?;
        }
        if !self.empty_sessions.is_empty() {
            write!(
                f,
                "; {} empty sessions skipped ({})",
                self.empty_sessions.len(),
                self.empty_sessions.join(", ")
            )?;
        }
        if let Some(cost) = self.cost_usd {
            write!(f, " (about ${cost:.2})")?;
        }
        write!(f, " in {:.1}s", self.elapsed.as_secs_f64())
    }
}

/// How many questions each answer path took.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PathCounts {
    /// Answered by the single path.
    pub single: usize,
    /// Answered by the loop.
    #[serde(rename = "loop")]
    pub looped: usize,
    /// The single pass found nothing, then the loop answered.
    pub escalated: usize,
}

impl PathCounts {
    /// Whether every question took the loop (nothing worth writing beside the usual counts).
    pub fn loop_only(&self) -> bool {
        self.single == 0 && self.escalated == 0
    }

    /// Counts one result line's path (a line without one took the loop).
    pub fn add(&mut self, path: Option<crate::results::AnswerPath>) {
        match path {
            Some(crate::results::AnswerPath::Single) => self.single += 1,
            Some(crate::results::AnswerPath::Escalated) => self.escalated += 1,
            Some(crate::results::AnswerPath::Loop) | None => self.looped += 1,
        }
    }
}

/// Answers every question of `samples` that the result files do not hold yet.
///
/// A question is answered only when its conversation's memory is complete
/// ([`Snapshot::memory`]); the others are counted as pending. `stop` resolves when the run
/// should wind down (Ctrl-C): no new question starts, the ones in flight finish and are
/// written, and the summary says what is left. Per-question failures are written as
/// `status: "error"` lines and never stop the run; a fatal endpoint error (a refused key, an
/// unknown model) does: no new question starts, the questions it failed are not written, and
/// [`AnswerSummary::fatal`] says why. Only IO errors on the result files fail the call.
pub async fn answer_all<M: ChatModel, E: Embedder>(
    settings: &AnswerSettings,
    pass: &AnswerPass,
    samples: &[Snapshot],
    model: &M,
    embedder: &E,
    stop: impl Future<Output = ()>,
) -> anyhow::Result<AnswerSummary> {
    let feed = SampleFeed {
        questions: samples
            .iter()
            .flat_map(|sample| &sample.conversation.questions)
            .filter(|question| pass.in_scope(&question.id))
            .count(),
        // Boxed: the concrete closure types over references trip the compiler's higher-ranked
        // lifetime inference when a caller needs the future to be `Send`.
        samples: futures::stream::iter(samples).map(Ok).boxed(),
        bars: None,
    };
    answer_stream(settings, pass, feed, model, embedder, stop).await
}

/// Conversations that become ready one by one (e.g. as their builds finish), for
/// [`answer_stream`].
pub struct SampleFeed<St> {
    /// The conversations, each as soon as its memory is loaded; an `Err` fails the run.
    pub samples: St,
    /// How many questions the conversations of the whole feed hold (for progress and the
    /// count of questions never started when the run stops early).
    pub questions: usize,
    /// Draw the progress bar among these (beside the build's), when given.
    pub bars: Option<indicatif::MultiProgress>,
}

/// [`answer_all`] over conversations that arrive while the run goes on: each one's questions
/// join the one pool of `settings.workers` as soon as it arrives, while earlier ones are still
/// being answered; the call returns when the feed has ended and every question is written.
///
/// A conversation `S` is cloned once per question: pass a reference or an `Arc`, never an
/// owned [`Snapshot`].
pub async fn answer_stream<S, St, M, E>(
    settings: &AnswerSettings,
    pass: &AnswerPass,
    feed: SampleFeed<St>,
    model: &M,
    embedder: &E,
    stop: impl Future<Output = ()>,
) -> anyhow::Result<AnswerSummary>
where
    S: Borrow<Snapshot> + Clone + Send + Sync,
    St: Stream<Item = anyhow::Result<S>> + Send,
    M: ChatModel,
    E: Embedder,
{
    let started = Instant::now();
    let SampleFeed { samples, questions: total, bars } = feed;
    tracing::info!(total, workers = settings.workers, "answering started");
    let progress = AnswerProgress::new(settings, total as u64, bars.as_ref());
    let latch = Arc::new(FatalLatch::default());
    let key = &settings.key_variable;
    let model = Latched::sharing(model, &latch, key, AfterFatal::Fail);
    let embedder = Latched::sharing(embedder, &latch, key, AfterFatal::Fail);
    let shared = RunShared::new(settings, pass, &model, &embedder);
    let scan = Mutex::new(Scan::default());

    // Set once `stop` resolves or the latch trips; checked before starting each question.
    let stopped = AtomicBool::new(false);
    let (stopped_ref, shared_ref, scan_ref, progress_ref) = (&stopped, &shared, &scan, &progress);
    let questions = samples
        .map(move |sample| {
            futures::stream::iter(questions_of((settings, pass), scan_ref, progress_ref, sample))
        })
        .flatten()
        .take_while(move |_| std::future::ready(!stopped_ref.load(Ordering::SeqCst)))
        // Boxed for the same reason as in `answer_all`.
        .boxed();
    let finished = questions
        .map(move |item| async move {
            let (sample, index) = item?;
            let sample: &Snapshot = sample.borrow();
            let question = &sample.conversation.questions[index];
            Ok(answer_question(shared_ref, sample, question).await)
        })
        .buffer_unordered(settings.workers.max(1));
    let output = Output { settings, progress: &progress, latch: &latch };
    let written = output.write_lines(finished, stop, &stopped).await?;
    progress.finish();
    let WrittenLines { answered, errors, usage, paths } = written;
    let Scan { resumed, waiting, result_files, empty_sessions } =
        scan.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
    let pending = waiting.iter().map(|sample| sample.questions).sum::<usize>();
    let summary = AnswerSummary {
        total,
        resumed,
        answered,
        errors,
        remaining: total.saturating_sub(resumed + answered + pending),
        pending,
        pending_samples: waiting,
        interrupted: stopped.load(Ordering::SeqCst),
        fatal: latch.error().map(ToString::to_string),
        usage,
        empty_sessions,
        counts: shared.counts(),
        paths,
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

/// The questions of an arrived conversation still to answer, as `(sample, question index)`,
/// after counting its resumed or pending ones in `scan` and on the progress bar.
fn questions_of<S: Borrow<Snapshot> + Clone>(
    (settings, pass): (&AnswerSettings, &AnswerPass),
    scan: &Mutex<Scan>,
    progress: &AnswerProgress,
    sample: anyhow::Result<S>,
) -> Vec<anyhow::Result<(S, usize)>> {
    // The sample id becomes result and trace file names: checked before anything is read or
    // written for it.
    let checked = sample.and_then(|sample| {
        settings.checked_result_path(&sample.borrow().conversation.sample_id)?;
        Ok(sample)
    });
    let sample = match checked {
        Ok(sample) => sample,
        Err(error) => return vec![Err(error)],
    };
    let mut scan = scan.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    match scan.add(settings, pass, sample.borrow()) {
        Ok(Arrival::Waiting(questions)) => {
            progress.waiting(questions as u64);
            Vec::new()
        }
        Ok(Arrival::Ready { resumed, pending }) => {
            progress.resumed(resumed as u64);
            pending.into_iter().map(|index| Ok((sample.clone(), index))).collect()
        }
        Err(error) => vec![Err(error)],
    }
}

/// Where finished questions go.
struct Output<'a> {
    settings: &'a AnswerSettings,
    progress: &'a AnswerProgress,
    latch: &'a FatalLatch,
}

impl Output<'_> {
    /// Appends the line of each finished question until the stream ends. When `stop` resolves
    /// or the latch trips, `stopped` is set (no new question starts) and the questions in
    /// flight are still written, except those the fatal error failed.
    async fn write_lines(
        &self,
        finished: impl Stream<Item = anyhow::Result<ResultLine>>,
        stop: impl Future<Output = ()>,
        stopped: &AtomicBool,
    ) -> anyhow::Result<WrittenLines> {
        let writer = resume::ResultWriter::new();
        let mut finished = std::pin::pin!(finished);
        let mut stop = std::pin::pin!(stop);
        let mut written = WrittenLines::default();
        loop {
            // Polled together so that an interrupt is acknowledged at once, even while every
            // worker is busy.
            let line = tokio::select! {
                () = &mut stop, if !stopped.load(Ordering::SeqCst) => {
                    stopped.store(true, Ordering::SeqCst);
                    self.progress.println(
                        "interrupted: no new questions start; waiting for the ones in flight to finish",
                    );
                    continue;
                }
                line = finished.next() => line,
            };
            let Some(line) = line.transpose()? else { break };
            if self.latch.error().is_some() {
                stopped.store(true, Ordering::SeqCst);
                if line.status == Status::Error {
                    // Failed by the fatal error (or at the same time): left for the rerun.
                    continue;
                }
            }
            writer.append(&self.settings.checked_result_path(&line.sample)?, &line)?;
            written.add(&line);
            self.progress.update(
                written.errors,
                written.usage,
                crate::llm::models::estimate_cost_usd(&self.settings.model, written.usage),
            );
        }
        Ok(written)
    }
}

/// The lines written by this run: how many, how many failed, and their tokens.
#[derive(Default)]
struct WrittenLines {
    answered: usize,
    errors: usize,
    usage: Usage,
    paths: PathCounts,
}

impl WrittenLines {
    fn add(&mut self, line: &ResultLine) {
        self.answered += 1;
        self.paths.add(line.path);
        if line.status == Status::Error {
            self.errors += 1;
        }
        self.usage +=
            Usage { prompt_tokens: line.prompt_tokens, completion_tokens: line.completion_tokens };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_summary_writes_its_fields_in_order_and_three_counts_even_when_zero() -> anyhow::Result<()>
    {
        let summary = AnswerSummary {
            total: 3,
            resumed: 1,
            answered: 2,
            errors: 0,
            remaining: 0,
            pending: 0,
            pending_samples: Vec::new(),
            interrupted: false,
            fatal: None,
            usage: Usage { prompt_tokens: 10, completion_tokens: 2 },
            empty_sessions: Vec::new(),
            counts: Counts { fallbacks: 4, retries: 5, hedges: 6, ..Counts::default() },
            paths: PathCounts::default(),
            cost_usd: None,
            elapsed: Duration::from_millis(1500),
            result_files: vec![PathBuf::from("r.jsonl")],
        };
        let expected = concat!(
            r#"{"total":3,"resumed":1,"answered":2,"errors":0,"remaining":0,"pending":0,"#,
            r#""pending_samples":[],"interrupted":false,"fatal":null,"#,
            r#""usage":{"prompt_tokens":10,"completion_tokens":2},"empty_sessions":[],"#,
            r#""fallbacks":4,"rejected":0,"skipped":0,"cost_usd":null,"#,
            r#""elapsed":{"secs":1,"nanos":500000000},"result_files":["r.jsonl"]}"#
        );
        assert_eq!(serde_json::to_string(&summary)?, expected);
        assert_eq!(
            summary.to_string(),
            "3 questions: 2 answered now (0 failed), 1 from earlier runs, 0 not started, 0 pending an incomplete memory; 10 prompt + 2 completion tokens; 4 retrieval fallbacks in 1.5s"
        );
        Ok(())
    }
}
