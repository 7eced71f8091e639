//! Answering one question end to end: its trace, retrieval, the tool loop, and its result line.
//! Never fails: a failure becomes a `status: "error"` line. [`answer_question`] is what a run's
//! pool does per question; [`answer_one`] does the same for one question alone, without a
//! result file.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use tracing::Instrument as _;

use crate::agent::mode::AnswerMode;
use crate::agent::question::{self, PreparedQuestion};
use crate::agent::retrieve::{self, RetrieveInput, Retrieved};
use crate::agent::run::{AnswerOutcome, AnswerRun};
use crate::agent::settings::{AnswerPass, AnswerSettings, RunShared};
use crate::agent::single::{self, Gate};
use crate::agent::tool_loop::{self, QuestionTools, run_setup};
use crate::agent::tools::ToolState;
use crate::agent::tools::compact::mark_shown;
use crate::agent::trace::{TraceEvent, TraceWriter};
use crate::dataset::Question;
use crate::llm::fatal::{AfterFatal, FatalLatch, Latched};
use crate::llm::{ChatModel, Embedder, Usage};
use crate::names::{NameKind, check_name};
use crate::results::{AnswerPath, ResultLine, Status};
use crate::retrieval::vector::unit_length;
use crate::snapshot::Snapshot;

/// Answers `question` over `snapshot` and returns its result line, which is written nowhere:
/// for a question that comes alone (`ask`, `serve`). Everything else is as in a run: the trace
/// (when `settings.traces`), the loop's rounds reported to `pass.events`, the model
/// and the embedder sharing one fatal latch. A failed question is a `status: "error"` line;
/// `Err` when the endpoint refuses every request (a refused key, an unknown model: a run stops
/// there too), or when the sample id is no valid name (it names the trace file).
pub async fn answer_one<M: ChatModel, E: Embedder>(
    settings: &AnswerSettings,
    pass: &AnswerPass,
    snapshot: &Snapshot,
    question: &Question,
    model: &M,
    embedder: &E,
) -> anyhow::Result<ResultLine> {
    check_name(NameKind::Sample, &snapshot.conversation.sample_id)?;
    let latch = Arc::new(FatalLatch::default());
    let key = &settings.key_variable;
    let model = Latched::sharing(model, &latch, key, AfterFatal::Fail);
    let embedder = Latched::sharing(embedder, &latch, key, AfterFatal::Fail);
    let shared = RunShared::new(settings, pass, &model, &embedder);
    let line = answer_question(&shared, snapshot, question).await;
    if let Some(fatal) = latch.error() {
        // No line, as a run writes none for a question the fatal error failed (its trace is
        // written all the same); the reason is the endpoint's.
        anyhow::bail!("the endpoint refuses every request: {fatal}");
    }
    Ok(line)
}

/// Answers one question of a run end to end, in its own span, its line carrying the run's
/// provenance; never fails (a failure is a `status: "error"` line).
pub(super) async fn answer_question<M: ChatModel, E: Embedder>(
    shared: &RunShared<'_, M, E>,
    sample: &Snapshot,
    question: &Question,
) -> ResultLine {
    let span = tracing::info_span!("question", id = %question.id);
    // Every model call of the question is recorded under its id (see `llm::tape`).
    let answered = answer_in_span(shared, sample, question).instrument(span);
    let mut line = crate::llm::tape::within(format!("question {}", question.id), answered).await;
    line.provenance = shared.settings.provenance(sample, &shared.pass.rules);
    line
}

