//! Run safety through the binary: hostile ids, one run per tag, a double Ctrl-C, torn and
//! foreign result lines, pending questions over an incomplete memory, provenance-driven
//! re-answers, and a refused key stopping the build, the answers and the judge at once.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use mragent::agent::scripted::is_answer_request;
use mragent::llm::scripted::{RecordedRequest, ScriptedReply, ScriptedServer};
use mragent::results::Status;
use serde_json::Value;

use super::mragent_in;
use crate::support::{build_and_answer, mragent_command, project_with, read_lines};

/// A chat request of the answer phase. (`is_answer_request` also counts every embeddings
/// request, and the build embeds its memory through the same endpoint.)
pub(super) fn answer_chat(request: &RecordedRequest) -> bool {
    request.is_chat() && is_answer_request(request)
}

/// A server that builds and answers well, except where `special` says otherwise.
pub(super) async fn server(
    special: impl Fn(&RecordedRequest) -> Option<ScriptedReply> + Send + Sync + 'static,
) -> ScriptedServer {
    let respond = build_and_answer(|_| None);
    ScriptedServer::with_responder(move |request| {
        special(request).unwrap_or_else(|| respond(request))
    })
    .await
    .unwrap()
}

/// A project directory with a copy of the answer fixture, changed by `edit`.
pub(super) fn project(edit: impl FnOnce(&mut Value)) -> (tempfile::TempDir, PathBuf) {
    project_with("tests/fixtures/answer/tiny_conversation.json", edit)
}

pub(super) fn run_args<'a>(
    data: &'a Path,
    server: &'a ScriptedServer,
    tag: &'a str,
) -> Vec<&'a str> {
    vec![
        "run",
        "--data-file",
        data.to_str().unwrap(),
        "--base-url",
        server.base_url(),
        "--model",
        "local/tiny",
        "--file",
        tag,
        "--no-memgas",
        "-q",
    ]
}

fn result_file(dir: &Path, tag: &str) -> PathBuf {
    dir.join(format!("result/locomo/conv-7_result_local-tiny_{tag}.jsonl"))
}

fn manifest(dir: &Path, tag: &str) -> Value {
    let path = dir.join(format!("result/locomo/local-tiny_{tag}.manifest.json"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test]
async fn traversal_and_absolute_ids_are_refused_before_anything_is_written() {
    for id in ["../../x", "/tmp/mragent-absolute"] {
        let (dir, data) = project(|data| data[0]["sample_id"] = Value::from(id));
        let server = server(|_| None).await;
        let output = mragent_in(dir.path(), &run_args(&data, &server, "t"), &[]).await;
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains(&format!("{id:?}")) && stderr.contains("sample id"), "{stderr}");
        assert!(!dir.path().join("result").exists() && !dir.path().join("data").exists());
        assert_eq!(server.request_count(), 0);
    }
}

#[tokio::test]
async fn a_second_run_with_the_same_tag_is_refused() {
    let (dir, data) = project(|_| {});
    let server = server(|_| None).await;
    // A live process (this test) holds the lock of dataset locomo, model local-tiny, tag t.
    let lock = dir.path().join("result/locomo/.local-tiny_t.lock");
    std::fs::create_dir_all(lock.parent().unwrap()).unwrap();
    let holder = mragent::recorded::lock::LockHolder::current();
    std::fs::write(&lock, serde_json::to_string(&holder).unwrap()).unwrap();
    let output = mragent_in(dir.path(), &run_args(&data, &server, "t"), &[]).await;
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("another run") && stderr.contains(&holder.pid.to_string()), "{stderr}");
    assert_eq!(server.request_count(), 0);
    assert!(lock.exists(), "the holder's lock is left alone");
    // Another tag runs.
    let other = mragent_in(dir.path(), &run_args(&data, &server, "u"), &[]).await;
    assert!(other.status.success(), "{}", text(&other.stderr));
}

