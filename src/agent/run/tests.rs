use super::*;
use crate::agent::ids::origin_of;
use crate::llm::ToolCall;

fn setup(limits: RunLimits) -> RunSetup {
    RunSetup {
        model: "test-model".into(),
        system: "tool rounds".into(),
        final_instructions: "final round".into(),
        user: r#"{"question":"Where does Caroline paint?"}"#.into(),
        tools: Tool::specs(false),
        limits,
        time_nudge: false,
        temperature: Some(0.0),
        seed: Some(66),
        structured_output: true,
    }
}

fn reply(content: Option<&str>, calls: &[(&str, &str, &str)]) -> Result<ChatResponse, llm::Error> {
    let mut message = ChatMessage::assistant(content.unwrap_or_default());
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
        NextStep::CallModel(request) => request,
        other => panic!("expected a model call, got {other:?}"),
    }
}

fn expect_tools(run: &mut AnswerRun) -> Vec<ToolInvocation> {
    match run.next_step() {
        NextStep::CallTools(calls) => calls,
        other => panic!("expected tool calls, got {other:?}"),
    }
}

fn expect_done(run: &mut AnswerRun) -> AnswerOutcome {
    match run.next_step() {
        NextStep::Done(outcome) => outcome,
        other => panic!("expected the end, got {other:?}"),
    }
}

/// Every assistant tool call is followed by exactly its tool messages, in order.
fn assert_well_formed(messages: &[ChatMessage]) {
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
    assert!(request.tools.is_empty() && request.tool_choice.is_none());
    assert_eq!(request.messages[0].content.as_deref(), Some("tool rounds"));
    assert_eq!(request.messages.last().and_then(|m| m.content.as_deref()), Some("final round"));
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
        run.model_responded(reply(None, &[(&id, "query_topic_events", r#"{"topic":"D1:t1"}"#)]));
        let calls = expect_tools(&mut run);
        run.tools_finished(vec![ToolOutput {
            call_id: calls[0].call_id.clone(),
            content: "[]".into(),
        }]);
    }
    let request = expect_model(&mut run);
    assert!(request.tools.is_empty() && request.tool_choice.is_none(), "no tools sent");
    let last =
        request.messages.last().and_then(|message| message.content.clone()).unwrap_or_default();
    assert_eq!(last, "final round");
    assert_eq!(request.messages[0].content.as_deref(), Some("tool rounds"), "same prefix");
    // The model still calls a tool: it is refused and the model re-asked.
    run.model_responded(reply(None, &[("late", "query_topic_events", r#"{"topic":"D1:t1"}"#)]));
    assert!(run.take_rejection().is_some_and(|reason| reason.contains("no longer available")));
    let request = expect_model(&mut run);
    assert_well_formed(&request.messages);
    assert!(request.tools.is_empty());
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
            Some(r#"{"answer": {"text": "x"}, "supports": "D1:1", "confidence": 2}"#),
            &[],
        ));
    }
    let outcome = expect_done(&mut run);
    let error = outcome.answer.err().unwrap_or_default();
    assert!(error.contains("no valid final answer after 2 re-asks"), "{error}");
    assert!(error.contains("`answer` must be a short text"), "{error}");
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
    assert!(request.tools.is_empty());
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
fn tool_round_and_final_round_have_their_own_reask_budgets() {
    let limits = RunLimits { max_rounds: 8, max_reasks: 1, ..RunLimits::default() };
    let mut run = AnswerRun::new(setup(limits));
    // Broken answers in the tool rounds use the tool rounds' budget ...
    for _ in 0..2 {
        assert!(!expect_model(&mut run).tools.is_empty());
        run.model_responded(reply(Some(r#"{"answer": null}"#), &[]));
        assert!(run.take_rejection().is_some());
    }
    // ... which is spent, so the final round comes next, with a budget of its own.
    let request = expect_model(&mut run);
    assert!(request.tools.is_empty());
    run.model_responded(reply(Some(r#"{"answer": ""}"#), &[]));
    assert!(run.take_rejection().is_some_and(|reason| reason.contains("empty")));
    expect_model(&mut run);
    run.model_responded(reply(Some(r#"{"answer": "Paris", "extra": 1}"#), &[]));
    let answer = expect_done(&mut run).answer.unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(answer.answer, "Paris");
}

#[test]
fn answers_are_read_with_the_reference_defaults() {
    let read = |text: &str| parse_answer(text).and_then(Result::ok);
    let answer = read(r#"{"answer": "Paris"}"#).unwrap_or_else(|| panic!("answer only"));
    assert_eq!((answer.supports.len(), answer.confidence), (0, DEFAULT_CONFIDENCE));
    let answer = read(r#"{"mode": "answer", "answer": ["a", 2], "supports": "D1:1, D2:3-1", "confidence": "80%", "why": "x"}"#)
        .unwrap_or_else(|| panic!("coerced"));
    assert_eq!(answer.answer, "a, 2");
    assert_eq!(answer.supports, ["D1:1", "D2:3-1"]);
    assert!((answer.confidence - 0.8).abs() < 1e-9);
    let answer = read(r#"{"answer": true, "supports": [3, null], "confidence": "high"}"#)
        .unwrap_or_else(|| panic!("bool"));
    assert_eq!((answer.answer.as_str(), answer.supports.len()), ("Yes", 1));
    assert_eq!(answer.confidence, DEFAULT_CONFIDENCE);
    assert!(matches!(parse_answer(r#"{"answer": null}"#), Some(Err(_))));
    assert!(matches!(parse_answer(r#"{"answer": "  "}"#), Some(Err(_))));
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
