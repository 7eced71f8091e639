//! The async driver of one question's tool loop: it performs the steps of the sans-IO
//! [`AnswerRun`] (model calls and tool calls, traced) until the run is done. Tool calls run one
//! after another in call order (they are in-memory lookups, and the order decides which keys
//! `query_event_keywords` has already shown).

use std::time::{Duration, Instant};

use crate::agent::question::{AnswerStyle, PreparedQuestion};
use crate::agent::retrieve::score_key_tags;
use crate::agent::run::{AnswerRun, Outcome, RunSetup, Step, ToolInvocation, ToolOutput};
use crate::agent::sample::SampleMemory;
use crate::agent::settings::{AnswerSettings, Shared};
use crate::agent::tools::{
    Applied, MEMGAS_TOOL, Tool, ToolContext, ToolError, ToolState, finish_event_keywords,
    memgas_result,
};
use crate::agent::trace::{TraceEvent, TraceWriter};
use crate::dataset::DatasetKind;
use crate::llm::{ChatModel, ChatRequest, ChatResponse, Embedder, Message, ToolChoice, Usage};
use crate::prompts;

/// What one question's tool calls read and update.
pub(super) struct QuestionTools<'a> {
    pub sample: &'a SampleMemory,
    pub prepared: &'a PreparedQuestion,
    pub context: ToolContext<'a>,
    pub state: ToolState,
}

/// Runs the loop to its end. `usage` gets the loop's tokens.
pub(super) async fn drive<M: ChatModel, E: Embedder>(
    shared: &Shared<'_, M, E>,
    mut run: AnswerRun,
    mut tools: QuestionTools<'_>,
    trace: &mut TraceWriter,
    usage: &mut Usage,
) -> Outcome {
    let mut sent: Vec<Message> = Vec::new();
    let mut request_number = 0;
    loop {
        match run.next_step() {
            Step::CallModel(mut request) => {
                request.max_tokens = shared.model.max_tokens(crate::llm::Step::Answer);
                request_number += 1;
                let response =
                    call_model(shared.model, &request, request_number, &mut sent, trace).await;
                run.model_responded(response);
            }
            Step::CallTools(invocations) => {
                let outputs = call_tools(shared, &mut tools, invocations, trace, usage).await;
                run.tools_finished(outputs);
            }
            Step::Done(outcome) => {
                *usage += outcome.usage;
                return outcome;
            }
        }
    }
}

/// Sends one request, tracing it (only the messages not sent before) and its response.
async fn call_model<M: ChatModel>(
    model: &M,
    request: &ChatRequest,
    request_number: u32,
    sent: &mut Vec<Message>,
    trace: &mut TraceWriter,
) -> Result<ChatResponse, crate::llm::Error> {
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
    let response = model.chat(request).await;
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
    response
}

/// Executes a batch of tool calls in call order, tracing each.
async fn call_tools<M: ChatModel, E: Embedder>(
    shared: &Shared<'_, M, E>,
    tools: &mut QuestionTools<'_>,
    invocations: Vec<ToolInvocation>,
    trace: &mut TraceWriter,
    usage: &mut Usage,
) -> Vec<ToolOutput> {
    let mut outputs = Vec::with_capacity(invocations.len());
    for invocation in invocations {
        let call_started = Instant::now();
        let content = execute_tool(shared, tools, &invocation.tool, trace, usage).await;
        trace.record(TraceEvent::ToolCall {
            call_id: invocation.call_id.clone(),
            name: invocation.tool.name().to_string(),
            arguments: invocation.tool.arguments_json(),
            result: content.clone(),
            ms: millis(call_started.elapsed()),
        });
        outputs.push(ToolOutput { call_id: invocation.call_id, content });
    }
    outputs
}

/// Runs one tool call; tag scoring for `query_event_keywords` asks the model, and
/// `query_memgas` embeds its query.
async fn execute_tool<M: ChatModel, E: Embedder>(
    shared: &Shared<'_, M, E>,
    tools: &mut QuestionTools<'_>,
    tool: &Tool,
    trace: &mut TraceWriter,
    usage: &mut Usage,
) -> String {
    let settings = shared.settings;
    match tool.apply(&tools.context, &mut tools.state) {
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
                    &tools.prepared.search_text,
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
            let Some(memgas) = &tools.sample.memgas else {
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
pub(super) fn run_setup(
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
