//! Adds that do not wait: `"wait": false` answers 202 with a job that builds in the
//! background; searches meanwhile say what is still pending; batch adds; jobs survive a
//! kill -9 of the server and nothing is built twice; the CLI's `memory add --no-wait`,
//! `--batch` and `memory jobs`. All over real HTTP against the scripted endpoint.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use mragent::llm::scripted::{RecordedRequest, ScriptedServer};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::own_memory::kill::serve;
use crate::serve::Api;
use crate::support::{self, EMBEDDER, mragent_command};

/// A server that plays the build stages and the answering agent, every chat reply reporting
/// 100 prompt and 10 completion tokens and delayed by `delay`.
pub(crate) async fn server(delay: Duration) -> ScriptedServer {
    let respond = support::build_and_answer(|_| None);
    ScriptedServer::with_responder(move |request: &RecordedRequest| {
        let reply = respond(request);
        if !request.is_chat() {
            return reply;
        }
        let reply = reply.with_usage(100, 10);
        if delay.is_zero() { reply } else { reply.delayed(delay) }
    })
    .await
    .unwrap()
}

/// `sessions` sessions of two messages, a day apart, about `topic`.
pub(crate) fn messages(topic: &str, sessions: u32) -> Value {
    let lines: Vec<Value> = (1..=sessions)
        .flat_map(|day| {
            let at = |minute: u32| format!("2024-05-{day:02}T10:{minute:02}:00Z");
            [
                json!({"speaker": "Ann", "session": format!("s{day}"), "timestamp": at(0),
                       "text": format!("Day {day}: I worked on {topic} number {day} today")}),
                json!({"speaker": "Bob", "session": format!("s{day}"), "timestamp": at(1),
                       "text": format!("Good luck with {topic} {day}")}),
            ]
        })
        .collect();
    Value::Array(lines)
}

/// The rewrite requests per session (`D<n>`) of the recorded requests.
pub(crate) fn rewrites(requests: &[RecordedRequest]) -> BTreeMap<String, usize> {
    let session = regex::Regex::new(r"(?m)^Session (D\d+), date").unwrap();
    let mut counts = BTreeMap::new();
    for request in requests.iter().filter(|request| request.is_chat()) {
        let prompt = request.messages()[0]["content"].as_str().unwrap_or_default();
        if let Some(found) = session.captures(prompt) {
            *counts.entry(found[1].to_string()).or_default() += 1;
        }
    }
    counts
}

