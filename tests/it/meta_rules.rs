//! `--meta-rules FILE` through the binary and the HTTP API, against the scripted endpoint: the
//! rules block is in the system message of every answer-loop request (tool rounds and the final
//! round) exactly once, the same bytes throughout a run; its hash is in the manifest, in every
//! result line and in `ask`'s report; resume keeps lines answered under the same rules and
//! answers again under other ones; a bad rules file stops the command before any request.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use mragent::agent::rules::{Rule, RuleSet};
use mragent::llm::scripted::{RecordedRequest, ScriptedReply, ScriptedServer};
use serde_json::{Value, json};

use crate::support::{build_and_answer, mragent_command, project_with, read_lines};

/// The question whose loop is never answered in a tool round, so that it reaches the final
/// round (the one request of the loop without tools).
const STALLED: &str = "violin teacher";

/// A rule set of these texts (`M0`, `M1`, …).
fn rule_set(texts: &[&str]) -> RuleSet {
    let rule = |(index, text): (usize, &&str)| Rule {
        id: format!("M{index}"),
        text: text.to_string(),
        sources: Vec::new(),
        added: None,
        changed: None,
    };
    RuleSet::new(texts.iter().enumerate().map(rule).collect())
}

fn write_rules(dir: &Path, name: &str, set: &RuleSet) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_string_pretty(set).unwrap()).unwrap();
    path
}

fn content(message: &Value) -> &str {
    message["content"].as_str().unwrap_or_default()
}

/// A request of the answer loop: its system prompt is the loop's.
fn is_loop(request: &RecordedRequest) -> bool {
    let first_line = mragent::prompts::ANSWER_SYSTEM.text.lines().next().unwrap();
    request.is_chat()
        && request.messages().first().is_some_and(|system| content(system).starts_with(first_line))
}

fn loop_requests(server: &ScriptedServer, from: usize) -> Vec<RecordedRequest> {
    server.requests().into_iter().skip(from).filter(is_loop).collect()
}

/// Checks that every loop request carries `block` once, at the end of its system message, and
/// that the system message is the same in all of them; returns it.
fn assert_block_in_every_loop_request(requests: &[RecordedRequest], block: &str) -> String {
    assert!(!requests.is_empty());
    let system = content(&requests[0].messages()[0]).to_string();
    for request in requests {
        let messages = request.messages();
        assert_eq!(content(&messages[0]), system, "request {}", request.index);
        let copies: usize = messages.iter().map(|m| content(m).matches(block).count()).sum();
        assert_eq!(copies, 1, "request {}: {copies} copies of the block", request.index);
    }
    assert!(system.ends_with(&format!("\n\n{block}")), "{system}");
    system
}

/// Builds and answers well, except that the [`STALLED`] question's tool rounds get prose.
async fn endpoint() -> ScriptedServer {
    let respond = build_and_answer(|_| None);
    ScriptedServer::with_responder(move |request| {
        let asked = |user: &Value| {
            let payload: Value = serde_json::from_str(content(user)).unwrap_or_default();
            payload["question"].as_str().is_some_and(|question| question.contains(STALLED))
        };
        let stalled = is_loop(request)
            && request.body.get("tools").is_some()
            && request.messages().get(1).is_some_and(asked);
        if stalled { ScriptedReply::text("Let me think about it.") } else { respond(request) }
    })
    .await
    .unwrap()
}

async fn mragent(dir: &Path, args: &[&str]) -> (bool, String, String) {
    let output = mragent_command(dir, args).output().await.unwrap();
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    (output.status.success(), text(&output.stdout), text(&output.stderr))
}

fn run_args<'a>(data: &'a Path, server: &'a ScriptedServer, tag: &'a str) -> Vec<&'a str> {
    let data = data.to_str().unwrap();
    let base = server.base_url();
    let model = ["--model", "local/tiny", "--no-memgas", "-q"];
    [&["run", "--data-file", data, "--base-url", base, "--file", tag][..], &model].concat()
}

