//! The tool-calling loop of one question as a sans-IO state machine.
//!
//! [`AnswerRun`] holds the transcript and decides what happens next; it never performs IO. The
//! async driver in `agent/tool_loop.rs` asks [`AnswerRun::next_step`] for the next [`NextStep`],
//! performs it (a model call, or a batch of tool calls) and feeds the outcome back with
//! [`AnswerRun::model_responded`] or [`AnswerRun::tools_finished`]. Turn limits, the tool-call
//! budget, recovery from malformed calls and final-answer validation are therefore unit-tested
//! here without async, network or fakes.
//!
//! Rules the machine keeps (the reference broke the first two, see the spec's §17 items 11–12):
//! - Every assistant tool call gets exactly one tool message, in call order, before the next
//!   request: calls over a limit are answered with a "not executed" result instead of dropped.
//! - Malformed or invalid arguments become a readable tool result, never a failed question.
//! - At most `max_rounds` model rounds: rounds `1..max_rounds` may call tools, the last one is the
//!   final-answer round (no tool schemas sent, the answer read leniently by [`parse_answer`],
//!   re-asked a bounded number of times).
//! - Every request starts with the same prefix (system prompt, tool schemas), so provider prompt
//!   caching applies; the final round's instructions come as a user message at the end.
//! - The tool rounds and the final round have separate re-ask budgets (`max_reasks` each).
//!
//! Layout: this module holds the machine; `calls` decides which tool calls of a reply run;
//! `answer` parses and validates the final answer.

mod answer;
mod calls;
#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};

pub use self::answer::{DEFAULT_CONFIDENCE, FinalAnswer, answer_schema, parse_answer};
use self::calls::normalise_call_ids;
use crate::agent::tools::{Tool, ToolError};
use crate::llm::{
    self, ChatMessage, ChatRequest, ChatResponse, JsonSchemaSpec, Role, ToolChoice, ToolSpec, Usage,
};
use crate::prompts;

/// Limits of one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunLimits {
    /// Model rounds in all, the final-answer round included (reference: 8).
    pub max_rounds: u32,
    /// Tool calls executed per question (reference: 50).
    pub max_tool_calls: u32,
    /// Tool calls executed per round (the paper's 10).
    pub max_calls_per_round: u32,
    /// Extra requests allowed when an answer cannot be read: this many in the tool rounds, and
    /// this many again in the final round.
    pub max_reasks: u32,
}

impl Default for RunLimits {
    fn default() -> Self {
        Self { max_rounds: 8, max_tool_calls: 50, max_calls_per_round: 10, max_reasks: 2 }
    }
}

/// Everything a run needs up front; the prompts are already rendered.
#[derive(Debug, Clone)]
pub struct RunSetup {
    /// Model id for every request.
    pub model: String,
    /// System prompt of every request.
    pub system: String,
    /// Instructions of the final-answer round, sent as a user message after the transcript.
    pub final_instructions: String,
    /// The user message: the retrieval payload as JSON.
    pub user: String,
    /// Tools offered in the tool rounds.
    pub tools: Vec<ToolSpec>,
    /// Limits.
    pub limits: RunLimits,
    /// Before the last tool round, remind the model to resolve the event's date (LoCoMo
    /// temporal questions).
    pub time_nudge: bool,
    /// Sampling temperature of every request.
    pub temperature: Option<f32>,
    /// Provider seed of every request.
    pub seed: Option<i64>,
    /// Attach the answer schema as `response_format` in the final-answer round (the client
    /// sends it only when its structured-output setting is on; the answer is validated here
    /// either way).
    pub structured_output: bool,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AnswerOutcome {
    /// The answer, or why there is none.
    pub answer: Result<FinalAnswer, String>,
    /// Model requests made.
    pub rounds: u32,
    /// Tool calls the model made (executed or not).
    pub tool_calls: u32,
    /// Tokens of the loop's requests.
    pub usage: Usage,
}

/// One tool call to execute.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolInvocation {
    /// The id the tool message must echo.
    pub call_id: String,
    /// The parsed call.
    pub tool: Tool,
}

/// The result of one executed tool call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    /// The id of the call.
    pub call_id: String,
    /// Tool message text.
    pub content: String,
}

/// What the driver must do next.
#[derive(Debug, Clone, PartialEq)]
pub enum NextStep {
    /// Send this request and report with [`AnswerRun::model_responded`].
    CallModel(ChatRequest),
    /// Execute these calls and report with [`AnswerRun::tools_finished`], one output per call.
    CallTools(Vec<ToolInvocation>),
    /// The run is over.
    Done(AnswerOutcome),
}

