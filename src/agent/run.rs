//! The tool-calling loop of one question as a sans-IO state machine.
//!
//! [`AnswerRun`] holds the transcript and decides what happens next; it never performs IO. The
//! async driver in `agent/mod.rs` asks [`AnswerRun::next_step`] for the next [`Step`], performs
//! it (a model call, or a batch of tool calls) and feeds the outcome back with
//! [`AnswerRun::model_responded`] or [`AnswerRun::tools_finished`]. Turn limits, the tool-call
//! budget, recovery from malformed calls and final-answer validation are therefore unit-tested
//! here without async, network or fakes.
//!
//! Rules the machine keeps (the reference broke the first two, see the spec's §17 items 11–12):
//! - Every assistant tool call gets exactly one tool message, in call order, before the next
//!   request: calls over a limit are answered with a "not executed" result instead of dropped.
//! - Malformed or invalid arguments become a readable tool result, never a failed question.
//! - At most `max_rounds` model rounds: rounds `1..max_rounds` may call tools, the last one is the
//!   final-answer round (no tools, answer JSON validated against [`answer_schema`], re-asked a
//!   bounded number of times).

use std::collections::BTreeSet;
use std::sync::LazyLock;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::agent::tools::{Tool, ToolError};
use crate::llm::{
    self, ChatRequest, ChatResponse, JsonSchemaSpec, Message, Role, ToolChoice, ToolSpec, Usage,
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
    /// Extra requests allowed when an answer does not fit the answer schema.
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
    /// System prompt of the tool rounds.
    pub system: String,
    /// System prompt of the final-answer round (replaces `system` in that round).
    pub final_system: String,
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

/// The model's final answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FinalAnswer {
    /// Short answer text.
    pub answer: String,
    /// Event or turn ids the answer rests on, as the model gave them.
    pub supports: Vec<String>,
    /// Self-reported confidence in `[0, 1]`.
    pub confidence: f64,
}

impl FinalAnswer {
    /// `supports` reduced to dialogue turns (`D1:3-2` → `D1:3`), first occurrence kept.
    pub fn support_turns(&self) -> Vec<String> {
        let mut seen = BTreeSet::new();
        self.supports
            .iter()
            .map(|id| origin_of(id).to_string())
            .filter(|origin| seen.insert(origin.clone()))
            .collect()
    }
}

