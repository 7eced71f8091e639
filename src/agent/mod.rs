//! The answer engine: per-question retrieval, the tool-calling loop, and resumable concurrent
//! runs over many conversations.
//!
//! Entry point: [`answer_all`]. It keeps `workers` questions in flight across all samples at once
//! (not sample by sample), appends one result line per question as soon as it finishes, and
//! resumes by question id: questions with a successful line are skipped, failed ones are answered
//! again, a torn last line from a killed run is repaired (see `resume`). Each question also gets
//! a JSONL trace (see `trace`), rendered by `mragent trace` (see `render`).
//!
//! Layout: `question` (category-aware question text), `retrieve` (pre-loop retrieval), `run`
//! (the sans-IO loop state machine), `tools` (the closed tool set), `resume` (result files),
//! `trace` and `render` (traces). This module is the only one here that awaits anything.
//!
//! Concurrency: `futures::StreamExt::buffer_unordered(workers)` bounds the questions in flight;
//! request rates are the `llm` stack's business. Within a question, tool calls run one after
//! another in call order (they are in-memory lookups, and the order decides which keys
//! `query_event_keywords` has already shown).

pub mod question;
pub mod render;
pub mod resume;
pub mod retrieve;
pub mod run;
#[cfg(any(test, feature = "test-support"))]
pub mod scripted;
pub mod tools;
pub mod trace;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use futures::future::BoxFuture;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;
use tracing::Instrument as _;

use crate::agent::question::{AnswerStyle, PreparedQuestion};
use crate::agent::retrieve::{
    CallSettings, RetrievalSettings, RetrieveInput, Retrieved, score_key_tags,
};
use crate::agent::run::{AnswerRun, Outcome, RunLimits, RunSetup, Step, ToolOutput};
use crate::agent::tools::{
    Applied, MEMGAS_TOOL, Tool, ToolContext, ToolError, ToolState, finish_event_keywords,
    memgas_result,
};
use crate::agent::trace::{TraceEvent, TraceWriter, trace_path};
use crate::dataset::{Conversation, DatasetKind, Question};
use crate::ingest::{BuiltMemory, SampleEmbeddings};
use crate::llm::{ChatModel, Embedder, ToolChoice, Usage};
use crate::memory::MemoryGraph;
use crate::prompts;
use crate::results::{ResultLine, Status, result_path};
use crate::retrieval::MemoryIndex;

/// Resolved settings of an answer run (`mragent run`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AnswerSettings {
    /// Project root: results go to `<root>/result/…`, traces to `<root>/log/…`.
    pub root: PathBuf,
    /// Dataset.
    pub dataset: DatasetKind,
    /// Model name used in result file names (`<sample>_result_<model_name>_<file>.jsonl`).
    pub model_name: String,
    /// Model id sent with every answer-time request (retrieval calls and the loop).
    pub model: String,
    /// Run tag (`--file`).
    pub file: String,
    /// Questions in flight at once, across all samples (`--workers`, default 10).
    pub workers: usize,
    /// Loop limits.
    pub limits: RunLimits,
    /// Retrieval knobs.
    pub retrieval: RetrievalSettings,
    /// Sampling temperature of every request (reference: 0).
    pub temperature: Option<f32>,
    /// Seed: provider seed of every request, and the category-5 option coin.
    pub seed: u64,
    /// Draw a progress bar on stderr.
    pub progress: bool,
    /// Write per-question traces under `log/`.
    pub traces: bool,
}

impl AnswerSettings {
    /// Settings with the reference defaults (10 workers, 8 rounds, 50 tool calls, seed 66,
    /// temperature 0).
    pub fn new(
        root: impl Into<PathBuf>,
        dataset: DatasetKind,
        model_name: &str,
        model: &str,
        file: &str,
    ) -> Self {
        Self {
            root: root.into(),
            dataset,
            model_name: model_name.to_string(),
            model: model.to_string(),
            file: file.to_string(),
            workers: 10,
            limits: RunLimits::default(),
            retrieval: RetrievalSettings::default(),
            temperature: Some(0.0),
            seed: 66,
            progress: true,
            traces: true,
        }
    }

