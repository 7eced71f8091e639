//! Benchmark (issue 14): `mragent run` on LoCoMo conv-26 (199 questions) at the default flags,
//! through the release binary, against the scripted endpoint on 127.0.0.1 with a fixed latency
//! on every reply (build stages answered mechanically, the answer phase by the plausible agent).
//! Each scenario starts from an empty project, so the build is part of the wall time.
//!
//! Scenarios: the model never calls `query_memgas` (the tool is taken out of the offered tools
//! before the agent sees them), and the model calls it (the plausible agent does in every
//! question that offers it). Reports the wall time, the answer phase (first answer request to
//! the end) against its floor (answer requests × latency ÷ workers), and the child's peak RSS
//! (`/usr/bin/time -f %M`).
//!
//! Run: `cargo bench --bench run_pipeline`. Knobs (environment): `BENCH_LATENCY_MS` (default
//! 300), `BENCH_SAMPLE` (default 26). Targets: wall ≤ 42 s, answer phase ≤ 1.1 × floor, peak
//! RSS ≤ 100 MB without `query_memgas` calls and ≤ 200 MB with them.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::path::Path;
use std::time::{Duration, Instant};

use mragent::agent::scripted::{AgentScript, is_answer_request, plausible_agent};
use mragent::embedding::{LocalEmbedder, LocalEmbedderOptions, ModelSource};
use mragent::llm::scripted::{RecordedRequest, ScriptedServer};
use regex::Regex;
use serde_json::Value;

#[path = "support/stages.rs"]
mod stages;

/// Dimension of `text-embedding-3-large`, the default embedding model.
const DIMS: usize = 3072;
/// The default `--workers`.
const WORKERS: f64 = 10.0;

fn knob(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|value| value.parse().ok()).unwrap_or(default)
}

fn answer_chat(request: &RecordedRequest) -> bool {
    request.is_chat() && is_answer_request(request)
}

/// One run in a new project; prints its line.
async fn scenario(name: &str, call_memgas: bool, latency: Duration, sample: u64, model_dir: &str) {
    let agent = plausible_agent(AgentScript { latency, ..AgentScript::default() });
    let (turn, session) = (Regex::new(stages::TURN).unwrap(), Regex::new(stages::SESSION).unwrap());
    let server = ScriptedServer::with_responder(move |request| {
        if request.is_embeddings() || !is_answer_request(request) {
            return stages::answer(request, &turn, &session, DIMS).delayed(latency);
        }
        if call_memgas {
            return agent(request);
        }
        let mut request = request.clone();
        if let Some(tools) = request.body.get_mut("tools").and_then(Value::as_array_mut) {
            tools.retain(|tool| tool["function"]["name"] != "query_memgas");
        }
        agent(&request)
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/dataset_locomo.json");
    let rss_file = dir.path().join("rss.txt");
    let sample = sample.to_string();
    let started = Instant::now();
    let output = tokio::process::Command::new("/usr/bin/time")
        .args(["-f", "%M", "-o", rss_file.to_str().unwrap(), env!("CARGO_BIN_EXE_mragent")])
        .args(["run", "--data-file", data.to_str().unwrap(), "--sample", &sample])
        .args(["--base-url", server.base_url(), "--model", "local/bench", "--file", "bench"])
        .args(["--embed-model-dir", model_dir, "-q"])
        .current_dir(dir.path())
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENROUTER_API_KEY")
        .output()
        .await
        .unwrap();
    let wall = started.elapsed().as_secs_f64();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let rss_mb = std::fs::read_to_string(&rss_file)
        .unwrap()
        .trim()
        .lines()
        .last()
        .and_then(|line| line.parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0);

    let requests = server.requests();
    let answers: Vec<&RecordedRequest> = requests.iter().filter(|r| answer_chat(r)).collect();
    let first = answers.first().map(|request| request.received_at).unwrap();
    // The server runs in this process: its arrival times share this clock.
    let answer_phase = wall - first.saturating_duration_since(started).as_secs_f64();
    let floor = answers.len() as f64 * latency.as_secs_f64() / WORKERS;
    let memgas_calls = answers
        .iter()
        .filter(|r| r.messages().last().is_some_and(|m| m["role"] == "tool"))
        .filter(|r| {
            r.messages().iter().any(|m| m["tool_calls"].to_string().contains("query_memgas"))
        })
        .count();
    println!(
        "{name}: wall {wall:.1} s (target 42), answer phase {answer_phase:.1} s = {:.2} x floor {floor:.1} s \
         ({} answer requests, {} build requests, {memgas_calls} loop requests after query_memgas), peak RSS {rss_mb:.0} MB",
        answer_phase / floor,
        answers.len(),
        requests.len() - answers.len(),
    );
}

fn main() {
    let latency = Duration::from_millis(knob("BENCH_LATENCY_MS", 300));
    let sample = knob("BENCH_SAMPLE", 26);
    let source =
        ModelSource::from_env_or_data_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("data"));
    let local = LocalEmbedder::from_source(&source, LocalEmbedderOptions::default()).unwrap();
    let model_dir = local.model_dir().to_str().unwrap().to_string();
    drop(local);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "run_pipeline: conv-{sample}, latency {} ms, load average before: {}",
        latency.as_millis(),
        load.trim()
    );
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        scenario("without query_memgas", false, latency, sample, &model_dir).await;
        scenario("with query_memgas   ", true, latency, sample, &model_dir).await;
    });
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load average after: {}", load.trim());
}
