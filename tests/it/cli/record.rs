//! Recorded runs through the binary: a run records every call; `replay` with the endpoint gone
//! gives the same result lines; a changed request is named, and `--fill` sends only what
//! changed; `export` then `verify` passes, and an altered result line, an altered judge verdict
//! or a missing trace fails with a message naming it.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use mragent::agent::rules::{Rule, RuleSet};
use mragent::llm::scripted::ScriptedServer;
use serde_json::{Value, json};

use super::mragent_in;
use super::safety::{project, run_args, server};

/// The answer fixture's endpoint, which also judges: CORRECT when the answer contains the gold.
pub(super) async fn judging_server() -> ScriptedServer {
    server(mragent::eval::judge::scripted_verdict).await
}

/// The result lines of `tag` by question id, without the measured latency.
fn lines(root: &Path, tag: &str) -> BTreeMap<String, Value> {
    let path = root.join(format!("result/locomo/conv-7_result_local-tiny_{tag}.jsonl"));
    let text = std::fs::read_to_string(&path).unwrap();
    text.lines()
        .map(|line| {
            let mut value: Value = serde_json::from_str(line).unwrap();
            value.as_object_mut().unwrap().remove("latency_ms");
            (value["question_id"].as_str().unwrap().to_string(), value)
        })
        .collect()
}

pub(super) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `replay` of `tag` against `base_url` (a dead one: nothing may be sent), plus `extra`.
fn replay_args<'a>(
    data: &'a Path,
    base_url: &'a str,
    tag: &'a str,
    extra: &[&'a str],
) -> Vec<&'a str> {
    let mut args = vec![
        "replay",
        "--data-file",
        data.to_str().unwrap(),
        "--base-url",
        base_url,
        "--model",
        "local/tiny",
        "--file",
        tag,
        "--no-memgas",
        "-q",
    ];
    args.extend(extra);
    args
}

const DEAD: &str = "http://127.0.0.1:9/v1";

#[tokio::test]
async fn a_replay_with_the_endpoint_gone_gives_the_same_result_lines() {
    let (dir, data) = project(|_| {});
    let live = server(|_| None).await;
    let output = mragent_in(dir.path(), &run_args(&data, &live, "t"), &[]).await;
    assert!(output.status.success(), "{}", text(&output.stderr));
    let chats = live.requests().iter().filter(|request| request.is_chat()).count();
    drop(live);
    let manifest: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("result/locomo/local-tiny_t.manifest.json"))
            .unwrap(),
    )
    .unwrap();
    // Every chat request the endpoint saw is on the tape, once.
    let store = dir.path().join("record/locomo/local-tiny_t.calls.sqlite");
    let calls = mragent::llm::tape::CallStore::open_read_only(&store).unwrap().calls().unwrap();
    assert_eq!(calls.iter().filter(|call| call.kind == "chat").count(), chats);
    assert!(calls.iter().any(|call| call.kind == "embed"));
    assert!(calls.iter().any(|call| call.context.contains("conv-7")), "calls carry their question");
    assert!(manifest["calls"]["calls"].as_u64().unwrap() > 0, "{manifest}");
    assert!(manifest["replay_args"].as_array().unwrap().iter().any(|arg| arg == "--no-memgas"));

    let output = mragent_in(dir.path(), &replay_args(&data, DEAD, "t", &[]), &[]).await;
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", text(&output.stderr));
    assert!(stdout.contains("replay of t: 9 of 9 result lines identical"), "{stdout}");
    assert_eq!(lines(dir.path(), "t"), lines(dir.path(), "t-replay"));
    // The recorded file is byte for byte the replayed one, once the measured latency is out.
    assert_eq!(lines(dir.path(), "t").len(), 9);
}

