//! Issue 23's defects, each driven as a user or an attacker would: ids that try to leave the
//! project root (CLI and HTTP), several processes opening one new store at once, concurrent adds,
//! the input limits that the CLI and the HTTP API share, a session that can never be built,
//! forgetting one message, and `trace` on the path that `ask` prints.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use mragent::llm::scripted::{RecordedRequest, ScriptedReply, ScriptedServer};
use mragent::names::{MAX_MESSAGE_CHARS, MAX_MESSAGES_PER_ADD, MAX_NAME_CHARS};
use mragent::serve::{ServeOptions, serve};
use serde_json::{Value, json};

use crate::own::{example_file, server, service};
use crate::support::{self, EMBEDDER, mragent_command};

/// Runs the binary in `dir`: (success, stdout, stderr).
async fn run(dir: &Path, args: &[&str]) -> (bool, String, String) {
    let output = mragent_command(dir, args).output().await.unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Every path under `dir`, relative, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(next) = stack.pop() {
        for entry in std::fs::read_dir(&next).unwrap() {
            let path = entry.unwrap().path();
            found.push(path.strip_prefix(dir).unwrap().display().to_string());
            if path.is_dir() {
                stack.push(path);
            }
        }
    }
    found.sort();
    found
}

/// `memory add` arguments against the scripted endpoint.
fn add_args<'a>(url: &'a str, conversation: &'a str, file: &'a str) -> Vec<&'a str> {
    let mut args = vec!["memory", "add", "--conversation", conversation, file];
    args.extend(["--base-url", url, "--model", "local/tiny", "--embedder", EMBEDDER, "-q"]);
    args
}

#[tokio::test]
async fn ids_that_leave_the_root_are_refused_by_the_cli_before_anything_is_written() {
    let scripted = server(Duration::ZERO).await;
    let outer = tempfile::tempdir().unwrap();
    let root = outer.path().join("a/b/project");
    std::fs::create_dir_all(&root).unwrap();
    let url = scripted.base_url();
    let file = example_file();
    let absolute = outer.path().join("abs").display().to_string();
    for id in ["../../../escape", "..", absolute.as_str(), "a/b", "", " padded", "x\u{1b}y"] {
        let (ok, _, stderr) = run(&root, &add_args(url, id, file.to_str().unwrap())).await;
        assert!(!ok && stderr.contains("invalid conversation"), "{id:?}: {stderr}");
        let (ok, _, stderr) =
            run(&root, &["ask", "--conversation", id, "Where?", "--base-url", url]).await;
        assert!(!ok && stderr.contains("invalid conversation"), "{id:?}: {stderr}");
        let others = [
            vec!["memory", "show", "--conversation", id],
            vec!["memory", "forget", "--conversation", id],
            vec!["memory", "search", "--conversation", id, "x"],
        ];
        for args in others {
            let (ok, _, stderr) = run(&root, &args).await;
            assert!(!ok && stderr.contains("invalid conversation"), "{args:?}: {stderr}");
        }
    }
    let long = "c".repeat(MAX_NAME_CHARS + 1);
    let (ok, _, stderr) = run(&root, &add_args(url, &long, file.to_str().unwrap())).await;
    assert!(!ok && stderr.contains("too long") && stderr.contains("1-128"), "{stderr}");
    assert_eq!(scripted.request_count(), 0, "no request for a refused id");
    let outside: Vec<String> =
        listing(outer.path()).into_iter().filter(|path| !path.starts_with("a/b/project")).collect();
    assert_eq!(outside, ["a", "a/b"], "nothing written outside the root");
    assert!(!root.join("data/store").exists(), "no store was even opened");
}

/// A server over `service` on 127.0.0.1 with a 4 MiB body limit; the base URL and the stop.
async fn start_api(
    scripted: &ScriptedServer,
    root: &Path,
) -> (String, tokio::sync::oneshot::Sender<()>) {
    let service = Arc::new(service(scripted, root));
    let options = ServeOptions { token: None, ..ServeOptions::default() };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(serve(listener, service, options, async move {
        let _ = stopped.await;
    }));
    (base, stop)
}

async fn post(base: &str, path: &str, body: &Value) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .json(body)
        .timeout(Duration::from_secs(60))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