/// Polls `GET /v1/jobs/{job}` until `done(job)` holds (at most a minute).
async fn wait_for(api: &Api, job: i64, done: impl Fn(&Value) -> bool) -> Value {
    for _ in 0..600 {
        let (status, reply) = api.get(&format!("/v1/jobs/{job}")).await;
        assert_eq!(status, StatusCode::OK, "{reply}");
        if done(&reply) {
            return reply;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("job {job} did not get there within a minute");
}

pub(crate) fn ended(job: &Value) -> bool {
    job["state"] == "done" || job["state"] == "failed"
}

#[tokio::test]
async fn an_add_that_does_not_wait_is_built_in_the_background_and_searches_see_it_grow() {
    let scripted = server(Duration::from_millis(150)).await;
    let dir = tempfile::tempdir().unwrap();
    let api = Api::start(&scripted, dir.path()).await;
    let body = json!({"wait": false, "messages": messages("the bridge", 4)});
    let (status, queued) = api.post("/v1/conversations/bg/messages", body).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{queued}");
    assert_eq!(
        (queued["created"].clone(), queued["new_messages"].clone()),
        (json!(true), json!(8))
    );
    let job = queued["job"]["id"].as_i64().unwrap();
    assert_eq!(queued["job"]["state"], "queued", "{queued}");
    assert_eq!(queued["job"]["sessions"]["pending"], 4, "{queued}");
    // While the job runs, a search answers over what is built and says what is pending.
    let mut seen_pending = false;
    for _ in 0..200 {
        let (status, found) =
            api.post("/v1/conversations/bg/search", json!({"query": "bridge", "k": 20})).await;
        let (_, now) = api.get(&format!("/v1/jobs/{job}")).await;
        if ended(&now) {
            break;
        }
        // Before the first session is built too: 200, no hits, every session pending.
        assert_eq!(status, StatusCode::OK, "{found}");
        let pending = found["pending_sessions"].as_u64().unwrap();
        assert!(pending <= 4, "{found}");
        seen_pending |= pending > 0;
        if pending == 4 {
            assert_eq!(found["hits"], json!([]), "{found}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let done = wait_for(&api, job, ended).await;
    assert!(seen_pending, "no search saw a pending session");
    assert_eq!(done["state"], "done", "{done}");
    assert_eq!(done["sessions"], json!({"done": 4, "failed": 0, "pending": 0}), "{done}");
    let chat = scripted.requests().iter().filter(|request| request.is_chat()).count() as u64;
    assert_eq!(done["chat_calls"], chat, "{done}");
    assert_eq!(done["tokens"], json!({"prompt": 100 * chat, "completion": 10 * chat}), "{done}");
    assert_eq!(done["attempts"], 1, "{done}");
    let (_, found) =
        api.post("/v1/conversations/bg/search", json!({"query": "bridge", "k": 20})).await;
    assert_eq!(found["pending_sessions"], 0, "{found}");
    assert!(!found["hits"].as_array().unwrap().is_empty(), "{found}");
    // Each session was rewritten once.
    assert!(rewrites(&scripted.requests()).values().all(|count| *count == 1));
    // The listing, the filters, and the errors.
    let (_, listed) = api.get("/v1/jobs?conversation=bg").await;
    assert_eq!(listed["jobs"].as_array().unwrap().len(), 1, "{listed}");
    let (_, unfinished) = api.get("/v1/jobs?unfinished=true").await;
    assert_eq!(unfinished["jobs"], json!([]), "{unfinished}");
    let (status, missing) = api.get("/v1/jobs/999").await;
    assert_eq!(
        (status, missing["error"]["code"].clone()),
        (StatusCode::NOT_FOUND, json!("unknown_job"))
    );
    let (status, bad) = api.get("/v1/jobs/x1").await;
    assert_eq!((status, bad["error"]["field"].clone()), (StatusCode::BAD_REQUEST, json!("job")));
    let body = json!({"wait": "no", "messages": messages("x", 1)});
    let (status, bad) = api.post("/v1/conversations/bg/messages", body).await;
    assert_eq!((status, bad["error"]["field"].clone()), (StatusCode::BAD_REQUEST, json!("wait")));
}

#[tokio::test]
async fn a_batch_adds_many_conversations_each_answering_on_its_own() {
    let scripted = server(Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    let api = Api::start(&scripted, dir.path()).await;
    let (status, owned) = api
        .post(
            "/v1/conversations/theirs/messages",
            json!({"user": "zoe", "messages": messages("kites", 1)}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{owned}");
    let batch = json!({"conversations": [
        {"conversation": "a1", "user": "amy", "messages": messages("apples", 2)},
        {"conversation": "theirs", "user": "amy", "messages": messages("pears", 1)},
        {"conversation": "a2", "user": "amy", "tags": {"src": "mail"}, "messages": messages("plums", 1)},
    ]});
    let (status, reply) = api.post("/v1/conversations", batch).await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    let results = reply["results"].as_array().unwrap();
    assert_eq!(results[0]["added"]["built_sessions"], json!(["D1", "D2"]), "{reply}");
    assert_eq!(results[1]["error"]["code"], "scope_mismatch", "{reply}");
    assert_eq!(results[2]["added"]["built_sessions"], json!(["D1"]), "{reply}");
    let (_, found) = api.post("/v1/users/amy/search", json!({"query": "plums", "k": 5})).await;
    let plums = found["hits"].as_array().unwrap().iter().filter(|hit| hit["conversation"] == "a2");
    assert!(plums.map(|hit| hit["text"].as_str().unwrap()).all(|text| text.contains("plums")));
    assert!(found["hits"].as_array().unwrap().iter().any(|hit| hit["tags"]["src"] == "mail"));
    // Not waiting: one job per conversation, each built.
    let batch = json!({"wait": false, "conversations": [
        {"conversation": "b1", "messages": messages("figs", 2)},
        {"conversation": "b2", "messages": messages("dates", 3)},
    ]});
    let (status, reply) = api.post("/v1/conversations", batch).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{reply}");
    for (result, sessions) in reply["results"].as_array().unwrap().iter().zip([2, 3]) {
        let job = result["queued"]["job"]["id"].as_i64().unwrap();
        let done = wait_for(&api, job, ended).await;
        assert_eq!(done["sessions"]["done"], sessions, "{done}");
    }
    // Two entries naming one conversation are both added, one after the other.
    let twice = json!({"conversations": [
        {"conversation": "c1", "messages": messages("x", 1)},
        {"conversation": "c1", "messages": messages("x", 2)}]});
    let (status, reply) = api.post("/v1/conversations", twice).await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    let news: Vec<&Value> =
        reply["results"].as_array().unwrap().iter().map(|r| &r["added"]["new_messages"]).collect();
    let (first, second) = (news[0].as_u64().unwrap(), news[1].as_u64().unwrap());
    assert_eq!(first + second, 4, "the second entry's two new messages, stored once: {reply}");
    // Bad batches change nothing.
    let empty = json!({"conversations": [{"conversation": "c2", "messages": []}]});
    let (status, bad) = api.post("/v1/conversations", empty).await;
    assert_eq!(
        (status, bad["error"]["field"].clone()),
        (StatusCode::BAD_REQUEST, json!("conversations[0].messages"))
    );
    let (_, listed) = api.get("/v1/conversations").await;
    let ids: Vec<&str> = listed["conversations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["a1", "a2", "b1", "b2", "c1", "theirs"], "{listed}");
}

/// `PRAGMA integrity_check` of the project's store.
fn integrity(dir: &Path) -> String {
    let connection = rusqlite::Connection::open(mragent::store::Store::default_path(dir)).unwrap();
    connection.query_row("PRAGMA integrity_check", [], |row| row.get(0)).unwrap()
}

#[tokio::test]
async fn a_job_survives_a_kill_of_its_server_and_nothing_is_built_twice() {
    let scripted = server(Duration::from_millis(120)).await;
    let dir = tempfile::tempdir().unwrap();
    let client = reqwest::Client::new();
    let (mut child, address) = serve(dir.path(), scripted.base_url()).await;
    let post = |path: String, body: Value| {
        let request = client.post(format!("http://{address}{path}")).bearer_auth("t").json(&body);
        async move { request.send().await.unwrap().json::<Value>().await.unwrap() }
    };
    let queued = post(
        "/v1/conversations/k/messages".into(),
        json!({"wait": false, "messages": messages("the dam", 6)}),
    )
    .await;
    let job = queued["job"]["id"].as_i64().unwrap();
    // Kill it once some sessions are built and others are not.
    let get = |address: String| {
        let client = client.clone();
        async move {
            let url = format!("http://{address}/v1/jobs/{job}");
            client.get(url).bearer_auth("t").send().await.unwrap().json::<Value>().await.unwrap()
        }
    };
    let mut before = Value::Null;
    for _ in 0..600 {
        before = get(address.clone()).await;
        if before["sessions"]["done"].as_u64().unwrap() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    child.start_kill().unwrap();
    child.wait().await.unwrap();
    let built_before: Vec<String> = {
        let connection =
            rusqlite::Connection::open(mragent::store::Store::default_path(dir.path())).unwrap();
        let mut statement =
            connection.prepare("SELECT 'D' || session_number FROM session_outputs").unwrap();
        statement.query_map([], |row| row.get(0)).unwrap().map(Result::unwrap).collect()
    };
    assert!(built_before.len() >= 2 && built_before.len() < 6, "{before} {built_before:?}");
    assert_eq!(integrity(dir.path()), "ok");
    let requests_before = scripted.request_count();
    // A new server on this host takes the job over at once: the process that claimed it is gone.
    let (_child, address) = serve(dir.path(), scripted.base_url()).await;
    let mut done = Value::Null;
    for _ in 0..600 {
        done = get(address.clone()).await;
        if ended(&done) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(done["state"], "done", "{done}");
    assert_eq!(done["attempts"], 2, "{done}");
    assert_eq!(done["sessions"]["pending"], 0, "{done}");
    assert_eq!(integrity(dir.path()), "ok");
    // The sessions built before the kill were not asked for again.
    let after = rewrites(&scripted.requests()[requests_before..]);
    for session in &built_before {
        assert!(!after.contains_key(session), "{session} rebuilt: {after:?}");
    }
    let all = rewrites(&scripted.requests());
    assert_eq!(all.len(), 6, "{all:?}");
    let url = format!("http://{address}/v1/conversations/k");
    let info: Value = client.get(url).bearer_auth("t").send().await.unwrap().json().await.unwrap();
    assert_eq!(info["built_sessions"], 6, "{info}");
}

#[tokio::test]
async fn the_command_line_queues_adds_runs_a_worker_and_lists_jobs() {
    let scripted = server(Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    let model =
        ["--base-url", scripted.base_url(), "--model", "local/tiny", "--embedder", EMBEDDER];
    let run = |args: Vec<&str>| {
        let mut command = mragent_command(dir.path(), &args);
        command.args(model);
        async move { command.output().await.unwrap() }
    };
    let file = dir.path().join("m.json");
    std::fs::write(&file, messages("the canal", 3).to_string()).unwrap();
    let path = file.to_str().unwrap();
    let out =
        run(vec!["memory", "add", "--conversation", "cli", path, "--no-wait", "--json"]).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let queued: Value = serde_json::from_slice(&out.stdout).unwrap();
    let job = queued["job"]["id"].as_i64().unwrap().to_string();
    // The worker it left builds the job.
    let mut shown = Value::Null;
    for _ in 0..600 {
        let out = run(vec!["memory", "jobs", &job, "--json"]).await;
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        shown = serde_json::from_slice(&out.stdout).unwrap();
        if ended(&shown) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(shown["state"], "done", "{shown}");
    assert_eq!(shown["sessions"]["done"], 3, "{shown}");
    // A batch in one call, built concurrently.
    let batch = json!({"conversations": [
        {"conversation": "cli2", "messages": messages("oaks", 2)},
        {"conversation": "cli3", "user": "ivy", "messages": messages("elms", 1)}]});
    let file = dir.path().join("batch.json");
    std::fs::write(&file, batch.to_string()).unwrap();
    let out = run(vec!["memory", "add", "--batch", file.to_str().unwrap()]).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        text.contains("cli2: 4 new messages") && text.contains("cli3: 2 new messages"),
        "{text}"
    );
    let out = run(vec!["memory", "jobs"]).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&format!("job {job} cli: done, sessions 3 built")), "{text}");
    // `--run` with nothing left to do ends at once.
    let out = run(vec!["memory", "jobs", "--run"]).await;
    assert!(String::from_utf8_lossy(&out.stdout).contains("0 jobs ended"));
    // A bad batch is refused before anything is stored.
    std::fs::write(&file, r#"{"conversations": [{"conversation": "bad id!", "messages": []}]}"#)
        .unwrap();
    let out = run(vec!["memory", "add", "--batch", file.to_str().unwrap()]).await;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("conversations[0]"));
}