#[tokio::test]
async fn torn_and_foreign_lines_are_moved_aside_never_deleted() {
    let (dir, data) = project(|_| {});
    let server = server(|_| None).await;
    let args = run_args(&data, &server, "t");
    assert!(mragent_in(dir.path(), &args, &[]).await.status.success());
    let path = result_file(dir.path(), "t");
    let answered = read_lines(&path).len();
    let junk = "{\"something\": \"else\"}\n{\"question_id\":\"conv-7:q1\",\"sam";
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend_from_slice(junk.as_bytes());
    std::fs::write(&path, bytes).unwrap();
    let before = server.request_count();
    let rerun = mragent_in(dir.path(), &args, &[]).await;
    assert!(rerun.status.success(), "{}", text(&rerun.stderr));
    assert_eq!(server.request_count(), before, "nothing is answered again");
    assert_eq!(read_lines(&path).len(), answered);
    let rejected =
        std::fs::read_to_string(path.with_file_name("conv-7_result_local-tiny_t.rejected.jsonl"))
            .unwrap();
    assert_eq!(rejected, format!("{junk}\n"));
    assert_eq!(manifest(dir.path(), "t")["status"], "complete");
}

#[tokio::test]
async fn an_incomplete_memory_leaves_questions_pending_then_a_rerun_answers_them() {
    let (dir, data) = project(|_| {});
    // The endpoint fails every call about session 2, after all retries: it stays out of
    // memory. (An unparsable reply would not: its turns go in verbatim after the re-asks.)
    let broken = server(|request| {
        (request.is_chat()
            && !is_answer_request(request)
            && request.transcript().contains("[D2:1]"))
        .then(|| ScriptedReply::Status { status: 500, message: "upstream down".into() })
    })
    .await;
    let output = mragent_in(dir.path(), &run_args(&data, &broken, "t"), &[]).await;
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("pending") && stderr.contains("conv-7"), "{stderr}");
    assert!(read_lines(&result_file(dir.path(), "t")).is_empty(), "no answer over a broken memory");
    assert!(broken.requests().iter().all(|request| !answer_chat(request)));
    let recorded = manifest(dir.path(), "t");
    assert_eq!(recorded["summary"]["pending"], 9, "{recorded}");
    assert_eq!(recorded["exit_code"], 2);

    let good = server(|_| None).await;
    let rerun = mragent_in(dir.path(), &run_args(&data, &good, "t"), &[]).await;
    assert!(rerun.status.success(), "{}", text(&rerun.stderr));
    let answered = read_lines(&result_file(dir.path(), "t"));
    assert_eq!(answered.len(), 9);
    assert!(
        answered.iter().all(|line| line.status == Status::Ok && !line.provenance.memory.is_empty())
    );
}

#[tokio::test]
async fn a_changed_question_is_answered_again() {
    let (dir, data) = project(|_| {});
    let server = server(|_| None).await;
    assert!(mragent_in(dir.path(), &run_args(&data, &server, "t"), &[]).await.status.success());
    let first = read_lines(&result_file(dir.path(), "t"));
    assert!(first.iter().all(|line| line.provenance.model == "local/tiny"));

    // The TempDir must live until the copy: dropping it deletes the edited file.
    let (_edited_dir, edited) = project(|data| {
        let question = data[0]["qa"][0]["question"].as_str().unwrap().to_string();
        data[0]["qa"][0]["question"] = Value::from(format!("{question} (edited)"));
    });
    std::fs::copy(&edited, &data).unwrap();
    let rerun = mragent_in(dir.path(), &run_args(&data, &server, "t"), &[]).await;
    assert!(rerun.status.success(), "{}", text(&rerun.stderr));
    assert!(text(&rerun.stdout).contains("1 answered now"), "{}", text(&rerun.stdout));
    let path = result_file(dir.path(), "t");
    let superseded =
        std::fs::read_to_string(path.with_file_name("conv-7_result_local-tiny_t.superseded.jsonl"))
            .unwrap();
    assert_eq!(superseded.lines().count(), 1);
    let again = read_lines(&path);
    assert_eq!(again.len(), first.len());
    assert!(again.iter().any(|line| line.question.ends_with("(edited)")));
}

