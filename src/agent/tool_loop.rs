//! The async driver of one question's tool loop: it performs the steps of the sans-IO
//! [`AnswerRun`] (model calls and tool calls, traced) until the run is done. A round's tool
//! calls are applied in call order and their model/embedding work runs concurrently (see
//! [`call_tools`]).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::agent::events::{CallSummary, LoopEvent, ResultSummary};
use crate::agent::question::PreparedQuestion;
use crate::agent::rules::RuleSet;
use crate::agent::run::{AnswerOutcome, AnswerRun, NextStep, RunSetup, ToolInvocation, ToolOutput};
use crate::agent::settings::{AnswerPass, AnswerSettings, RunShared};
use crate::agent::tools::compact::compact_result;
use crate::agent::tools::{
    Applied, Tool, ToolContext, ToolError, ToolState, call_memgas, score_tags,
};
use crate::agent::trace::{TraceEvent, TraceWriter, failed_call, rejected_excerpt};
use crate::dataset::DatasetKind;
use crate::llm::{ChatMessage, ChatModel, ChatRequest, ChatResponse, Embedder, ToolChoice, Usage};
use crate::prompts;

/// What one question's tool calls read and update.
pub(super) struct QuestionTools<'a> {
    pub context: ToolContext<'a>,
    pub state: ToolState,
    /// Ids of the event and turn lines shown in full so far (see `tools::compact`).
    pub shown: BTreeSet<String>,
}

/// Runs the loop to its end. `usage` gets the loop's tokens.
pub(super) async fn drive<M: ChatModel, E: Embedder>(
    shared: &RunShared<'_, M, E>,
    mut run: AnswerRun,
    mut tools: QuestionTools<'_>,
    trace: &mut TraceWriter,
    usage: &mut Usage,
) -> AnswerOutcome {
    let mut sent: Vec<ChatMessage> = Vec::new();
    let mut request_number = 0;
    loop {
        match run.next_step() {
            NextStep::CallModel(mut request) => {
                request.for_step(Some(crate::llm::Step::Answer), &shared.model);
                request_number += 1;
                let call_started = Instant::now();
                let response =
                    call_model(shared.model, &request, request_number, &mut sent, trace).await;
                report_model(shared.pass, request_number, &response, call_started.elapsed());
                let reply = response.as_ref().ok().and_then(|response| {
                    let message = &response.message;
                    message.content.clone().or_else(|| {
                        (!message.tool_calls.is_empty()).then(|| {
                            let names: Vec<&str> =
                                message.tool_calls.iter().map(|call| call.name.as_str()).collect();
                            format!("(tool calls: {})", names.join(", "))
                        })
                    })
                });
                run.model_responded(response);
                if let Some(reason) = run.take_rejection() {
                    trace.record(TraceEvent::Rejected {
                        step: "answer".into(),
                        reason,
                        reply: rejected_excerpt(&reply.unwrap_or_default()),
                    });
                }
            }
            NextStep::CallTools(invocations) => {
                let started = Instant::now();
                let names: Vec<&'static str> =
                    invocations.iter().map(|invocation| invocation.tool.name()).collect();
                let outputs = call_tools(shared, &mut tools, invocations, trace, usage).await;
                report_tools(shared.pass, request_number, &names, &outputs, started.elapsed());
                run.tools_finished(outputs);
            }
            NextStep::Done(outcome) => {
                *usage += outcome.usage;
                return outcome;
            }
        }
    }
}

/// Tells the caller's [`LoopEvents`](crate::agent::events::LoopEvents), if any, what the model
/// answered in round `round`.
fn report_model(
    pass: &AnswerPass,
    round: u32,
    response: &Result<ChatResponse, crate::llm::Error>,
    elapsed: Duration,
) {
    let Some(events) = &pass.events else { return };
    let (tool_calls, error) = match response {
        Ok(response) => (response.message.tool_calls.iter().map(CallSummary::of).collect(), None),
        Err(error) => (Vec::new(), Some(error.to_string())),
    };
    let final_reply = error.is_none() && tool_calls.is_empty();
    events.send(LoopEvent::Model { round, tool_calls, final_reply, error, ms: millis(elapsed) });
}

/// Tells the caller's events, if any, what round `round`'s tool calls returned.
fn report_tools(
    pass: &AnswerPass,
    round: u32,
    names: &[&str],
    outputs: &[ToolOutput],
    elapsed: Duration,
) {
    let Some(events) = &pass.events else { return };
    let results = outputs
        .iter()
        .zip(names)
        .map(|(output, name)| ResultSummary::of(&output.call_id, name, &output.content))
        .collect();
    events.send(LoopEvent::Tools { round, results, ms: millis(elapsed) });
}

