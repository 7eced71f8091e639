//! Benchmark: a full answer run over all 10 LoCoMo conversations (1,986 questions) against the
//! scripted endpoint on 127.0.0.1, which adds a fixed latency to every reply, with the client's
//! request-rate limit set so that it binds. Reports wall time as a ratio to the floor the rate
//! limit sets (`(requests − burst) / rate`), and the latency floor for comparison
//! (`Σ per-question sequential latency / workers`).
//!
//! Memories are built mechanically (`agent::scripted::mechanical_memory`) and the responder plays
//! the answering agent (`agent::scripted::plausible_agent`): keywords, re-rank, two tool rounds,
//! answer. Not a criterion bench: one run takes minutes and is measured once.
//!
//! Run: `cargo bench --bench run_locomo`. Knobs (environment): `BENCH_LATENCY_MS` (default 100),
//! `BENCH_RPM` (default 6000), `BENCH_WORKERS` (default 16), `BENCH_SAMPLES` (default 10).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::num::NonZeroU32;
use std::path::Path;
use std::time::{Duration, Instant};

use mragent::agent::scripted::{AgentScript, mechanical_memory, plausible_agent};
use mragent::agent::{AnswerSettings, answer_all};
use mragent::dataset::{DatasetKind, load_locomo};
use mragent::llm::scripted::ScriptedServer;
use mragent::llm::{EmbedderConfig, LlmConfig, Secret, build_chat_model, build_embedder};
use mragent::results::{ResultLine, Status};
use mragent::snapshot::Snapshot;

fn knob(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|value| value.parse().ok()).unwrap_or(default)
}

fn main() {
    let latency = Duration::from_millis(knob("BENCH_LATENCY_MS", 100));
    let rpm = knob("BENCH_RPM", 6000) as u32;
    let workers = knob("BENCH_WORKERS", 16) as usize;
    let sample_count = knob("BENCH_SAMPLES", 10) as usize;
    let burst_window = Duration::from_secs(1);

    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/dataset_locomo.json");
    let conversations = load_locomo(&path).unwrap();
    let samples: Vec<Snapshot> = conversations
        .iter()
        .take(sample_count)
        .map(|conversation| mechanical_memory(conversation, true).unwrap())
        .collect();
    let questions: usize = samples.iter().map(|sample| sample.conversation.questions.len()).sum();

    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let script = AgentScript { latency, ..AgentScript::default() };
        let server = ScriptedServer::with_responder(plausible_agent(script)).await.unwrap();
        let mut config = LlmConfig::new(server.base_url(), Secret::new("bench-key"), "bench-model");
        config.requests_per_minute = NonZeroU32::new(rpm);
        config.burst_window = burst_window;
        let chat = build_chat_model(&config).unwrap();
        let embedder = build_embedder(
            &config,
            &EmbedderConfig { model: "bench-embedding".into(), batch_size: 64 },
        )
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut settings =
            AnswerSettings::new(dir.path(), DatasetKind::Locomo, "bench", "bench-model", "bench");
        settings.workers = workers;
        settings.progress = false;

        let started = Instant::now();
        let summary = answer_all(
            &settings,
            &Default::default(),
            &samples,
            &chat,
            &embedder,
            std::future::pending(),
        )
        .await
        .unwrap();
        let wall = started.elapsed().as_secs_f64();

        let requests = server.request_count() as f64;
        let rate = f64::from(rpm) / 60.0;
        let burst = (rate * burst_window.as_secs_f64()).floor();
        let rate_floor = (requests - burst).max(0.0) / rate;
        let lines: Vec<ResultLine> = summary
            .result_files
            .iter()
            .flat_map(|file| {
                std::fs::read_to_string(file)
                    .unwrap_or_default()
                    .lines()
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
            .map(|line| serde_json::from_str(&line).unwrap())
            .collect();
        let ok = lines.iter().filter(|line| line.status == Status::Ok).count();
        // Each question's requests are sequential, so its latency floor is requests × latency.
        let latency_floor = requests * latency.as_secs_f64() / workers as f64;

        println!(
            "run_locomo: {} conversations, {questions} questions ({ok} ok), {requests} requests",
            samples.len()
        );
        println!(
            "  endpoint latency {} ms, rate limit {rpm}/min (burst {burst}), {workers} workers",
            latency.as_millis()
        );
        println!("  wall time            {wall:8.2} s");
        println!(
            "  rate-limit floor     {rate_floor:8.2} s   ratio wall/floor = {:.3}",
            wall / rate_floor
        );
        println!("  latency floor        {latency_floor:8.2} s   (requests x latency / workers)");
        println!(
            "  throughput           {:8.1} requests/s, {:.1} questions/s",
            requests / wall,
            questions as f64 / wall
        );
        assert_eq!(lines.len(), questions, "one result line per question");
    });
}