#[tokio::test]
async fn a_changed_request_is_named_and_fill_sends_only_the_changed_calls() {
    let (dir, data) = project(|_| {});
    let live = server(|_| None).await;
    let output = mragent_in(dir.path(), &run_args(&data, &live, "t"), &[]).await;
    assert!(output.status.success(), "{}", text(&output.stderr));
    drop(live);

    // A rule appended to the loop's system prompt: the first loop request is named with its
    // question.
    let rule = Rule {
        id: "M0".into(),
        text: "Quote the date of the line you answer from.".into(),
        sources: Vec::new(),
        added: None,
        changed: None,
    };
    let rules = serde_json::to_string(&RuleSet::new(vec![rule])).unwrap();
    std::fs::write(dir.path().join("rules.json"), rules).unwrap();
    let ruled = replay_args(&data, DEAD, "t", &["--meta-rules", "rules.json", "--to", "ruled"]);
    let output = mragent_in(dir.path(), &ruled, &[]).await;
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("answering stopped: replay: question conv-7:"), "{stderr}");
    assert!(stderr.contains("chat request") && stderr.contains("was never recorded"), "{stderr}");

    // One question reworded: its requests were never recorded.
    let original = std::fs::read_to_string(&data).unwrap();
    let mut changed: Value = serde_json::from_str(&original).unwrap();
    let question = changed[0]["qa"][0]["question"].as_str().unwrap().to_string();
    let reworded = format!("{question} Please answer briefly.");
    changed[0]["qa"][0]["question"] = Value::from(reworded.clone());
    std::fs::write(&data, serde_json::to_string(&changed).unwrap()).unwrap();

    let output = mragent_in(dir.path(), &replay_args(&data, DEAD, "t", &[]), &[]).await;
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("was never recorded"), "{stderr}");
    assert!(stderr.contains("the build of conv-7"), "names the work item: {stderr}");
    assert!(stderr.contains("Please answer briefly"), "names the request: {stderr}");

    // --fill: only the reworded question's calls reach the endpoint.
    let filler = server(|_| None).await;
    let output = mragent_in(
        dir.path(),
        &replay_args(&data, filler.base_url(), "t", &["--fill", "--to", "filled"]),
        &[],
    )
    .await;
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", text(&output.stderr));
    let requests = filler.requests();
    assert!(!requests.is_empty());
    for request in &requests {
        let body = request.body.to_string();
        assert!(body.contains("Please answer briefly"), "an unchanged call was sent: {body}");
    }
    let manifest: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("result/locomo/local-tiny_filled.manifest.json"))
            .unwrap(),
    )
    .unwrap();
    let totals = &manifest["calls"]["totals"];
    assert!(totals["replayed"].as_u64().unwrap() > 0, "{totals}");
    assert_eq!(
        totals["filled"].as_u64().unwrap() as usize,
        requests.iter().map(|r| r.body["input"].as_array().map_or(1, Vec::len)).sum::<usize>(),
        "every filled call was sent once: {totals}"
    );
    assert!(stdout.contains("8 of 9 result lines identical"), "{stdout}");
    let (before, after) = (lines(dir.path(), "t"), lines(dir.path(), "filled"));
    let moved: Vec<&String> = before.keys().filter(|id| before[*id] != after[*id]).collect();
    assert_eq!(moved.len(), 1, "{moved:?}");
}

/// Reads an archive into (path → bytes), `archive.json` included.
pub(super) fn read_archive(path: &Path) -> BTreeMap<String, Vec<u8>> {
    let decoder = zstd::Decoder::new(std::fs::File::open(path).unwrap()).unwrap();
    let mut archive = tar::Archive::new(decoder);
    let mut members = BTreeMap::new();
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let name = entry.path().unwrap().display().to_string();
        let mut bytes = Vec::new();
        entry.read_to_end(&mut bytes).unwrap();
        members.insert(name, bytes);
    }
    members
}

/// Writes `members` as an archive at `path`; with `rehash`, `archive.json` lists them anew (a
/// forger's archive, consistent with itself).
pub(super) fn write_archive(path: &Path, mut members: BTreeMap<String, Vec<u8>>, rehash: bool) {
    if rehash {
        let mut index: Value = serde_json::from_slice(&members["archive.json"]).unwrap();
        let files: Vec<Value> = members
            .iter()
            .filter(|(name, _)| *name != "archive.json")
            .map(|(name, bytes)| {
                use sha2::Digest as _;
                let hash: String =
                    sha2::Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect();
                json!({"path": name, "sha256": hash, "bytes": bytes.len()})
            })
            .collect();
        index["files"] = Value::from(files);
        members.insert("archive.json".into(), serde_json::to_vec(&index).unwrap());
    }
    let encoder = zstd::Encoder::new(std::fs::File::create(path).unwrap(), 3).unwrap();
    let mut builder = tar::Builder::new(encoder);
    for (name, bytes) in &members {
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        builder.append_data(&mut header, name, bytes.as_slice()).unwrap();
    }
    builder.into_inner().unwrap().finish().unwrap();
}