#[tokio::test]
async fn ids_that_leave_the_root_are_refused_over_http_and_nothing_is_written_outside() {
    let scripted = server(Duration::ZERO).await;
    let outer = tempfile::tempdir().unwrap();
    let root = outer.path().join("a/b/project");
    std::fs::create_dir_all(&root).unwrap();
    let (base, _stop) = start_api(&scripted, &root).await;
    let messages = json!({"messages": [{"speaker": "Ann", "text": "I live in Lisbon."}]});
    for id in ["..%2F..%2F..%2Fescape", "%2Ftmp%2Fescape", "a%2F..%2Fb", "%20x", ".hidden"] {
        let (status, body) =
            post(&base, &format!("/v1/conversations/{id}/messages"), &messages).await;
        assert_eq!(status, 400, "{id}: {body}");
        assert_eq!(body["error"]["field"], "conversation", "{id}: {body}");
        let question = json!({"question": "Where does Ann live?"});
        let (status, body) = post(&base, &format!("/v1/conversations/{id}/ask"), &question).await;
        assert!(status == 400 || status == 404, "{id}: {status} {body}");
    }
    assert_eq!(scripted.request_count(), 0);
    let outside: Vec<String> =
        listing(outer.path()).into_iter().filter(|path| !path.starts_with("a/b/project")).collect();
    assert_eq!(outside, ["a", "a/b"], "nothing written outside the root");
}

/// How many rounds of the open race [`many_processes_open_one_new_store_at_once`] runs
/// (`MRAGENT_OPEN_ROUNDS`, default 10).
fn open_rounds() -> usize {
    std::env::var("MRAGENT_OPEN_ROUNDS").ok().and_then(|value| value.parse().ok()).unwrap_or(10)
}

