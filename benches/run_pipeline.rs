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
use std::time::Duration;

use mragent::agent::scripted::is_answer_request;
use mragent::embedding::{LocalEmbedder, LocalEmbedderOptions};
use mragent::llm::scripted::{RecordedRequest, ScriptedServer};

#[path = "support/run.rs"]
mod run;
#[path = "support/stages.rs"]
mod stages;

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
    let server =
        ScriptedServer::with_responder(run::responder(latency, call_memgas)).await.unwrap();
    let sample = sample.to_string();
    let args = ["--sample", &sample, "--file", "bench", "--embed-model-dir", model_dir];
    let finished = run::run_mragent(server.base_url(), &args, None).await;
    let (wall, started, rss_mb) = (finished.wall.as_secs_f64(), finished.started, finished.rss_mb);
    assert!(finished.status.success(), "{}", finished.stderr);

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
        mragent::settings::model_source(&Path::new(env!("CARGO_MANIFEST_DIR")).join("data"));
    let local = LocalEmbedder::from_source(&source, LocalEmbedderOptions::default()).unwrap();
    let model_dir = local.model_dir().to_str().unwrap().to_string();
    drop(local);
    println!(
        "run_pipeline: conv-{sample}, latency {} ms, load average before: {}",
        latency.as_millis(),
        run::load()
    );
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        scenario("without query_memgas", false, latency, sample, &model_dir).await;
        scenario("with query_memgas   ", true, latency, sample, &model_dir).await;
    });
    println!("load average after: {}", run::load());
}
