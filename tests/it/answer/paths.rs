//! `--answer single|adaptive` over real HTTP: which path each question takes, what the single
//! path sends, and that every result line, trace and summary says which path answered.

use mragent::agent::{AnswerGate, AnswerMode, NOTHING_FOUND, PathCounts};
use mragent::results::AnswerPath;
use serde_json::json;

use super::*;

/// The system prompt's first line of the single path.
fn single_head() -> &'static str {
    mragent::prompts::ANSWER_SINGLE.text.lines().next().unwrap_or_default()
}

fn is_single(request: &RecordedRequest) -> bool {
    request.is_chat()
        && request
            .messages()
            .first()
            .and_then(|message| message["content"].as_str())
            .is_some_and(|system| system.starts_with(single_head()))
}

/// The gate's trace record of a question: `(path, confidence)`.
fn gate_record(bench: &Bench, question_id: &str) -> (String, Option<f64>, Value) {
    let records = read_trace(&bench.settings.trace_path("conv-7", question_id)).unwrap();
    let detail = records
        .iter()
        .find_map(|record| match &record.event {
            TraceEvent::Retrieval { step, detail } if step == "gate" => Some(detail.clone()),
            _ => None,
        })
        .unwrap_or(Value::Null);
    let finish = records.iter().find_map(|record| match &record.event {
        TraceEvent::Finish { path, .. } => *path,
        _ => None,
    });
    let line_path = bench
        .lines("conv-7")
        .into_iter()
        .find(|line| line.question_id == question_id)
        .and_then(|line| line.path);
    assert_eq!(finish, line_path, "the trace and the result line name the same path");
    (detail["path"].as_str().unwrap_or_default().to_string(), detail["confidence"].as_f64(), detail)
}

async fn memory(bench: &Bench) -> Snapshot {
    with_memgas(mechanical_memory(&fixture(), false).unwrap(), &bench.embedder).await
}

#[tokio::test]
async fn single_answers_every_question_with_one_model_call_and_no_tools() {
    let mut bench = Bench::new(AgentScript::default()).await;
    bench.settings.answer = AnswerGate::with_mode(AnswerMode::Single);
    let summary = bench.run(&[memory(&bench).await]).await;
    let lines = bench.lines("conv-7");
    assert_eq!(lines.len(), 9);
    for line in &lines {
        assert_eq!(line.status, Status::Ok, "{line:?}");
        assert_eq!(line.path, Some(AnswerPath::Single));
        assert_eq!((line.rounds, line.tool_calls), (1, 0), "{}", line.question_id);
        assert!(!line.prediction.is_empty());
    }
    assert_eq!(summary.paths, PathCounts { single: 9, looped: 0, escalated: 0 });
    assert!(summary.to_string().contains("paths: 9 single, 0 loop, 0 escalated"), "{summary}");
    // One chat request per question, each the single prompt with no tools, and nothing else
    // (no keyword, re-rank or tag-score call).
    let chats: Vec<RecordedRequest> =
        bench.server.requests().into_iter().filter(|request| request.is_chat()).collect();
    assert_eq!(chats.len(), 9);
    for request in &chats {
        assert!(is_single(request), "{}", request.transcript());
        assert!(request.body.get("tools").is_none());
        let payload: Value =
            serde_json::from_str(request.messages()[1]["content"].as_str().unwrap()).unwrap();
        let turns = payload["turns"].as_array().unwrap();
        // The whole reach: the top 30 turns, or every turn of a smaller conversation.
        let all_turns = fixture().sessions.iter().map(|session| session.turns.len()).sum::<usize>();
        let shown = mragent::retrieval::gate::SINGLE_CONTEXT.k.min(all_turns);
        assert_eq!(turns.len(), shown, "{payload}");
        assert!(
            turns.iter().filter_map(Value::as_str).all(|turn| turn.contains("(session date: "))
        );
        // The mechanical memory has one sentence and one fact per turn: both are shown.
        assert_eq!(payload["events"].as_array().unwrap().len(), turns.len(), "{payload}");
        assert!(!payload["facts"].as_array().unwrap().is_empty());
        assert!(!payload["sessions"].as_array().unwrap().is_empty());
    }
    // The trace records the gate's decision with its signals.
    let (path, confidence, detail) = gate_record(&bench, "conv-7:q1");
    assert_eq!(path, "single");
    assert!(confidence.is_some_and(|value| (0.0..=1.0).contains(&value)), "{detail}");
    for signal in ["coverage", "margin", "agreement"] {
        assert!(detail[signal].is_number(), "{detail}");
    }
}

