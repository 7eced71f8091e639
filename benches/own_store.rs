//! Benchmark: the own-conversation store on a LoCoMo-size conversation (conv-26: 19 sessions,
//! 419 turns), with the model replaced by the scripted endpoint on 127.0.0.1 (real HTTP;
//! mechanically valid stage answers; 384-dimensional hashed embeddings, the size of the local
//! all-MiniLM-L6-v2). Model latency is not measured; this is what mragent adds on top of it.
//!
//! - add: the conversation arrives one session per `add` (as a chat app would send it); each
//!   add's wall time (store transaction, the session's three stages over HTTP, MemGAS unit
//!   embedding, output commit) and its model calls;
//! - re-add: the whole conversation again (every message a duplicate: no model call);
//! - search, cold: the first query of a service that has not seen the conversation (what every
//!   `mragent memory search` process pays): read the revision, load from SQLite, build the
//!   MemGAS index from the stored vectors, embed the query (one loopback request), rank;
//! - search, warm: every LoCoMo question of conv-26 as a query (k = 10) on a long-lived service
//!   (`mragent serve`): read the revision, embed the query, rank on the cached index.
//!
//! Run: `cargo bench --bench own_store` (`OWN_STORE_DIMS=1536` for an endpoint embedder's size).

// A benchmark aborts on any setup failure (nothing to recover) and reports on stdout.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::print_stdout)]

use std::path::Path;
use std::time::{Duration, Instant};

use mragent::convo::{Message, Timestamp};
use mragent::dataset::{Conversation, DatasetKind, default_path, load_locomo};
use mragent::llm::scripted::ScriptedServer;
use mragent::llm::{EmbedderConfig, LlmConfig, Secret, build_chat_model, build_embedder};
use mragent::service::{MemoryService, OwnEmbedder, ServiceSettings};
use mragent::store::Store;
use regex::Regex;

#[path = "support/stages.rs"]
mod stages;

/// Vector dimensions (`OWN_STORE_DIMS`, default 384: the local model's).
fn dims() -> usize {
    std::env::var("OWN_STORE_DIMS").ok().and_then(|value| value.parse().ok()).unwrap_or(384)
}

/// The conversation's sessions as own messages: session ids, minute-spaced timestamps on the
/// session's date.
fn messages(conversation: &Conversation) -> Vec<Vec<Message>> {
    conversation
        .sessions
        .iter()
        .map(|session| {
            let day = session.date.expect("LoCoMo sessions are dated");
            session
                .turns
                .iter()
                .enumerate()
                .map(|(position, turn)| Message {
                    speaker: turn.speaker.clone(),
                    text: turn.text.clone(),
                    timestamp: Some(Timestamp::Instant(
                        day.and_hms_opt(12, 0, 0).unwrap().and_utc()
                            + chrono::TimeDelta::minutes(position as i64),
                    )),
                    session: Some(session.id()),
                })
                .collect()
        })
        .collect()
}

fn percentile(sorted: &[Duration], fraction: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * fraction).round() as usize;
    sorted[index]
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let conversation = load_locomo(&default_path(root, DatasetKind::Locomo))
        .expect("LoCoMo ships with the repository")
        .into_iter()
        .find(|conversation| conversation.sample_id == "conv-26")
        .expect("conv-26");
    let sessions = messages(&conversation);
    let turns: usize = sessions.iter().map(Vec::len).sum();
    let dims = dims();
    let runtime =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    runtime.block_on(async {
        let turn = Regex::new(stages::TURN).expect("valid regex");
        let session = Regex::new(stages::SESSION).expect("valid regex");
        let server = ScriptedServer::with_responder(move |request| {
            stages::answer(request, &turn, &session, dims)
        })
        .await
        .expect("server");
        let config = LlmConfig::new(server.base_url(), Secret::new("bench"), "bench-model");
        let chat = build_chat_model(&config).expect("chat client");
        let embedder = build_embedder(
            &config,
            &EmbedderConfig { model: "bench-embedding".into(), batch_size: 96 },
        )
        .expect("embedder");
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Store::open(Store::default_path(dir.path())).expect("store");
        let settings = ServiceSettings::new(dir.path(), "bench-embedding", "bench", "bench-model");
        let embedder = OwnEmbedder::Api(Box::new(embedder));
        let service = MemoryService::new(store, settings.clone(), chat, embedder.clone());

        let mut adds = Vec::new();
        let mut calls = 0;
        for messages in &sessions {
            let started = Instant::now();
            let report = service.add("conv-26", messages.clone()).await.expect("add");
            adds.push(started.elapsed());
            assert_eq!(report.built_sessions.len(), 1, "{report}");
            calls += report.chat_calls;
        }
        let all: Vec<Message> = sessions.iter().flatten().cloned().collect();
        let started = Instant::now();
        let again = service.add("conv-26", all).await.expect("re-add");
        let readd = started.elapsed();
        assert_eq!((again.new_messages, again.chat_calls), (0, 0));

        let mut cold = Vec::new();
        for question in conversation.questions.iter().take(5) {
            let store = Store::open(Store::default_path(dir.path())).expect("store");
            let chat = build_chat_model(&config).expect("chat client");
            let fresh = MemoryService::new(store, settings.clone(), chat, embedder.clone());
            let started = Instant::now();
            let hits = fresh.search("conv-26", &question.question, 10).await.expect("search");
            cold.push(started.elapsed());
            std::hint::black_box(hits);
        }
        let mut searches = Vec::new();
        for question in &conversation.questions {
            let started = Instant::now();
            let hits = service.search("conv-26", &question.question, 10).await.expect("search");
            searches.push(started.elapsed());
            std::hint::black_box(hits);
        }
        let bytes = std::fs::metadata(Store::default_path(dir.path())).map_or(0, |m| m.len());
        adds.sort();
        cold.sort();
        searches.sort();
        let ms = |duration: Duration| duration.as_secs_f64() * 1e3;
        println!(
            "own_store: conv-26, {} sessions, {turns} turns, {}-d vectors, store {:.1} MiB",
            sessions.len(),
            dims,
            bytes as f64 / (1024.0 * 1024.0)
        );
        println!(
            "  add one session (scripted model): p50 {:.1} ms, p90 {:.1} ms, max {:.1} ms; {calls} chat calls in all ({:.1} per session)",
            ms(percentile(&adds, 0.5)),
            ms(percentile(&adds, 0.9)),
            ms(percentile(&adds, 1.0)),
            f64::from(calls) / sessions.len() as f64
        );
        println!("  re-add all {turns} messages (no-op): {:.1} ms", ms(readd));
        println!(
            "  search, cold (new service: load + index build), {} queries: p50 {:.1} ms, max {:.1} ms",
            cold.len(),
            ms(percentile(&cold, 0.5)),
            ms(percentile(&cold, 1.0))
        );
        println!(
            "  search, warm (cached index), {} queries, k=10: p50 {:.1} ms, p99 {:.1} ms; {:?}",
            searches.len(),
            ms(percentile(&searches, 0.5)),
            ms(percentile(&searches, 0.99)),
            service.index_stats()
        );
    });
}
