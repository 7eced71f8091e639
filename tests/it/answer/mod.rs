//! The answer engine end to end over real HTTP: the real client stack talks to the scripted
//! OpenAI-compatible endpoint on 127.0.0.1, whose responder plays a plausible agent
//! (`agent::scripted`): it extracts keywords, re-ranks, calls tools for two rounds, then answers
//! with the event that best overlaps the question. Memories are built mechanically from the
//! conversations (no build-stage model calls), so these tests exercise retrieval, the seven tools,
//! the loop, result files, resume, interruption, fault handling and traces.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::OpenOptions;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use mragent::agent::render::{RenderOptions, render_trace};
use mragent::agent::scripted::{AgentScript, Fault, mechanical_memory, plausible_agent};
use mragent::agent::trace::{TraceEvent, read_trace};
use mragent::agent::{AnswerSettings, AnswerSummary, answer_all};
use mragent::dataset::{Conversation, DatasetKind};
use mragent::ingest::build_memory;
use mragent::llm::retry::RetryPolicy;
use mragent::llm::scripted::{RecordedRequest, ScriptedReply, ScriptedServer};
use mragent::llm::{
    Client, EmbedClient, EmbedderConfig, LlmConfig, Secret, build_chat_model, build_embedder,
};
use mragent::results::{ResultLine, Status};
use mragent::retrieval::{IndexOptions, SessionUnits, build_index};
use mragent::snapshot::{MemgasMemory, Snapshot};
use serde_json::Value;

use crate::support::{build_and_answer, load_fixture, locomo, read_lines};

mod tokens;

mod shapes;

mod faults;

mod paths;

fn fixture() -> Conversation {
    load_fixture("tests/fixtures/answer/tiny_conversation.json").remove(0)
}

/// A scripted endpoint, the real client stack pointed at it, and answer settings under a
/// temporary project root.
struct Bench {
    _dir: tempfile::TempDir,
    server: ScriptedServer,
    chat: Client,
    embedder: EmbedClient,
    settings: AnswerSettings,
}

impl Bench {
    async fn new(script: AgentScript) -> Self {
        Self::with_responder(plausible_agent(script)).await
    }

    async fn with_responder(
        responder: impl Fn(&RecordedRequest) -> ScriptedReply + Send + Sync + 'static,
    ) -> Self {
        Self::with_config(responder, |_| {}).await
    }

    /// A bench whose client configuration is changed by `edit` (timeouts, retries, hedging).
    async fn with_config(
        responder: impl Fn(&RecordedRequest) -> ScriptedReply + Send + Sync + 'static,
        edit: impl FnOnce(&mut LlmConfig),
    ) -> Self {
        let server = ScriptedServer::with_responder(responder).await.unwrap();
        let mut config =
            LlmConfig::new(server.base_url(), Secret::new("sk-answer-test-secret"), "test-model");
        config.retry = RetryPolicy {
            max_attempts: 3,
            base_delay: Duration::from_millis(10),
            max_delay: Duration::from_millis(50),
            max_retry_after: Duration::from_secs(2),
        };
        config.timeout = Duration::from_millis(1500);
        edit(&mut config);
        let chat = build_chat_model(&config).unwrap();
        let embedder = build_embedder(
            &config,
            &EmbedderConfig { model: "test-embedding".into(), batch_size: 16 },
        )
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut settings =
            AnswerSettings::new(dir.path(), DatasetKind::Locomo, "test", "test-model", "it");
        settings.progress = false;
        settings.workers = 4;
        Self { _dir: dir, server, chat, embedder, settings }
    }

    fn root(&self) -> &Path {
        &self.settings.root
    }

    async fn run(&self, samples: &[Snapshot]) -> AnswerSummary {
        answer_all(
            &self.settings,
            &Default::default(),
            samples,
            &self.chat,
            &self.embedder,
            std::future::pending(),
        )
        .await
        .unwrap()
    }

    fn lines(&self, sample: &str) -> Vec<ResultLine> {
        read_lines(&self.settings.result_path(sample))
    }