/// Sends one request, tracing it (only the messages not sent before) and its response.
async fn call_model<M: ChatModel>(
    model: &M,
    request: &ChatRequest,
    request_number: u32,
    sent: &mut Vec<ChatMessage>,
    trace: &mut TraceWriter,
) -> Result<ChatResponse, crate::llm::Error> {
    let messages_from =
        sent.iter().zip(&request.messages).take_while(|(old, new)| old == new).count();
    trace.record(TraceEvent::Request {
        round: request_number,
        messages_from,
        messages: request.messages[messages_from..].to_vec(),
        tools: if request_number == 1 { request.tools.clone() } else { Vec::new() },
        tool_choice: if request.tools.is_empty() {
            "none (no tools sent)".into()
        } else {
            tool_choice_name(request.tool_choice.as_ref())
        },
        structured: request.response_format.is_some(),
    });
    sent.clone_from(&request.messages);
    let call_started = Instant::now();
    let response = model.chat(request).await;
    let ms = millis(call_started.elapsed());
    match &response {
        Ok(response) => trace.record(TraceEvent::Response {
            round: request_number,
            message: Some(response.message.clone()),
            finish_reason: response.finish_reason.clone(),
            error: None,
            calls: response.calls.clone(),
            usage: response.usage,
            ms,
        }),
        Err(error) => trace.record(TraceEvent::Response {
            round: request_number,
            message: None,
            finish_reason: None,
            error: Some(error.to_string()),
            calls: failed_call(error),
            usage: Usage::default(),
            ms,
        }),
    }
    response
}

/// Executes a round's tool calls. They are applied to the memory in call order (in-memory
/// lookups; the order decides which keys `query_event_keywords` has already shown), then the
/// model and embedding work they need (tag scoring, MemGAS queries) runs concurrently. Outputs
/// and trace records come back in call order, each with its own timing.
async fn call_tools<M: ChatModel, E: Embedder>(
    shared: &RunShared<'_, M, E>,
    tools: &mut QuestionTools<'_>,
    invocations: Vec<ToolInvocation>,
    trace: &mut TraceWriter,
    usage: &mut Usage,
) -> Vec<ToolOutput> {
    let started = Instant::now();
    let applied: Vec<(ToolInvocation, Result<Applied, ToolError>)> = invocations
        .into_iter()
        .map(|invocation| {
            let applied = invocation.tool.apply(&tools.context, &mut tools.state);
            (invocation, applied)
        })
        .collect();
    let branches: Vec<TraceWriter> = applied.iter().map(|_| trace.branch()).collect();
    let reader = &*tools;
    let finished = futures::future::join_all(applied.into_iter().zip(branches).map(
        |((invocation, applied), mut branch)| async move {
            let (content, cost) = finish_tool(shared, reader, applied, &mut branch).await;
            branch.record(TraceEvent::ToolCall {
                call_id: invocation.call_id.clone(),
                name: invocation.tool.name().to_string(),
                arguments: invocation.tool.arguments_json(),
                result: content.clone(),
                ms: millis(started.elapsed()),
            });
            (ToolOutput { call_id: invocation.call_id, content }, cost, branch)
        },
    ))
    .await;
    let mut outputs = Vec::with_capacity(finished.len());
    for (output, cost, branch) in finished {
        trace.merge(branch);
        *usage += cost;
        let content = compact_result(output.content, &mut tools.shown);
        outputs.push(ToolOutput { content, ..output });
    }
    outputs
}

/// The tool message of one applied call: tag scoring for `query_event_keywords` asks the model
/// (all wide keys at once), and `query_memgas` embeds its query.
async fn finish_tool<M: ChatModel, E: Embedder>(
    shared: &RunShared<'_, M, E>,
    tools: &QuestionTools<'_>,
    applied: Result<Applied, ToolError>,
    trace: &mut TraceWriter,
) -> (String, Usage) {
    match applied {
        Ok(Applied::Done(value)) => (value.to_string(), Usage::default()),
        Ok(Applied::ScoreTags { keys, .. }) => {
            let call = shared.settings.call_settings();
            let (value, usage) =
                score_tags(shared.model, &call, &tools.context, &tools.shown, keys, trace).await;
            (value.to_string(), usage)
        }
        Ok(Applied::Memgas { query, k }) => {
            (call_memgas(&tools.context, &query, k).await, Usage::default())
        }
        Err(error) => (error.to_tool_result(), Usage::default()),
    }
}

/// What one question's tools read, from the run's settings and the conversation's snapshot.
pub(super) fn tool_context<'a>(
    settings: &AnswerSettings,
    sample: &'a crate::snapshot::Snapshot,
    question_vector: &'a [f32],
    prepared: &'a PreparedQuestion,
) -> ToolContext<'a> {
    ToolContext {
        graph: &sample.graph,
        vectors: &sample.embeddings,
        question_vector,
        rerank_limit: settings.retrieval.k2,
        keep: settings.retrieval.k2,
        tag_max: settings.retrieval.tag_max,
        tag_limit: settings.retrieval.tag_limit,
        question: &prepared.search_text,
        memgas: sample.memgas.as_ref(),
    }
}

/// The loop's prompts and limits for one question.
pub(super) fn run_setup(
    (settings, rules): (&AnswerSettings, &RuleSet),
    prepared: &PreparedQuestion,
    payload: String,
    memgas: bool,
) -> RunSetup {
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
        .render(&[("dataset_rules", dataset_rules), ("calls_per_round", &calls_per_round)])
        .unwrap_or_else(|_| prompts::ANSWER_SYSTEM.text.to_string())
        .trim_end()
        .to_string();
    let system = rules.extend_system(&system);
    RunSetup {
        model: settings.model.clone(),
        system,
        final_instructions: prompts::ANSWER_FINAL.text.trim().to_string(),
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