/// One tool call of the latest assistant message, waiting for its tool message.
#[derive(Debug, Clone)]
struct PendingCall {
    call_id: String,
    /// Set for calls to execute; `None` once `content` is known.
    tool: Option<Tool>,
    content: Option<String>,
}

#[derive(Debug, Clone)]
enum Phase {
    /// Ready to send the next request.
    Ready,
    /// A request is out.
    AwaitingModel,
    /// Tool calls are out.
    AwaitingTools(Vec<PendingCall>),
    /// Finished.
    Done(AnswerOutcome),
}

/// The state of one question's tool-calling loop.
#[derive(Debug, Clone)]
pub struct AnswerRun {
    setup: RunSetup,
    messages: Vec<ChatMessage>,
    phase: Phase,
    /// Model responses received (all rounds, re-asks included).
    rounds: u32,
    tool_calls: u32,
    executed_calls: u32,
    /// Re-asks in the tool rounds.
    reasks: u32,
    /// Re-asks in the final round (a separate budget).
    final_reasks: u32,
    /// Whether the next request is the final-answer round.
    final_round: bool,
    /// Whether the final-round instructions were already appended.
    final_prepared: bool,
    time_nudged: bool,
    /// Whether tool results were already shortened after a context-length error.
    compacted: bool,
    /// Why the last reply was rejected and re-asked, until the driver takes it.
    rejection: Option<String>,
    usage: Usage,
}

impl AnswerRun {
    /// A run about to send its first request.
    pub fn new(setup: RunSetup) -> Self {
        let messages =
            vec![ChatMessage::system(setup.system.clone()), ChatMessage::user(setup.user.clone())];
        let final_round = setup.limits.max_rounds <= 1;
        Self {
            setup,
            messages,
            phase: Phase::Ready,
            rounds: 0,
            tool_calls: 0,
            executed_calls: 0,
            reasks: 0,
            final_reasks: 0,
            final_round,
            final_prepared: false,
            time_nudged: false,
            compacted: false,
            rejection: None,
            usage: Usage::default(),
        }
    }

    /// Why the reply just reported was rejected (and re-asked), once: the driver keeps it in
    /// the trace beside the reply.
    pub fn take_rejection(&mut self) -> Option<String> {
        self.rejection.take()
    }

    /// The transcript so far.
    pub fn messages(&self) -> &[ChatMessage] {
        &self.messages
    }

    /// What to do next. Calling it again before reporting returns the same step.
    pub fn next_step(&mut self) -> NextStep {
        match &self.phase {
            Phase::Done(outcome) => NextStep::Done(outcome.clone()),
            Phase::AwaitingTools(slots) => NextStep::CallTools(
                slots
                    .iter()
                    .filter_map(|slot| {
                        slot.tool
                            .clone()
                            .map(|tool| ToolInvocation { call_id: slot.call_id.clone(), tool })
                    })
                    .collect(),
            ),
            Phase::Ready | Phase::AwaitingModel => {
                self.prepare_round();
                self.phase = Phase::AwaitingModel;
                NextStep::CallModel(self.request())
            }
        }
    }

    /// Appends the round's extra instructions once, before its first request.
    fn prepare_round(&mut self) {
        if !matches!(self.phase, Phase::Ready) {
            return;
        }
        if self.final_round {
            if !self.final_prepared {
                self.final_prepared = true;
                self.messages.push(ChatMessage::user(self.setup.final_instructions.clone()));
            }
        } else if self.setup.time_nudge
            && !self.time_nudged
            && self.rounds + 2 == self.setup.limits.max_rounds
        {
            self.time_nudged = true;
            self.messages.push(ChatMessage::user(prompts::ANSWER_TIME_NUDGE.text.trim()));
        }
    }

    fn request(&self) -> ChatRequest {
        let mut request = ChatRequest::new(self.setup.model.clone(), self.messages.clone());
        request.temperature = self.setup.temperature;
        request.seed = self.setup.seed;
        // No tool schemas in the final round (they are the largest part of the prefix, and no
        // call may be made); a call the model makes anyway is refused and re-asked.
        if self.final_round {
            if self.setup.structured_output {
                request.response_format = Some(JsonSchemaSpec {
                    name: "final_answer".into(),
                    schema: answer_schema().clone(),
                });
            }
        } else {
            request.tools = self.setup.tools.clone();
            request.tool_choice = Some(ToolChoice::Auto);
            request.parallel_tool_calls = Some(true);
        }
        request
    }