    /// The result file of a sample.
    pub fn result_path(&self, sample_id: &str) -> PathBuf {
        result_path(&self.root, self.dataset.as_str(), sample_id, &self.model_name, &self.file)
    }

    /// The trace file of a question.
    pub fn trace_path(&self, sample_id: &str, question_id: &str) -> PathBuf {
        trace_path(&self.root, self.dataset.as_str(), &self.file, sample_id, question_id)
    }

    fn provider_seed(&self) -> Option<i64> {
        i64::try_from(self.seed).ok()
    }

    fn call_settings(&self) -> CallSettings<'_> {
        CallSettings {
            model: &self.model,
            temperature: self.temperature,
            seed: self.provider_seed(),
            max_reasks: self.retrieval.max_reasks,
        }
    }
}

/// One conversation ready to be answered: its questions, memory graph and embeddings.
#[derive(Debug, Clone)]
pub struct SampleMemory {
    /// The conversation and its questions.
    pub conversation: Conversation,
    /// Its memory graph.
    pub graph: MemoryGraph,
    /// Vectors of its sentences, topics and questions.
    pub embeddings: SampleEmbeddings,
    /// Its MemGAS index; when present, the loop offers the `query_memgas` tool.
    pub memgas: Option<MemgasMemory>,
}

impl SampleMemory {
    /// A conversation's memory from its finished build (`ingest::build_memory` or
    /// `ingest::load_memory`), without a MemGAS index.
    pub fn from_built(conversation: Conversation, built: BuiltMemory) -> Self {
        Self { conversation, graph: built.graph, embeddings: built.embeddings, memgas: None }
    }
}

/// A conversation's MemGAS index with the embedder it was built with (queries must be embedded
/// by the same model). Cheap to clone.
#[derive(Clone)]
pub struct MemgasMemory {
    /// The index.
    pub index: Arc<MemoryIndex>,
    /// The index's embedder, for the tool's query texts.
    pub embedder: Arc<dyn QueryEmbedder>,
}

impl MemgasMemory {
    /// Pairs an index with its embedder.
    pub fn new(index: MemoryIndex, embedder: impl Embedder + 'static) -> Self {
        Self { index: Arc::new(index), embedder: Arc::new(embedder) }
    }
}

impl std::fmt::Debug for MemgasMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemgasMemory")
            .field("sessions", &self.index.n_sessions())
            .field("turns", &self.index.n_turns())
            .finish()
    }
}

/// Embeds one query text. Implemented for every [`Embedder`]; it exists so that a
/// [`SampleMemory`] can carry its MemGAS embedder without a type parameter (`Embedder` itself
/// returns `impl Future` and cannot be a trait object).
pub trait QueryEmbedder: Send + Sync {
    /// The unit-length embedding of `text`.
    fn embed_query<'a>(
        &'a self,
        text: &'a str,
    ) -> BoxFuture<'a, Result<Vec<f32>, crate::llm::Error>>;
}

impl<E: Embedder> QueryEmbedder for E {
    fn embed_query<'a>(
        &'a self,
        text: &'a str,
    ) -> BoxFuture<'a, Result<Vec<f32>, crate::llm::Error>> {
        Box::pin(async move {
            let texts = [text.to_string()];
            let embedded = self.embed(&texts).await?;
            let vector = embedded.vectors.into_iter().next().ok_or_else(|| {
                crate::llm::Error::Decode { message: "the embedder returned no vector".to_string() }
            })?;
            Ok(unit_length(vector))
        })
    }
}

/// `vector` scaled to length 1 (unchanged when it is zero).
fn unit_length(mut vector: Vec<f32>) -> Vec<f32> {
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        vector.iter_mut().for_each(|x| *x /= norm);
    }
    vector
}

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
    tracing::info!(
        total,
        resumed,
        pending = pending.len(),
        workers = settings.workers,
        "answering started"
    );

    let progress = Progress::new(settings, total as u64, resumed as u64);
    let writer = resume::ResultWriter::new();
    let shared = Shared { settings, model, embedder };

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
    let mut finished = std::pin::pin!(finished);
    let mut stop = std::pin::pin!(stop);
    let mut answered = 0;
    let mut errors = 0;
    let mut usage = Usage::default();
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
        answered += 1;
        if line.status == Status::Error {
            errors += 1;
        }
        usage +=
            Usage { prompt_tokens: line.prompt_tokens, completion_tokens: line.completion_tokens };
        progress.update(
            errors,
            usage,
            crate::llm::models::estimate_cost_usd(&settings.model, usage),
        );
    }
    progress.finish();
    let interrupted = stopped.load(Ordering::SeqCst);
    let summary = RunSummary {
        total,
        resumed,
        answered,
        errors,
        remaining: pending.len() - answered,
        interrupted,
        usage,
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

/// What every question of a run shares.
struct Shared<'a, M, E> {
    settings: &'a AnswerSettings,
    model: &'a M,
    embedder: &'a E,
}