/// `D1:3-2` → `D1:3`; ids without a `-<n>` suffix are returned unchanged.
pub fn origin_of(id: &str) -> &str {
    match id.rsplit_once('-') {
        Some((origin, suffix))
            if origin.contains(':')
                && !suffix.is_empty()
                && suffix.bytes().all(|b| b.is_ascii_digit()) =>
        {
            origin
        }
        _ => id,
    }
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
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
pub enum Step {
    /// Send this request and report with [`AnswerRun::model_responded`].
    CallModel(ChatRequest),
    /// Execute these calls and report with [`AnswerRun::tools_finished`], one output per call.
    CallTools(Vec<ToolInvocation>),
    /// The run is over.
    Done(Outcome),
}

/// One tool call of the latest assistant message, waiting for its tool message.
#[derive(Debug, Clone)]
struct Slot {
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
    AwaitingTools(Vec<Slot>),
    /// Finished.
    Done(Outcome),
}

/// The state of one question's tool-calling loop.
#[derive(Debug, Clone)]
pub struct AnswerRun {
    setup: RunSetup,
    messages: Vec<Message>,
    phase: Phase,
    /// Model responses received (all rounds, re-asks included).
    rounds: u32,
    tool_calls: u32,
    executed_calls: u32,
    reasks: u32,
    /// Whether the next request is the final-answer round.
    final_round: bool,
    /// Whether the final-round instructions were already appended.
    final_prepared: bool,
    time_nudged: bool,
    /// Whether tool results were already shortened after a context-length error.
    compacted: bool,
    usage: Usage,
}

impl AnswerRun {
    /// A run about to send its first request.
    pub fn new(setup: RunSetup) -> Self {
        let messages =
            vec![Message::system(setup.system.clone()), Message::user(setup.user.clone())];
        let final_round = setup.limits.max_rounds <= 1;
        Self {
            setup,
            messages,
            phase: Phase::Ready,
            rounds: 0,
            tool_calls: 0,
            executed_calls: 0,
            reasks: 0,
            final_round,
            final_prepared: false,
            time_nudged: false,
            compacted: false,
            usage: Usage::default(),
        }
    }

    /// The transcript so far.
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// What to do next. Calling it again before reporting returns the same step.
    pub fn next_step(&mut self) -> Step {
        match &self.phase {
            Phase::Done(outcome) => Step::Done(outcome.clone()),
            Phase::AwaitingTools(slots) => Step::CallTools(
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
                Step::CallModel(self.request())
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
                self.messages[0] = Message::system(self.setup.final_system.clone());
                self.messages.push(Message::user(prompts::ANSWER_FINAL_ROUND.text.trim()));
            }
        } else if self.setup.time_nudge
            && !self.time_nudged
            && self.rounds + 2 == self.setup.limits.max_rounds
        {
            self.time_nudged = true;
            self.messages.push(Message::user(prompts::ANSWER_TIME_NUDGE.text.trim()));
        }
    }

    fn request(&self) -> ChatRequest {
        let mut request = ChatRequest::new(self.setup.model.clone(), self.messages.clone());
        request.temperature = self.setup.temperature;
        request.seed = self.setup.seed;
        // The tools stay declared in the final round: several providers reject a transcript with
        // tool calls when no tools are declared. `tool_choice: none` forbids new calls.
        request.tools = self.setup.tools.clone();
        if self.final_round {
            request.tool_choice = Some(ToolChoice::None);
            if self.setup.structured_output {
                request.response_format = Some(JsonSchemaSpec {
                    name: "final_answer".into(),
                    schema: answer_schema().clone(),
                });
            }
        } else {
            request.tool_choice = Some(ToolChoice::Auto);
            request.parallel_tool_calls = Some(true);
        }
        request
    }

    /// Reports the result of the request from the last [`Step::CallModel`].
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
                self.messages.push(Message::user(prompts::ANSWER_NUDGE.text.trim()));
                self.end_tool_round();
            }
        }
    }

    fn handle_final(&mut self, message: Message, attempt: Option<Result<FinalAnswer, String>>) {
        let error = match attempt {
            Some(Ok(answer)) => {
                self.finish(Ok(answer));
                return;
            }
            Some(Err(error)) => error,
            None if !message.tool_calls.is_empty() => "tools are no longer available".to_string(),
            None => "the reply is not a JSON object".to_string(),
        };
        if self.reasks >= self.setup.limits.max_reasks {
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
            self.messages.push(Message::tool(call_id, refused.to_tool_result()));
        }
        self.reask(&error);
    }

    fn reask(&mut self, error: &str) {
        self.reasks += 1;
        let text = prompts::ANSWER_REASK
            .render(&[("error", error)])
            .unwrap_or_else(|_| format!("Your answer could not be used: {error}"));
        self.messages.push(Message::user(text));
        if !self.final_round {
            self.end_tool_round();
        }
    }

    /// Appends the assistant message and decides, call by call, what runs.
    fn take_tool_calls(&mut self, message: Message) {
        let limits = self.setup.limits;
        let mut slots = Vec::with_capacity(message.tool_calls.len());
        let mut executed_this_round = 0;
        for call in &message.tool_calls {
            self.tool_calls += 1;
            let refusal = if executed_this_round >= limits.max_calls_per_round {
                Some(format!("at most {} tool calls run per round", limits.max_calls_per_round))
            } else if self.executed_calls >= limits.max_tool_calls {
                Some(format!("the budget of {} tool calls is used up", limits.max_tool_calls))
            } else {
                None
            };
            let slot = match refusal {
                Some(reason) => Slot {
                    call_id: call.id.clone(),
                    tool: None,
                    content: Some(ToolError::LimitReached(reason).to_tool_result()),
                },
                None => {
                    executed_this_round += 1;
                    self.executed_calls += 1;
                    match Tool::parse(&call.name, &call.arguments) {
                        Ok(tool) => {
                            Slot { call_id: call.id.clone(), tool: Some(tool), content: None }
                        }
                        Err(error) => Slot {
                            call_id: call.id.clone(),
                            tool: None,
                            content: Some(error.to_tool_result()),
                        },
                    }
                }
            };
            slots.push(slot);
        }
        self.messages.push(message);
        if slots.iter().any(|slot| slot.tool.is_some()) {
            self.phase = Phase::AwaitingTools(slots);
        } else {
            self.append_tool_messages(slots);
        }
    }

    /// Reports the outputs of the last [`Step::CallTools`]. Outputs may come in any order; a
    /// call without an output is answered with an error so the transcript stays well formed.
    pub fn tools_finished(&mut self, outputs: Vec<ToolOutput>) {
        let Phase::AwaitingTools(mut slots) = std::mem::replace(&mut self.phase, Phase::Ready)
        else {
            return;
        };
        for output in outputs {
            if let Some(slot) =
                slots.iter_mut().find(|slot| slot.call_id == output.call_id && slot.tool.is_some())
            {
                slot.tool = None;
                slot.content = Some(output.content);
            }
        }
        self.append_tool_messages(slots);
    }

    fn append_tool_messages(&mut self, slots: Vec<Slot>) {
        for slot in slots {
            let content = slot.content.unwrap_or_else(|| {
                ToolError::NotFound("the tool produced no result".into()).to_tool_result()
            });
            self.messages.push(Message::tool(slot.call_id, content));
        }
        self.phase = Phase::Ready;
        self.end_tool_round();
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
        self.phase = Phase::Done(Outcome {
            answer,
            rounds: self.rounds,
            tool_calls: self.tool_calls,
            usage: self.usage,
        });
    }
}

