//! The run as one pipeline: a conversation's questions are answered while another conversation
//! still builds, and MemGAS costs nothing until the model calls `query_memgas`.

use std::time::Duration;

use mragent::llm::scripted::ScriptedReply;
use serde_json::Value;

use super::mragent_in;
use super::safety::{answer_chat, project, run_args, server};
use crate::support::read_lines;

/// The fixture's conversation twice: `conv-7` as is, and `conv-8` with every "Lena" renamed to
/// "Marguerite" (so that the endpoint can tell its build requests apart).
fn two_conversations(data: &mut Value) {
    let text = serde_json::to_string(&data[0]).unwrap().replace("Lena", "Marguerite");
    let mut second: Value = serde_json::from_str(&text).unwrap();
    second["sample_id"] = Value::from("conv-8");
    data.as_array_mut().unwrap().push(second);
}

#[tokio::test]
async fn a_built_conversation_is_answered_while_another_still_builds() {
    let (dir, data) = project(two_conversations);
    // Every build request of conv-8 takes 1.5 s; conv-7 builds at once.
    let slow = server(|request| {
        (request.is_chat() && !answer_chat(request) && request.transcript().contains("Marguerite"))
            .then(|| ScriptedReply::json(&crate::ingest::good_answer(request)))
            .map(|reply| reply.delayed(Duration::from_millis(1500)))
    })
    .await;
    let output = mragent_in(dir.path(), &run_args(&data, &slow, "t"), &[]).await;
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let requests = slow.requests();
    let first_answer = requests.iter().find(|request| answer_chat(request)).unwrap().index;
    let slow_build: Vec<usize> = requests
        .iter()
        .filter(|r| r.is_chat() && !answer_chat(r) && r.transcript().contains("Marguerite"))
        .map(|request| request.index)
        .collect();
    // conv-8's later build requests (its keywords) wait for its slow rewrites; conv-7's
    // questions must not.
    assert!(slow_build.len() >= 2, "{slow_build:?}");
    let last_slow = *slow_build.last().unwrap();
    assert!(
        first_answer < last_slow,
        "the first answer request ({first_answer}) waited for conv-8's build (last request {last_slow})"
    );
    let answered = read_lines(&dir.path().join("result/locomo/conv-8_result_local-tiny_t.jsonl"));
    assert_eq!(answered.len(), 9, "conv-8 is answered once built");
}

/// Two build workers, conv-8's requests slow: conv-7's question embedding waits for a worker
/// beside conv-7's own units, so conv-7 is answered after at most the first slow request of
/// conv-8 (and the one that takes the worker conv-7 freed). Asked after its units, it would
/// queue behind every unit of conv-8 and wait for two of them to finish (≥ 4 slow requests).
#[tokio::test]
async fn the_first_conversation_does_not_queue_behind_the_second() {
    let (dir, data) = project(two_conversations);
    let slow_build = |request: &mragent::llm::scripted::RecordedRequest| {
        request.is_chat() && !answer_chat(request) && request.transcript().contains("Marguerite")
    };
    let slow = server(move |request| {
        slow_build(request)
            .then(|| ScriptedReply::json(&crate::ingest::good_answer(request)))
            .map(|reply| reply.delayed(Duration::from_millis(1500)))
    })
    .await;
    let mut args = run_args(&data, &slow, "t");
    args.extend(["--workers", "2"]);
    let output = mragent_in(dir.path(), &args, &[]).await;
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let requests = slow.requests();
    let first_answer = requests.iter().position(answer_chat).unwrap();
    let slow_before = requests[..first_answer].iter().filter(|r| slow_build(r)).count();
    assert!(
        slow_before <= 2,
        "{slow_before} slow build requests of conv-8 before conv-7's answers"
    );
    assert_eq!(requests.iter().filter(|r| slow_build(r)).count(), 6, "3 rewrites, 3 keywords");
}

