//! Benchmark (issue 26): what recording costs and how long checking takes, for one LoCoMo
//! conversation (conv-26, 199 questions by default) through the release binary against the
//! scripted endpoint on 127.0.0.1 (build stages answered mechanically, the answers by the
//! plausible agent, which calls `query_memgas`, so local query embeddings are recorded too; the
//! judge compares the answer with the gold).
//!
//! Steps: `run` (recording), `eval` with a judge (3 runs, recording), `replay` with the endpoint
//! gone, `export`, `verify`, and, when `BENCH_QEMU_CPU` names CPU models (comma-separated),
//! `verify` again under `qemu-x86_64 -cpu <model>` for each: another CPU model, other cache
//! sizes, the same verdict. Prints the recorded calls' size on disk (and the raw JSON the
//! endpoint received, for the ratio), and every step's wall time.
//!
//! Run: `cargo bench --bench record`. Knobs: `BENCH_SAMPLE` (26), `BENCH_MEMGAS` (1),
//! `BENCH_QEMU_CPU` (none).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use mragent::llm::scripted::{RecordedRequest, ScriptedReply, ScriptedServer};

#[path = "support/run.rs"]
mod run;
#[path = "support/stages.rs"]
mod stages;

fn knob(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_string())
}

/// The run's endpoint, which also judges: CORRECT when the answer contains the gold.
fn responder(memgas: bool) -> impl Fn(&RecordedRequest) -> ScriptedReply + Send + Sync + 'static {
    let rest = run::responder(Duration::ZERO, memgas);
    move |request| mragent::eval::judge::scripted_verdict(request).unwrap_or_else(|| rest(request))
}

/// Runs `program args` in `root`; its wall time and output.
async fn timed(root: &Path, program: &str, args: &[&str]) -> (Duration, Output) {
    let started = Instant::now();
    let output = tokio::process::Command::new(program)
        .args(args)
        .current_dir(root)
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENROUTER_API_KEY")
        .output()
        .await
        .unwrap();
    (started.elapsed(), output)
}

fn check(step: &str, output: &Output) {
    assert!(
        output.status.success(),
        "{step} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        run::tail(&String::from_utf8_lossy(&output.stderr), 20)
    );
}

