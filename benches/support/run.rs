//! Running the release binary against the scripted endpoint, for the `run_*` benchmarks: the
//! endpoint's responder (build stages mechanically, answers by the plausible agent, a fixed
//! latency on every reply), one `mragent run` in a new project, and what it left on disk
//! (result lines, retries and hedges in the question traces).

// Each bench uses the part of this module it needs.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use mragent::agent::scripted::{AgentScript, is_answer_request, plausible_agent};
use mragent::agent::trace::{TraceEvent, read_trace};
use mragent::llm::scripted::{RecordedRequest, ScriptedReply};
use mragent::results::ResultLine;
use regex::Regex;
use serde_json::Value;

use super::stages;

/// Dimension of `text-embedding-3-large`, the default embedding model.
pub(crate) const DIMS: usize = 3072;

/// `/proc/loadavg`, trimmed (empty where there is none).
pub(crate) fn load() -> String {
    std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim().to_string()
}

/// The endpoint of a clean run: build stages and embeddings answered mechanically
/// (`stages::answer`, embeddings of [`DIMS`]), the answer stage by the plausible agent, every
/// reply after `latency`. Without `call_memgas` the agent never sees (so never calls)
/// `query_memgas`.
pub(crate) fn responder(
    latency: Duration,
    call_memgas: bool,
) -> impl Fn(&RecordedRequest) -> ScriptedReply + Send + Sync + 'static {
    let agent = plausible_agent(AgentScript { latency, ..AgentScript::default() });
    let (turn, session) = (Regex::new(stages::TURN).unwrap(), Regex::new(stages::SESSION).unwrap());
    move |request: &RecordedRequest| {
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
    }
}

/// One finished `mragent run`.
pub(crate) struct Finished {
    /// From the spawn to the exit.
    pub(crate) wall: Duration,
    /// When the child was spawned (the clock the endpoint's arrival times share).
    pub(crate) started: Instant,
    pub(crate) status: ExitStatus,
    pub(crate) stderr: String,
    /// Peak RSS of the child (`/usr/bin/time -f %M`), MB.
    pub(crate) rss_mb: f64,
    /// The project directory (removed on drop).
    pub(crate) dir: tempfile::TempDir,
}

/// The binary to run: `BENCH_MRAGENT_BIN` when set (a copy taken right after the build: the
/// shared target directory's binary may be replaced by another build while a bench runs),
/// else the one cargo built for this bench.
pub(crate) fn binary() -> String {
    std::env::var("BENCH_MRAGENT_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_mragent").into())
}

/// `mragent run --data-file data/dataset_locomo.json --base-url <base_url> --model local/bench
/// -q` plus `args`, in a new project, under `/usr/bin/time` for the peak RSS; `RUST_LOG` is
/// `log` when given (the log file under `log/` then holds those records).
pub(crate) async fn run_mragent(base_url: &str, args: &[&str], log: Option<&str>) -> Finished {
    let dir = tempfile::tempdir().unwrap();
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/dataset_locomo.json");
    let rss_file = dir.path().join("rss.txt");
    let started = Instant::now();
    let output = tokio::process::Command::new("/usr/bin/time")
        .args(["-f", "%M", "-o", rss_file.to_str().unwrap(), &binary()])
        .args(["run", "--data-file", data.to_str().unwrap(), "--base-url", base_url])
        .args(["--model", "local/bench", "-q"])
        .args(args)
        .current_dir(dir.path())
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENROUTER_API_KEY")
        .env("RUST_LOG", log.unwrap_or_default())
        .output()
        .await
        .unwrap();
    let wall = started.elapsed();
    let rss_mb = std::fs::read_to_string(&rss_file)
        .unwrap_or_default()
        .trim()
        .lines()
        .last()
        .and_then(|line| line.parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    Finished { wall, started, status: output.status, stderr, rss_mb, dir }
}

/// Every file under `directory` whose name ends with `suffix`, sorted.
pub(crate) fn files(directory: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(directory) else { return found };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(files(&path, suffix));
        } else if path.to_string_lossy().ends_with(suffix) {
            found.push(path);
        }
    }
    found.sort();
    found
}

/// The result lines of the project at `root` (rejected and superseded files left out).
pub(crate) fn result_lines(root: &Path) -> Vec<ResultLine> {
    files(&root.join("result"), ".jsonl")
        .iter()
        .filter(|path| {
            let name = path.to_string_lossy();
            !name.contains(".rejected") && !name.contains(".superseded")
        })
        .flat_map(|path| {
            let text = std::fs::read_to_string(path).unwrap();
            text.lines().filter_map(|line| serde_json::from_str(line).ok()).collect::<Vec<_>>()
        })
        .collect()
}

/// Retries and hedges over the question traces of the project at `root`.
pub(crate) fn retries_and_hedges(root: &Path) -> (u64, u64) {
    let (mut retries, mut hedges) = (0, 0);
    for trace in files(&root.join("log"), ".jsonl") {
        for record in read_trace(&trace).unwrap_or_default() {
            if let TraceEvent::Finish { counts, .. } = record.event {
                retries += counts.retries;
                hedges += counts.hedges;
            }
        }
    }
    (retries, hedges)
}

/// How often the adaptive concurrency limit was cut and the lowest limit it was cut to, from
/// the debug records of the log files under `root/log` (a run with `RUST_LOG` naming
/// `mragent::llm::adaptive=debug`).
pub(crate) fn limit_cuts(root: &Path) -> (usize, Option<u64>) {
    let limit = Regex::new(r"limit=(\d+)").unwrap();
    let (mut cuts, mut lowest) = (0, None::<u64>);
    for file in files(&root.join("log"), ".log") {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        for line in text.lines().filter(|line| line.contains("concurrency limit cut")) {
            cuts += 1;
            if let Some(value) = limit.captures(line).and_then(|c| c[1].parse::<u64>().ok()) {
                lowest = Some(lowest.map_or(value, |low| low.min(value)));
            }
        }
    }
    (cuts, lowest)
}

/// The last `lines` lines of `text`.
pub(crate) fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