/// Gives every tool call a non-empty id that is unique within the message (some providers send
/// empty or repeated ids; the tool messages must echo distinct ones).
fn normalise_call_ids(message: &mut Message, round: u32) {
    let mut seen = BTreeSet::new();
    for (index, call) in message.tool_calls.iter_mut().enumerate() {
        if call.id.trim().is_empty() || !seen.insert(call.id.clone()) {
            call.id = format!("call_{round}_{index}");
            seen.insert(call.id.clone());
        }
    }
}

/// The answer JSON contract: `{answer, supports, confidence}` (`mode` optional).
pub fn answer_schema() -> &'static Value {
    static SCHEMA: LazyLock<Value> = LazyLock::new(|| {
        json!({
            "type": "object",
            "properties": {
                "answer": { "type": "string", "minLength": 1 },
                "supports": { "type": "array", "items": { "type": "string" } },
                "confidence": { "type": "number", "minimum": 0, "maximum": 1 }
            },
            "required": ["answer", "supports", "confidence"],
            "additionalProperties": false
        })
    });
    &SCHEMA
}

/// Reads an answer attempt from assistant text. `None`: the text holds no JSON object with an
/// `answer` key (so it is not an answer attempt). `Some(Err)`: an attempt that breaks the schema,
/// with the reason the model is told.
pub fn parse_answer(content: &str) -> Option<Result<FinalAnswer, String>> {
    let mut value = crate::llm::structured::extract_json(content).ok()?;
    let object = value.as_object_mut()?;
    if !object.contains_key("answer") {
        return None;
    }
    object.remove("mode");
    object.remove("reason");
    // Models often write a bare number or a list of strings as the answer; keep their text.
    match object.get("answer") {
        Some(Value::Number(number)) => {
            let text = number.to_string();
            object.insert("answer".into(), Value::String(text));
        }
        Some(Value::Bool(flag)) => {
            let text = if *flag { "Yes" } else { "No" };
            object.insert("answer".into(), Value::String(text.into()));
        }
        Some(Value::Array(items)) if items.iter().all(Value::is_string) => {
            let text = items.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", ");
            object.insert("answer".into(), Value::String(text));
        }
        _ => {}
    }
    if let Some(Value::String(confidence)) = object.get("confidence")
        && let Ok(number) = confidence.trim().parse::<f64>()
        && let Some(number) = serde_json::Number::from_f64(number)
    {
        object.insert("confidence".into(), Value::Number(number));
    }
    if let Err(error) = validate_answer(&value) {
        return Some(Err(error));
    }
    Some(serde_json::from_value::<FinalAnswer>(value).map_err(|error| error.to_string()))
}