/// Answers one question end to end; never fails (a failure is a `status: "error"` line).
async fn answer_question<M: ChatModel, E: Embedder>(
    shared: &Shared<'_, M, E>,
    sample: &SampleMemory,
    question: &Question,
) -> ResultLine {
    let settings = shared.settings;
    let started = Instant::now();
    let sample_id = &sample.conversation.sample_id;
    let mut trace = if settings.traces {
        TraceWriter::open(settings.trace_path(sample_id, &question.id))
    } else {
        TraceWriter::disabled()
    };
    let prepared = question::prepare(question, settings.dataset, settings.seed);
    let result_file = settings
        .result_path(sample_id)
        .strip_prefix(&settings.root)
        .map(Path::to_path_buf)
        .unwrap_or_else(|_| settings.result_path(sample_id));
    trace.record(TraceEvent::Start {
        question_id: question.id.clone(),
        sample: sample_id.clone(),
        dataset: settings.dataset.as_str().to_string(),
        model: settings.model.clone(),
        file: settings.file.clone(),
        result_file: result_file.display().to_string(),
        category: question.category.clone(),
        question: question.question.clone(),
        formatted_question: prepared.text.clone(),
        started_at: chrono::Utc::now().to_rfc3339(),
    });

    let mut usage = Usage::default();
    let outcome = solve(shared, sample, question, &prepared, &mut trace, &mut usage).await;
    let latency_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let (status, prediction, prediction_context, error, rounds, tool_calls) = match outcome {
        Ok(Outcome { answer: Ok(answer), rounds, tool_calls, .. }) => {
            (Status::Ok, answer.answer.clone(), answer.support_turns(), None, rounds, tool_calls)
        }
        Ok(Outcome { answer: Err(error), rounds, tool_calls, .. }) => {
            (Status::Error, String::new(), Vec::new(), Some(error), rounds, tool_calls)
        }
        Err(error) => (Status::Error, String::new(), Vec::new(), Some(error), 0, 0),
    };
    if let Some(error) = &error {
        tracing::warn!(error = %error, "question failed");
    }
    trace.record(TraceEvent::Finish {
        status,
        prediction: prediction.clone(),
        prediction_context: prediction_context.clone(),
        error: error.clone(),
        rounds,
        tool_calls,
        usage,
        latency_ms,
    });
    ResultLine {
        question_id: question.id.clone(),
        sample: sample_id.clone(),
        question: question.question.clone(),
        answer: question.answer.clone(),
        prediction,
        category: question.category.clone(),
        evidence: question.evidence.clone(),
        prediction_context,
        status,
        error,
        rounds,
        tool_calls,
        prompt_tokens: usage.prompt_tokens,
        completion_tokens: usage.completion_tokens,
        latency_ms,
    }
}

