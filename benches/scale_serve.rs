//! Benchmark: `mragent serve` over many conversations with a memory budget (`--cache-mb`), no
//! model: what the service costs as the conversations it has met grow.
//!
//! 1. store: `SCALE_TEMPLATES` (50) synthetic conversations of 5 sessions × 8 turns (seeded
//!    words; a random speaker pair, places and names per conversation) are added through the
//!    memory service with the build stages and the embeddings played by the scripted endpoint
//!    (`support/stages.rs`: mechanical outputs, hashed vectors of `SCALE_DIMS`, 1,536, the
//!    dimension of an endpoint embedder); each is searched once (its word vectors are stored).
//!    Then the store is filled to `SCALE_N` conversations by copying them row for row under
//!    new ids (SQLite `INSERT … SELECT`, every table keyed by conversation): deterministic, and
//!    minutes faster than building each. Store bytes per message are measured here.
//! 2. serve: the release binary with `--cache-mb SCALE_BUDGET_MB` (64) over that store, the
//!    scripted endpoint embedding the queries.
//! 3. cold: `SCALE_CLIENTS` (20) clients search `SCALE_COLD` (200) distinct conversations,
//!    each once (every one a cache miss: load, index, rank); p50/p99.
//! 4. load: the same clients for `SCALE_SECONDS` (30) over all N conversations at random (a
//!    working set far above the budget), queries drawn from 200; searches per second, p50/p99,
//!    errors, evictions.
//! 5. warm: 10 conversations (well within the budget), touched once, then 1,000 searches;
//!    p50/p99.
//!
//! Printed: resident memory (`VmRSS`) after each phase and the peak (`VmHWM`), the cache's
//! own bytes, entries and evictions from `/metrics`, and `/proc/loadavg` (the machine is
//! shared: state the load with the numbers).
//!
//! Run: `cargo bench --bench scale_serve` (settings: `SCALE_N`, `SCALE_BUDGET_MB`,
//! `SCALE_CLIENTS`, `SCALE_SECONDS`, `SCALE_COLD`, `SCALE_TEMPLATES`, `SCALE_DIMS`,
//! `SCALE_SEED`).
//!
//! On PostgreSQL: `SCALE_STORE=postgres` copies the SQLite store made in step 1 into a private
//! PostgreSQL (durable: fsync on) with `store::copy_store`, prints its size per message, and
//! serves it with `SCALE_REPLICAS` (2) `serve` processes, each with the budget; the clients
//! spread over them round-robin, and RSS and cache are printed per replica.

// A benchmark aborts on any setup failure (nothing to recover) and reports on stdout.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::print_stdout)]

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use mragent::convo::{Message, Timestamp};
use mragent::llm::scripted::ScriptedServer;
use mragent::llm::{EmbedderConfig, LlmConfig, Secret, build_chat_model, build_embedder};
use mragent::service::{MemoryService, OwnEmbedder, ServiceSettings};
use mragent::store::Store;
use rand::seq::SliceRandom as _;
use rand::{Rng as _, SeedableRng as _};
use rand_chacha::ChaCha8Rng;
use regex::Regex;
use serde_json::json;
use tokio::io::{AsyncBufReadExt as _, BufReader};

#[path = "support/stages.rs"]
mod stages;

#[path = "support/run.rs"]
mod run;

#[path = "../tests/support/private_pg.rs"]
mod private_pg;

const EMBEDDER: &str = "bench-embedding";
const SESSIONS: usize = 5;
const TURNS: usize = 8;

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|value| value.parse().ok()).unwrap_or(default)
}