fn refused(body: &str) -> ScriptedReply {
    ScriptedReply::Status { status: 401, message: body.to_string() }
}

#[tokio::test]
async fn a_refused_key_stops_the_build_and_the_answers_at_once() {
    for body in ["", "Invalid API key"] {
        // During the build.
        let (dir, data) = project(|_| {});
        let reply = refused(body);
        let building = server(move |_| Some(reply.clone())).await;
        let output = mragent_in(dir.path(), &run_args(&data, &building, "t"), &[]).await;
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains("building stopped") && stderr.contains("OPENAI_API_KEY"),
            "{stderr}"
        );
        assert!(building.request_count() <= 4, "{} requests", building.request_count());
        assert_eq!(manifest(dir.path(), "t")["status"], "failed");

        // While answering.
        let reply = refused(body);
        let answering = server(move |request| answer_chat(request).then(|| reply.clone())).await;
        let output = mragent_in(dir.path(), &run_args(&data, &answering, "t"), &[]).await;
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{stderr}");
        assert_eq!(stderr.matches("answering stopped").count(), 1, "{stderr}");
        assert!(stderr.contains("OPENAI_API_KEY"), "{stderr}");
        assert!(read_lines(&result_file(dir.path(), "t")).is_empty(), "no ERROR row per question");
        let answer_requests = answering.requests().iter().filter(|r| answer_chat(r)).count();
        assert!(answer_requests <= 12, "{answer_requests} answer requests after a 401");
    }
}

#[tokio::test]
async fn a_refused_key_stops_the_judge_at_once() {
    let (dir, data) = project(|_| {});
    let good = server(|_| None).await;
    assert!(mragent_in(dir.path(), &run_args(&data, &good, "t"), &[]).await.status.success());
    for body in ["", "{\"error\":\"no such key\"}"] {
        let reply = refused(body);
        let judge = server(move |_| Some(reply.clone())).await;
        let args = [
            "eval",
            "--data-file",
            data.to_str().unwrap(),
            "--model",
            "local/tiny",
            "--file",
            "t",
            "--judge-model",
            "judge/x",
            "--base-url",
            judge.base_url(),
            "--judge-workers",
            "2",
            "--no-audit",
        ];
        let output = mragent_in(dir.path(), &args, &[]).await;
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{stderr}");
        assert_eq!(stderr.matches("judging stopped").count(), 1, "{stderr}");
        assert!(stderr.contains("OPENAI_API_KEY"), "{stderr}");
        assert!(judge.request_count() <= 4, "{} requests", judge.request_count());
    }
}

#[cfg(unix)]
#[tokio::test]
async fn a_second_ctrl_c_exits_at_once() {
    let (dir, data) = project(|_| {});
    // Slow answers keep the run busy.
    let slow = server(|request| {
        answer_chat(request).then(|| ScriptedReply::text("{}").delayed(Duration::from_secs(30)))
    })
    .await;
    let mut child = mragent_command(dir.path(), &run_args(&data, &slow, "t"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !slow.requests().iter().any(answer_chat) {
        assert!(Instant::now() < deadline, "the run never started answering");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let interrupt = || std::process::Command::new("kill").args(["-INT", &pid]).status().unwrap();
    assert!(interrupt().success());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(child.try_wait().unwrap().is_none(), "the first Ctrl-C waits for the work in flight");
    let second = Instant::now();
    assert!(interrupt().success());
    let status =
        tokio::time::timeout(Duration::from_secs(10), child.wait()).await.unwrap().unwrap();
    assert!(second.elapsed() < Duration::from_secs(5));
    assert_eq!(status.code(), Some(130));
    let recorded = manifest(dir.path(), "t");
    assert_eq!(recorded["status"], "killed");
    assert!(!dir.path().join("result/locomo/.local-tiny_t.lock").exists());
}