    /// Reports the result of the request from the last [`NextStep::CallModel`].
    pub fn model_responded(&mut self, response: Result<ChatResponse, llm::Error>) {
        if !matches!(self.phase, Phase::AwaitingModel) {
            return;
        }
        self.phase = Phase::Ready;
        let response = match response {
            Ok(response) => response,
            Err(llm::Error::ContextLength { body }) if !self.compacted && !self.final_round => {
                self.compact();
                self.final_round = true;
                tracing::debug!(body = %body, "context length exceeded; shortened tool results");
                return;
            }
            Err(error) => {
                self.finish(Err(format!("model call failed: {error}")));
                return;
            }
        };
        self.rounds += 1;
        self.usage += response.usage;
        let mut message = response.message;
        message.role = Role::Assistant;
        normalise_call_ids(&mut message, self.rounds);
        let content = message.content.clone().unwrap_or_default();
        let attempt = parse_answer(&content);

        if self.final_round {
            self.handle_final(message, attempt);
            return;
        }
        match attempt {
            Some(Ok(answer)) => self.finish(Ok(answer)),
            Some(Err(error)) if message.tool_calls.is_empty() => {
                self.messages.push(message);
                self.reask(&error);
            }
            _ if !message.tool_calls.is_empty() => self.take_tool_calls(message),
            _ => {
                self.messages.push(message);
                self.messages.push(ChatMessage::user(prompts::ANSWER_NUDGE.text.trim()));
                self.end_tool_round();
            }
        }
    }

    fn handle_final(&mut self, message: ChatMessage, attempt: Option<Result<FinalAnswer, String>>) {
        let error = match attempt {
            Some(Ok(answer)) => {
                self.finish(Ok(answer));
                return;
            }
            Some(Err(error)) => error,
            None if !message.tool_calls.is_empty() => "tools are no longer available".to_string(),
            None => "the reply is not a JSON object".to_string(),
        };
        if self.final_reasks >= self.setup.limits.max_reasks {
            self.rejection = Some(error.clone());
            self.finish(Err(format!(
                "no valid final answer after {} re-asks: {error}",
                self.setup.limits.max_reasks
            )));
            return;
        }
        let calls: Vec<String> = message.tool_calls.iter().map(|call| call.id.clone()).collect();
        self.tool_calls += calls.len() as u32;
        self.messages.push(message);
        for call_id in calls {
            let refused = ToolError::LimitReached("this is the final round".into());
            self.messages.push(ChatMessage::tool(call_id, refused.to_tool_result()));
        }
        self.reask(&error);
    }

    fn reask(&mut self, error: &str) {
        if self.final_round {
            self.final_reasks += 1;
        } else {
            self.reasks += 1;
        }
        self.rejection = Some(error.to_string());
        let text = prompts::ANSWER_REASK
            .render(&[("error", error)])
            .unwrap_or_else(|_| format!("Your answer could not be used: {error}"));
        self.messages.push(ChatMessage::user(text));
        if !self.final_round {
            self.end_tool_round();
        }
    }

    /// After a tool round: the next request is the final round once the tool rounds or the
    /// tool-call budget are used up.
    fn end_tool_round(&mut self) {
        let limits = self.setup.limits;
        if self.rounds + 1 >= limits.max_rounds
            || self.executed_calls >= limits.max_tool_calls
            || self.reasks > limits.max_reasks
        {
            self.final_round = true;
        }
    }

    /// Shortens every tool result so that the final round fits the context window.
    fn compact(&mut self) {
        const KEEP_CHARS: usize = 600;
        self.compacted = true;
        for message in &mut self.messages {
            if message.role != Role::Tool {
                continue;
            }
            if let Some(content) = &mut message.content
                && content.chars().count() > KEEP_CHARS
            {
                let kept: String = content.chars().take(KEEP_CHARS).collect();
                *content =
                    format!("{kept} … [shortened: the transcript exceeded the context window]");
            }
        }
    }

    fn finish(&mut self, answer: Result<FinalAnswer, String>) {
        self.phase = Phase::Done(AnswerOutcome {
            answer,
            rounds: self.rounds,
            tool_calls: self.tool_calls,
            usage: self.usage,
        });
    }
}
