//! Benchmark (issue 43): what each answer path costs per question. The same questions are
//! answered three times, with `--answer loop`, `single` and `adaptive`, against the scripted
//! endpoint on 127.0.0.1 with a fixed latency on every reply; memories are built mechanically
//! (`agent::scripted::mechanical_memory`) with a MemGAS index (built beforehand through a
//! second endpoint without latency, whose hashed embeddings are the same), and the plausible
//! agent answers. Per mode: chat and embedding requests per question, prompt and completion
//! tokens per question, wall time (and per question), the share of questions on each path, and
//! the wall against the answer phase's latency floor (`requests × latency / workers`).
//!
//! Run: `cargo bench --bench answer_paths`. Knobs (environment): `BENCH_LATENCY_MS` (300),
//! `BENCH_SAMPLES` (1: conv-26; 10: all of LoCoMo), `BENCH_WORKERS` (10), `BENCH_MODES`
//! (`loop,single,adaptive`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::path::Path;
use std::time::{Duration, Instant};

use mragent::agent::scripted::{AgentScript, mechanical_memory, plausible_agent};
use mragent::agent::tools::compact::compact_result;
use mragent::agent::{AnswerGate, AnswerMode, AnswerSettings, answer_all};
use mragent::dataset::{DatasetKind, load_locomo};
use mragent::embedding::load_local_async;
use mragent::llm::scripted::{RecordedRequest, ScriptedServer};
use mragent::llm::{EmbedderConfig, LlmConfig, Secret, build_chat_model, build_embedder};
use mragent::results::{AnswerPath, ResultLine};
use mragent::retrieval::{IndexOptions, SessionUnits, build_index};
use mragent::snapshot::{MemgasMemory, Snapshot};
use serde_json::Value;

fn knob(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|value| value.parse().ok()).unwrap_or(default)
}

fn main() {
    let latency = Duration::from_millis(knob("BENCH_LATENCY_MS", 300));
    let workers = knob("BENCH_WORKERS", 10) as usize;
    let sample_count = knob("BENCH_SAMPLES", 1) as usize;
    let modes: Vec<AnswerMode> = std::env::var("BENCH_MODES")
        .unwrap_or_else(|_| "loop,single,adaptive".into())
        .split(',')
        .map(|name| match name.trim() {
            "loop" => AnswerMode::Loop,
            "single" => AnswerMode::Single,
            "adaptive" => AnswerMode::Adaptive,
            other => panic!("unknown mode {other}"),
        })
        .collect();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/dataset_locomo.json");
    let conversations = load_locomo(&path).unwrap();

    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        // The MemGAS index and its query embeddings come from the local all-MiniLM-L6-v2, as
        // in `mragent run` (the model ships in data/models).
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let local = load_local_async(None, root.join("data")).await.unwrap();
        let indexing = Instant::now();
        let mut indexes = Vec::new();
        for conversation in conversations.iter().take(sample_count) {
            let sessions: Vec<SessionUnits> =
                conversation.sessions.iter().map(SessionUnits::from_session).collect();
            indexes.push(
                build_index(sessions, &local, None, IndexOptions::default()).await.unwrap(),
            );
        }
        println!("indexes built locally in {:.1} s", indexing.elapsed().as_secs_f64());
        println!(
            "answer_paths: {} conversations, latency {} ms, {workers} workers",
            indexes.len(),
            latency.as_millis()
        );
        println!(
            "| mode | questions | chat req/q | embed req/q | prompt tok/q | completion tok/q | wall s | wall/q s | single | loop | escalated | wall/floor |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
        let mut parts = Vec::new();
        for mode in modes {
            let script = AgentScript { latency, ..AgentScript::default() };
            let server = ScriptedServer::with_responder(plausible_agent(script)).await.unwrap();
            let mut config =
                LlmConfig::new(server.base_url(), Secret::new("bench-key"), "bench-model");
            config.requests_per_minute = None;
            let chat = build_chat_model(&config).unwrap();
            let embedding = EmbedderConfig { model: "bench-embedding".into(), batch_size: 64 };
            let embedder = build_embedder(&config, &embedding).unwrap();
            let samples: Vec<Snapshot> = conversations
                .iter()
                .zip(&indexes)
                .map(|(conversation, index)| {
                    let mut memory = mechanical_memory(conversation, true).unwrap();
                    memory.memgas = Some(MemgasMemory::new(index.clone(), local.clone()));
                    memory
                })
                .collect();
            let questions: usize =
                samples.iter().map(|sample| sample.conversation.questions.len()).sum();
            let dir = tempfile::tempdir().unwrap();
            let mut settings = AnswerSettings::new(
                dir.path(),
                DatasetKind::Locomo,
                "bench",
                "bench-model",
                "bench",
            );
            settings.workers = workers;
            settings.progress = false;
            settings.traces = false;
            settings.answer = AnswerGate::with_mode(mode);
            let started = Instant::now();
            let summary =
                answer_all(&settings, &Default::default(), &samples, &chat, &embedder, std::future::pending())
                    .await
                    .unwrap();
            let wall = started.elapsed().as_secs_f64();
            let requests = server.requests();
            let chats = requests.iter().filter(|request| request.is_chat()).count() as f64;
            let embeds = requests.len() as f64 - chats;
            let lines: Vec<ResultLine> = summary
                .result_files
                .iter()
                .flat_map(|file| {
                    std::fs::read_to_string(file)
                        .unwrap_or_default()
                        .lines()
                        .map(|line| serde_json::from_str::<ResultLine>(line).unwrap())
                        .collect::<Vec<_>>()
                })
                .collect();
            assert_eq!(lines.len(), questions, "one result line per question");
            let share = |path: AnswerPath| {
                100.0 * lines.iter().filter(|line| line.path == Some(path)).count() as f64
                    / questions as f64
            };
            let q = questions as f64;
            let floor = requests.len() as f64 * latency.as_secs_f64() / workers as f64;
            println!(
                "| {} | {questions} | {:.2} | {:.2} | {:.0} | {:.0} | {wall:.1} | {:.3} | {:.1} % | {:.1} % | {:.1} % | {:.2} |",
                mode.as_str(),
                chats / q,
                embeds / q,
                summary.usage.prompt_tokens as f64 / q,
                summary.usage.completion_tokens as f64 / q,
                wall / q,
                share(AnswerPath::Single),
                share(AnswerPath::Loop),
                share(AnswerPath::Escalated),
                wall / floor,
            );
            if mode == AnswerMode::Loop {
                parts.push(prompt_parts(&requests));
            }
        }
        for table in parts {
            println!("{table}");
        }
    });
}

