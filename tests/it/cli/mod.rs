//! The binary as a user runs it: help lists only real commands, a missing key fails at once with
//! directions, and `ping` goes through the real client to the scripted endpoint.

use std::process::Output;

use mragent::llm::scripted::{ScriptedReply, ScriptedServer};

use crate::support::{build_and_answer, mragent_command, project_with, read_lines, repo_path};

/// Every subcommand `mragent --help` must list: exactly the ones that work.
const COMMANDS: &[&str] = &[
    "build", "run", "eval", "replay", "export", "verify", "compare", "learn", "retrieve", "trace",
    "ping", "memory", "ask", "serve", "mcp", "store", "keys",
];

/// Run the built binary in a new empty directory (no `.env`) with a clean model environment.
async fn mragent(args: &[&str], env: &[(&str, &str)]) -> (Output, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let output = mragent_in(dir.path(), args, env).await;
    (output, dir)
}

/// Run the built binary in `dir` (a project directory) with a clean model environment plus
/// `env`.
async fn mragent_in(dir: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = mragent_command(dir, args);
    for (name, value) in env {
        command.env(name, value);
    }
    command.output().await.unwrap()
}

fn listed_commands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|line| !line.starts_with("Commands:"))
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn help_lists_only_real_commands() {
    let (output, _dir) = mragent(&["--help"], &[]).await;
    assert!(output.status.success());
    let help = String::from_utf8(output.stdout).unwrap();
    assert_eq!(listed_commands(&help), COMMANDS, "{help}");
}

#[tokio::test]
async fn missing_key_fails_at_once_with_directions() {
    let (output, _dir) = mragent(&["ping"], &[]).await;
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(stderr.contains("OPENROUTER_API_KEY"), "{stderr}");
    assert!(stderr.contains("--base-url"), "{stderr}");
}

#[tokio::test]
async fn ping_reaches_a_local_endpoint_without_leaking_the_key() {
    let key = "sk-local-CLI-LEAKCHECK-0042";
    let server =
        ScriptedServer::with_script([ScriptedReply::text("42").with_usage(12, 1)]).await.unwrap();
    let (output, dir) = mragent(
        &["ping", "--base-url", server.base_url(), "--model", "local/tiny"],
        &[("OPENAI_API_KEY", key)],
    )
    .await;
    let stdout = String::from_utf8(output.stdout).unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(output.status.success(), "{stderr}");
    assert!(stdout.contains("\"42\"") && stdout.contains("12 prompt"), "{stdout}");
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].header("authorization"), Some(format!("Bearer {key}").as_str()));
    assert_eq!(requests[0].body["model"], "local/tiny");
    assert!(!stdout.contains(key) && !stderr.contains(key));
    // The log file written under log/ must not carry the key either.
    for entry in std::fs::read_dir(dir.path().join("log")).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        assert!(!text.contains(key));
    }
}

#[tokio::test]
async fn ping_fails_when_the_server_echoes_the_prompt() {
    let server = ScriptedServer::with_responder(|request| {
        ScriptedReply::text(request.last_message_text().to_owned())
    })
    .await
    .unwrap();
    let (output, _dir) =
        mragent(&["ping", "--base-url", server.base_url(), "--model", "local/echo"], &[]).await;
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("repeats the prompt") && stderr.contains("--model"), "{stderr}");
}

#[tokio::test]
async fn build_command_builds_a_conversation_then_resumes_from_cache() {
    let server = ScriptedServer::with_responder(crate::ingest::responder(|_| None)).await.unwrap();
    let fixture = repo_path("tests/fixtures/ingest/tiny_conversation.json");
    let fixture = fixture.to_str().unwrap();
    let args = [
        "build",
        "--data-file",
        fixture,
        "--base-url",
        server.base_url(),
        "--model",
        "local/tiny",
        "-q",
    ];
    let (output, dir) = mragent(&args, &[]).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("events"), "{stdout}");
    let first = server.request_count();
    assert!(first > 0);
    assert!(dir.path().join("data/locomo/rewrite_local-tiny").is_dir());

    // The same command in the same project directory finds everything cached.
    let rerun = mragent_in(dir.path(), &args, &[]).await;
    assert!(rerun.status.success());
    assert_eq!(server.request_count(), first, "a rerun must not ask the model again");
}

/// A session without turns is counted and named in the build's report, not only logged.
#[tokio::test]
async fn build_counts_and_names_sessions_without_turns() {
    let server = ScriptedServer::with_responder(crate::ingest::responder(|_| None)).await.unwrap();
    let mut sample = String::new();
    let (dir, file) = project_with("tests/fixtures/ingest/tiny_conversation.json", |samples| {
        sample = samples[0]["sample_id"].as_str().unwrap().to_string();
        let conversation = samples[0]["conversation"].as_object_mut().unwrap();
        conversation.insert("session_9_date_time".into(), "1:00 pm on 1 June, 2023".into());
        conversation.insert("session_9".into(), serde_json::json!([]));
    });
    let args = [
        "build",
        "--data-file",
        file.to_str().unwrap(),
        "--base-url",
        server.base_url(),
        "--model",
        "local/tiny",
        "-q",
    ];
    let output = mragent_in(dir.path(), &args, &[]).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("3 sessions (0 from cache), 1 empty sessions skipped"), "{stdout}");
    assert!(
        stdout.contains(&format!("skipped: {sample} conversation.session_9: no turns")),
        "{stdout}"
    );
}

