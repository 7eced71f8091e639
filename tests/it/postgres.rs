//! The memory service on PostgreSQL, as an operator runs it: several `mragent serve` replicas
//! on one database (a private PostgreSQL the test starts), over real HTTP against the scripted
//! endpoint. Replicas see each other's writes, concurrent adds to one conversation lose and
//! duplicate nothing, a job whose replica is killed is finished by the other once its lease
//! expires (nothing built twice), a database restart is a clear 503 and then recovery, and
//! `store copy` moves a store to PostgreSQL and back. (The store's own suite runs on both
//! backends in `src/store/tests/`.)

use std::time::Duration;

use mragent::store::Store;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::jobs::{ended, messages, rewrites, server};
use crate::own_memory::kill::serve_with;
use crate::private_pg;
use crate::support::{EMBEDDER, mragent_command};

/// Posts `body` to `path` of the replica at `address`; the status and the JSON reply.
async fn post(address: &str, path: &str, body: Value) -> (StatusCode, Value) {
    let client = reqwest::Client::new();
    let url = format!("http://{address}{path}");
    let response = client.post(url).bearer_auth("t").json(&body).send().await.unwrap();
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn get(address: &str, path: &str) -> (StatusCode, Value) {
    let client = reqwest::Client::new();
    let response =
        client.get(format!("http://{address}{path}")).bearer_auth("t").send().await.unwrap();
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// The texts of a search's hits.
fn texts(found: &Value) -> Vec<String> {
    found["hits"]
        .as_array()
        .map(|hits| hits.iter().map(|hit| hit["text"].as_str().unwrap_or("").to_string()).collect())
        .unwrap_or_default()
}

/// A new database of the shared private server (its client blocks: off the executor).
async fn fresh_database() -> String {
    tokio::task::spawn_blocking(|| private_pg::shared().fresh_database()).await.unwrap()
}

/// The store at `url`, opened off the async executor.
async fn open(url: &str) -> Store {
    let url = url.to_string();
    tokio::task::spawn_blocking(move || Store::open_url(&url).unwrap()).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_see_each_others_writes_and_concurrent_adds_lose_nothing() {
    let url = fresh_database().await;
    let scripted = server(Duration::ZERO).await;
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let store = ["--store", url.as_str()];
    let (_a, a) = serve_with(dir_a.path(), scripted.base_url(), &store, &[]).await;
    let (_b, b) = serve_with(dir_b.path(), scripted.base_url(), &store, &[]).await;
    let path = "/v1/conversations/shared";
    // An add through A, a search through B.
    let (status, added) =
        post(&a, &format!("{path}/messages"), json!({"messages": messages("the bridge", 2)})).await;
    assert_eq!(status, StatusCode::OK, "{added}");
    let (status, found) = post(&b, &format!("{path}/search"), json!({"query": "bridge"})).await;
    assert_eq!(status, StatusCode::OK, "{found}");
    assert!(texts(&found).iter().any(|text| text.contains("bridge")), "{found}");
    // B has cached its index; an add through B moves the revision, and A and B both see it.
    let tunnel = json!({"messages": messages("the tunnel", 3)});
    let (status, added) = post(&b, &format!("{path}/messages"), tunnel).await;
    assert_eq!(status, StatusCode::OK, "{added}");
    for replica in [&a, &b] {
        let (_, found) = post(replica, &format!("{path}/search"), json!({"query": "tunnel"})).await;
        assert!(texts(&found).iter().any(|text| text.contains("tunnel")), "{found}");
    }
    // Concurrent adds through both replicas to one conversation: the same messages through
    // both, and other messages through each.
    let canal = messages("the canal", 3);
    let (lock, dam) = (messages("the lock", 2), messages("the dam", 2));
    let adds = [
        (a.clone(), canal.clone()),
        (b.clone(), canal.clone()),
        (a.clone(), lock.clone()),
        (b.clone(), dam.clone()),
    ];
    let tasks: Vec<_> = adds
        .into_iter()
        .map(|(replica, batch)| {
            tokio::spawn(async move {
                post(&replica, "/v1/conversations/busy/messages", json!({"messages": batch})).await
            })
        })
        .collect();
    let mut new_messages = 0;
    for task in tasks {
        let (status, reply) = task.await.unwrap();
        assert_eq!(status, StatusCode::OK, "{reply}");
        new_messages += reply["new_messages"].as_u64().unwrap();
    }
    let unique: usize =
        [&canal, &lock, &dam].iter().map(|batch| batch.as_array().unwrap().len()).sum();
    assert_eq!(new_messages, unique as u64, "each message stored once, by one of the adds");
    let stored = open(&url).await;
    let counted =
        tokio::task::spawn_blocking(move || stored.info("busy").unwrap().unwrap()).await.unwrap();
    assert_eq!(counted.messages, unique as i64, "{counted:?}");
    assert_eq!(counted.built_sessions, counted.sessions, "{counted:?}");
    for replica in [&a, &b] {
        let (_, shown) = get(replica, "/v1/conversations/busy").await;
        assert_eq!(shown["messages"], json!(unique), "{shown}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_replica_is_killed_is_finished_by_the_other_and_nothing_is_built_twice() {
    let url = fresh_database().await;
    let scripted = server(Duration::from_millis(150)).await;
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let store = ["--store", url.as_str()];
    // Two hosts (their names are what a runner knows of another): B cannot tell A is dead,
    // only that A's lease expired.
    let host = |name| [("HOSTNAME", name)];
    let (mut first, a) =
        serve_with(dir_a.path(), scripted.base_url(), &store, &host("replica-a")).await;
    let (status, queued) = post(
        &a,
        "/v1/conversations/k/messages",
        json!({"wait": false, "messages": messages("the dam", 6)}),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{queued}");
    let job = queued["job"]["id"].as_i64().unwrap();
    let (_second, b) =
        serve_with(dir_b.path(), scripted.base_url(), &store, &host("replica-b")).await;
    let mut before = Value::Null;
    for _ in 0..600 {
        before = get(&a, &format!("/v1/jobs/{job}")).await.1;
        if before["sessions"]["done"].as_u64().unwrap_or(0) >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let stored = open(&url).await;
    let owner = {
        let stored = stored.clone();
        tokio::task::spawn_blocking(move || stored.job_lease(job).unwrap().0).await.unwrap()
    };
    let pid = first.id().unwrap().to_string();
    let claimed_by_a = format!("replica-a:{pid}:");
    assert!(owner.as_deref().is_some_and(|owner| owner.starts_with(&claimed_by_a)), "{owner:?}");
    first.start_kill().unwrap();
    first.wait().await.unwrap();
    let built_before = {
        let stored = stored.clone();
        tokio::task::spawn_blocking(move || {
            let loaded = stored.load("k").unwrap();
            let built = loaded.sessions.iter().filter(|session| session.outputs.is_some());
            built.map(|session| format!("D{}", session.number)).collect::<Vec<_>>()
        })
        .await
        .unwrap()
    };
    assert!((2..6).contains(&built_before.len()), "{before} {built_before:?}");
    let requests_before = scripted.request_count();
    // B takes the job over once A's lease (2 s) expires, and finishes it.
    let mut done = Value::Null;
    for _ in 0..600 {
        done = get(&b, &format!("/v1/jobs/{job}")).await.1;
        if ended(&done) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(done["state"], "done", "{done}");
    assert_eq!(done["attempts"], 2, "{done}");
    let owner = tokio::task::spawn_blocking(move || stored.job_lease(job).unwrap()).await.unwrap();
    assert_eq!(owner, (None, None), "an ended job is nobody's");
    let after = rewrites(&scripted.requests()[requests_before..]);
    for session in &built_before {
        assert!(!after.contains_key(session), "{session} rebuilt: {after:?}");
    }
    assert_eq!(rewrites(&scripted.requests()).len(), 6);
    let (_, info) = get(&b, "/v1/conversations/k").await;
    assert_eq!(info["built_sessions"], 6, "{info}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_restart_is_a_clear_503_then_recovery_without_restarting_mragent() {
    let pg = tokio::task::spawn_blocking(|| private_pg::PrivatePg::start().unwrap()).await.unwrap();
    let url = pg.url("postgres");
    let scripted = server(Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    let (mut child, address) =
        serve_with(dir.path(), scripted.base_url(), &["--store", &url], &[]).await;
    let search = "/v1/conversations/r/search";
    let body = json!({"messages": messages("the weir", 2)});
    assert_eq!(post(&address, "/v1/conversations/r/messages", body).await.0, StatusCode::OK);
    assert_eq!(post(&address, search, json!({"query": "weir"})).await.0, StatusCode::OK);
    let ready = format!("http://{address}/ready");
    assert_eq!(reqwest::get(&ready).await.unwrap().status(), StatusCode::OK);
    let pg = std::sync::Arc::new(pg);
    let stopper = std::sync::Arc::clone(&pg);
    tokio::task::spawn_blocking(move || stopper.stop()).await.unwrap();
    // Down: a search is a 503 with the code and a Retry-After, so is the readiness probe.
    // Each within a second (a readiness probe's timeout is 3 s), naming nothing of the
    // database (its user, host, port, name: the log has them).
    let client = reqwest::Client::new();
    let started = std::time::Instant::now();
    let response = client
        .post(format!("http://{address}{search}"))
        .bearer_auth("t")
        .json(&json!({"query": "weir"}))
        .send()
        .await
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(1), "{:?}", started.elapsed());
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(response.headers().contains_key("retry-after"));
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["error"]["code"], "store_unavailable", "{error}");
    let started = std::time::Instant::now();
    let probe = reqwest::get(&ready).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(1), "{:?}", started.elapsed());
    assert_eq!(probe.status(), StatusCode::SERVICE_UNAVAILABLE);
    let probed: Value = probe.json().await.unwrap();
    for body in [&error, &probed] {
        let text = body.to_string();
        for named in
            [private_pg::USER, "127.0.0.1", &pg.port().to_string(), "PostgreSQL", "postgres"]
        {
            assert!(!text.contains(named), "names {named}: {text}");
        }
    }
    // The document declares it (a served document needs no database).
    let (status, document) = get(&address, "/openapi.json").await;
    assert_eq!(status, StatusCode::OK);
    let declared = &document["paths"]["/v1/conversations/{id}/search"]["post"]["responses"];
    assert!(declared["503"]["content"]["application/json"].is_object(), "{declared}");
    // Up again: the same server answers, and remembers.
    let starter = std::sync::Arc::clone(&pg);
    tokio::task::spawn_blocking(move || starter.run().unwrap()).await.unwrap();
    let mut found = (StatusCode::SERVICE_UNAVAILABLE, Value::Null);
    for _ in 0..100 {
        found = post(&address, search, json!({"query": "weir"})).await;
        if found.0 == StatusCode::OK {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(found.0, StatusCode::OK, "{}", found.1);
    assert!(texts(&found.1).iter().any(|text| text.contains("weir")), "{}", found.1);
    assert_eq!(reqwest::get(&ready).await.unwrap().status(), StatusCode::OK);
    // SIGTERM (what Kubernetes sends) stops the server gracefully.
    let pid = child.id().unwrap().to_string();
    std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    let stopped = tokio::time::timeout(Duration::from_secs(30), child.wait()).await;
    let status = stopped.expect("serve stops on SIGTERM").unwrap();
    assert!(status.success(), "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_copy_moves_a_store_to_postgres_and_back_and_verifies_it() {
    let scripted = server(Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    let model =
        ["--base-url", scripted.base_url(), "--model", "local/tiny", "--embedder", EMBEDDER];
    let run = |args: Vec<String>| {
        let mut command =
            mragent_command(dir.path(), &args.iter().map(String::as_str).collect::<Vec<_>>());
        async move { command.output().await.unwrap() }
    };
    let file = dir.path().join("m.json");
    std::fs::write(&file, messages("the mill", 3).to_string()).unwrap();
    let mut add: Vec<String> = ["memory", "add", "--conversation", "mill", "--user", "ann"]
        .iter()
        .map(|arg| arg.to_string())
        .collect();
    add.push(file.display().to_string());
    add.extend(model.iter().map(|arg| arg.to_string()));
    let out = run(add).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let sqlite = format!("sqlite:{}", Store::default_path(dir.path()).display());
    let url = fresh_database().await;
    let copy = |from: &str, to: &str| {
        ["store", "copy", "--from", from, "--to", to, "--json"].map(str::to_string).to_vec()
    };
    let out = run(copy(&sqlite, &url)).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let there: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(there["verified"], true, "{there}");
    let rows = |report: &Value, table: &str| {
        let tables = report["tables"].as_array().unwrap();
        tables.iter().find(|entry| entry["table"] == table).unwrap()["rows"].as_u64().unwrap()
    };
    assert_eq!(rows(&there, "messages"), 6);
    assert_eq!(rows(&there, "session_outputs"), 3);
    // Into a store that is not empty: refused, naming it.
    let again = run(copy(&sqlite, &url)).await;
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("not empty"));
    // Back into a new SQLite file: the same tables, row for row.
    let back = format!("sqlite:{}", dir.path().join("back.sqlite").display());
    let out = run(copy(&url, &back)).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let returned: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(returned["tables"], there["tables"], "the same counts and hashes both ways");
    // The copy on PostgreSQL answers the command line as the original did.
    let list =
        |store: &str| ["--store", store, "memory", "list", "--json"].map(str::to_string).to_vec();
    let original = run(list(&sqlite)).await;
    let copied = run(list(&url)).await;
    assert!(copied.status.success(), "{}", String::from_utf8_lossy(&copied.stderr));
    assert_eq!(original.stdout, copied.stdout);
    assert!(!String::from_utf8_lossy(&copied.stdout).is_empty());
}