/// Retrieval then the loop. `usage` accumulates every call's tokens, failed attempts included.
async fn solve<M: ChatModel, E: Embedder>(
    shared: &Shared<'_, M, E>,
    sample: &SampleMemory,
    question: &Question,
    prepared: &PreparedQuestion,
    trace: &mut TraceWriter,
    usage: &mut Usage,
) -> Result<Outcome, String> {
    let settings = shared.settings;
    let question_vector = question_vector(shared, sample, question, usage).await?;
    let input = RetrieveInput {
        graph: &sample.graph,
        vectors: &sample.embeddings,
        question_vector: &question_vector,
        question: prepared,
        dataset: settings.dataset,
        settings: &settings.retrieval,
        call: settings.call_settings(),
    };
    let retrieved = retrieve::retrieve(shared.model, &input, trace).await;
    let Retrieved { payload, seen_keys, usage: retrieval_usage } = match retrieved {
        Ok(retrieved) => retrieved,
        Err(error) => return Err(error.to_string()),
    };
    *usage += retrieval_usage;

    let mut run =
        AnswerRun::new(run_setup(settings, prepared, payload.to_string(), sample.memgas.is_some()));
    let context = ToolContext {
        graph: &sample.graph,
        vectors: &sample.embeddings,
        question_vector: &question_vector,
        rerank_limit: settings.retrieval.k2,
        keep: settings.retrieval.k2,
        tag_max: settings.retrieval.tag_max,
        memgas: sample.memgas.is_some(),
    };
    let mut state = ToolState { seen_keys };
    let mut sent: Vec<crate::llm::Message> = Vec::new();
    let mut request_number = 0;
    loop {
        match run.next_step() {
            Step::CallModel(request) => {
                request_number += 1;
                let messages_from =
                    sent.iter().zip(&request.messages).take_while(|(old, new)| old == new).count();
                trace.record(TraceEvent::Request {
                    round: request_number,
                    messages_from,
                    messages: request.messages[messages_from..].to_vec(),
                    tools: if request_number == 1 { request.tools.clone() } else { Vec::new() },
                    tool_choice: tool_choice_name(request.tool_choice.as_ref()),
                    structured: request.response_format.is_some(),
                });
                sent.clone_from(&request.messages);
                let call_started = Instant::now();
                let response = shared.model.chat(&request).await;
                let ms = millis(call_started.elapsed());
                match &response {
                    Ok(response) => trace.record(TraceEvent::Response {
                        round: request_number,
                        message: Some(response.message.clone()),
                        finish_reason: response.finish_reason.clone(),
                        error: None,
                        usage: response.usage,
                        ms,
                    }),
                    Err(error) => trace.record(TraceEvent::Response {
                        round: request_number,
                        message: None,
                        finish_reason: None,
                        error: Some(error.to_string()),
                        usage: Usage::default(),
                        ms,
                    }),
                }
                run.model_responded(response);
            }
            Step::CallTools(invocations) => {
                let mut outputs = Vec::with_capacity(invocations.len());
                for invocation in invocations {
                    let call_started = Instant::now();
                    let content = execute_tool(
                        shared,
                        sample,
                        prepared,
                        &invocation.tool,
                        &context,
                        &mut state,
                        trace,
                        usage,
                    )
                    .await;
                    trace.record(TraceEvent::ToolCall {
                        call_id: invocation.call_id.clone(),
                        name: invocation.tool.name().to_string(),
                        arguments: invocation.tool.arguments_json(),
                        result: content.clone(),
                        ms: millis(call_started.elapsed()),
                    });
                    outputs.push(ToolOutput { call_id: invocation.call_id, content });
                }
                run.tools_finished(outputs);
            }
            Step::Done(outcome) => {
                *usage += outcome.usage;
                return Ok(outcome);
            }
        }
    }
}

/// The question's embedding: from the build's cache, else embedded now.
async fn question_vector<M: ChatModel, E: Embedder>(
    shared: &Shared<'_, M, E>,
    sample: &SampleMemory,
    question: &Question,
    usage: &mut Usage,
) -> Result<Vec<f32>, String> {
    if let Some(vector) = sample.embeddings.questions.get(&question.id) {
        return Ok(vector.clone());
    }
    let text = question.question.replace(['\r', '\n'], " ").trim().to_string();
    let embedded = shared
        .embedder
        .embed(std::slice::from_ref(&text))
        .await
        .map_err(|error| format!("embedding the question failed: {error}"))?;
    *usage += embedded.usage;
    let mut vector = embedded
        .vectors
        .into_iter()
        .next()
        .ok_or_else(|| "the embedder returned no vector".to_string())?;
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        vector.iter_mut().for_each(|x| *x /= norm);
    }
    Ok(vector)
}