#[tokio::test]
async fn adaptive_sends_a_question_down_the_single_path_exactly_when_it_is_sure() {
    // Threshold 0: every question is sure enough; above 1: none is.
    let mut bench = Bench::new(AgentScript::default()).await;
    bench.settings.answer =
        AnswerGate { threshold: 0.0, ..AnswerGate::with_mode(AnswerMode::Adaptive) };
    bench.run(&[memory(&bench).await]).await;
    let mut confidences = Vec::new();
    for line in bench.lines("conv-7") {
        assert_eq!(line.path, Some(AnswerPath::Single));
        let (path, confidence, _) = gate_record(&bench, &line.question_id);
        assert_eq!(path, "single");
        confidences.push((line.question_id.clone(), confidence.unwrap()));
    }

    let mut bench = Bench::new(AgentScript::default()).await;
    bench.settings.answer =
        AnswerGate { threshold: 1.01, ..AnswerGate::with_mode(AnswerMode::Adaptive) };
    let summary = bench.run(&[memory(&bench).await]).await;
    assert_eq!(summary.paths.looped, 9);
    assert!(bench.server.requests().iter().all(|request| !is_single(request)));
    for line in bench.lines("conv-7") {
        assert_eq!(line.path, Some(AnswerPath::Loop));
        let (path, _, detail) = gate_record(&bench, &line.question_id);
        assert_eq!(path, "loop");
        assert_eq!(detail["reason"], "the confidence is below the threshold");
    }

    // A threshold between: each question's path follows its own confidence.
    let mut sorted: Vec<f64> = confidences.iter().map(|(_, value)| *value).collect();
    sorted.sort_by(f64::total_cmp);
    let threshold = sorted[sorted.len() / 2];
    let mut bench = Bench::new(AgentScript::default()).await;
    bench.settings.answer = AnswerGate { threshold, ..AnswerGate::with_mode(AnswerMode::Adaptive) };
    bench.run(&[memory(&bench).await]).await;
    let lines = bench.lines("conv-7");
    for (question_id, confidence) in &confidences {
        let line = lines.iter().find(|line| &line.question_id == question_id).unwrap();
        let expected = if *confidence >= threshold { AnswerPath::Single } else { AnswerPath::Loop };
        assert_eq!(line.path, Some(expected), "{question_id}: {confidence} against {threshold}");
    }
}

/// Plays the plausible agent, except that every single-path request answers that it found
/// nothing.
fn finds_nothing_in_one_pass() -> impl Fn(&RecordedRequest) -> ScriptedReply + Send + Sync {
    let agent = plausible_agent(AgentScript::default());
    move |request: &RecordedRequest| {
        if is_single(request) {
            ScriptedReply::json(&json!({ "answer": NOTHING_FOUND, "confidence": 0 }))
        } else {
            agent(request)
        }
    }
}

#[tokio::test]
async fn adaptive_runs_the_loop_when_the_single_pass_finds_nothing() {
    let mut bench = Bench::with_responder(finds_nothing_in_one_pass()).await;
    bench.settings.answer =
        AnswerGate { threshold: 0.0, ..AnswerGate::with_mode(AnswerMode::Adaptive) };
    let summary = bench.run(&[memory(&bench).await]).await;
    assert_eq!(summary.paths, PathCounts { single: 0, looped: 0, escalated: 9 });
    let singles = bench.server.requests().iter().filter(|request| is_single(request)).count();
    assert_eq!(singles, 9, "one single pass per question");
    assert!(!bench.loop_requests().is_empty());
    for line in bench.lines("conv-7") {
        assert_eq!(line.path, Some(AnswerPath::Escalated));
        assert_ne!(line.prediction, NOTHING_FOUND, "the loop's answer is the one kept");
        assert!(line.rounds >= 2, "the single call and the loop's rounds: {}", line.rounds);
        let records = read_trace(&bench.settings.trace_path("conv-7", &line.question_id)).unwrap();
        assert!(records.iter().any(|record| matches!(&record.event,
            TraceEvent::Retrieval { step, detail } if step == "gate" && detail["path"] == "escalated")));
    }

    // `single` keeps what the one pass said, found or not.
    let mut bench = Bench::with_responder(finds_nothing_in_one_pass()).await;
    bench.settings.answer = AnswerGate::with_mode(AnswerMode::Single);
    bench.run(&[memory(&bench).await]).await;
    for line in bench.lines("conv-7") {
        assert_eq!(
            (line.path, line.prediction.as_str()),
            (Some(AnswerPath::Single), NOTHING_FOUND)
        );
    }
    assert!(bench.loop_requests().is_empty());
}

#[tokio::test]
async fn without_a_memgas_index_every_question_takes_the_loop_and_the_trace_says_why() {
    let mut bench = Bench::new(AgentScript::default()).await;
    bench.settings.answer = AnswerGate::with_mode(AnswerMode::Single);
    bench.run(&[mechanical_memory(&fixture(), true).unwrap()]).await;
    for line in bench.lines("conv-7") {
        assert_eq!(line.path, Some(AnswerPath::Loop));
        let (path, _, detail) = gate_record(&bench, &line.question_id);
        assert_eq!(path, "loop");
        assert_eq!(detail["reason"], "the conversation has no MemGAS index");
    }
}

#[tokio::test]
async fn a_rerun_in_another_mode_answers_again_and_in_the_same_mode_resumes() {
    let mut bench = Bench::new(AgentScript::default()).await;
    bench.run(&[memory(&bench).await]).await;
    let first = bench.server.request_count();
    bench.settings.answer = AnswerGate::with_mode(AnswerMode::Single);
    let summary = bench.run(&[memory(&bench).await]).await;
    assert_eq!((summary.resumed, summary.answered), (0, 9), "other prompts: answered again");
    assert!(bench.server.request_count() > first);
    let again = bench.run(&[memory(&bench).await]).await;
    assert_eq!((again.resumed, again.answered), (9, 0));
}