fn validate_answer(value: &Value) -> Result<(), String> {
    static VALIDATOR: LazyLock<Option<jsonschema::Validator>> =
        LazyLock::new(|| jsonschema::validator_for(answer_schema()).ok());
    let Some(validator) = VALIDATOR.as_ref() else {
        return Err("the answer schema failed to compile".into());
    };
    match validator.iter_errors(value).next() {
        None => Ok(()),
        Some(error) => {
            let path = error.instance_path().to_string();
            let at = if path.is_empty() { String::new() } else { format!(" at `{path}`") };
            Err(format!("the answer JSON does not match the schema{at}: {error}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::ToolCall;

    fn setup(limits: RunLimits) -> RunSetup {
        RunSetup {
            model: "test-model".into(),
            system: "tool rounds".into(),
            final_system: "final round".into(),
            user: r#"{"question":"Where does Caroline paint?"}"#.into(),
            tools: Tool::specs(false),
            limits,
            time_nudge: false,
            temperature: Some(0.0),
            seed: Some(66),
            structured_output: true,
        }
    }

    fn reply(
        content: Option<&str>,
        calls: &[(&str, &str, &str)],
    ) -> Result<ChatResponse, llm::Error> {
        let mut message = Message::assistant(content.unwrap_or_default());
        message.content = content.map(str::to_string);
        message.tool_calls = calls
            .iter()
            .map(|(id, name, arguments)| ToolCall {
                id: (*id).into(),
                name: (*name).into(),
                arguments: (*arguments).into(),
            })
            .collect();
        Ok(ChatResponse::new(message, None, Usage { prompt_tokens: 100, completion_tokens: 10 }))
    }

    const ANSWER: &str = r#"{"mode":"answer","answer":"Art studio","supports":["D1:3-1","D1:3-2","D2:1"],"confidence":0.8}"#;

    fn expect_model(run: &mut AnswerRun) -> ChatRequest {
        match run.next_step() {
            Step::CallModel(request) => request,
            other => panic!("expected a model call, got {other:?}"),
        }
    }

    fn expect_tools(run: &mut AnswerRun) -> Vec<ToolInvocation> {
        match run.next_step() {
            Step::CallTools(calls) => calls,
            other => panic!("expected tool calls, got {other:?}"),
        }
    }

    fn expect_done(run: &mut AnswerRun) -> Outcome {
        match run.next_step() {
            Step::Done(outcome) => outcome,
            other => panic!("expected the end, got {other:?}"),
        }
    }

    /// Every assistant tool call is followed by exactly its tool messages, in order.
    fn assert_well_formed(messages: &[Message]) {
        let mut index = 0;
        while index < messages.len() {
            let message = &messages[index];
            index += 1;
            if message.role == Role::Assistant && !message.tool_calls.is_empty() {
                for call in &message.tool_calls {
                    let answer = &messages[index];
                    assert_eq!(answer.role, Role::Tool, "call {} has no tool message", call.id);
                    assert_eq!(answer.tool_call_id.as_deref(), Some(call.id.as_str()));
                    index += 1;
                }
            }
        }
    }

    #[test]
    fn tool_round_then_answer() {
        let mut run = AnswerRun::new(setup(RunLimits::default()));
        let request = expect_model(&mut run);
        assert_eq!(request.tool_choice, Some(ToolChoice::Auto));
        assert_eq!(request.tools.len(), 7);
        assert_eq!(request.messages.len(), 2);
        run.model_responded(reply(
            None,
            &[
                ("a", "query_personal_information", r#"{"person":"Caroline"}"#),
                ("b", "query_topic_events", r#"{"topic":"D1:t2"}"#),
            ],
        ));
        let calls = expect_tools(&mut run);
        assert_eq!(calls.len(), 2);
        // Asking again before reporting repeats the same step.
        assert_eq!(expect_tools(&mut run), calls);
        // Outputs may arrive out of order; messages follow call order.
        run.tools_finished(vec![
            ToolOutput { call_id: "b".into(), content: "[topic]".into() },
            ToolOutput { call_id: "a".into(), content: "[aspects]".into() },
        ]);
        let request = expect_model(&mut run);
        assert_eq!(request.messages.len(), 5);
        assert_eq!(request.messages[3].content.as_deref(), Some("[aspects]"));
        assert_eq!(request.messages[4].content.as_deref(), Some("[topic]"));
        run.model_responded(reply(Some(ANSWER), &[]));
        let outcome = expect_done(&mut run);
        let answer = outcome.answer.clone().unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(answer.answer, "Art studio");
        assert_eq!(answer.support_turns(), vec!["D1:3", "D2:1"]);
        assert_eq!(outcome.rounds, 2);
        assert_eq!(outcome.tool_calls, 2);
        assert_eq!(outcome.usage, Usage { prompt_tokens: 200, completion_tokens: 20 });
        assert_well_formed(run.messages());
    }

    #[test]
    fn bad_calls_are_answered_not_fatal() {
        let mut run = AnswerRun::new(setup(RunLimits::default()));
        expect_model(&mut run);
        run.model_responded(reply(
            None,
            &[
                ("a", "edges_by_tag", r#"{"key": "paint"#),
                ("b", "no_such_tool", "{}"),
                ("", "query_topic_events", r#"{"topic":"D1:t1"}"#),
                ("", "query_event_context", r#"{"event_id":"D1:1"}"#),
            ],
        ));
        let calls = expect_tools(&mut run);
        // Only the two valid calls run; both got distinct ids in place of the empty ones.
        assert_eq!(calls.len(), 2);
        assert_ne!(calls[0].call_id, calls[1].call_id);
        assert!(calls.iter().all(|call| !call.call_id.is_empty()));
        run.tools_finished(
            calls
                .iter()
                .map(|call| ToolOutput { call_id: call.call_id.clone(), content: "[]".into() })
                .collect(),
        );
        let request = expect_model(&mut run);
        assert_well_formed(&request.messages);
        let tool_texts: Vec<&str> = request
            .messages
            .iter()
            .filter(|message| message.role == Role::Tool)
            .filter_map(|message| message.content.as_deref())
            .collect();
        assert!(tool_texts[0].contains("not a valid JSON object"));
        assert!(tool_texts[1].contains("unknown tool `no_such_tool`"));
    }

    #[test]
    fn call_caps_answer_every_call() {
        let limits =
            RunLimits { max_rounds: 8, max_tool_calls: 5, max_calls_per_round: 3, max_reasks: 1 };
        let mut run = AnswerRun::new(setup(limits));
        expect_model(&mut run);
        let many: Vec<(String, &str, &str)> = (0..4)
            .map(|index| (format!("c{index}"), "query_topic_events", r#"{"topic":"D1:t1"}"#))
            .collect();
        let many_refs: Vec<(&str, &str, &str)> =
            many.iter().map(|(id, name, args)| (id.as_str(), *name, *args)).collect();
        run.model_responded(reply(None, &many_refs));
        let calls = expect_tools(&mut run);
        assert_eq!(calls.len(), 3, "per-round cap");
        run.tools_finished(Vec::new()); // The driver lost them: still answered.
        expect_model(&mut run);
        run.model_responded(reply(None, &many_refs));
        let calls = expect_tools(&mut run);
        assert_eq!(calls.len(), 2, "total budget");
        run.tools_finished(
            calls
                .iter()
                .map(|call| ToolOutput { call_id: call.call_id.clone(), content: "x".into() })
                .collect(),
        );
        // Budget used up: the next request is the final round.
        let request = expect_model(&mut run);
        assert_eq!(request.tool_choice, Some(ToolChoice::None));
        assert_eq!(request.messages[0].content.as_deref(), Some("final round"));
        assert!(request.response_format.is_some());
        assert_well_formed(&request.messages);
        let refused = request
            .messages
            .iter()
            .filter(|message| {
                message.content.as_deref().is_some_and(|text| text.contains("not executed"))
            })
            .count();
        assert_eq!(refused, 3);
        run.model_responded(reply(Some(ANSWER), &[]));
        let outcome = expect_done(&mut run);
        assert_eq!(outcome.tool_calls, 8);
        assert!(outcome.answer.is_ok());
    }

    #[test]
    fn round_limit_forces_a_final_round() {
        let limits = RunLimits { max_rounds: 3, ..RunLimits::default() };
        let mut run = AnswerRun::new(setup(limits));
        for round in 0..2 {
            let request = expect_model(&mut run);
            assert_eq!(request.tool_choice, Some(ToolChoice::Auto), "round {round}");
            let id = format!("r{round}");
            run.model_responded(reply(
                None,
                &[(&id, "query_topic_events", r#"{"topic":"D1:t1"}"#)],
            ));
            let calls = expect_tools(&mut run);
            run.tools_finished(vec![ToolOutput {
                call_id: calls[0].call_id.clone(),
                content: "[]".into(),
            }]);
        }
        let request = expect_model(&mut run);
        assert_eq!(request.tool_choice, Some(ToolChoice::None));
        let last =
            request.messages.last().and_then(|message| message.content.clone()).unwrap_or_default();
        assert_eq!(last, prompts::ANSWER_FINAL_ROUND.text.trim());
        // The model still calls a tool: it is refused and the model re-asked.
        run.model_responded(reply(None, &[("late", "query_topic_events", r#"{"topic":"D1:t1"}"#)]));
        let request = expect_model(&mut run);
        assert_well_formed(&request.messages);
        assert_eq!(request.tool_choice, Some(ToolChoice::None));
        run.model_responded(reply(
            Some("```json\n{\"answer\": 2022, \"supports\": [], \"confidence\": \"0.5\"}\n```"),
            &[],
        ));
        let outcome = expect_done(&mut run);
        assert_eq!(outcome.rounds, 4);
        let answer = outcome.answer.unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(answer.answer, "2022");
        assert!((answer.confidence - 0.5).abs() < 1e-9);
    }

    #[test]
    fn invalid_final_answers_end_in_an_error_after_reasks() {
        let limits = RunLimits { max_rounds: 1, max_reasks: 2, ..RunLimits::default() };
        let mut run = AnswerRun::new(setup(limits));
        for _ in 0..3 {
            expect_model(&mut run);
            run.model_responded(reply(
                Some(r#"{"answer": "x", "supports": "D1:1", "confidence": 2}"#),
                &[],
            ));
        }
        let outcome = expect_done(&mut run);
        let error = outcome.answer.err().unwrap_or_default();
        assert!(error.contains("no valid final answer after 2 re-asks"), "{error}");
        assert!(error.contains("/supports") || error.contains("/confidence"), "{error}");
        assert_eq!(outcome.rounds, 3);
    }

    #[test]
    fn plain_text_gets_a_nudge_and_model_errors_end_the_run() {
        let mut run = AnswerRun::new(setup(RunLimits::default()));
        expect_model(&mut run);
        run.model_responded(reply(Some("Let me think about the painting."), &[]));
        let request = expect_model(&mut run);
        assert_eq!(
            request.messages.last().and_then(|m| m.content.as_deref()),
            Some(prompts::ANSWER_NUDGE.text.trim())
        );
        run.model_responded(Err(llm::Error::Api {
            status: 503,
            attempts: 4,
            body: "overloaded".into(),
            retry_after: None,
        }));
        let outcome = expect_done(&mut run);
        let error = outcome.answer.err().unwrap_or_default();
        assert!(error.contains("status 503"), "{error}");
        assert_eq!(outcome.rounds, 1);
    }

    #[test]
    fn context_overflow_shortens_results_and_answers() {
        let mut run = AnswerRun::new(setup(RunLimits::default()));
        expect_model(&mut run);
        run.model_responded(reply(None, &[("a", "query_topic_events", r#"{"topic":"D1:t1"}"#)]));
        expect_tools(&mut run);
        run.tools_finished(vec![ToolOutput { call_id: "a".into(), content: "x".repeat(5000) }]);
        expect_model(&mut run);
        run.model_responded(Err(llm::Error::ContextLength { body: "too long".into() }));
        let request = expect_model(&mut run);
        assert_eq!(request.tool_choice, Some(ToolChoice::None));
        let tool_text =
            request.messages.iter().find(|m| m.role == Role::Tool).and_then(|m| m.content.clone());
        assert!(tool_text.is_some_and(|text| text.len() < 1000 && text.contains("shortened")));
        run.model_responded(reply(Some(ANSWER), &[]));
        assert!(expect_done(&mut run).answer.is_ok());
    }

    #[test]
    fn temporal_questions_get_the_time_nudge_before_the_last_tool_round() {
        let mut run = AnswerRun::new(RunSetup {
            time_nudge: true,
            ..setup(RunLimits { max_rounds: 3, ..RunLimits::default() })
        });
        let first = expect_model(&mut run);
        assert_eq!(first.messages.len(), 2);
        run.model_responded(reply(None, &[("a", "query_topic_events", r#"{"topic":"D1:t1"}"#)]));
        expect_tools(&mut run);
        run.tools_finished(vec![ToolOutput { call_id: "a".into(), content: "[]".into() }]);
        let second = expect_model(&mut run);
        let last = second.messages.last().and_then(|m| m.content.clone()).unwrap_or_default();
        assert_eq!(last, prompts::ANSWER_TIME_NUDGE.text.trim());
    }

    #[test]
    fn extracts_json_from_chatter() {
        let text = r#"Sure! Here it is: {"answer": "a {brace} \"quoted\"", "supports": ["D1:1"], "confidence": 1} hope it helps"#;
        let parsed = parse_answer(text).and_then(Result::ok).map(|answer| answer.answer);
        assert_eq!(parsed.as_deref(), Some(r#"a {brace} "quoted""#));
        assert_eq!(parse_answer("no json here"), None);
        assert_eq!(parse_answer(r#"{"mode":"navigate"}"#), None);
        assert_eq!(origin_of("D12:3-10"), "D12:3");
        assert_eq!(origin_of("D12:3"), "D12:3");
        assert_eq!(origin_of("conv-26"), "conv-26");
    }
}