/// Runs one tool call; tag scoring for `query_event_keywords` asks the model, and
/// `query_memgas` embeds its query.
#[allow(clippy::too_many_arguments)]
async fn execute_tool<M: ChatModel, E: Embedder>(
    shared: &Shared<'_, M, E>,
    sample: &SampleMemory,
    prepared: &PreparedQuestion,
    tool: &Tool,
    context: &ToolContext<'_>,
    state: &mut ToolState,
    trace: &mut TraceWriter,
    usage: &mut Usage,
) -> String {
    let settings = shared.settings;
    match tool.apply(context, state) {
        Ok(Applied::Done(value)) => value.to_string(),
        Ok(Applied::ScoreTags { event_id, mut keys }) => {
            for key in &mut keys {
                if key.tags.len() <= settings.retrieval.tag_max {
                    continue;
                }
                let (scored, cost) = score_key_tags(
                    shared.model,
                    &settings.call_settings(),
                    settings.retrieval.tag_limit,
                    &prepared.search_text,
                    &key.key,
                    &key.tags,
                    trace,
                )
                .await;
                *usage += cost;
                key.tags = match scored {
                    Some(scored) => scored.into_iter().map(|(tag, _)| tag).collect(),
                    None => key.tags.iter().take(settings.retrieval.tag_limit).cloned().collect(),
                };
            }
            finish_event_keywords(&event_id, keys).to_string()
        }
        Ok(Applied::Memgas { query, k }) => {
            let Some(memgas) = &sample.memgas else {
                return ToolError::NotFound(format!(
                    "{MEMGAS_TOOL} is not available for this conversation"
                ))
                .to_tool_result();
            };
            let vector = match memgas.embedder.embed_query(&query).await {
                Ok(vector) => vector,
                Err(error) => {
                    return ToolError::NotFound(format!("embedding the query failed: {error}"))
                        .to_tool_result();
                }
            };
            match memgas.index.query(&query, &vector, k) {
                Ok(hits) => memgas_result(&query, &hits).to_string(),
                Err(error) => ToolError::NotFound(format!("MemGAS retrieval failed: {error}"))
                    .to_tool_result(),
            }
        }
        Err(error) => error.to_tool_result(),
    }
}

/// The loop's prompts and limits for one question.
fn run_setup(
    settings: &AnswerSettings,
    prepared: &PreparedQuestion,
    payload: String,
    memgas: bool,
) -> RunSetup {
    let style = match prepared.style {
        AnswerStyle::Strict => prompts::ANSWER_STYLE_STRICT.text.trim(),
        AnswerStyle::Open => prompts::ANSWER_STYLE_OPEN.text.trim(),
    };
    let dataset_rules = match settings.dataset {
        DatasetKind::Locomo => "",
        DatasetKind::LongMemEval | DatasetKind::Own => {
            prompts::ANSWER_RULES_LONGMEMEVAL.text.trim()
        }
    };
    let calls_per_round = settings.limits.max_calls_per_round.to_string();
    // The templates and their values are fixed at compile time; a render failure is a bug that
    // the prompt tests catch, and the raw template is still a usable prompt.
    let system = prompts::ANSWER_SYSTEM
        .render(&[
            ("style_rules", style),
            ("dataset_rules", dataset_rules),
            ("calls_per_round", &calls_per_round),
        ])
        .unwrap_or_else(|_| prompts::ANSWER_SYSTEM.text.to_string());
    let final_system = prompts::ANSWER_FINAL
        .render(&[("style_rules", style)])
        .unwrap_or_else(|_| prompts::ANSWER_FINAL.text.to_string());
    RunSetup {
        model: settings.model.clone(),
        system,
        final_system,
        user: payload,
        tools: Tool::specs(memgas),
        limits: settings.limits,
        time_nudge: prepared.time_nudge,
        temperature: settings.temperature,
        seed: settings.provider_seed(),
        // Always attached; the client sends it only when its structured-output setting is on.
        structured_output: true,
    }
}

fn tool_choice_name(choice: Option<&ToolChoice>) -> String {
    match choice {
        None => "default".into(),
        Some(ToolChoice::Auto) => "auto".into(),
        Some(ToolChoice::None) => "none".into(),
        Some(ToolChoice::Required) => "required".into(),
        Some(ToolChoice::Function(name)) => format!("function {name}"),
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
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