/// [`answer_question`] inside its span.
async fn answer_in_span<M: ChatModel, E: Embedder>(
    shared: &RunShared<'_, M, E>,
    sample: &Snapshot,
    question: &Question,
) -> ResultLine {
    let settings = shared.settings;
    let started = Instant::now();
    let sample_id = &sample.conversation.sample_id;
    let mut trace = open_trace(settings, sample_id, &question.id);
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
    let solved = solve(shared, sample, question, &prepared, &mut trace, &mut usage).await;
    let path = solved.as_ref().ok().map(|(_, path)| *path);
    let outcome = solved.map(|(outcome, _)| outcome);
    let latency_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let (status, prediction, prediction_context, error, rounds, tool_calls) = match outcome {
        Ok(AnswerOutcome { answer: Ok(answer), rounds, tool_calls, .. }) => {
            (Status::Ok, answer.answer.clone(), answer.support_turns(), None, rounds, tool_calls)
        }
        Ok(AnswerOutcome { answer: Err(error), rounds, tool_calls, .. }) => {
            (Status::Error, String::new(), Vec::new(), Some(error), rounds, tool_calls)
        }
        Err(error) => (Status::Error, String::new(), Vec::new(), Some(error), 0, 0),
    };
    if let Some(error) = &error {
        tracing::warn!(error = %error, "question failed");
    }
    let counts = trace.counts();
    shared.count(counts);
    trace.record(TraceEvent::Finish {
        status,
        prediction: prediction.clone(),
        prediction_context: prediction_context.clone(),
        error: error.clone(),
        rounds,
        tool_calls,
        usage,
        latency_ms,
        path,
        counts,
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
        path,
        provenance: Default::default(),
    }
}

/// The question's trace writer (one that records nothing when traces are off).
fn open_trace(settings: &AnswerSettings, sample_id: &str, question_id: &str) -> TraceWriter {
    if settings.traces {
        TraceWriter::open(settings.trace_path(sample_id, question_id))
    } else {
        TraceWriter::disabled()
    }
}

/// The single path when the gate sends the question there (`--answer single|adaptive`), else
/// retrieval then the loop; under `adaptive` a single pass that found nothing goes on to the
/// loop. `usage` accumulates every call's tokens, failed attempts included.
async fn solve<M: ChatModel, E: Embedder>(
    shared: &RunShared<'_, M, E>,
    sample: &Snapshot,
    question: &Question,
    prepared: &PreparedQuestion,
    trace: &mut TraceWriter,
    usage: &mut Usage,
) -> Result<(AnswerOutcome, AnswerPath), String> {
    let settings = shared.settings;
    let question_vector = question_vector(shared, sample, question, usage).await?;
    let mut first = None;
    if settings.answer.mode != AnswerMode::Loop
        && let Gate::Single(turns) =
            single::gate(settings, sample, question.question.trim(), trace).await
    {
        let outcome =
            single::answer(shared, sample, prepared, &question_vector, &turns, trace, usage).await;
        if settings.answer.mode == AnswerMode::Single || !single::found_nothing(&outcome) {
            return Ok((outcome, AnswerPath::Single));
        }
        trace.record(TraceEvent::Retrieval {
            step: "gate".into(),
            detail: serde_json::json!({
                "path": "escalated",
                "reason": "the single pass found nothing",
            }),
        });
        first = Some(outcome);
    }
    let outcome = solve_in_loop(shared, sample, prepared, &question_vector, trace, usage).await;
    Ok(match first {
        None => (outcome, AnswerPath::Loop),
        Some(first) => (
            AnswerOutcome {
                rounds: first.rounds + outcome.rounds,
                tool_calls: first.tool_calls + outcome.tool_calls,
                usage: first.usage + outcome.usage,
                ..outcome
            },
            AnswerPath::Escalated,
        ),
    })
}

/// Retrieval then the loop.
async fn solve_in_loop<M: ChatModel, E: Embedder>(
    shared: &RunShared<'_, M, E>,
    sample: &Snapshot,
    prepared: &PreparedQuestion,
    question_vector: &[f32],
    trace: &mut TraceWriter,
    usage: &mut Usage,
) -> AnswerOutcome {
    let settings = shared.settings;
    let input = RetrieveInput {
        graph: &sample.graph,
        vectors: &sample.embeddings,
        question_vector,
        question: prepared,
        dataset: settings.dataset,
        settings: &settings.retrieval,
        call: settings.call_settings(),
    };
    let Retrieved { payload, seen_keys, usage: retrieval_usage } =
        retrieve::retrieve(shared.model, &input, trace).await;
    *usage += retrieval_usage;

    let payload_text = payload.to_string();
    let memgas = sample.memgas.is_some();
    let run =
        AnswerRun::new(run_setup((settings, &shared.pass.rules), prepared, payload_text, memgas));
    let context = tool_loop::tool_context(settings, sample, question_vector, prepared);
    let state = ToolState { seen_keys };
    let mut shown = BTreeSet::new();
    mark_shown(&payload, &mut shown);
    let tools = QuestionTools { context, state, shown };
    tool_loop::drive(shared, run, tools, trace, usage).await
}

/// The question's embedding: from the build's cache, else embedded now.
async fn question_vector<M: ChatModel, E: Embedder>(
    shared: &RunShared<'_, M, E>,
    sample: &Snapshot,
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
    let vector = embedded
        .vectors
        .into_iter()
        .next()
        .ok_or_else(|| "the embedder returned no vector".to_string())?;
    Ok(unit_length(vector))
}