    /// Chat requests of the answer loop (system prompt from `answer_system.md`), in arrival
    /// order.
    fn loop_requests(&self) -> Vec<RecordedRequest> {
        let head = mragent::prompts::ANSWER_SYSTEM.text.lines().next().unwrap_or_default();
        self.server
            .requests()
            .into_iter()
            .filter(|request| {
                request.is_chat()
                    && request
                        .messages()
                        .first()
                        .and_then(|message| message["content"].as_str())
                        .is_some_and(|system| system.starts_with(head))
            })
            .collect()
    }
}

fn by_id(lines: &[ResultLine]) -> BTreeMap<String, ResultLine> {
    lines.iter().map(|line| (line.question_id.clone(), line.clone())).collect()
}

/// Every assistant tool call of a request is answered by a tool message before anything else.
fn assert_transcript_well_formed(request: &RecordedRequest) {
    let messages = request.messages();
    let mut index = 0;
    while index < messages.len() {
        let message = &messages[index];
        index += 1;
        let calls =
            message.get("tool_calls").and_then(Value::as_array).cloned().unwrap_or_default();
        for call in calls {
            let answer = &messages[index];
            assert_eq!(
                answer["role"], "tool",
                "call without its tool message in request {}",
                request.index
            );
            assert_eq!(answer["tool_call_id"], call["id"]);
            index += 1;
        }
    }
}

/// Names of the tools the agent called, over all loop requests.
fn tools_called(requests: &[RecordedRequest]) -> BTreeSet<String> {
    requests
        .iter()
        .flat_map(|request| request.messages().to_vec())
        .flat_map(|message| {
            message.get("tool_calls").and_then(Value::as_array).cloned().unwrap_or_default()
        })
        .filter_map(|call| call["function"]["name"].as_str().map(str::to_string))
        .collect()
}