#[tokio::test]
async fn many_processes_open_one_new_store_at_once() {
    for round in 0..open_rounds() {
        let dir = tempfile::tempdir().unwrap();
        let children: Vec<_> = (0..8)
            .map(|_| mragent_command(dir.path(), &["memory", "list", "--json"]).output())
            .collect();
        for output in futures::future::join_all(children).await {
            let output = output.unwrap();
            assert!(
                output.status.success(),
                "round {round}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "[]");
        }
    }
}

/// `count` messages of one speaker, one session, as JSONL.
fn jsonl(speaker: &str, count: usize) -> String {
    (0..count)
        .map(|index| {
            json!({"speaker": speaker, "session": "s1", "text": format!("{speaker} note {index}")})
                .to_string()
                + "\n"
        })
        .collect()
}

#[tokio::test]
async fn two_adds_racing_on_a_new_store_both_land() {
    let scripted = server(Duration::from_millis(5)).await;
    for round in 0..3 {
        let dir = tempfile::tempdir().unwrap();
        let (first, second) = (dir.path().join("ann.jsonl"), dir.path().join("bob.jsonl"));
        std::fs::write(&first, jsonl("Ann", 3)).unwrap();
        std::fs::write(&second, jsonl("Bob", 4)).unwrap();
        let url = scripted.base_url();
        // Same conversation, then two conversations, each on a new store.
        let other = if round == 0 { "shared" } else { "other" };
        let (first_args, second_args) = (
            add_args(url, "shared", first.to_str().unwrap()),
            add_args(url, other, second.to_str().unwrap()),
        );
        let (a, b) = tokio::join!(run(dir.path(), &first_args), run(dir.path(), &second_args));
        assert!(a.0 && b.0, "round {round}: {}\n{}", a.2, b.2);
        let (ok, stdout, _) = run(dir.path(), &["memory", "list", "--json"]).await;
        assert!(ok);
        let listed: Vec<Value> = serde_json::from_str(&stdout).unwrap();
        let messages: i64 = listed.iter().map(|info| info["messages"].as_i64().unwrap()).sum();
        assert_eq!(messages, 7, "round {round}: nothing lost: {listed:?}");
    }
}

#[tokio::test]
async fn the_cli_and_http_refuse_the_same_oversized_input_naming_the_limit() {
    let scripted = server(Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    let url = scripted.base_url();
    let huge = dir.path().join("huge.json");
    let text = "word ".repeat(10_000_000); // 50 MB in one message
    std::fs::write(&huge, json!([{"speaker": "A", "text": text}]).to_string()).unwrap();
    let (ok, _, stderr) = run(dir.path(), &add_args(url, "c1", huge.to_str().unwrap())).await;
    assert!(!ok, "{stderr}");
    assert!(stderr.contains(&format!("the limit is {MAX_MESSAGE_CHARS} characters")), "{stderr}");
    let many = dir.path().join("many.jsonl");
    std::fs::write(&many, jsonl("A", MAX_MESSAGES_PER_ADD + 1)).unwrap();
    let (ok, _, stderr) = run(dir.path(), &add_args(url, "c1", many.to_str().unwrap())).await;
    assert!(!ok && stderr.contains(&format!("the limit is {MAX_MESSAGES_PER_ADD}")), "{stderr}");
    // Exactly at the limits: accepted.
    let edge = dir.path().join("edge.json");
    let longest = "é".repeat(MAX_MESSAGE_CHARS);
    std::fs::write(&edge, json!([{"speaker": "A", "text": longest}]).to_string()).unwrap();
    let (ok, _, stderr) = run(dir.path(), &add_args(url, "c1", edge.to_str().unwrap())).await;
    assert!(ok, "{stderr}");

    let (base, _stop) = start_api(&scripted, dir.path()).await;
    let over = "x".repeat(MAX_MESSAGE_CHARS + 1);
    let body = json!({"messages": [{"speaker": "A", "text": over}]});
    let (status, reply) = post(&base, "/v1/conversations/c2/messages", &body).await;
    assert_eq!(status, 400, "{reply}");
    assert_eq!(reply["error"]["field"], "messages[0].text", "{reply}");
    assert!(reply["error"]["message"].as_str().unwrap().contains("the limit is 16000"));
    let tiny = json!({"speaker": "A", "text": "hi"});
    let body = json!({"messages": vec![tiny; MAX_MESSAGES_PER_ADD + 1]});
    let (status, reply) = post(&base, "/v1/conversations/c2/messages", &body).await;
    assert_eq!((status, &reply["error"]["field"]), (400, &json!("messages")), "{reply}");
    let long = "c".repeat(MAX_NAME_CHARS + 1);
    let body = json!({"messages": [{"speaker": "A", "text": "hi"}]});
    let (status, reply) = post(&base, &format!("/v1/conversations/{long}/messages"), &body).await;
    assert_eq!((status, &reply["error"]["field"]), (400, &json!("conversation")), "{reply}");
    let (ok, stdout, _) = run(dir.path(), &["memory", "list", "--json"]).await;
    assert!(ok);
    let listed: Vec<Value> = serde_json::from_str(&stdout).unwrap();
    assert_eq!(listed.len(), 1, "only the add at the limits was stored: {listed:?}");
}

/// The marker of messages whose session the scripted endpoint refuses as over its context.
const UNBUILDABLE: &str = "UNBUILDABLE-SESSION";

/// A server that refuses every build request of a session holding [`UNBUILDABLE`].
async fn refusing_server() -> ScriptedServer {
    let respond = support::build_and_answer(|request: &RecordedRequest| {
        let refused = request.is_chat() && request.transcript().contains(UNBUILDABLE);
        refused.then_some(ScriptedReply::ContextLengthExceeded)
    });
    ScriptedServer::with_responder(respond).await.unwrap()
}

fn two_sessions() -> Vec<mragent::convo::Message> {
    let text = [
        json!({"speaker": "Ann", "session": "s1", "timestamp": "2024-03-01T10:00:00Z", "text": "I adopted a cat called Miso."}),
        json!({"speaker": "Bob", "session": "s1", "timestamp": "2024-03-01T10:01:00Z", "text": "Miso is a lovely name."}),
        json!({"speaker": "Ann", "session": "s2", "timestamp": "2024-04-01T10:00:00Z", "text": format!("{UNBUILDABLE} I started pottery classes.")}),
        json!({"speaker": "Bob", "session": "s2", "timestamp": "2024-04-01T10:01:00Z", "text": "Pottery sounds fun."}),
    ]
    .map(|line| line.to_string())
    .join("\n");
    mragent::convo::parse(&text).unwrap()
}

#[tokio::test]
async fn a_session_that_cannot_be_built_is_reported_and_ask_answers_from_the_others() {
    let scripted = refusing_server().await;
    let dir = tempfile::tempdir().unwrap();
    let service = service(&scripted, dir.path());
    let report = service.add("pets", two_sessions()).await.unwrap();
    assert_eq!(report.built_sessions, ["D1"]);
    assert_eq!(report.failed_sessions.len(), 1, "{report}");
    let again = service.add("pets", two_sessions()).await.unwrap();
    assert_eq!(again.failed_sessions.len(), 1, "the next add retries it");

    let stored = service.store().load("pets").unwrap();
    let shown = mragent::commands::memory::render_conversation(&stored, false).unwrap();
    assert!(shown.contains("D2 ") && shown.contains("(not built: failed 2 time(s)"), "{shown}");
    assert!(shown.to_lowercase().contains("context"), "{shown}");
    let json: Value = serde_json::from_str(
        &mragent::commands::memory::render_conversation(&stored, true).unwrap(),
    )
    .unwrap();
    assert_eq!(json["sessions"][1]["built"], false);
    assert_eq!(json["sessions"][1]["failure"]["attempts"], 2);

    let answer = service.ask("pets", "What is the name of Ann's cat?").await.unwrap();
    assert!(answer.ok, "{answer:?}");
    assert_eq!(answer.missing_sessions.len(), 1, "{answer:?}");
    let missing = &answer.missing_sessions[0];
    assert_eq!((missing.session.as_str(), missing.messages, missing.attempts), ("D2", 2, 2));
    assert!(missing.error.as_deref().unwrap().to_lowercase().contains("context"));
    assert!(answer.question_id.starts_with("pets:ask-"), "{}", answer.question_id);
}

#[tokio::test]
async fn one_message_can_be_forgotten_and_its_session_is_rebuilt_without_it() {
    let scripted = refusing_server().await;
    let dir = tempfile::tempdir().unwrap();
    let service = service(&scripted, dir.path());
    service.add("pets", two_sessions()).await.unwrap();
    let stored = service.store().load("pets").unwrap();
    let poisoned = stored.sessions[1].messages[0].id.clone();
    let (forgotten, rebuilt) = service.forget_message("pets", &poisoned, "test").await.unwrap();
    assert_eq!((forgotten.session.as_str(), forgotten.session_removed), ("D2", false));
    assert_eq!(rebuilt.built_sessions, ["D2"], "{rebuilt}");
    let stored = service.store().load("pets").unwrap();
    assert_eq!(stored.info.messages, 3);
    assert!(stored.sessions.iter().all(|session| session.outputs.is_some()));
    assert!(stored.sessions.iter().flat_map(|s| &s.messages).all(|m| m.id != poisoned));
    let hits = service.search("pets", "pottery classes", 10).await.unwrap();
    assert!(hits.iter().all(|hit| !hit.text.contains(UNBUILDABLE)), "{hits:?}");
    let error = service.forget_message("pets", &poisoned, "test").await.unwrap_err();
    assert!(error.to_string().contains("has no message"), "{error}");
    let error = service.forget_message("pets", "../x", "test").await.unwrap_err();
    assert!(error.to_string().contains("invalid message"), "{error}");
}

#[tokio::test]
async fn trace_accepts_the_question_id_and_the_trace_path_that_ask_prints() {
    let scripted = server(Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    let url = scripted.base_url();
    let (ok, _, stderr) =
        run(dir.path(), &add_args(url, "demo", example_file().to_str().unwrap())).await;
    assert!(ok, "{stderr}");
    let ask = ["ask", "--conversation", "demo", "Which race did Maya sign up for?"];
    let mut args = ask.to_vec();
    args.extend(["--base-url", url, "--model", "local/tiny", "-q"]);
    let (ok, stdout, stderr) = run(dir.path(), &args).await;
    assert!(ok, "{stdout}\n{stderr}");
    let printed = |label: &str| {
        stdout
            .lines()
            .find_map(|line| line.strip_prefix(label))
            .unwrap_or_else(|| panic!("no {label:?} line in {stdout}"))
            .to_string()
    };
    let (question, trace) = (printed("question: "), printed("trace: "));
    for target in [question.as_str(), trace.as_str()] {
        let (ok, shown, stderr) = run(dir.path(), &["trace", target]).await;
        assert!(ok, "trace {target}: {stderr}");
        assert!(shown.contains(&question), "trace {target}: {shown}");
    }
}

#[tokio::test]
async fn a_conversation_deleted_over_http_is_gone_whatever_its_id_characters() {
    let scripted = server(Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    let (base, _stop) = start_api(&scripted, dir.path()).await;
    let body =
        json!({"messages": [{"speaker": "A", "text": "hello there", "timestamp": "5585-01-31"}]});
    let (status, reply) = post(&base, "/v1/conversations/u.%40.w.o/messages", &body).await;
    assert_eq!(status, 200, "{reply}");
    let client = reqwest::Client::new();
    let url = format!("{base}/v1/conversations/u.%40.w.o");
    assert_eq!(client.get(&url).send().await.unwrap().status().as_u16(), 200);
    assert_eq!(client.delete(&url).send().await.unwrap().status().as_u16(), 200);
    let after = client.get(&url).send().await.unwrap();
    assert_eq!(after.status().as_u16(), 404, "{}", after.text().await.unwrap());
}
