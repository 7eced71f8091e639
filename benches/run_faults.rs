//! Benchmark: the release binary (`mragent run`, build and answers) over one LoCoMo
//! conversation against the scripted endpoint on 127.0.0.1 with a seeded fault mix in front
//! of it: a share of the requests (default 5%) gets a 429 (`Retry-After: 1`), a 500, a hung
//! reply (default 60 s, longer than the timeout) or a truncated 200 body. The client runs with
//! its defaults (retries, hedging, concurrency), as a user would run it.
//!
//! Reports the exit status, ERROR rows, pending questions, wall time, the longest stretch in
//! which no request reached the endpoint (an idle pool behind a hung request shows here), the
//! slowest question, and the retries and hedges the question traces record.
//!
//! The build stages are answered mechanically (`support/stages.rs`) and the answers by the
//! plausible scripted agent (`agent::scripted`). Not a criterion bench: measured once.
//!
//! Run: `cargo bench --bench run_faults`. Knobs (environment): `BENCH_SAMPLE` (default
//! conv-26), `BENCH_FAULT_RATE` (0.05), `BENCH_SEED` (26), `BENCH_HANG_S` (60),
//! `BENCH_TIMEOUT_S` (20), `BENCH_LATENCY_MS` (50), `BENCH_WORKERS` (10).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::path::Path;
use std::time::{Duration, Instant};

use mragent::agent::scripted::{AgentScript, is_answer_request, plausible_agent};
use mragent::llm::scripted::{FaultMix, ScriptedServer};
use mragent::results::Status;
use regex::Regex;

#[path = "support/run.rs"]
mod run;
#[path = "support/stages.rs"]
mod stages;

fn knob(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

fn number<T: std::str::FromStr>(name: &str, default: &str) -> T {
    knob(name, default).parse().unwrap_or_else(|_| panic!("{name} must be a number"))
}

fn main() {
    let sample = knob("BENCH_SAMPLE", "conv-26");
    let rate: f64 = number("BENCH_FAULT_RATE", "0.05");
    let seed: u64 = number("BENCH_SEED", "26");
    let hang = Duration::from_secs(number("BENCH_HANG_S", "60"));
    let timeout: u64 = number("BENCH_TIMEOUT_S", "20");
    let latency = Duration::from_millis(number("BENCH_LATENCY_MS", "50"));
    let workers: u32 = number("BENCH_WORKERS", "10");
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/dataset_locomo.json");

    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let agent = plausible_agent(AgentScript { latency, ..AgentScript::default() });
        let (turn, session) = (Regex::new(stages::TURN).unwrap(), Regex::new(stages::SESSION).unwrap());
        let mix = FaultMix { retry_after: Some(1), ..FaultMix::new(seed, rate, hang) };
        let (responder, faults) = mix.wrap(move |request| {
            if is_answer_request(request) {
                agent(request)
            } else {
                stages::answer(request, &turn, &session, 64).delayed(latency)
            }
        });
        let server = ScriptedServer::with_responder(responder).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (timeout, workers) = (timeout.to_string(), workers.to_string());
        let args = [
            "run", "--data-file", data.to_str().unwrap(), "--sample", &sample, "--base-url",
            server.base_url(), "--model", "bench/model", "--file", "faults", "--no-memgas",
            "--timeout", &timeout, "--workers", &workers, "-q",
        ];
        let started = Instant::now();
        let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_mragent"))
            .args(args)
            .current_dir(dir.path())
            .env_remove("RUST_LOG")
            .output()
            .await
            .unwrap();
        let wall = started.elapsed();

        let lines = run::result_lines(dir.path());
        let errors = lines.iter().filter(|line| line.status == Status::Error).count();
        let slowest = lines.iter().map(|line| line.latency_ms).max().unwrap_or_default();
        let mut arrivals: Vec<Instant> = server.requests().iter().map(|r| r.received_at).collect();
        arrivals.sort();
        let gaps: Vec<Duration> = arrivals.windows(2).map(|pair| pair[1] - pair[0]).collect();
        let longest = gaps.iter().max().copied().unwrap_or_default();
        let (retries, hedges) = run::retries_and_hedges(dir.path());
        let stderr = String::from_utf8_lossy(&output.stderr);
        println!("run_faults: mragent run over {sample}, seed {seed}, {:.0}% faults, hangs {hang:?}, --timeout {timeout}, {workers} workers, endpoint latency {} ms", rate * 100.0, latency.as_millis());
        println!("  exit status          {:?}", output.status.code());
        println!("  result rows          {} ({errors} ERROR)", lines.len());
        println!("  wall time            {:8.2} s", wall.as_secs_f64());
        println!("  injected             {faults}");
        println!("  longest idle gap     {:8.2} s   ({} gaps ≥ 1 s, {} gaps ≥ 5 s)", longest.as_secs_f64(), gaps.iter().filter(|gap| **gap >= Duration::from_secs(1)).count(), gaps.iter().filter(|gap| **gap >= Duration::from_secs(5)).count());
        println!("  slowest question     {:8.2} s", slowest as f64 / 1000.0);
        println!("  answer phase traces  {retries} retries, {hedges} hedges");
        if !output.status.success() {
            println!("  stderr (tail):\n{}", run::tail(&stderr, 15));
        }
    });
}