/// Changes the first line of the member `name` that satisfies `pick` with `change`.
fn edit_line(
    members: &mut BTreeMap<String, Vec<u8>>,
    name: &str,
    change: impl Fn(&mut Value),
) -> String {
    let text = String::from_utf8(members[name].clone()).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let mut value: Value = serde_json::from_str(&lines[0]).unwrap();
    change(&mut value);
    lines[0] = serde_json::to_string(&value).unwrap();
    members.insert(name.to_string(), (lines.join("\n") + "\n").into_bytes());
    value["question_id"].as_str().unwrap_or_default().to_string()
}

pub(super) async fn verify(dir: &Path, archive: &Path) -> (Option<i32>, String) {
    let output = mragent_in(dir, &["verify", archive.to_str().unwrap()], &[]).await;
    (output.status.code(), text(&output.stdout) + &text(&output.stderr))
}

#[tokio::test]
async fn export_then_verify_passes_and_an_altered_archive_fails() {
    let (dir, data) = project(|_| {});
    let live = judging_server().await;
    let output = mragent_in(dir.path(), &run_args(&data, &live, "t"), &[]).await;
    assert!(output.status.success(), "{}", text(&output.stderr));
    let eval = [
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
        live.base_url(),
        "--no-audit",
        "--judge-runs",
        "2",
    ];
    let output = mragent_in(dir.path(), &eval, &[]).await;
    assert!(output.status.success(), "{}", text(&output.stderr));
    drop(live);

    let (archive, elsewhere, said) = export_and_verify(dir.path()).await;
    assert!(said.starts_with("VERIFIED"), "{said}");
    assert!(said.contains("9 result lines replayed"), "{said}");

    let members = read_archive(&archive);
    let result = "result/locomo/conv-7_result_local-tiny_t.jsonl";
    let forged = elsewhere.path().join("forged.tar.zst");

    // A changed result line: the hash says so; re-hashed, the replay says so.
    let mut changed = members.clone();
    let question =
        edit_line(&mut changed, result, |line| line["prediction"] = Value::from("Paris"));
    write_archive(&forged, changed.clone(), false);
    let (code, said) = verify(elsewhere.path(), &forged).await;
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains(&format!("{result}: its SHA-256 differs")), "{said}");
    write_archive(&forged, changed, true);
    let (code, said) = verify(elsewhere.path(), &forged).await;
    assert_eq!(code, Some(1), "{said}");
    assert!(
        said.contains(&format!("question {question}")) && said.contains("prediction"),
        "{said}"
    );
    assert!(said.contains("line 1"), "{said}");

    // A changed judge verdict in the eval table: recomputing from the recorded calls says so.
    let mut changed = members.clone();
    let scores = "eval/locomo/t/scores.jsonl";
    let question = edit_line(&mut changed, scores, |line| {
        let flipped = line
            .to_string()
            .replace("\"correct\":true", "\"correct\":@")
            .replace("\"correct\":false", "\"correct\":true")
            .replace("\"correct\":@", "\"correct\":false");
        *line = serde_json::from_str(&flipped).unwrap();
    });
    write_archive(&forged, changed, true);
    let (code, said) = verify(elsewhere.path(), &forged).await;
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains(&format!("{scores} line 1 (question {question})")), "{said}");

    // A missing trace, left out of the index too.
    let mut changed = members.clone();
    let trace = changed.keys().find(|name| name.starts_with("log/")).unwrap().clone();
    changed.remove(&trace);
    write_archive(&forged, changed, true);
    let (code, said) = verify(elsewhere.path(), &forged).await;
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains(&format!("its trace {trace} is missing")), "{said}");

    // Not an archive at all.
    std::fs::write(&forged, b"not an archive").unwrap();
    let (code, said) = verify(elsewhere.path(), &forged).await;
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("MISMATCH"), "{said}");
}