const PEOPLE: [&str; 12] =
    ["Ann", "Bob", "Caro", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jun", "Kai", "Lea"];
const VERBS: [&str; 8] =
    ["visited", "painted", "cooked", "read about", "planned", "fixed", "sang at", "ran to"];

/// One synthetic conversation: two speakers, five sessions a week apart, eight turns each,
/// naming places and things drawn from a vocabulary of 2,000 capitalised words.
fn conversation(random: &mut ChaCha8Rng) -> Vec<Message> {
    let a = PEOPLE[random.random_range(0..PEOPLE.len())];
    let b = PEOPLE[(PEOPLE.iter().position(|p| *p == a).unwrap() + 1) % PEOPLE.len()];
    let start = chrono::NaiveDate::from_ymd_opt(2024, 1, 1).unwrap()
        + chrono::TimeDelta::days(random.random_range(0..300));
    let mut messages = Vec::new();
    for session in 0..SESSIONS {
        let day = start + chrono::TimeDelta::days(7 * session as i64);
        for turn in 0..TURNS {
            let speaker = if turn % 2 == 0 { a } else { b };
            let place = random.random_range(0..2000);
            let thing = random.random_range(0..2000);
            let verb = VERBS[random.random_range(0..VERBS.len())];
            messages.push(Message {
                speaker: speaker.to_string(),
                text: format!(
                    "Yesterday I {verb} Place{place} and talked about Thing{thing} with my friend for a while"
                ),
                timestamp: Some(Timestamp::Instant(
                    day.and_hms_opt(12, 0, 0).unwrap().and_utc()
                        + chrono::TimeDelta::minutes(turn as i64),
                )),
                session: Some(format!("s{session}")),
            });
        }
    }
    messages
}

/// Copies conversation `from` under the id `to`: every table keyed by conversation (their
/// columns read from the schema, so the copy follows it).
fn copy_statements(connection: &rusqlite::Connection) -> Vec<String> {
    let tables = ["conversations", "sessions", "messages", "session_outputs", "conversation_words"];
    tables
        .iter()
        .map(|table| {
            let mut statement = connection
                .prepare(&format!("SELECT name FROM pragma_table_info('{table}')"))
                .unwrap();
            let columns: Vec<String> =
                statement.query_map([], |row| row.get(0)).unwrap().map(Result::unwrap).collect();
            let key = if *table == "conversations" { "id" } else { "conversation_id" };
            assert!(columns.iter().any(|column| column == key), "{table} has {key}");
            let select: Vec<&str> = columns
                .iter()
                .map(|column| if column == key { "?1" } else { column.as_str() })
                .collect();
            format!(
                "INSERT INTO {table} ({}) SELECT {} FROM {table} WHERE {key} = ?2",
                columns.join(", "),
                select.join(", ")
            )
        })
        .collect()
}

/// Bytes of the SQLite store (main file and write-ahead log).
fn store_bytes(path: &Path) -> u64 {
    let wal = path.with_extension("sqlite-wal");
    [path.to_path_buf(), wal]
        .iter()
        .map(|file| std::fs::metadata(file).map_or(0, |m| m.len()))
        .sum()
}

fn status_mib(pid: u32, field: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn percentile(sorted: &[Duration], fraction: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let index = ((sorted.len() as f64 - 1.0) * fraction).round() as usize;
    sorted[index].as_secs_f64() * 1000.0
}

/// The cache samples of a scrape: (bytes, entries, evictions) of the conversations' cache.
fn cache_of(metrics: &str) -> (f64, f64, f64) {
    let read = |name: &str| {
        metrics
            .lines()
            .find(|line| line.starts_with(name) && line.contains("cache=\"conversations\""))
            .and_then(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    (
        read("mragent_cache_bytes{"),
        read("mragent_cache_entries{"),
        read("mragent_cache_evictions_total{"),
    )
}

struct Phase {
    latencies: Vec<Duration>,
    errors: usize,
    wall: Duration,
}

/// `clients` clients, each taking the next target from `next` until it returns `None`.
async fn drive(
    http: &reqwest::Client,
    bases: &[String],
    clients: usize,
    next: Arc<dyn Fn(usize) -> Option<(String, String)> + Send + Sync>,
) -> Phase {
    let started = Instant::now();
    let counter = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..clients)
        .map(|client| {
            // Client `c` talks to replica `c mod replicas`.
            let base = bases[client % bases.len()].clone();
            let (http, next, counter) = (http.clone(), Arc::clone(&next), Arc::clone(&counter));
            tokio::spawn(async move {
                let (mut latencies, mut errors) = (Vec::new(), 0);
                while let Some((conversation, query)) =
                    next(counter.fetch_add(1, Ordering::Relaxed))
                {
                    let url = format!("{base}/v1/conversations/{conversation}/search");
                    let sent = Instant::now();
                    let reply = http
                        .post(url)
                        .json(&json!({"query": query, "k": 10}))
                        .timeout(Duration::from_secs(120))
                        .send()
                        .await;
                    let ok = match reply {
                        Ok(response) => {
                            let ok = response.status().is_success();
                            let _ = response.bytes().await;
                            ok
                        }
                        Err(_) => false,
                    };
                    latencies.push(sent.elapsed());
                    errors += usize::from(!ok);
                }
                (latencies, errors)
            })
        })
        .collect();
    let mut phase = Phase { latencies: Vec::new(), errors: 0, wall: Duration::ZERO };
    for task in tasks {
        let (latencies, errors) = task.await.unwrap();
        phase.latencies.extend(latencies);
        phase.errors += errors;
    }
    phase.wall = started.elapsed();
    phase.latencies.sort();
    phase
}

/// One `serve` process.
struct Replica {
    child: tokio::process::Child,
    pid: u32,
    base: String,
}

/// Starts `serve` over `store` (the SQLite store in `dir` when `None`) with the budget.
async fn serve(dir: &Path, model: &str, budget: u64, store: Option<&str>) -> Replica {
    let mut command = tokio::process::Command::new(run::binary());
    command
        .args(["serve", "--bind", "127.0.0.1:0", "--base-url", model])
        .args(["--model", "local/bench", "--embedder", EMBEDDER, "--max-concurrency", "64"])
        .args(["--cache-mb", &budget.to_string()]);
    if let Some(url) = store {
        command.args(["--store", url]);
    }
    let mut child = command
        .current_dir(dir)
        .env_remove("MRAGENT_SERVE_TOKEN")
        .env_remove("MRAGENT_SERVE_TOKENS")
        .env_remove("OPENAI_API_KEY")
        .env_remove("RUST_LOG")
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("serve starts");
    let pid = child.id().expect("pid");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut base = None;
    while let Some(line) = lines.next_line().await.unwrap() {
        if let Some(rest) = line.strip_prefix("serving on ") {
            base = Some(rest.split_whitespace().next().unwrap().to_string());
            break;
        }
    }
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Replica { child, pid, base: base.expect("serve listens") }
}

async fn report(name: &str, phase: &Phase, http: &reqwest::Client, replicas: &[Replica]) {
    println!(
        "{name:>5}: {} searches in {:.1} s = {:.0}/s, p50 {:.1} ms, p99 {:.1} ms, errors {}",
        phase.latencies.len(),
        phase.wall.as_secs_f64(),
        phase.latencies.len() as f64 / phase.wall.as_secs_f64(),
        percentile(&phase.latencies, 0.5),
        percentile(&phase.latencies, 0.99),
        phase.errors,
    );
    for (number, replica) in replicas.iter().enumerate() {
        let metrics = http.get(format!("{}/metrics", replica.base)).send().await.unwrap();
        let (bytes, entries, evictions) = cache_of(&metrics.text().await.unwrap());
        println!(
            "       replica {number}: RSS {:.0} MiB (peak {:.0}); cache {:.0} MiB in {entries} \
             entries, {evictions} evictions",
            status_mib(replica.pid, "VmRSS:"),
            status_mib(replica.pid, "VmHWM:"),
            bytes / 1024.0 / 1024.0,
        );
    }
}

fn main() {
    let n = setting("SCALE_N", 1000) as usize;
    let budget = setting("SCALE_BUDGET_MB", 64);
    let clients = setting("SCALE_CLIENTS", 20) as usize;
    let seconds = setting("SCALE_SECONDS", 30);
    let cold = (setting("SCALE_COLD", 200) as usize).min(n);
    let templates = (setting("SCALE_TEMPLATES", 50) as usize).clamp(1, n);
    let dims = setting("SCALE_DIMS", 1536) as usize;
    let seed = setting("SCALE_SEED", 41);
    let postgres = std::env::var("SCALE_STORE").is_ok_and(|store| store == "postgres");
    let replicas = if postgres { setting("SCALE_REPLICAS", 2).max(1) as usize } else { 1 };
    let pg =
        postgres.then(|| private_pg::PrivatePg::start_durable().expect("a private PostgreSQL"));
    println!(
        "scale_serve: N={n}, budget {budget} MiB, {clients} clients, {dims}-d vectors, \
         {templates} templates; load before: {}",
        run::load()
    );
    let runtime =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    let pg_ref = pg.as_ref();
    runtime.block_on(async move {
        let (turn, session) =
            (Regex::new(stages::TURN).unwrap(), Regex::new(stages::SESSION).unwrap());
        let server = ScriptedServer::with_responder(move |request| {
            stages::answer(request, &turn, &session, dims)
        })
        .await
        .expect("server");
        let dir = tempfile::tempdir().expect("temp dir");
        let path = Store::default_path(dir.path());

        // 1. The store.
        let started = Instant::now();
        let config = LlmConfig::new(server.base_url(), Secret::new("bench"), "bench-model");
        let embedder =
            build_embedder(&config, &EmbedderConfig { model: EMBEDDER.into(), batch_size: 96 })
                .expect("embedder");
        let service = MemoryService::new(
            Store::open(&path).expect("store"),
            ServiceSettings::new(dir.path(), EMBEDDER, "bench", "bench-model"),
            build_chat_model(&config).expect("chat client"),
            OwnEmbedder::Api(Box::new(embedder)),
        );
        let mut random = ChaCha8Rng::seed_from_u64(seed);
        for template in 0..templates {
            let id = format!("c{template}");
            let report = service.add(&id, conversation(&mut random)).await.expect("add");
            assert!(report.is_complete(), "{report}");
            service.search(&id, "Place1 Thing2", 3).await.expect("search");
        }
        drop(service);
        let template_bytes = store_bytes(&path);
        {
            let mut connection = rusqlite::Connection::open(&path).unwrap();
            let statements = copy_statements(&connection);
            let transaction = connection.transaction().unwrap();
            for copy in templates..n {
                let (to, from) = (format!("c{copy}"), format!("c{}", copy % templates));
                for statement in &statements {
                    transaction.execute(statement, rusqlite::params![to, from]).unwrap();
                }
            }
            transaction.commit().unwrap();
            connection.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)").unwrap();
        }
        let messages = (n * SESSIONS * TURNS) as f64;
        println!(
            "store: {n} conversations, {messages} messages, {:.1} MiB, {:.2} KiB per message \
             (templates alone: {:.2} KiB per message); made in {:.0} s",
            store_bytes(&path) as f64 / 1024.0 / 1024.0,
            store_bytes(&path) as f64 / 1024.0 / messages,
            template_bytes as f64 / 1024.0 / (templates * SESSIONS * TURNS) as f64,
            started.elapsed().as_secs_f64()
        );

        // The synchronous PostgreSQL client runs its own runtime: off this one's worker.
        let url = pg_ref.map(|pg| tokio::task::block_in_place(|| {
            let url = pg.fresh_database();
            let started = Instant::now();
            let (from, to) = (Store::open(&path).unwrap(), Store::open_url(&url).unwrap());
            mragent::store::copy_store(&from, &to, |_| {}).expect("copy to PostgreSQL");
            let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
            let bytes: i64 =
                admin.query_one("SELECT pg_database_size(current_database())", &[]).unwrap().get(0);
            println!(
                "PostgreSQL store: {:.1} MiB, {:.2} KiB per message (copied in {:.0} s; {replicas} \
                 replicas)",
                bytes as f64 / 1024.0 / 1024.0,
                bytes as f64 / 1024.0 / messages,
                started.elapsed().as_secs_f64()
            );
            url
        }));

        // 2. The servers.
        let mut servers = Vec::new();
        for _ in 0..replicas {
            servers.push(serve(dir.path(), server.base_url(), budget, url.as_deref()).await);
        }
        let bases: Vec<String> = servers.iter().map(|replica| replica.base.clone()).collect();
        let http = reqwest::Client::new();
        for replica in &servers {
            println!("serve: RSS {:.0} MiB at start", status_mib(replica.pid, "VmRSS:"));
        }

        let queries: Arc<Vec<String>> = Arc::new(
            (0..200)
                .map(|q| {
                    let mut random = ChaCha8Rng::seed_from_u64(seed + 1000 + q);
                    format!(
                        "When did they talk about Thing{} at Place{}?",
                        random.random_range(0..2000),
                        random.random_range(0..2000)
                    )
                })
                .collect(),
        );

        // 3. Cold: each conversation once.
        let mut order: Vec<usize> = (0..n).collect();
        order.shuffle(&mut ChaCha8Rng::seed_from_u64(seed + 1));
        let order = Arc::new(order[..cold].to_vec());
        let (o, q) = (Arc::clone(&order), Arc::clone(&queries));
        let phase = drive(
            &http,
            &bases,
            clients,
            Arc::new(move |i| o.get(i).map(|c| (format!("c{c}"), q[i % q.len()].clone()))),
        )
        .await;
        report("cold", &phase, &http, &servers).await;

        // 4. Load over all N, for `seconds`.
        let deadline = Instant::now() + Duration::from_secs(seconds);
        let q = Arc::clone(&queries);
        let phase = drive(
            &http,
            &bases,
            clients,
            Arc::new(move |i| {
                if Instant::now() >= deadline {
                    return None;
                }
                let mut random = ChaCha8Rng::seed_from_u64(seed + 7 + i as u64);
                let c = random.random_range(0..n);
                Some((format!("c{c}"), q[random.random_range(0..q.len())].clone()))
            }),
        )
        .await;
        report("load", &phase, &http, &servers).await;

        // 5. Warm: ten conversations, touched once, then 1,000 searches.
        let q = Arc::clone(&queries);
        let touch = drive(
            &http,
            &bases,
            1,
            Arc::new(move |i| (i < 10).then(|| (format!("c{i}"), q[0].clone()))),
        )
        .await;
        assert_eq!(touch.errors, 0);
        let q = Arc::clone(&queries);
        let phase = drive(
            &http,
            &bases,
            clients,
            Arc::new(move |i| (i < 1000).then(|| (format!("c{}", i % 10), q[i % q.len()].clone()))),
        )
        .await;
        report("warm", &phase, &http, &servers).await;
        println!("load after: {}", run::load());
        for mut replica in servers {
            let _ = replica.child.kill().await;
        }
    });
    if let Some(pg) = pg {
        pg.stop();
    }
}