#[tokio::test]
async fn retrieve_command_runs_offline_and_writes_its_tables() {
    let model_dir = crate::retrieval::embedder().model_dir().to_str().unwrap().to_string();
    let fixture = repo_path("tests/fixtures/embedding/locomo_retrieval.json");
    let args = [
        "retrieve",
        "--data-file",
        fixture.to_str().unwrap(),
        "--method",
        "bm25,fusion",
        "--embed-model-dir",
        &model_dir,
        "-q",
    ];
    let (output, dir) = mragent(&args, &[]).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("bm25") && stdout.contains("fusion"), "{stdout}");
    assert!(!stdout.contains("memgas |"), "only the requested methods run: {stdout}");
    assert!(dir.path().join("eval/locomo/retrieve/summary.md").is_file());

    let (unknown, _dir) = mragent(&["retrieve", "--method", "magic"], &[]).await;
    assert!(!unknown.status.success());
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("unknown retrieval method `magic`"));
}

/// `retrieve` honours the dataset flags `run` takes (`--sample`, `--ca`,
/// `--drop-assistant-turns`) and refuses the ones that mean nothing for it; `bm25` alone runs
/// with no embedding model at all (none is loaded, nothing is embedded, no graph is built).
#[tokio::test]
async fn retrieve_honours_or_refuses_every_dataset_flag_of_run() {
    let fixture = repo_path("tests/fixtures/longmemeval_tiny.json");
    let fixture = fixture.to_str().unwrap();
    let lm = |extra: &[&'static str]| {
        let mut args = vec![
            "retrieve",
            "--data",
            "LM",
            "--data-file",
            fixture,
            "--method",
            "bm25",
            "--embed-model-dir",
            "/nonexistent/model",
            "-q",
        ];
        args.extend_from_slice(extra);
        args
    };
    let top_turns = |dir: &std::path::Path| -> Vec<String> {
        let lines = std::fs::read_to_string(dir.join("eval/LM/retrieve/bm25.jsonl")).unwrap();
        let first: serde_json::Value = serde_json::from_str(lines.lines().next().unwrap()).unwrap();
        serde_json::from_value(first["top_turns"].clone()).unwrap()
    };

    let (all, dir) = mragent(&lm(&[]), &[]).await;
    assert!(all.status.success(), "{}", String::from_utf8_lossy(&all.stderr));
    let summary: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("eval/LM/retrieve/summary.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(summary["n_questions"], 5);
    assert_eq!(summary["timings"]["texts_embedded"], 0);
    assert_eq!(summary["graph_nodes"], 0);
    assert!(!dir.path().join("data/LM/embedding").exists(), "bm25 embeds nothing");
    let log_dir = dir.path().join("log");
    let log = std::fs::read_dir(&log_dir).unwrap().next().unwrap().unwrap().path();
    assert!(std::fs::read_to_string(log).unwrap().contains("retrieve: finished"));

    // --ca 1 keeps the single-session-user question only.
    let (one_type, dir) = mragent(&lm(&["--ca", "1"]), &[]).await;
    assert!(one_type.status.success(), "{}", String::from_utf8_lossy(&one_type.stderr));
    let summary = std::fs::read_to_string(dir.path().join("eval/LM/retrieve/summary.md")).unwrap();
    assert!(summary.contains("1 questions"), "{summary}");
    assert!(summary.contains("question type single-session-user"), "{summary}");
    // Its haystack: D1:2, D2:2 and D2:4 are assistant turns.
    let with_assistant = top_turns(dir.path());
    assert!(with_assistant.contains(&"D2:4".to_string()), "{with_assistant:?}");

    let (dropped, dir) = mragent(&lm(&["--ca", "1", "--drop-assistant-turns"]), &[]).await;
    assert!(dropped.status.success(), "{}", String::from_utf8_lossy(&dropped.stderr));
    let turns = top_turns(dir.path());
    assert_eq!(turns.len(), 3, "{turns:?}");
    assert!(turns.iter().all(|id| id.ends_with(":1") || id.ends_with(":3")), "{turns:?}");

    for (args, message) in [
        (vec!["retrieve", "--ca", "1"], "--ca selects a LongMemEval question type"),
        (vec!["retrieve", "--drop-assistant-turns"], "--drop-assistant-turns is for LongMemEval"),
        (vec!["retrieve", "--data", "LM", "--lm-batch", "4"], "`retrieve` calls no LLM"),
        (vec!["retrieve", "--shard", "0/2"], "unexpected argument '--shard'"),
        (vec!["retrieve", "--workers", "2"], "unexpected argument '--workers'"),
        (vec!["retrieve", "--model", "gemini"], "unexpected argument '--model'"),
    ] {
        let (refused, _dir) = mragent(&args, &[]).await;
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(!refused.status.success(), "{args:?} must be refused");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    }
}

/// The whole user journey through the binary against the scripted endpoint: `run` builds the
/// memory and answers every question (MemGAS tool included, local embedder), a rerun answers
/// nothing again, `trace` renders a question, `eval` scores the run.
#[tokio::test]
async fn run_then_trace_then_eval_through_the_binary() {
    let server = ScriptedServer::with_responder(build_and_answer(|_| None)).await.unwrap();
    let fixture = repo_path("tests/fixtures/answer/tiny_conversation.json");
    let model_dir = crate::retrieval::embedder().model_dir().to_str().unwrap().to_string();
    let args = [
        "run",
        "--data-file",
        fixture.to_str().unwrap(),
        "--base-url",
        server.base_url(),
        "--model",
        "local/tiny",
        "--file",
        "journey",
        "--embed-model-dir",
        &model_dir,
        "-q",
    ];
    let (output, dir) = mragent(&args, &[]).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    let results = dir.path().join("result/locomo");
    let files: Vec<_> = std::fs::read_dir(&results)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|extension| extension == "jsonl"))
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let lines = read_lines(&files[0]);
    assert!(!lines.is_empty());
    assert!(lines.iter().all(|line| line.status == mragent::results::Status::Ok), "{lines:?}");
    let tools: Vec<String> = server
        .requests()
        .iter()
        .filter_map(|request| request.body.get("tools"))
        .flat_map(|tools| tools.as_array().cloned().unwrap_or_default())
        .filter_map(|tool| tool["function"]["name"].as_str().map(str::to_string))
        .collect();
    assert!(tools.iter().any(|name| name == "query_memgas"), "the MemGAS tool is offered");

    // A rerun in the same project answers nothing again.
    let before = server.request_count();
    let rerun = mragent_in(dir.path(), &args, &[]).await;
    assert!(rerun.status.success());
    assert_eq!(server.request_count(), before);

    let question_id = lines[0].question_id.clone();
    let trace = mragent_in(dir.path(), &["trace", &question_id], &[]).await;
    let rendered = String::from_utf8_lossy(&trace.stdout);
    assert!(trace.status.success(), "{}", String::from_utf8_lossy(&trace.stderr));
    assert!(rendered.contains(&question_id) && rendered.contains(&lines[0].question), "{rendered}");

    let eval_args = [
        "eval",
        "--model",
        "local/tiny",
        "--file",
        "journey",
        "--data-file",
        fixture.to_str().unwrap(),
        "--no-audit",
    ];
    let eval = mragent_in(dir.path(), &eval_args, &[]).await;
    assert!(eval.status.success(), "{}", String::from_utf8_lossy(&eval.stderr));
    assert!(dir.path().join("eval/locomo/journey/summary.md").is_file());

    // A result line lost: eval refuses, naming the question, unless --partial.
    let text = std::fs::read_to_string(&files[0]).unwrap();
    let kept: String = text.lines().skip(1).map(|line| format!("{line}\n")).collect();
    std::fs::write(&files[0], kept).unwrap();
    let eval = mragent_in(dir.path(), &eval_args, &[]).await;
    let stderr = String::from_utf8_lossy(&eval.stderr);
    assert_eq!(eval.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&question_id) && stderr.contains("no result line"), "{stderr}");
    let mut partial_args = eval_args.to_vec();
    partial_args.push("--partial");
    let eval = mragent_in(dir.path(), &partial_args, &[]).await;
    assert!(eval.status.success(), "{}", String::from_utf8_lossy(&eval.stderr));
    let table = String::from_utf8_lossy(&eval.stdout);
    let partial = format!("PARTIAL {}/{}", lines.len() - 1, lines.len());
    assert!(table.contains(&partial), "{table}");
}

