//! Benchmark: the build stages' own cost (prompt rendering, validation, normalisation, atomic
//! cache writes, embedding-cache rewrites, graph construction) on all 10 LoCoMo conversations,
//! with the model replaced by the scripted endpoint on 127.0.0.1 (real HTTP, answers generated
//! mechanically from the prompt: one sentence per turn, one topic per session, 3072-dimensional
//! hashed embeddings as `text-embedding-3-large` returns). Model latency is not measured; this is
//! what the pipeline adds on top of it.
//!
//! Scenarios, each repeated and reported as the median:
//! - cold: empty caches, every session rewritten, keyworded and embedded;
//! - warm: every stage cached (a rerun): open and check the caches, rebuild the graphs;
//! - load: `load_memory` of every conversation (no model client at all).
//!
//! Run: `cargo bench --bench build_stages`.

// A benchmark aborts on any setup failure (nothing to recover) and reports on stdout.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::print_stdout)]

use std::path::Path;
use std::time::{Duration, Instant};

use mragent::dataset::{Conversation, DatasetKind, default_path, load_locomo};
use mragent::ingest::{BuildSettings, build, load_memory};
use mragent::llm::scripted::ScriptedServer;
use mragent::llm::{
    Embedder as _, EmbedderConfig, LlmConfig, Secret, build_chat_model, build_embedder,
};
use regex::Regex;

#[path = "support/stages.rs"]
mod stages;

/// Dimension of `text-embedding-3-large`.
const DIMS: usize = 3072;

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

/// Peak resident set of this process (`VmHWM`), Linux only.
fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let conversations: Vec<Conversation> = load_locomo(&default_path(root, DatasetKind::Locomo))
        .expect("LoCoMo ships with the repository");
    let sessions: usize = conversations.iter().map(|c| c.sessions.len()).sum();
    let runtime =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    runtime.block_on(async {
        let turn = Regex::new(stages::TURN).expect("valid regex");
        let session = Regex::new(stages::SESSION).expect("valid regex");
        let server = ScriptedServer::with_responder(move |request| stages::answer(request, &turn, &session, DIMS)).await.expect("server");
        let config = LlmConfig::new(server.base_url(), Secret::new("bench"), "bench-model");
        let chat = build_chat_model(&config).expect("chat client");
        let embedder =
            build_embedder(&config, &EmbedderConfig { model: "text-embedding-3-large".into(), batch_size: 96 }).expect("embedder");

        let mut cold = Vec::new();
        let mut warm = Vec::new();
        let mut load = Vec::new();
        let mut last = None;
        for _ in 0..3 {
            let dir = tempfile::tempdir().expect("temp dir");
            let mut settings = BuildSettings::new(dir.path().join("data"), DatasetKind::Locomo, "bench", "bench-model");
            settings.progress = false;
            let started = Instant::now();
            let summary = build(&settings, &chat, &embedder, &conversations).await.expect("cold build");
            cold.push(started.elapsed());
            assert!(summary.is_complete(), "{summary}");
            for _ in 0..3 {
                let started = Instant::now();
                let again = build(&settings, &chat, &embedder, &conversations).await.expect("warm build");
                warm.push(started.elapsed());
                assert_eq!(again.usage.total(), 0, "a warm build asks nothing");
                let started = Instant::now();
                for conversation in &conversations {
                    let memory = load_memory(&settings, embedder.name(), conversation).expect("load");
                    std::hint::black_box(&memory);
                }
                load.push(started.elapsed());
            }
            let bytes: u64 = walk_bytes(dir.path());
            last = Some((summary, bytes));
        }
        let (summary, bytes) = last.expect("at least one run");
        let events: usize = summary.samples.iter().map(|s| s.events).sum();
        println!("build_stages: 10 LoCoMo conversations, {sessions} sessions, {events} events, {DIMS}-d vectors");
        println!("  cold build (scripted model): median {:?} ({:.2} ms per session)", median(cold.clone()), median(cold).as_secs_f64() * 1e3 / sessions as f64);
        println!("  warm rerun (all cached):     median {:?}", median(warm));
        println!("  load_memory x10:             median {:?}", median(load));
        println!("  cache size on disk:          {:.1} MiB", bytes as f64 / (1024.0 * 1024.0));
        if let Some(peak) = peak_rss_mib() {
            println!("  peak RSS (whole process, incl. scripted server): {peak:.0} MiB");
        }
    });
}

fn walk_bytes(path: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(path) else { return 0 };
    entries
        .flatten()
        .map(|entry| {
            let path = entry.path();
            if path.is_dir() {
                walk_bytes(&path)
            } else {
                entry.metadata().map(|m| m.len()).unwrap_or(0)
            }
        })
        .sum()
}