/// Everything the loop sent to the model for one question (all request messages).
fn text_seen_by_model(trace_file: &Path) -> String {
    read_trace(trace_file)
        .unwrap()
        .into_iter()
        .filter_map(|record| match record.event {
            TraceEvent::Request { messages, .. } => Some(messages),
            _ => None,
        })
        .flatten()
        .filter_map(|message| message.content)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Share of questions whose cited turns include a gold evidence turn.
fn evidence_hit_rate(lines: &[ResultLine]) -> f64 {
    let hits = lines
        .iter()
        .filter(|line| line.prediction_context.iter().any(|turn| line.evidence.contains(turn)))
        .count();
    hits as f64 / lines.len().max(1) as f64
}

/// Attaches a MemGAS index of the conversation, built with the endpoint's embeddings.
async fn with_memgas(mut memory: Snapshot, embedder: &EmbedClient) -> Snapshot {
    let sessions: Vec<SessionUnits> =
        memory.conversation.sessions.iter().map(SessionUnits::from_session).collect();
    let index = build_index(sessions, embedder, None, IndexOptions::default()).await.unwrap();
    memory.memgas = Some(MemgasMemory::new(index, embedder.clone()));
    memory
}

#[tokio::test]
async fn answers_a_fixture_conversation_end_to_end() {
    let bench = Bench::new(AgentScript::default()).await;
    let conversation = fixture();
    // Question vectors left out: the run embeds each question through the endpoint.
    let memory =
        with_memgas(mechanical_memory(&conversation, false).unwrap(), &bench.embedder).await;
    let summary = bench.run(&[memory]).await;
    assert_eq!((summary.total, summary.answered, summary.errors, summary.remaining), (9, 9, 0, 0));
    assert!(!summary.interrupted && summary.resume_hint().is_none());
    assert!(summary.usage.prompt_tokens > 0 && summary.usage.completion_tokens > 0);

    let lines = bench.lines("conv-7");
    assert_eq!(lines.len(), 9);
    let ids: BTreeSet<&str> = lines.iter().map(|line| line.question_id.as_str()).collect();
    assert_eq!(ids.len(), 9, "one line per question");
    for line in &lines {
        assert_eq!(line.status, Status::Ok, "{line:?}");
        assert!(!line.prediction.is_empty());
        assert!(line.rounds >= 2 && line.tool_calls >= 1, "{line:?}");
        assert!(line.prompt_tokens > 0 && line.completion_tokens > 0, "{line:?}");
    }
    // Retrieval and tools surface the gold evidence: the agent cites it for most questions.
    let rate = evidence_hit_rate(&lines);
    assert!(rate >= 0.5, "evidence hit rate {rate}");
    // Every gold evidence turn reached the model, through retrieval or a tool.
    for line in &lines {
        let seen = text_seen_by_model(&bench.settings.trace_path("conv-7", &line.question_id));
        for turn in &line.evidence {
            assert!(
                seen.contains(&format!("{turn}-1:")) || seen.contains(&format!("{turn}:")),
                "{turn} never shown for {}",
                line.question_id
            );
        }
    }
    let lines = by_id(&lines);
    assert_eq!(lines["conv-7:q3"].prediction_context, ["D1:4"]);
    assert!(lines["conv-7:q3"].prediction.contains("Harbour marathon"));
    assert_eq!(lines["conv-7:q5"].prediction_context, ["D2:4"]);
    assert!(lines["conv-7:q5"].prediction.contains("Clara"));
    // The temporal question is answered with the session date `query_conversation_time` gave
    // for the cited turn.
    let temporal = &lines["conv-7:q4"];
    let session: u32 = temporal.prediction_context[0][1..2].parse().unwrap();
    let date =
        conversation.sessions.iter().find(|s| s.index == session).and_then(|s| s.date).unwrap();
    assert_eq!(temporal.prediction, date.to_string());

    let requests = bench.loop_requests();
    for request in &requests {
        assert_transcript_well_formed(request);
        assert_eq!(request.body["temperature"], 0.0);
        assert_eq!(request.body["seed"], 66);
        // The final round sends no tool schemas; every other round all eight.
        let tools = request.body.get("tools").and_then(Value::as_array).map_or(0, Vec::len);
        assert!(tools == 8 || (tools == 0 && request.body.get("tool_choice").is_none()), "{tools}");
    }
    let called = tools_called(&requests);
    let mut all: BTreeSet<String> =
        mragent::agent::tools::TOOL_NAMES.iter().map(|name| name.to_string()).collect();
    all.insert("query_memgas".into());
    assert_eq!(called, all, "every tool is exercised");
    // MemGAS answers with dated turns of the conversation.
    let memgas_result: Value = requests
        .iter()
        .flat_map(|request| request.messages().to_vec())
        .filter(|message| message["role"] == "tool")
        .filter_map(|message| serde_json::from_str::<Value>(message["content"].as_str()?).ok())
        .find(|result| result.get("turns").is_some() && result.get("sessions").is_some())
        .unwrap();
    let turns = memgas_result["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 3);
    assert!(
        turns
            .iter()
            .filter_map(Value::as_str)
            .all(|turn| turn.starts_with('D') && turn.contains("(session date: "))
    );
    // The adversarial question offers both options.
    let adversarial =
        requests.iter().find(|request| request.transcript().contains("Omar's kitten")).unwrap();
    assert!(adversarial.transcript().contains("Not mentioned in the conversation"));
    assert!(adversarial.transcript().contains("a violin"));
    // The temporal question carries its instructions.
    let temporal = requests
        .iter()
        .find(|request| request.transcript().contains("When did Lena adopt"))
        .unwrap();
    assert!(temporal.transcript().contains("query_conversation_time"));

    // A second run finds everything answered and asks nothing.
    let memory =
        with_memgas(mechanical_memory(&conversation, false).unwrap(), &bench.embedder).await;
    let before = bench.server.request_count();
    let again = bench.run(&[memory]).await;
    assert_eq!((again.resumed, again.answered), (9, 0));
    assert_eq!(bench.server.request_count(), before);
    assert_eq!(bench.lines("conv-7").len(), 9);
}

/// Sessions the dataset gives without turns are counted and named in the run's summary.
#[tokio::test]
async fn the_run_summary_names_sessions_without_turns() {
    let bench = Bench::new(AgentScript::default()).await;
    let mut memory = mechanical_memory(&fixture(), true).unwrap();
    memory.conversation.empty_sessions = vec!["conversation.session_4".into()];
    let summary = bench.run(&[memory]).await;
    assert_eq!(summary.empty_sessions, ["conv-7 conversation.session_4"]);
    let text = summary.to_string();
    assert!(text.contains("; 1 empty sessions skipped (conv-7 conversation.session_4)"), "{text}");
}

#[tokio::test]
async fn trace_renders_a_question_and_a_result_file() {
    let bench = Bench::new(AgentScript::default()).await;
    bench.run(&[mechanical_memory(&fixture(), true).unwrap()]).await;

    let trace_file = bench.settings.trace_path("conv-7", "conv-7:q1");
    let records = read_trace(&trace_file).unwrap();
    let kinds: BTreeSet<&str> = records
        .iter()
        .map(|record| match &record.event {
            TraceEvent::Start { .. } => "start",
            TraceEvent::Llm { .. } => "llm",
            TraceEvent::Retrieval { .. } => "retrieval",
            TraceEvent::Request { .. } => "request",
            TraceEvent::Response { .. } => "response",
            TraceEvent::ToolCall { .. } => "tool_call",
            TraceEvent::Finish { .. } => "finish",
            TraceEvent::Fallback { .. } => "fallback",
            TraceEvent::Rejected { .. } => "rejected",
            TraceEvent::Skipped { .. } => "skipped",
        })
        .collect();
    for kind in ["start", "llm", "retrieval", "request", "response", "tool_call", "finish"] {
        assert!(
            kinds.contains(kind),
            "every kind of event but fallbacks and rejections: {kinds:?}"
        );
    }
    assert!(!kinds.contains("fallback") && !kinds.contains("rejected"), "{kinds:?}");
    // The first request carries the tool specs, every later one only what is new.
    let requests: Vec<(usize, usize, usize)> = records
        .iter()
        .filter_map(|record| match &record.event {
            TraceEvent::Request { messages_from, messages, tools, .. } => {
                Some((*messages_from, messages.len(), tools.len()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(requests[0], (0, 2, 7));
    assert!(requests[1..].iter().all(|(from, _, tools)| *from > 0 && *tools == 0));
    let text = std::fs::read_to_string(&trace_file).unwrap();
    assert!(!text.contains("sk-answer-test-secret"), "the key never reaches a trace");

    let options = RenderOptions::default();
    let rendered = render_trace(bench.root(), "conv-7:q1", &options).unwrap();
    for expected in [
        "conv-7:q1",
        "Q: What is the name of Lena's kitten?",
        "llm question_keywords",
        "→ request 1",
        "tool query_event_context",
        "answer",
    ] {
        assert!(rendered.contains(expected), "missing `{expected}` in:\n{rendered}");
    }
    assert!(!rendered.contains('\u{1b}'), "no colour unless asked");
    let coloured = render_trace(
        bench.root(),
        "conv-7:q1",
        &RenderOptions { color: true, ..RenderOptions::default() },
    )
    .unwrap();
    assert!(coloured.contains("\u{1b}["));
    let json: Value = serde_json::from_str(
        &render_trace(bench.root(), "conv-7:q1", &RenderOptions { json: true, ..options.clone() })
            .unwrap(),
    )
    .unwrap();
    assert_eq!(json["questions"][0]["records"][0]["event"], "start");

    let result_file = bench.settings.result_path("conv-7");
    let all = render_trace(bench.root(), result_file.to_str().unwrap(), &options).unwrap();
    assert_eq!(all.matches("Q: ").count(), 9);
    let error = render_trace(bench.root(), "conv-7:q99", &options).unwrap_err().to_string();
    assert!(error.contains("no trace for question `conv-7:q99`"), "{error}");
}

#[tokio::test]
async fn injected_faults_never_stop_the_run() {
    let script = AgentScript {
        faults: vec![
            ("name of Lena's kitten".into(), Fault::StatusOnce(500)),
            ("find the kitten".into(), Fault::RateLimitedOnce),
            ("marathon did Omar".into(), Fault::SlowOnce(Duration::from_secs(3))),
            ("adopt the kitten".into(), Fault::MalformedOnce),
            ("violin teacher".into(), Fault::InvalidToolArguments),
            ("finish line".into(), Fault::AlwaysUnavailable),
            ("string music".into(), Fault::BadRerank),
        ],
        latency: Duration::ZERO,
    };
    let mut bench = Bench::new(script).await;
    // Few candidates pass the cut, so every question goes through the re-rank.
    bench.settings.retrieval.k2 = 1;
    let summary = bench.run(&[mechanical_memory(&fixture(), true).unwrap()]).await;
    assert_eq!((summary.answered, summary.errors), (9, 1));
    assert!(summary.counts.fallbacks >= 1, "the bad re-rank is counted: {summary:?}");
    let lines = by_id(&bench.lines("conv-7"));
    assert_eq!(lines.len(), 9);
    // Retried by the client stack until they pass: 500, 429 with Retry-After, a timeout, and a
    // truncated 200 body (transient like a 5xx).
    for id in [
        "conv-7:q1",
        "conv-7:q2",
        "conv-7:q3",
        "conv-7:q4",
        "conv-7:q5",
        "conv-7:q7",
        "conv-7:q8",
        "conv-7:q9",
    ] {
        assert_eq!(lines[id].status, Status::Ok, "{:?}", lines[id]);
    }
    let failed = &lines["conv-7:q6"];
    assert_eq!(failed.status, Status::Error);
    assert!(failed.error.as_deref().unwrap_or_default().contains("503"), "{failed:?}");
    let trace =
        |question: &str| read_trace(&bench.settings.trace_path("conv-7", question)).unwrap();
    // The failure is in the trace with its cause.
    assert!(trace("conv-7:q6").iter().any(|record| matches!(&record.event,
        TraceEvent::Response { error: Some(error), .. } if error.contains("503"))));
    // Invalid tool arguments came back to the model as readable results.
    let invalid = trace("conv-7:q5");
    let tool_texts: Vec<String> = invalid
        .iter()
        .filter_map(|record| match &record.event {
            TraceEvent::Request { messages, .. } => Some(messages.clone()),
            _ => None,
        })
        .flatten()
        .filter(|message| message.role == mragent::llm::Role::Tool)
        .filter_map(|message| message.content)
        .collect();
    assert!(
        tool_texts.iter().any(|text| text.contains("not a valid JSON object")),
        "{tool_texts:?}"
    );
    assert!(
        tool_texts.iter().any(|text| text.contains("missing field `aspect`")),
        "{tool_texts:?}"
    );
    // The unusable re-rank fell back to the similarity order: the context is not empty.
    let reranked = trace("conv-7:q7");
    assert!(reranked.iter().any(|record| matches!(&record.event,
        TraceEvent::Retrieval { step, detail } if step == "rerank" && detail["fallback"] == true)));
    assert!(reranked.iter().any(|record| matches!(&record.event,
        TraceEvent::Fallback { step, reason } if step == "rerank" && reason.contains("similarity order"))));
    assert!(reranked.iter().any(|record| matches!(&record.event,
        TraceEvent::Retrieval { step, detail } if step == "candidates" && detail["key_sentences"].as_array().is_some_and(|ids| !ids.is_empty()))));
    // A rerun answers only the failed question (the 503s go on). Lines are replaced, never
    // duplicated.
    let again = bench.run(&[mechanical_memory(&fixture(), true).unwrap()]).await;
    assert_eq!((again.resumed, again.answered, again.errors), (8, 1, 1));
    let lines = by_id(&bench.lines("conv-7"));
    assert_eq!(lines.len(), 9);
    assert_eq!(lines["conv-7:q4"].status, Status::Ok);
    assert_eq!(lines["conv-7:q6"].status, Status::Error);
}

#[tokio::test]
async fn kill_mid_run_then_resume_answers_each_question_once() {
    let conversation = locomo("conv-30");
    let total = conversation.questions.len();
    let script = AgentScript { latency: Duration::from_millis(15), ..AgentScript::default() };
    let bench = Bench::new(script).await;
    let result_file = bench.settings.result_path("conv-30");
    let memory = mechanical_memory(&conversation, true).unwrap();

    // Kill: abort the run once some lines are written; in-flight questions are lost.
    let settings = bench.settings.clone();
    let (chat, embedder) = (bench.chat.clone(), bench.embedder.clone());
    let samples = vec![memory.clone()];
    let task = tokio::spawn(async move {
        answer_all(
            &settings,
            &Default::default(),
            &samples,
            &chat,
            &embedder,
            std::future::pending(),
        )
        .await
        .unwrap();
    });
    while read_lines(&result_file).len() < 12 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    task.abort();
    let _ = task.await;
    // The kill also tore the line being written.
    let mut file = OpenOptions::new().append(true).open(&result_file).unwrap();
    file.write_all(br#"{"question_id":"conv-30:q999","sample":"conv-30","ques"#).unwrap();
    drop(file);
    let first: BTreeSet<String> = std::fs::read_to_string(&result_file)
        .unwrap()
        .lines()
        .filter_map(|line| serde_json::from_str::<ResultLine>(line).ok())
        .map(|line| line.question_id)
        .collect();
    assert!(first.len() >= 12 && first.len() < total, "killed after {} of {total}", first.len());

    // The rerun, against a fresh endpoint, answers only what is missing.
    let rerun = Bench::new(AgentScript::default()).await;
    let settings = AnswerSettings { root: bench.settings.root.clone(), ..rerun.settings.clone() };
    let summary = answer_all(
        &settings,
        &Default::default(),
        &[memory],
        &rerun.chat,
        &rerun.embedder,
        std::future::pending(),
    )
    .await
    .unwrap();
    assert_eq!(summary.resumed, first.len());
    assert_eq!(summary.answered, total - first.len());
    let lines = read_lines(&result_file);
    assert_eq!(lines.len(), total, "every question has exactly one line");
    let ids: BTreeSet<&str> = lines.iter().map(|line| line.question_id.as_str()).collect();
    assert_eq!(ids.len(), total);
    assert!(lines.iter().all(|line| line.status == Status::Ok));
    // Nothing answered twice: the rerun never asked about a question already in the file.
    let asked: Vec<String> = rerun
        .server
        .requests()
        .iter()
        .filter(|request| request.is_chat() && request.body.get("tools").is_none())
        .map(|request| request.transcript())
        .collect();
    let questions: BTreeMap<&str, &str> = conversation
        .questions
        .iter()
        .map(|question| (question.id.as_str(), question.question.as_str()))
        .collect();
    for id in &first {
        let text = serde_json::to_string(questions[id.as_str()]).unwrap();
        assert!(!asked.iter().any(|transcript| transcript.contains(&text)), "{id} was asked again");
    }
}

#[tokio::test]
async fn interrupt_lets_in_flight_questions_finish_and_says_how_to_resume() {
    let conversation = locomo("conv-30");
    let total = conversation.questions.len();
    let script = AgentScript { latency: Duration::from_millis(40), ..AgentScript::default() };
    let mut bench = Bench::new(script).await;
    bench.settings.workers = 3;
    let memory = mechanical_memory(&conversation, true).unwrap();
    let stop = tokio::time::sleep(Duration::from_millis(400));
    let summary = answer_all(
        &bench.settings,
        &Default::default(),
        std::slice::from_ref(&memory),
        &bench.chat,
        &bench.embedder,
        stop,
    )
    .await
    .unwrap();
    assert!(summary.interrupted);
    assert!(summary.answered >= 1 && summary.remaining > 0, "{summary:?}");
    assert_eq!(summary.answered + summary.remaining, total);
    // Every question that started finished and was written.
    assert_eq!(bench.lines("conv-30").len(), summary.answered);
    assert!(bench.lines("conv-30").iter().all(|line| line.status == Status::Ok));
    let hint = summary.resume_hint().unwrap();
    assert!(hint.contains("run the same command again"), "{hint}");

    let summary = bench.run(std::slice::from_ref(&memory)).await;
    assert!(!summary.interrupted);
    assert_eq!(bench.lines("conv-30").len(), total);
}

/// `run` end to end on a whole LoCoMo conversation: the real build stages (rewrite, keywords,
/// embeddings, through the same endpoint, answered mechanically by the build tests' responder)
/// write their caches, the graph is built from them, and every question is answered.
#[tokio::test]
async fn builds_and_answers_a_whole_locomo_conversation() {
    let conversation = locomo("conv-30");
    let mut bench = Bench::with_responder(build_and_answer(|_| None)).await;
    bench.settings.workers = 10;
    let build_settings = crate::support::build_settings(bench.root());
    let built =
        build_memory(&build_settings, &bench.chat, &bench.embedder, &conversation).await.unwrap();
    assert_eq!(built.summary.failed.len(), 0, "{:?}", built.summary);
    let memory = Snapshot::from_built(conversation.clone(), built);

    let summary = bench.run(&[memory]).await;
    assert_eq!((summary.answered, summary.errors), (conversation.questions.len(), 0));
    let lines = bench.lines("conv-30");
    assert_eq!(lines.len(), conversation.questions.len());
    let ids: BTreeSet<&str> = lines.iter().map(|line| line.question_id.as_str()).collect();
    assert_eq!(ids.len(), lines.len());
    let categories: BTreeSet<String> = lines.iter().map(|line| line.category.to_string()).collect();
    let expected: BTreeSet<String> =
        conversation.questions.iter().map(|question| question.category.to_string()).collect();
    assert_eq!(categories, expected);
    assert!(lines.iter().all(|line| !line.prediction_context.is_empty()));
    // With keyword matching and word-overlap answers, a good share of citations hit the gold
    // evidence (the scripted agent has no language understanding; this is a floor, not a score).
    let rate = evidence_hit_rate(&lines);
    assert!(rate > 0.2, "evidence hit rate {rate}");
    for request in bench.loop_requests() {
        assert_transcript_well_formed(&request);
    }
}

/// Trace files of the fixture run land under `log/<dataset>/<file>/<sample>/`.
#[test]
fn trace_paths_follow_the_layout() {
    let settings = AnswerSettings::new(
        "/project",
        DatasetKind::Locomo,
        "gemini",
        "google/gemini-2.5-flash",
        "myrun",
    );
    assert_eq!(
        settings.trace_path("conv-26", "conv-26:q3"),
        PathBuf::from("/project/log/locomo/myrun/conv-26/conv-26_q3.jsonl")
    );
    assert_eq!(
        settings.result_path("conv-26"),
        PathBuf::from("/project/result/locomo/conv-26_result_gemini_myrun.jsonl")
    );
}

/// The tool loop's skip (issue 14): `query_event_keywords` asks no tag-scoring request for tags
/// whose events the model has already seen; `unshown_tags` decides which tags still lead to
/// something new.
#[test]
fn unshown_tags_drop_the_tags_whose_events_were_all_shown() {
    use mragent::agent::retrieve::unshown_tags;
    use mragent::memory::query::edges_by_tag;

    let memory = mechanical_memory(&locomo("conv-26"), false).unwrap();
    let graph = &memory.graph;
    let key = graph.keys().find(|key| key.tags.len() >= 3).expect("a key with three tags");
    let (name, tags) = (&key.key, &key.tags);
    assert_eq!(&unshown_tags(graph, name, tags, &BTreeSet::new()), tags, "nothing shown yet");

    let first: BTreeSet<String> =
        edges_by_tag(graph, name, &tags[0]).unwrap().into_iter().map(|hit| hit.event_id).collect();
    let left = unshown_tags(graph, name, tags, &first);
    assert!(!left.contains(&tags[0]), "{left:?}");
    for tag in &tags[1..] {
        let new = edges_by_tag(graph, name, tag)
            .unwrap()
            .iter()
            .any(|hit| !first.contains(&hit.event_id));
        assert_eq!(left.contains(tag), new, "{tag}");
    }
    let every: BTreeSet<String> = tags
        .iter()
        .flat_map(|tag| edges_by_tag(graph, name, tag).unwrap())
        .map(|hit| hit.event_id)
        .collect();
    assert!(unshown_tags(graph, name, tags, &every).is_empty());
}