fn manifest(dir: &Path, tag: &str) -> Value {
    let path = dir.join(format!("result/locomo/local-tiny_{tag}.manifest.json"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn result_file(dir: &Path, tag: &str) -> PathBuf {
    dir.join(format!("result/locomo/conv-7_result_local-tiny_{tag}.jsonl"))
}

/// Every result line of `tag` in JSON, each with its `meta_rules` (`None`: absent).
fn recorded_hashes(dir: &Path, tag: &str) -> Vec<Option<String>> {
    let text = std::fs::read_to_string(result_file(dir, tag)).unwrap();
    let line = |line: &str| serde_json::from_str::<Value>(line).unwrap();
    text.lines().map(|text| line(text)["meta_rules"].as_str().map(str::to_string)).collect()
}

fn project() -> (tempfile::TempDir, PathBuf) {
    project_with("tests/fixtures/answer/tiny_conversation.json", |_| {})
}

#[tokio::test]
async fn a_run_with_rules_sends_the_block_in_every_loop_request_and_records_its_hash() {
    let (dir, data) = project();
    let set = rule_set(&[
        "For a when-question, read the session date before answering.",
        "Prefer the most recent statement when two facts conflict.",
    ]);
    write_rules(dir.path(), "rules.json", &set);
    let block = set.block().unwrap();
    let server = endpoint().await;

    let (ok, stdout, stderr) = mragent(dir.path(), &run_args(&data, &server, "plain")).await;
    assert!(ok, "{stdout}\n{stderr}");
    let plain = loop_requests(&server, 0);
    assert!(plain.iter().all(|r| !r.body.to_string().contains("Guidelines learned")));
    let plain_system = content(&plain[0].messages()[0]).to_string();
    assert!(manifest(dir.path(), "plain").get("meta_rules").is_none());
    assert!(recorded_hashes(dir.path(), "plain").iter().all(Option::is_none));

    let before = server.request_count();
    let mut args = run_args(&data, &server, "ruled");
    args.extend(["--meta-rules", "rules.json"]);
    let (ok, stdout, stderr) = mragent(dir.path(), &args).await;
    assert!(ok, "{stdout}\n{stderr}");
    let ruled = loop_requests(&server, before);
    let system = assert_block_in_every_loop_request(&ruled, &block);
    // The prompt without rules, then the block: the rest of the prefix is unchanged.
    assert_eq!(system, format!("{plain_system}\n\n{block}"));
    let with_tools = ruled.iter().filter(|r| r.body.get("tools").is_some()).count();
    let final_rounds = ruled.len() - with_tools;
    assert!(with_tools > 0 && final_rounds > 0, "{with_tools} tool rounds, {final_rounds} final");

    let recorded = &manifest(dir.path(), "ruled")["meta_rules"];
    assert_eq!(recorded, &json!({"hash": set.hash(), "file": "rules.json", "rules": 2}));
    let hashes = recorded_hashes(dir.path(), "ruled");
    assert_eq!(hashes.len(), 9);
    assert!(hashes.iter().all(|hash| hash.as_deref() == Some(set.hash().as_str())), "{hashes:?}");
    let lines = read_lines(&result_file(dir.path(), "ruled"));
    assert!(lines.iter().all(|line| line.status == mragent::results::Status::Ok));
}

/// How many result lines the run logs of `dir` say were answered again for other rules.
fn rule_changes_logged(dir: &Path) -> usize {
    let logs = std::fs::read_dir(dir.join("log")).unwrap();
    let text = |path: PathBuf| std::fs::read_to_string(path).unwrap_or_default();
    logs.map(|entry| text(entry.unwrap().path()).matches("the meta rules changed").count()).sum()
}

#[tokio::test]
async fn a_rerun_resumes_under_the_same_rules_and_answers_again_under_other_ones() {
    let (dir, data) = project();
    let first = rule_set(&["Check the timeline before answering a when-question."]);
    let rules = write_rules(dir.path(), "rules.json", &first);
    let server = endpoint().await;
    let mut args = run_args(&data, &server, "t");
    args.extend(["--meta-rules", rules.to_str().unwrap()]);
    let (ok, stdout, stderr) = mragent(dir.path(), &args).await;
    assert!(ok, "{stdout}\n{stderr}");

    // The same rules: everything resumes, no loop request.
    let before = server.request_count();
    let (ok, stdout, stderr) = mragent(dir.path(), &args).await;
    assert!(ok, "{stdout}\n{stderr}");
    assert!(stdout.contains("0 answered now (0 failed), 9 from earlier runs"), "{stdout}");
    assert!(loop_requests(&server, before).is_empty());

    // A changed rule: every question is answered again, under the new block.
    let changed = rule_set(&["Check the timeline before answering any question about dates."]);
    write_rules(dir.path(), "rules.json", &changed);
    let before = server.request_count();
    let (ok, stdout, stderr) = mragent(dir.path(), &args).await;
    assert!(ok, "{stdout}\n{stderr}");
    assert!(stdout.contains("9 answered now (0 failed), 0 from earlier runs"), "{stdout}");
    assert_block_in_every_loop_request(&loop_requests(&server, before), &changed.block().unwrap());
    let hashes = recorded_hashes(dir.path(), "t");
    assert_eq!(hashes, vec![Some(changed.hash()); 9]);
    let superseded = result_file(dir.path(), "t").with_extension("superseded.jsonl");
    let old = std::fs::read_to_string(superseded).unwrap();
    assert_eq!(old.lines().count(), 9);
    assert!(old.lines().all(|line| line.contains(&first.hash())));
    assert_eq!(rule_changes_logged(dir.path()), 9);
    let recorded = &manifest(dir.path(), "t")["meta_rules"];
    assert_eq!(recorded["hash"], changed.hash());
    assert_eq!(recorded["file"], rules.to_str().unwrap(), "the file as given");

    // No rules any more: answered again without them.
    let (ok, stdout, stderr) = mragent(dir.path(), &run_args(&data, &server, "t")).await;
    assert!(ok, "{stdout}\n{stderr}");
    assert!(stdout.contains("9 answered now"), "{stdout}");
    assert_eq!(recorded_hashes(dir.path(), "t"), vec![None; 9]);
    assert_eq!(rule_changes_logged(dir.path()), 18);
}

#[tokio::test]
async fn a_bad_rules_file_stops_run_ask_and_serve_before_any_request() {
    let (dir, data) = project();
    let long = vec!["word"; 31].join(" ");
    let too_long = write_rules(dir.path(), "long.json", &rule_set(&[long.as_str()]));
    let prose = dir.path().join("prose.json");
    std::fs::write(&prose, "Check the timeline first.").unwrap();
    let server = endpoint().await;
    let base = server.base_url();
    for (file, problem) in [(&too_long, "31 words"), (&prose, "is not a rules file")] {
        let file = file.to_str().unwrap();
        let mut run = run_args(&data, &server, "t");
        run.extend(["--meta-rules", file]);
        let ask =
            ["ask", "--conversation", "demo", "Who?", "--base-url", base, "--meta-rules", file];
        let serve = ["serve", "--bind", "127.0.0.1:0", "--base-url", base, "--meta-rules", file];
        for args in [&run[..], &ask[..], &serve[..]] {
            let output = tokio::time::timeout(Duration::from_secs(60), mragent(dir.path(), args));
            let (ok, _, stderr) = output.await.expect("refused at once, not served");
            assert!(!ok, "{args:?}");
            assert!(stderr.contains(file) && stderr.contains(problem), "{args:?}: {stderr}");
            assert!(stderr.contains("--meta-rules"), "{stderr}");
        }
    }
    assert_eq!(server.request_count(), 0);
    assert!(!dir.path().join("result").exists() && !dir.path().join("data/store").exists());
}

/// `memory add` of the example conversation into a new project.
async fn stored_example(server: &ScriptedServer) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let file = crate::own::example_file();
    let args = crate::own::add_args(server.base_url(), "demo", file.to_str().unwrap());
    let (ok, stdout, stderr) = mragent(dir.path(), &args).await;
    assert!(ok, "{stdout}\n{stderr}");
    dir
}

#[tokio::test]
async fn ask_with_rules_sends_the_block_and_reports_its_hash() {
    let server = crate::own::server(Duration::ZERO).await;
    let dir = stored_example(&server).await;
    let rule = "Name the person the question is about before searching.";
    let set = rule_set(&[rule]);
    write_rules(dir.path(), "rules.json", &set);
    let question = "Which race did Maya sign up for?";
    let ask = [
        "ask",
        "--conversation",
        "demo",
        question,
        "--base-url",
        server.base_url(),
        "--answer",
        "loop",
    ];
    let ruled = [&ask[..], &["--model", "local/tiny", "--meta-rules", "rules.json", "-q"]].concat();

    let before = server.request_count();
    let (ok, stdout, stderr) = mragent(dir.path(), &[&ruled[..], &["--json"]].concat()).await;
    assert!(ok, "{stdout}\n{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["meta_rules"], set.hash());
    assert_block_in_every_loop_request(&loop_requests(&server, before), &set.block().unwrap());

    let (ok, stdout, stderr) = mragent(dir.path(), &ruled).await;
    assert!(ok && stdout.contains(&format!("meta rules: {}", set.hash())), "{stdout}\n{stderr}");

    let before = server.request_count();
    let plain = [&ask[..], &["--model", "local/tiny", "--json", "-q"]].concat();
    let (ok, stdout, stderr) = mragent(dir.path(), &plain).await;
    assert!(ok, "{stdout}\n{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert!(report.get("meta_rules").is_none(), "{report}");
    let requests = loop_requests(&server, before);
    assert!(!requests.is_empty() && requests.iter().all(|r| !r.body.to_string().contains(rule)));
}

#[tokio::test]
async fn every_ask_over_http_uses_the_services_rules() {
    let server = crate::own::server(Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    let set = rule_set(&["Quote the date of the line you answer from."]);
    let service = crate::own::service_with(&server, dir.path(), |settings| {
        settings.rules = Arc::new(set.clone());
    });
    let text = std::fs::read_to_string(crate::own::example_file()).unwrap();
    service.add("demo", mragent::convo::parse(&text).unwrap()).await.unwrap();

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1/conversations/demo/ask", listener.local_addr().unwrap());
    let options = mragent::serve::ServeOptions {
        token: None,
        named_tokens: Vec::new(),
        max_body_bytes: 16 * 1024,
        max_concurrency: 2,
        ..mragent::serve::ServeOptions::default()
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(mragent::serve::serve(listener, Arc::new(service), options, async move {
        let _ = stopped.await;
    }));
    let client = reqwest::Client::new();
    for question in ["Which race did Maya sign up for?", "What is the name of Sam's dog?"] {
        let before = server.request_count();
        let response = client.post(&url).json(&json!({ "question": question })).send();
        let report: Value = response.await.unwrap().json().await.unwrap();
        assert_eq!(report["meta_rules"], set.hash(), "{report}");
        assert_block_in_every_loop_request(&loop_requests(&server, before), &set.block().unwrap());
    }
    let _ = stop.send(());
}