/// Run `t` of the project at `dir` exported and verified elsewhere: the archive, the folder
/// verify ran in, and what it said (VERIFIED, asserted).
async fn export_and_verify(dir: &Path) -> (PathBuf, tempfile::TempDir, String) {
    let output = mragent_in(dir, &["export", "--model", "local/tiny", "--file", "t"], &[]).await;
    assert!(output.status.success(), "{}", text(&output.stderr));
    let archive = dir.join("export/locomo/local-tiny_t.tar.zst");
    let elsewhere = tempfile::tempdir().unwrap();
    let (code, said) = verify(elsewhere.path(), &archive).await;
    assert_eq!(code, Some(0), "{said}");
    (archive, elsewhere, said)
}

/// A project whose run `t` answered with MemGAS on (the local model): its folder and dataset.
async fn memgas_run() -> (tempfile::TempDir, std::path::PathBuf) {
    let model_dir = crate::retrieval::embedder().model_dir().to_str().unwrap().to_string();
    let (dir, data) = project(|_| {});
    let live = server(|_| None).await;
    let mut args = run_args(&data, &live, "t");
    args.retain(|arg| *arg != "--no-memgas");
    args.extend(["--embed-model-dir", model_dir.as_str()]);
    let output = mragent_in(dir.path(), &args, &[]).await;
    assert!(output.status.success(), "{}", text(&output.stderr));
    drop(live);
    (dir, data)
}

/// The MemGAS tool's query embeddings come from the local model; a replay takes them from the
/// tape and never loads the model (here it could not: its folder does not exist), so the
/// replayed answers cannot depend on the host's floating-point kernels.
#[tokio::test]
async fn local_query_embeddings_are_replayed_without_loading_the_model() {
    let (dir, data) = memgas_run().await;
    let store = dir.path().join("record/locomo/local-tiny_t.calls.sqlite");
    let calls = mragent::llm::tape::CallStore::open_read_only(&store).unwrap().calls().unwrap();
    let local = mragent::embedding::LOCAL_EMBEDDER_NAME;
    assert!(
        calls.iter().any(|call| call.kind == "embed" && call.model == local),
        "the local query embeddings are on the tape"
    );

    let mut replay = replay_args(&data, DEAD, "t", &[]);
    replay.retain(|arg| *arg != "--no-memgas");
    let missing = dir.path().join("no-model-here");
    let env = [("MRAGENT_EMBED_MODEL_DIR", missing.to_str().unwrap())];
    let output = mragent_in(dir.path(), &replay, &env).await;
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", text(&output.stderr));
    assert!(stdout.contains("replay of t: 9 of 9 result lines identical"), "{stdout}");
    assert_eq!(lines(dir.path(), "t"), lines(dir.path(), "t-replay"));
}

/// An archive of a run with MemGAS verifies without the local model; one whose MemGAS index
/// and local vectors were removed (a forger's, re-hashed) is a mismatch that names why, and
/// `verify` never loads, or installs, the model to build the index again.
#[tokio::test]
async fn verify_never_loads_the_local_model_to_rebuild_a_missing_index() {
    let (dir, _data) = memgas_run().await;
    let (archive, elsewhere, _said) = export_and_verify(dir.path()).await;

    let mut members = read_archive(&archive);
    let before = members.len();
    // The index and the local vectors it is rebuilt from (without them, only the model could).
    let vectors = format!("/embedding/{}/", mragent::embedding::LOCAL_EMBEDDER_NAME);
    members.retain(|name, _| !name.contains("/memgas_index/") && !name.contains(&vectors));
    assert!(members.len() + 2 <= before, "the MemGAS index and its vectors are archived");
    let forged = elsewhere.path().join("forged.tar.zst");
    write_archive(&forged, members, true);
    let (code, said) = verify(elsewhere.path(), &forged).await;
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("replaying conv-7: its MemGAS index is not among the mem"), "{said}");
}