fn main() {
    let sample = knob("BENCH_SAMPLE", "26");
    let memgas = knob("BENCH_MEMGAS", "1") != "0";
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let data = repo.join("data/dataset_locomo.json");
    let audit = repo.join("data/locomo_audit.json");
    let model_dir = memgas.then(|| {
        let source = mragent::settings::model_source(&repo.join("data"));
        let options = mragent::embedding::LocalEmbedderOptions::default();
        let local = mragent::embedding::LocalEmbedder::from_source(&source, options).unwrap();
        local.model_dir().to_str().unwrap().to_string()
    });
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let server = ScriptedServer::with_responder(responder(memgas)).await.unwrap();
        let mut args = vec!["--sample", sample.as_str(), "--file", "pub"];
        match &model_dir {
            Some(dir) => args.extend(["--embed-model-dir", dir.as_str()]),
            None => args.push("--no-memgas"),
        }
        let finished = run::run_mragent(server.base_url(), &args, None).await;
        assert!(finished.status.success(), "{}", run::tail(&finished.stderr, 20));
        let root = finished.dir.path();
        let questions = run::result_lines(root).len();
        let raw: usize = server.requests().iter().map(|r| r.body.to_string().len()).sum();
        let sent = server.request_count();
        let store = root.join("record/locomo/local-bench_pub.calls.sqlite");
        let size = mragent::llm::tape::CallStore::open(&store).unwrap().size().unwrap();
        let calls = mragent::llm::tape::CallStore::open(&store).unwrap().calls().unwrap();
        let kinds = |kind: &str, model: Option<&str>| {
            calls
                .iter()
                .filter(|call| call.kind == kind && model.is_none_or(|model| call.model == model))
                .count()
        };
        let local = mragent::embedding::LOCAL_EMBEDDER_NAME;
        let (chats, embeds, locals) = (kinds("chat", None), kinds("embed", None), kinds("embed", Some(local)));
        println!(
            "record: conv-{sample}, {questions} questions, memgas {memgas}: run {:.1} s, {sent} requests ({raw} bytes of request JSON)",
            finished.wall.as_secs_f64()
        );
        println!(
            "  recorded calls: {} calls, {} distinct bodies, {} bytes on disk ({:.1} KB per question; request JSON / store = {:.1})",
            size.calls,
            size.bodies,
            size.file_bytes,
            size.file_bytes as f64 / 1024.0 / questions as f64,
            raw as f64 / size.file_bytes as f64
        );

        println!(
            "  by kind: {chats} chat calls, {embeds} embedded texts ({locals} by the local model); vectors of a real API embedder would add at most {:.1} MB uncompressed ({} texts × 3072 × 4 bytes)",
            ((embeds - locals) * run::DIMS * 4) as f64 / 1e6,
            embeds - locals
        );
        let binary = run::binary();
        let data = data.to_str().unwrap();
        let eval = [
            "eval", "--data-file", data, "--model", "local/bench", "--file", "pub", "--sample",
            sample.as_str(), "--judge-model", "judge/x", "--base-url", server.base_url(),
            "--audit-file", audit.to_str().unwrap(), "-q",
        ];
        let (wall, output) = timed(root, &binary, &eval).await;
        check("eval", &output);
        let judge = root.join("record/locomo/local-bench_pub.judge.sqlite");
        let judge = mragent::llm::tape::CallStore::open(&judge).unwrap().size().unwrap();
        println!(
            "  eval (judge, 3 runs): {:.1} s; judge calls {} in {} bytes",
            wall.as_secs_f64(),
            judge.calls,
            judge.file_bytes
        );
        drop(server);

        let mut replay = vec![
            "replay", "--data-file", data, "--base-url", "http://127.0.0.1:9/v1", "--model",
            "local/bench", "--file", "pub", "--sample", sample.as_str(), "-q",
        ];
        if model_dir.is_none() {
            replay.push("--no-memgas");
        }
        let (wall, output) = timed(root, &binary, &replay).await;
        check("replay", &output);
        let said = String::from_utf8_lossy(&output.stdout);
        let line = said.lines().find(|line| line.starts_with("replay of")).unwrap_or_default();
        println!("  replay, no network: {:.2} s ({line})", wall.as_secs_f64());

        let export = ["export", "--model", "local/bench", "--file", "pub"];
        let (wall, output) = timed(root, &binary, &export).await;
        check("export", &output);
        let archive = root.join("export/locomo/local-bench_pub.tar.zst");
        let bytes = std::fs::metadata(&archive).unwrap().len();
        println!("  export: {:.2} s, archive {bytes} bytes", wall.as_secs_f64());

        let elsewhere = tempfile::tempdir().unwrap();
        let archive = archive.to_str().unwrap();
        let (wall, output) = timed(elsewhere.path(), &binary, &["verify", archive]).await;
        check("verify", &output);
        let verdict = String::from_utf8_lossy(&output.stdout);
        println!("  verify: {:.2} s: {}", wall.as_secs_f64(), verdict.trim());

        for cpu in knob("BENCH_QEMU_CPU", "").split(',').filter(|cpu| !cpu.is_empty()) {
            let other = tempfile::tempdir().unwrap();
            let args = ["-cpu", cpu, binary.as_str(), "verify", archive];
            let (wall, output) = timed(other.path(), "qemu-x86_64", &args).await;
            let verdict = String::from_utf8_lossy(&output.stdout);
            println!(
                "  verify under qemu-x86_64 -cpu {cpu}: {:.1} s, exit {:?}: {}",
                wall.as_secs_f64(),
                output.status.code(),
                verdict.trim()
            );
        }
    });
}