/// `run_args` with MemGAS on (the local embedder from the test model directory).
fn memgas_args<'a>(
    data: &'a std::path::Path,
    server: &'a mragent::llm::scripted::ScriptedServer,
    tag: &'a str,
    model_dir: &'a str,
) -> Vec<&'a str> {
    let mut args = run_args(data, server, tag);
    args.retain(|arg| *arg != "--no-memgas");
    args.extend(["--embed-model-dir", model_dir]);
    args
}

/// Whether any loop request carried a `query_memgas` result.
fn memgas_called(server: &mragent::llm::scripted::ScriptedServer) -> bool {
    server.requests().iter().any(|request| {
        request
            .messages()
            .iter()
            .any(|message| message["tool_calls"].to_string().contains("query_memgas"))
    })
}

#[tokio::test]
async fn the_memgas_index_is_built_only_when_called_then_loaded_from_disk() {
    use mragent::agent::scripted::{AgentScript, plausible_agent};

    let model_dir = crate::retrieval::embedder().model_dir().to_str().unwrap().to_string();
    let (dir, data) = project(|_| {});
    let local = mragent::embedding::LOCAL_EMBEDDER_NAME;
    let index_file = dir.path().join(format!("data/locomo/memgas_index/{local}/conv-7.json"));
    let unit_vectors = dir.path().join(format!("data/locomo/embedding/{local}"));

    // The model never calls the tool (it is taken out of the offered tools): no index.
    let agent = plausible_agent(AgentScript::default());
    let never = server(move |request| {
        answer_chat(request).then(|| {
            let mut request = request.clone();
            if let Some(tools) = request.body.get_mut("tools").and_then(Value::as_array_mut) {
                tools.retain(|tool| tool["function"]["name"] != "query_memgas");
            }
            agent(&request)
        })
    })
    .await;
    let output = mragent_in(dir.path(), &memgas_args(&data, &never, "t", &model_dir), &[]).await;
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(!memgas_called(&never));
    assert!(!index_file.exists() && !unit_vectors.exists(), "no index without a call");

    // The model calls it: built once and written.
    let calls = server(|_| None).await;
    let output = mragent_in(dir.path(), &memgas_args(&data, &calls, "u", &model_dir), &[]).await;
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(memgas_called(&calls));
    let written = std::fs::read(&index_file).unwrap();
    std::fs::remove_dir_all(&unit_vectors).unwrap();

    // A rerun (another tag) loads it: nothing is embedded or written again.
    let again = server(|_| None).await;
    let output = mragent_in(dir.path(), &memgas_args(&data, &again, "w", &model_dir), &[]).await;
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(memgas_called(&again));
    assert!(!unit_vectors.exists(), "the index was loaded, not rebuilt");
    assert_eq!(std::fs::read(&index_file).unwrap(), written);
    let results = read_lines(&dir.path().join("result/locomo/conv-7_result_local-tiny_w.jsonl"));
    assert!(results.iter().all(|line| line.status == mragent::results::Status::Ok));
}

/// `run` prints its build's report (the one `build` prints) before its own summary, and not
/// under `-q`.
#[tokio::test]
async fn run_prints_the_build_report_unless_quiet() {
    let (dir, data) = project(|_| {});
    let endpoint = server(|_| None).await;
    let mut args = run_args(&data, &endpoint, "loud");
    args.retain(|arg| *arg != "-q");
    let output = mragent_in(dir.path(), &args, &[]).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let report = stdout.find("built 1 conversations, ").expect("the build report");
    let summary = stdout.find(" questions: ").expect("the run summary");
    assert!(report < summary, "{stdout}");
    assert!(stdout.contains("\nrepaired: ") && stdout.contains("reasked"), "{stdout}");

    let quiet = mragent_in(dir.path(), &run_args(&data, &endpoint, "quiet"), &[]).await;
    let stdout = String::from_utf8_lossy(&quiet.stdout);
    assert!(quiet.status.success(), "{}", String::from_utf8_lossy(&quiet.stderr));
    assert!(stdout.contains(" questions: ") && !stdout.contains("built "), "{stdout}");
}