/// Where the loop's prompt bytes go (issue 43 point 5): every loop request's bytes split into
/// the system prompt, the tool specs, each field of the retrieval payload, the assistant's tool
/// calls, each tool's results (and how much of them is `(shown above)` stubs) and the other
/// user messages (final instructions, nudges), summed over the run. Requests re-send the whole
/// transcript, so a part's share counts every time it is sent.
fn prompt_parts(requests: &[RecordedRequest]) -> String {
    use std::collections::BTreeMap;
    let loop_head = mragent::prompts::ANSWER_SYSTEM.text.lines().next().unwrap_or_default();
    let mut bytes: BTreeMap<String, usize> = BTreeMap::new();
    let mut add = |part: String, size: usize| *bytes.entry(part).or_default() += size;
    let mut loop_requests = 0;
    for request in requests.iter().filter(|request| request.is_chat()) {
        let messages = request.messages();
        let system = messages.first().and_then(|message| message["content"].as_str());
        if !system.is_some_and(|text| text.starts_with(loop_head)) {
            continue;
        }
        loop_requests += 1;
        add("system prompt".into(), system.map_or(0, str::len));
        if let Some(tools) = request.body.get("tools") {
            add("tool specs".into(), tools.to_string().len());
        }
        let mut tool_names: BTreeMap<String, String> = BTreeMap::new();
        for (position, message) in messages.iter().enumerate().skip(1) {
            let content = message["content"].as_str().unwrap_or_default();
            match message["role"].as_str().unwrap_or_default() {
                "user" if position == 1 => match serde_json::from_str::<Value>(content) {
                    Ok(Value::Object(fields)) => {
                        // Lines the payload itself repeats (the same text in two fields).
                        let mut shown = std::collections::BTreeSet::new();
                        let compacted = compact_result(content.to_string(), &mut shown);
                        add(
                            "  payload lines repeated within it".into(),
                            content.len().saturating_sub(compacted.len()),
                        );
                        for (field, value) in fields {
                            add(format!("payload: {field}"), field.len() + value.to_string().len());
                        }
                    }
                    _ => add("payload (not JSON)".into(), content.len()),
                },
                "user" => add("other user messages".into(), content.len()),
                "assistant" => {
                    for call in message["tool_calls"].as_array().into_iter().flatten() {
                        let id = call["id"].as_str().unwrap_or_default().to_string();
                        let name = call["function"]["name"].as_str().unwrap_or("?").to_string();
                        tool_names.insert(id, name);
                    }
                    add("assistant tool calls".into(), message.to_string().len());
                }
                "tool" => {
                    let id = message["tool_call_id"].as_str().unwrap_or_default();
                    let name = tool_names.get(id).cloned().unwrap_or_else(|| "?".into());
                    let stubs = content.matches(": (shown above)").count();
                    add(format!("result: {name}"), content.len());
                    add("  of which (shown above) stubs".into(), stubs * 20);
                }
                other => add(format!("{other} messages"), content.len()),
            }
        }
    }
    let total: usize =
        bytes.iter().filter(|(part, _)| !part.starts_with("  ")).map(|(_, size)| size).sum();
    let mut rows: Vec<(String, usize)> = bytes.into_iter().collect();
    rows.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut out = format!(
        "\nloop prompt bytes by part, {loop_requests} requests, {total} bytes ({:.0} per request):\n\n| part | bytes/request | share |\n|---|---|---|\n",
        total as f64 / loop_requests.max(1) as f64
    );
    for (part, size) in rows {
        out.push_str(&format!(
            "| {part} | {:.0} | {:.1} % |\n",
            size as f64 / loop_requests.max(1) as f64,
            100.0 * size as f64 / total.max(1) as f64
        ));
    }
    out
}
