//! Benchmark: `mragent serve` under load, on loopback, with the model replaced by the scripted
//! endpoint (build stages answered mechanically, the plausible answering agent, hashed
//! embeddings). A bounded run that stops by itself:
//!
//! 1. ingest: the 10 LoCoMo conversations in one batch add (`POST /v1/conversations`,
//!    `"wait": false`), then wait for their jobs;
//! 2. load: `LOAD_CLIENTS` (50) clients for `LOAD_SECONDS` (60 s), each sending search (80 %)
//!    or ask (20 %) requests on a random conversation with one of its LoCoMo questions, one
//!    after the other; p50/p99 latency per route, requests, errors (anything but 200), and
//!    the server's peak RSS (`VmHWM`);
//! 3. kill: the same load plus a second batch of adds queued as jobs, then a kill -9 of the
//!    server `LOAD_KILL_AFTER` (5 s) in; `PRAGMA integrity_check`, a restart, and every job
//!    queued before the kill must end `done` (none lost).
//!
//! Run: `cargo bench --bench serve_load` (settings: `LOAD_CLIENTS`, `LOAD_SECONDS`,
//! `LOAD_KILL_AFTER`, `LOAD_SEED`).
//!
//! On PostgreSQL: `LOAD_STORE=postgres` starts a private PostgreSQL (durable: fsync on, as
//! SQLite's `synchronous=FULL`) and runs `LOAD_REPLICAS` (1 or more) `serve` processes on it,
//! the clients spread over them round-robin and the jobs built by whichever replica claims
//! them; the kill phase is the SQLite run's only.

// A benchmark aborts on any setup failure (nothing to recover) and reports on stdout.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::print_stdout)]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mragent::dataset::{Conversation, DatasetKind, default_path, load_locomo};
use mragent::llm::scripted::ScriptedServer;
use rand::{Rng as _, SeedableRng as _};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, BufReader};

#[path = "support/stages.rs"]
mod stages;

#[path = "support/run.rs"]
mod run;

#[path = "../tests/support/private_pg.rs"]
mod private_pg;

const TOKEN: &str = "load-token";

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|value| value.parse().ok()).unwrap_or(default)
}

/// A conversation's messages in the add format (`extra`: a suffix making them new messages).
fn messages(conversation: &Conversation, extra: &str) -> Value {
    let lines: Vec<Value> = conversation
        .sessions
        .iter()
        .flat_map(|session| {
            let day = session.date.expect("LoCoMo sessions are dated");
            session.turns.iter().enumerate().map(move |(position, turn)| {
                let at = day.and_hms_opt(12, 0, 0).unwrap().and_utc()
                    + chrono::TimeDelta::minutes(position as i64);
                json!({"speaker": turn.speaker, "session": format!("{}{extra}", session.id()),
                       "timestamp": at.to_rfc3339(), "text": format!("{}{extra}", turn.text)})
            })
        })
        .collect();
    Value::Array(lines)
}

/// `mragent serve` in `dir` against `base_url`; the child and its address.
async fn start(dir: &Path, base_url: &str, store: Option<&str>) -> (tokio::process::Child, String) {
    let store: Vec<&str> = store.map(|url| vec!["--store", url]).unwrap_or_default();
    let mut child = tokio::process::Command::new(run::binary())
        .args(["serve", "--bind", "127.0.0.1:0", "--base-url", base_url, "--model", "local/bench"])
        .args(["--embedder", "bench-embedding", "--max-concurrency", "64"])
        .args(store)
        .current_dir(dir)
        .env("MRAGENT_SERVE_TOKEN", TOKEN)
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENROUTER_API_KEY")
        .env_remove("RUST_LOG")
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("serve starts");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut address = None;
    while let Some(line) = lines.next_line().await.unwrap() {
        if let Some(rest) = line.strip_prefix("serving on ") {
            let url = rest.split_whitespace().next().unwrap();
            address = Some(url.trim_start_matches("http://").to_string());
            break;
        }
    }
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, address.expect("serve listens"))
}