#[tokio::test]
async fn eval_help_explains_every_column_and_option() {
    let (output, _dir) = mragent(&["eval", "--help"], &[]).await;
    assert!(output.status.success());
    let help = String::from_utf8(output.stdout).unwrap();
    for needle in [
        "--judge-protocol",
        "--judge-prompt",
        "--judge-runs",
        "--partial",
        "--paired-with",
        "--data-file",
        "--audit-file",
        "{{question}}",
        "  n  ",
        "F1 %",
        "EM %",
        "judge % [judged, failed]",
        "(audited)",
        "recall all/any %",
        "errors",
        "tokens/q",
        "cost $",
        "refusal rate",
        "PARTIAL n/N",
    ] {
        assert!(help.contains(needle), "eval --help lacks {needle:?}:\n{help}");
    }
}

/// Regression: a `.env` copied from `.env.example` must parse (clap rejects empty values), so
/// a fresh user gets the missing-key message, not an argument error.
#[tokio::test]
async fn env_example_copied_to_dot_env_parses() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(repo_path(".env.example"), dir.path().join(".env")).unwrap();
    let output = mragent_in(dir.path(), &["run", "--data", "locomo"], &[]).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("OPENROUTER_API_KEY"), "{stderr}");
}

mod errors;
mod forger;
mod learn;
mod learn_archive;
mod output;
mod pipeline;
mod record;
mod safety;