/// Peak resident memory of process `pid` so far, MiB.
fn peak_rss(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

struct Client {
    http: reqwest::Client,
    base: String,
    /// Other replicas' addresses (`http://…`): requests go round-robin over `base` and these.
    others: Vec<String>,
}

impl Client {
    async fn call(&self, get: bool, path: &str, body: Option<&Value>) -> (u16, Value) {
        self.call_on(0, get, path, body).await
    }

    /// [`Client::call`] on replica `index` (round-robin).
    async fn call_on(
        &self,
        index: u64,
        get: bool,
        path: &str,
        body: Option<&Value>,
    ) -> (u16, Value) {
        let replicas = 1 + self.others.len() as u64;
        let base = match index % replicas {
            0 => &self.base,
            other => &self.others[other as usize - 1],
        };
        let url = format!("{base}{path}");
        let request = if get { self.http.get(url) } else { self.http.post(url) };
        let request = match body {
            Some(body) => request.json(body),
            None => request,
        };
        match request.bearer_auth(TOKEN).timeout(Duration::from_secs(120)).send().await {
            Ok(response) => {
                let status = response.status().as_u16();
                (status, response.json().await.unwrap_or(Value::Null))
            }
            Err(_) => (0, Value::Null),
        }
    }

    /// Waits until every job in `jobs` has ended; their final rows.
    async fn wait_jobs(&self, jobs: &[i64]) -> Vec<Value> {
        let mut ended = Vec::new();
        for job in jobs {
            loop {
                let (status, row) = self.call(true, &format!("/v1/jobs/{job}"), None).await;
                if status == 200 && (row["state"] == "done" || row["state"] == "failed") {
                    ended.push(row);
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        ended
    }
}

/// Queues one batch add of every conversation; the job ids.
async fn queue(client: &Client, conversations: &[Conversation], extra: &str) -> Vec<i64> {
    let entries: Vec<Value> = conversations
        .iter()
        .map(|c| json!({"conversation": c.sample_id, "messages": messages(c, extra)}))
        .collect();
    let body = json!({"wait": false, "conversations": entries});
    let (status, reply) = client.call(false, "/v1/conversations", Some(&body)).await;
    assert_eq!(status, 202, "{reply}");
    reply["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|result| result["queued"]["job"]["id"].as_i64().expect("queued"))
        .collect()
}

/// Latencies per route, and failed requests (status not 200).
#[derive(Default)]
struct Tally {
    latencies: BTreeMap<&'static str, Vec<Duration>>,
    errors: BTreeMap<String, u64>,
}

/// `clients` clients sending searches and asks until `seconds` have passed.
async fn load(
    client: Arc<Client>,
    questions: Arc<Vec<(String, String)>>,
    clients: u64,
    seconds: u64,
    seed: u64,
) -> Tally {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let tasks: Vec<_> = (0..clients)
        .map(|index| {
            let (client, questions) = (Arc::clone(&client), Arc::clone(&questions));
            tokio::spawn(async move {
                let mut random = rand_chacha::ChaCha8Rng::seed_from_u64(seed + index);
                let mut tally = Tally::default();
                while Instant::now() < deadline {
                    let (conversation, question) =
                        &questions[random.random_range(0..questions.len())];
                    let (route, path, body) = if random.random_bool(0.8) {
                        (
                            "search",
                            format!("/v1/conversations/{conversation}/search"),
                            json!({"query": question, "k": 10}),
                        )
                    } else {
                        (
                            "ask",
                            format!("/v1/conversations/{conversation}/ask"),
                            json!({"question": question}),
                        )
                    };
                    let started = Instant::now();
                    let (status, reply) = client.call_on(index, false, &path, Some(&body)).await;
                    tally.latencies.entry(route).or_default().push(started.elapsed());
                    if status != 200 {
                        let code = reply["error"]["code"].as_str().unwrap_or("no answer");
                        *tally.errors.entry(format!("{route} {status} {code}")).or_default() += 1;
                    }
                }
                tally
            })
        })
        .collect();
    let mut all = Tally::default();
    for task in tasks {
        let tally = task.await.unwrap();
        for (route, mut latencies) in tally.latencies {
            all.latencies.entry(route).or_default().append(&mut latencies);
        }
        for (error, count) in tally.errors {
            *all.errors.entry(error).or_default() += count;
        }
    }
    all
}

/// What the per-request revision check (how a replica learns that its cached index is stale)
/// costs: `Store::revision` 2,000 times, one after the other, from a thread of the blocking pool
/// as the service calls it; p50 and p99.
async fn revision_checks(store: mragent::store::Store, conversation: &str) {
    let conversation = conversation.to_string();
    let mut took = tokio::task::spawn_blocking(move || {
        (0..2000)
            .map(|_| {
                let started = Instant::now();
                store.revision(&conversation).unwrap();
                started.elapsed()
            })
            .collect::<Vec<Duration>>()
    })
    .await
    .unwrap();
    took.sort();
    let micros =
        |fraction: f64| took[((took.len() - 1) as f64 * fraction) as usize].as_secs_f64() * 1e6;
    println!("revision check: p50 {:.0} µs, p99 {:.0} µs (2,000 calls)", micros(0.5), micros(0.99));
}

fn report(label: &str, tally: &mut Tally, seconds: u64) {
    for (route, latencies) in &mut tally.latencies {
        latencies.sort();
        let at = |fraction: f64| {
            let index = ((latencies.len() as f64 - 1.0) * fraction).round() as usize;
            latencies[index].as_secs_f64() * 1e3
        };
        println!(
            "{label} {route}: {} requests ({:.1}/s), p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            latencies.len(),
            latencies.len() as f64 / seconds as f64,
            at(0.5),
            at(0.99),
            at(1.0)
        );
    }
    let errors: u64 = tally.errors.values().sum();
    println!("{label} errors: {errors} {:?}", tally.errors);
}

fn main() {
    let (clients, seconds) = (setting("LOAD_CLIENTS", 50), setting("LOAD_SECONDS", 60));
    let (kill_after, seed) = (setting("LOAD_KILL_AFTER", 5), setting("LOAD_SEED", 7));
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let conversations = load_locomo(&default_path(root, DatasetKind::Locomo))
        .expect("LoCoMo ships with the repository");
    let questions: Vec<(String, String)> = conversations
        .iter()
        .flat_map(|c| c.questions.iter().map(|q| (c.sample_id.clone(), q.question.clone())))
        .collect();
    let questions = Arc::new(questions);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let postgres = std::env::var("LOAD_STORE").is_ok_and(|store| store == "postgres");
    let replicas = setting("LOAD_REPLICAS", 1).max(1);
    let pg =
        postgres.then(|| private_pg::PrivatePg::start_durable().expect("a private PostgreSQL"));
    let url = pg.as_ref().map(|pg| pg.url("postgres"));
    runtime.block_on(async {
        println!("serve_load: load average before {}", run::load());
        let store = match &url {
            Some(_) => format!("PostgreSQL 15 (private, loopback), {replicas} replica(s)"),
            None => "SQLite".to_string(),
        };
        println!("store: {store}");
        let scripted = ScriptedServer::with_responder(run::responder(Duration::ZERO, true)).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (mut child, address) = start(dir.path(), scripted.base_url(), url.as_deref()).await;
        let mut others = Vec::new();
        let mut replica_children = Vec::new();
        let count = if url.is_some() { replicas } else { 1 };
        for _ in 1..count {
            let (other, address) = start(dir.path(), scripted.base_url(), url.as_deref()).await;
            others.push(format!("http://{address}"));
            replica_children.push(other);
        }
        let client = Arc::new(Client { http: reqwest::Client::new(), base: format!("http://{address}"), others });
        let started = Instant::now();
        let jobs = queue(&client, &conversations, "").await;
        let ended = client.wait_jobs(&jobs).await;
        let sessions: u64 = ended.iter().map(|job| job["sessions"]["done"].as_u64().unwrap()).sum();
        let wall = started.elapsed().as_secs_f64();
        assert!(ended.iter().all(|job| job["state"] == "done"), "{ended:?}");
        println!(
            "ingest: {} conversations, {sessions} sessions built by {} jobs in {wall:.1} s ({:.1} sessions/s), {} model requests",
            conversations.len(),
            jobs.len(),
            sessions as f64 / wall,
            scripted.request_count()
        );
        let store = match &url {
            Some(url) => mragent::store::Store::open_url(url).unwrap(),
            None => mragent::store::Store::open(mragent::store::Store::default_path(dir.path())).unwrap(),
        };
        revision_checks(store, &conversations[0].sample_id).await;
        let mut tally = load(Arc::clone(&client), Arc::clone(&questions), clients, seconds, seed).await;
        report(&format!("load ({clients} clients, {seconds} s)"), &mut tally, seconds);
        let pid = child.id().unwrap();
        println!("serve peak RSS: {:.0} MiB", peak_rss(pid));
        for other in &replica_children {
            println!("replica peak RSS: {:.0} MiB", peak_rss(other.id().unwrap()));
        }
        if url.is_some() {
            println!("serve_load: load average after {}", run::load());
            return;
        }

        // Kill -9 in the middle of load and of new jobs, then restart.
        let loading = tokio::spawn(load(Arc::clone(&client), Arc::clone(&questions), clients, kill_after + 2, seed + 1000));
        let jobs = queue(&client, &conversations, " (again)").await;
        tokio::time::sleep(Duration::from_secs(kill_after)).await;
        child.start_kill().unwrap();
        child.wait().await.unwrap();
        let killed_at = Instant::now();
        let connection = rusqlite::Connection::open(mragent::store::Store::default_path(dir.path())).unwrap();
        let integrity: String = connection.query_row("PRAGMA integrity_check", [], |row| row.get(0)).unwrap();
        let unfinished: i64 = connection
            .query_row("SELECT COUNT(*) FROM jobs WHERE state IN ('queued', 'running')", [], |row| row.get(0))
            .unwrap();
        let (_child, address) = start(dir.path(), scripted.base_url(), None).await;
        let client = Client { http: reqwest::Client::new(), base: format!("http://{address}"), others: Vec::new() };
        let ended = client.wait_jobs(&jobs).await;
        let done = ended.iter().filter(|job| job["state"] == "done").count();
        let resumed = ended.iter().filter(|job| job["attempts"].as_u64() > Some(1)).count();
        let mut during = loading.await.unwrap();
        // Requests in flight at the kill, or sent in the 2 s after it, fail (no answer).
        report("kill phase", &mut during, kill_after + 2);
        println!(
            "kill -9 after {kill_after} s: integrity_check {integrity}; {unfinished} of {} jobs unfinished at the kill, {resumed} resumed after the restart; {done} of {} done ({:.1} s after the kill)",
            jobs.len(),
            jobs.len(),
            killed_at.elapsed().as_secs_f64()
        );
        assert_eq!(integrity, "ok");
        assert_eq!(done, jobs.len(), "{ended:?}");
        println!("serve_load: load average after {}", run::load());
    });
}
