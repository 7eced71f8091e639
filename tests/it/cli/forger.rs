//! The forger's suite (issue 39): an archive is changed member by member, `archive.json`
//! re-hashed as a forger would, and `verify` must say MISMATCH naming the file (and the
//! question, where there is one); what it cannot recompute it lists as carried (no trace: each
//! is compared with the replay's, its times aside). The honest
//! sequence (run → eval with two protocols → compare → export → verify) verifies, under a
//! hostile environment too, and reading a run never changes it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::mragent_in;
use super::record::{judging_server, read_archive, text, verify, write_archive};
use super::safety::{project, run_args};

const RESULT: &str = "result/locomo/conv-7_result_local-tiny_t.jsonl";
const MANIFEST: &str = "result/locomo/local-tiny_t.manifest.json";
const EVAL: &str = "eval/locomo/t";

/// Every file under `dir`, by path relative to it, with its bytes.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(folder) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&folder) else { continue };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else {
                let bytes = std::fs::read(&path).unwrap();
                files.insert(path.strip_prefix(dir).unwrap().to_path_buf(), bytes);
            }
        }
    }
    files
}

/// The scoring arguments shared by `eval` and `compare`.
fn scoring<'a>(data: &'a Path, base_url: &'a str) -> Vec<&'a str> {
    vec![
        "--data-file",
        data.to_str().unwrap(),
        "--model",
        "local/tiny",
        "--judge-model",
        "judge/x",
        "--base-url",
        base_url,
        "--no-audit",
        "--judge-runs",
        "2",
    ]
}

/// The honest sequence: runs `t` and `u`, `eval` of `t` under two protocols, `compare t u` and
/// `eval --paired-with`, which must leave `t`'s eval folder as it was, then `export` of `t`.
async fn honest_archive() -> (tempfile::TempDir, PathBuf) {
    let (dir, data) = project(|_| {});
    let live = judging_server().await;
    for tag in ["t", "u"] {
        let output = mragent_in(dir.path(), &run_args(&data, &live, tag), &[]).await;
        assert!(output.status.success(), "{}", text(&output.stderr));
    }
    let mut eval = vec!["eval", "--file", "t", "--judge-protocol", "mem0,strict"];
    eval.extend(scoring(&data, live.base_url()));
    let output = mragent_in(dir.path(), &eval, &[]).await;
    assert!(output.status.success(), "{}", text(&output.stderr));
    let before = snapshot(&dir.path().join(EVAL));
    assert!(before.contains_key(Path::new("matrix.json")), "{:?}", before.keys());

    let mut compare = vec!["compare", "t", "u"];
    compare.extend(scoring(&data, live.base_url()));
    let output = mragent_in(dir.path(), &compare, &[]).await;
    assert!(output.status.success(), "{}", text(&output.stderr));
    let mut paired = vec!["eval", "--file", "t", "--paired-with", "u"];
    paired.extend(scoring(&data, live.base_url()));
    let output = mragent_in(dir.path(), &paired, &[]).await;
    assert!(output.status.success(), "{}", text(&output.stderr));
    // Reading a run never changes it: its eval folder is byte for byte what `eval` wrote, and
    // the comparison is beside the runs.
    assert_eq!(snapshot(&dir.path().join(EVAL)), before, "compare changed run t's eval folder");
    assert!(!dir.path().join("eval/locomo/u").exists(), "compare wrote into run u's folder");
    assert!(dir.path().join("eval/locomo/local-tiny_t_vs_u.json").is_file());
    drop(live);

    let output =
        mragent_in(dir.path(), &["export", "--model", "local/tiny", "--file", "t"], &[]).await;
    assert!(output.status.success(), "{}", text(&output.stderr));
    let archive = dir.path().join("export/locomo/local-tiny_t.tar.zst");
    (dir, archive)
}

#[tokio::test]
async fn the_honest_sequence_verifies_quietly_under_a_hostile_environment() {
    let (dir, archive) = honest_archive().await;
    let elsewhere = tempfile::tempdir().unwrap();
    let (code, said) = verify(elsewhere.path(), &archive).await;
    assert_eq!(code, Some(0), "{said}");
    assert!(said.starts_with("VERIFIED"), "{said}");
    assert!(said.contains("2 protocol(s)"), "{said}");
    // What verify cannot recompute is listed, never counted among what matches.
    assert!(said.contains(&format!("carried, not verified: {MANIFEST}")), "{said}");
    // Every trace is recomputed: compared with the replay's trace of its question.
    assert!(!said.contains("carried, not verified: log/"), "{said}");
    for recomputed in ["matrix.json", "matrix.md", "summary.md", "summary.json", "scores.jsonl"] {
        assert!(!said.contains(&format!("carried, not verified: {EVAL}/{recomputed}")), "{said}");
    }
    // Provenance: the binary's commit, in the manifest and the archive, wherever the project.
    let members = read_archive(&archive);
    let index: Value = serde_json::from_slice(&members["archive.json"]).unwrap();
    let manifest: Value = serde_json::from_slice(&members[MANIFEST]).unwrap();
    let head = std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|output| output.status.success())
        .map(|output| String::from_utf8(output.stdout).unwrap().trim().to_string());
    assert_eq!(index["build"]["git_commit"], manifest["git_commit"]);
    assert_eq!(manifest["version"], env!("CARGO_PKG_VERSION"));
    let version = mragent_in(dir.path(), &["--version"], &[]).await;
    let version = text(&version.stdout);
    if let Some(head) = head {
        assert_eq!(manifest["git_commit"], head.as_str(), "{manifest}");
        assert!(manifest["git_dirty"].is_boolean(), "{manifest}");
        assert!(version.contains(&head), "{version}");
    }
    // Every call of the run is counted once: what the manifest says it recorded is the store.
    let calls = mragent::llm::tape::CallStore::open_read_only(
        &dir.path().join("record/locomo/local-tiny_t.calls.sqlite"),
    )
    .unwrap()
    .calls()
    .unwrap();
    assert_eq!(manifest["calls"]["totals"]["recorded"], calls.len() as u64, "{manifest}");
    // The judge's calls carry their work item.
    let judged = mragent::llm::tape::CallStore::open_read_only(
        &dir.path().join("record/locomo/local-tiny_t.judge.sqlite"),
    )
    .unwrap()
    .calls()
    .unwrap();
    assert!(!judged.is_empty());
    assert!(judged.iter().all(|call| call.context.starts_with("judging question conv-7:")));

    // Every MRAGENT_* variable hostile, and a hostile .env where verify runs: the same verdict,
    // nothing written there or under the hostile root, nothing said on stderr.
    let hostile_root = tempfile::tempdir().unwrap();
    let quiet = tempfile::tempdir().unwrap();
    std::fs::write(quiet.path().join(".env"), "MRAGENT_MAX_TOKENS=answer=7\nMRAGENT_MODEL=x/y\n")
        .unwrap();
    let root = hostile_root.path().to_str().unwrap();
    let env = hostile_env(root);
    let path = archive.to_str().unwrap();
    let output = mragent_in(quiet.path(), &["verify", path], &env).await;
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    assert_eq!(output.status.code(), Some(0), "{stdout}{stderr}");
    assert!(stdout.starts_with("VERIFIED"), "{stdout}");
    assert_eq!(stderr, "", "verify is quiet unless asked");
    let left: Vec<PathBuf> = snapshot(quiet.path()).into_keys().collect();
    assert_eq!(left, vec![PathBuf::from(".env")], "verify wrote where it ran");
    assert!(snapshot(hostile_root.path()).is_empty(), "verify wrote under MRAGENT_ROOT");
}

/// An honest user judges with an audit file that lives outside the project (another folder
/// on the judging host): the archive holds the audit as a member, and verify, recomputing the
/// matrix from it, still says VERIFIED (found by `benches/record.rs`: the matrix named the
/// host's path, the recomputation the member's).
#[tokio::test]
async fn an_archive_judged_with_an_audit_outside_the_project_verifies() {
    let (dir, data) = project(|_| {});
    let outside = tempfile::tempdir().unwrap();
    let audit = outside.path().join("my_audit.json");
    let items = serde_json::json!({"items": [{"question_id": "conv-7:q1", "audit_id": "a1",
        "category": 4, "error_type": "hallucination", "action": "corrected",
        "answer": "Pixel the kitten"}]});
    std::fs::write(&audit, items.to_string()).unwrap();
    let live = judging_server().await;
    let output = mragent_in(dir.path(), &run_args(&data, &live, "t"), &[]).await;
    assert!(output.status.success(), "{}", text(&output.stderr));
    let mut eval = vec!["eval", "--file", "t", "--judge-protocol", "mem0,strict"];
    eval.extend(scoring(&data, live.base_url()).into_iter().filter(|arg| *arg != "--no-audit"));
    eval.extend(["--audit-file", audit.to_str().unwrap()]);
    let output = mragent_in(dir.path(), &eval, &[]).await;
    assert!(output.status.success(), "{}", text(&output.stderr));
    let matrix = std::fs::read_to_string(dir.path().join(EVAL).join("matrix.json")).unwrap();
    assert!(matrix.contains(audit.to_str().unwrap()), "{matrix}");
    drop(live);
    let output =
        mragent_in(dir.path(), &["export", "--model", "local/tiny", "--file", "t"], &[]).await;
    assert!(output.status.success(), "{}", text(&output.stderr));
    let archive = dir.path().join("export/locomo/local-tiny_t.tar.zst");
    let output = mragent_in(dir.path(), &["verify", archive.to_str().unwrap()], &[]).await;
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    assert_eq!(output.status.code(), Some(0), "{stdout}{stderr}");
    assert!(stdout.starts_with("VERIFIED"), "{stdout}");
    assert!(!stdout.contains("carried, not verified: eval/locomo/t/matrix"), "{stdout}");
}

/// A forger's change to an archive's members.
pub(super) type Forgery = Box<dyn Fn(&mut BTreeMap<String, Vec<u8>>)>;

/// Each case `(what, forgery, names)` applied to `members` and written as a forger would
/// (`archive.json` re-hashed) into `here`: `verify` says MISMATCH naming every one of `names`,
/// and names the archive the user gave, never another path of the verifier's folder.
pub(super) async fn assert_each_forgery_is_named<W: std::fmt::Display>(
    members: &BTreeMap<String, Vec<u8>>,
    cases: &[(W, Forgery, Vec<String>)],
    here: &Path,
) {
    let forged = here.join("forged.tar.zst");
    for (what, forge, named) in cases {
        let mut changed = members.clone();
        forge(&mut changed);
        write_archive(&forged, changed, true);
        let (code, said) = verify(here, &forged).await;
        assert_eq!(code, Some(1), "{what}: {said}");
        assert!(said.starts_with("MISMATCH"), "{what}: {said}");
        for name in named {
            assert!(said.contains(name.as_str()), "{what}: {said} does not name {name}");
        }
        let without_archive = said.replace(forged.to_str().unwrap(), "<archive>");
        assert!(!without_archive.contains(here.to_str().unwrap()), "{what}: {said}");
    }
}

/// Every `MRAGENT_*` variable set to a hostile value, `MRAGENT_ROOT` to `root`.
pub(super) fn hostile_env(root: &str) -> Vec<(&'static str, &str)> {
    vec![
        ("MRAGENT_BASE_URL", "http://127.0.0.1:9/v1"),
        ("MRAGENT_EMBED_MODEL", "hostile/embedder"),
        ("MRAGENT_EMBED_MODEL_DIR", "/nonexistent/model"),
        ("MRAGENT_JOB_LEASE", "1"),
        ("MRAGENT_MAX_TOKENS", "answer=1000"),
        ("MRAGENT_MODEL", "hostile/model"),
        ("MRAGENT_NO_HEDGE", "true"),
        ("MRAGENT_RE_MODEL", "hostile/re-model"),
        ("MRAGENT_ROOT", root),
        ("MRAGENT_RPM", "1"),
        ("MRAGENT_SERVE_BIND", "0.0.0.0:1"),
        ("MRAGENT_SERVE_TOKEN", "hostile"),
        ("MRAGENT_SERVE_TOKENS", "hostile"),
        ("MRAGENT_STORE_EMBEDDER", "api"),
        ("MRAGENT_STORE_URL", "postgres://hostile@127.0.0.1:9/none"),
        ("MRAGENT_STRUCTURED_OUTPUT", "true"),
        ("MRAGENT_TIMEOUT", "1"),
        ("MRAGENT_TPM", "1"),
        ("MRAGENT_WORKERS", "1"),
    ]
}

/// Changes the first ASCII digit of `bytes` (a number in a table, a chart or a JSON file).
pub(super) fn change_a_digit(bytes: &[u8]) -> Vec<u8> {
    let mut bytes = bytes.to_vec();
    let at = bytes.iter().position(u8::is_ascii_digit).unwrap();
    bytes[at] = if bytes[at] == b'9' { b'8' } else { bytes[at] + 1 };
    bytes
}

/// Edits the JSON member `name` with `change`.
pub(super) fn edit_json(
    members: &mut BTreeMap<String, Vec<u8>>,
    name: &str,
    change: impl FnOnce(&mut Value),
) {
    let mut value: Value = serde_json::from_slice(&members[name]).unwrap();
    change(&mut value);
    members.insert(name.to_string(), serde_json::to_vec_pretty(&value).unwrap());
}

/// The first correct verdict of the scores member `name` made wrong.
fn flip_a_verdict(members: &mut BTreeMap<String, Vec<u8>>, name: &str) {
    let text = String::from_utf8(members[name].clone()).unwrap();
    let flipped = text.replacen("\"correct\":true", "\"correct\":false", 1);
    assert_ne!(flipped, text);
    members.insert(name.to_string(), flipped.into_bytes());
}

/// A changed manifest, in its member and in `archive.json` alike.
fn edit_manifest(members: &mut BTreeMap<String, Vec<u8>>, change: impl Fn(&mut Value)) {
    edit_json(members, MANIFEST, &change);
    edit_json(members, "archive.json", |index| change(&mut index["manifest"]));
}

/// Edits every line of the trace member `name` with `change` (the record and its line number).
fn edit_trace(
    members: &mut BTreeMap<String, Vec<u8>>,
    name: &str,
    change: impl Fn(&mut Value, usize),
) {
    let text = String::from_utf8(members[name].clone()).unwrap();
    let mut edited = String::new();
    for (number, line) in text.lines().enumerate() {
        let mut record: Value = serde_json::from_str(line).unwrap();
        change(&mut record, number + 1);
        edited += &(serde_json::to_string(&record).unwrap() + "\n");
    }
    members.insert(name.to_string(), edited.into_bytes());
}

/// The number of the first line of the trace member `name` recording `event`.
fn trace_line(members: &BTreeMap<String, Vec<u8>>, name: &str, event: &str) -> usize {
    let text = std::str::from_utf8(&members[name]).unwrap();
    1 + text.lines().position(|line| line.contains(&format!("\"event\":\"{event}\""))).unwrap()
}

/// Deletes the first call of `kind` recorded for a work item containing `item` from the call
/// store member `name`.
pub(super) fn delete_call(
    members: &mut BTreeMap<String, Vec<u8>>,
    name: &str,
    kind: &str,
    item: &str,
) {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), &members[name]).unwrap();
    let connection = rusqlite::Connection::open(file.path()).unwrap();
    let deleted = connection
        .execute(
            "DELETE FROM calls WHERE rowid = (SELECT rowid FROM calls WHERE kind = ?1 AND context LIKE ?2 ORDER BY rowid LIMIT 1)",
            rusqlite::params![kind, format!("%{item}%")],
        )
        .unwrap();
    assert_eq!(deleted, 1, "{name}: no {kind} call of {item}");
    drop(connection);
    members.insert(name.to_string(), std::fs::read(file.path()).unwrap());
}

#[tokio::test]
async fn every_forged_member_kind_is_named() {
    let (_dir, archive) = honest_archive().await;
    let members = read_archive(&archive);
    let elsewhere = tempfile::tempdir().unwrap();
    let forged = elsewhere.path().join("forged.tar.zst");
    let trace = members.keys().find(|name| name.starts_with("log/")).unwrap().clone();
    let dataset = members
        .keys()
        .find(|name| {
            name.starts_with("data/") && name.ends_with(".json") && !name.contains("conv-")
        })
        .unwrap()
        .clone();
    let memory = super::learn_archive::rewritten_memory(&members);

    let mut cases: Vec<(&str, Forgery, Vec<String>)> = Vec::new();
    for file in ["matrix.json", "matrix.md", "summary.md", "accuracy.svg", "tokens.svg"] {
        let name = format!("{EVAL}/{file}");
        let member = name.clone();
        cases.push((
            "a number in a table",
            Box::new(move |m| {
                let bytes = change_a_digit(&m[&member]);
                m.insert(member.clone(), bytes);
            }),
            vec![name],
        ));
    }
    // Bytes that are not text: compared as bytes, never taken for equal because neither side
    // reads as text.
    cases.push((
        "a byte that is not UTF-8 in a chart",
        Box::new(|m| {
            let name = format!("{EVAL}/accuracy.svg");
            let mut bytes = m[&name].clone();
            bytes.insert(10, 0xff);
            m.insert(name, bytes);
        }),
        vec![format!("{EVAL}/accuracy.svg line 1")],
    ));
    cases.push((
        "a summary field",
        Box::new(|m| edit_json(m, &format!("{EVAL}/summary.json"), |s| s["judge_runs"] = 3.into())),
        vec![format!("{EVAL}/summary.json: field judge_runs")],
    ));
    cases.push((
        "a verdict",
        Box::new(|m| flip_a_verdict(m, &format!("{EVAL}/scores.jsonl"))),
        vec![format!("{EVAL}/scores.jsonl line"), "(question conv-7:".into()],
    ));
    cases.push((
        "a prediction",
        Box::new(|m| super::learn_archive::forge_prediction(m, RESULT)),
        vec![RESULT.into(), "question conv-7:".into()],
    ));
    // archive.json alone says the run wrote no traces: it is checked against the manifest.
    let removed = trace.clone();
    cases.push((
        "archive.json's manifest",
        Box::new(move |m| {
            m.remove(&removed);
            edit_json(m, "archive.json", |index| {
                index["manifest"]["settings"]["traces"] = false.into()
            });
        }),
        vec![format!("archive.json: its copy of the manifest differs from {MANIFEST}")],
    ));
    // The manifest and archive.json both say so: the replay still traces the question.
    let removed = trace.clone();
    cases.push((
        "the manifest",
        Box::new(move |m| {
            m.remove(&removed);
            edit_manifest(m, |manifest| manifest["settings"]["traces"] = false.into());
        }),
        vec![format!("its trace {trace} is missing")],
    ));
    cases.push((
        "the replay arguments",
        Box::new(|m| {
            edit_manifest(m, |manifest| {
                let args = manifest["replay_args"].as_array_mut().unwrap();
                args.extend(["--max-tokens".into(), "answer=5".into()]);
            });
        }),
        vec!["question conv-7:".into()],
    ));
    let data_member = dataset.clone();
    cases.push((
        "the dataset",
        Box::new(move |m| {
            let bytes = m[&data_member].clone();
            let text = String::from_utf8(bytes).unwrap();
            let mut value: Value = serde_json::from_str(&text).unwrap();
            value[0]["qa"][0]["answer"] = "a forged gold answer".into();
            m.insert(data_member.clone(), serde_json::to_vec(&value).unwrap());
        }),
        vec![format!("{dataset}: its SHA-256 differs from the dataset_sha256")],
    ));
    cases.push((
        "the judge settings",
        Box::new(|m| {
            edit_json(m, "record/locomo/local-tiny_t.eval.json", |record| {
                record["judge_runs"] = 1.into()
            });
        }),
        vec![
            "archive.json: its judge settings differ from record/locomo/local-tiny_t.eval.json"
                .into(),
        ],
    ));
    cases.push((
        "the judge settings, both copies",
        Box::new(|m| {
            edit_json(m, "record/locomo/local-tiny_t.eval.json", |record| {
                record["judge_runs"] = 1.into()
            });
            edit_json(m, "archive.json", |index| index["eval"]["judge_runs"] = 1.into());
        }),
        vec![format!("{EVAL}/")],
    ));
    cases.push((
        "a recorded call",
        Box::new(|m| {
            delete_call(m, "record/locomo/local-tiny_t.calls.sqlite", "chat", "question conv-7:")
        }),
        vec!["record/locomo/local-tiny_t.calls.sqlite".into(), "question conv-7:".into()],
    ));
    cases.push((
        "a recorded verdict",
        Box::new(|m| {
            delete_call(
                m,
                "record/locomo/local-tiny_t.judge.sqlite",
                "chat",
                "judging question conv-7:",
            )
        }),
        vec!["record/locomo/local-tiny_t.judge.sqlite".into(), "judging question conv-7:".into()],
    ));
    // A trace is compared with the replay's trace of its question: a tool result changed in
    // it is named by the trace, the question, the line and the field.
    let question = {
        let first = std::str::from_utf8(&members[&trace]).unwrap().lines().next().unwrap();
        serde_json::from_str::<Value>(first).unwrap()["question_id"].as_str().unwrap().to_string()
    };
    let line = trace_line(&members, &trace, "tool_call");
    let forged_trace = trace.clone();
    cases.push((
        "a trace",
        Box::new(move |m| {
            edit_trace(m, &forged_trace, |record, number| {
                if number == line {
                    record["result"] = "{\"turns\":[\"D9:1:Lena: a forged turn\"]}".into();
                }
            })
        }),
        vec![
            format!("{trace} (question {question}): line {line} differs"),
            "field(s) result".into(),
        ],
    ));
    // A record added to a trace (it was carried, once).
    let appended = trace.clone();
    let lines = std::str::from_utf8(&members[&trace]).unwrap().lines().count();
    cases.push((
        "a record added to a trace",
        Box::new(move |m| {
            let bytes = [&m[&appended][..], b"{\"forged\":true}\n"].concat();
            m.insert(appended.clone(), bytes);
        }),
        vec![format!(
            "{trace} (question {question}): line {} is not in the replay's trace",
            lines + 1
        )],
    ));
    // An archived trace of a question the replay did not trace.
    let copied = trace.clone();
    let extra = format!("{}/conv-7_q99.jsonl", trace.rsplit_once('/').unwrap().0);
    let named = format!("{extra} (question conv-7:q99): the replay did not trace this question");
    cases.push((
        "a trace of no question answered",
        Box::new(move |m| {
            let text = String::from_utf8(m[&copied].clone()).unwrap();
            m.insert(extra.clone(), text.replace("conv-7:q1\"", "conv-7:q99\"").into_bytes());
        }),
        vec![named],
    ));
    cases.push((
        "the memory",
        Box::new(move |m| super::learn_archive::forge_memory(m, &memory)),
        vec!["question conv-7:".into(), "field(s) memory".into()],
    ));
    assert_each_forgery_is_named(&members, &cases, elsewhere.path()).await;

    // A trace whose times alone changed verifies, recomputed (the times measure the host); a
    // file the run never wrote verifies as carried, and is listed so.
    let mut changed = members.clone();
    edit_trace(&mut changed, &trace, |record, number| {
        let fields = record.as_object_mut().unwrap();
        fields.insert("t_ms".into(), (1000 + number).into());
        for name in ["ms", "latency_ms"] {
            if let Some(value) = fields.get_mut(name) {
                *value = 4321.into();
            }
        }
        if let Some(value) = fields.get_mut("started_at") {
            *value = "2001-01-01T00:00:00+00:00".into();
        }
    });
    assert_ne!(changed[&trace], members[&trace]);
    changed.insert("notes/claim.md".into(), b"J = 99%\n".to_vec());
    write_archive(&forged, changed, true);
    let (code, said) = verify(elsewhere.path(), &forged).await;
    assert_eq!(code, Some(0), "{said}");
    assert!(!said.contains("carried, not verified: log/"), "{said}");
    assert!(said.contains("carried, not verified: notes/claim.md"), "{said}");
}

const COMPARISON: &str = "eval/locomo/local-tiny_t_vs_u";
const COMPARE_RECORD: &str = "record/locomo/local-tiny_t_vs_u.compare.json";
const COMPARE_TAPE: &str = "record/locomo/local-tiny_t_vs_u.judge.sqlite";
const RESULT_B: &str = "result/locomo/conv-7_result_local-tiny_u.jsonl";
const MANIFEST_B: &str = "result/locomo/local-tiny_u.manifest.json";

/// The honest sequence's comparison of `t` with `u` exported (`export --file t --vs u`).
async fn honest_comparison() -> (tempfile::TempDir, PathBuf) {
    let (dir, _) = honest_archive().await;
    let export = ["export", "--model", "local/tiny", "--file", "t", "--vs", "u"];
    let output = mragent_in(dir.path(), &export, &[]).await;
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(text(&output.stdout).contains("runs t and u and their comparison"));
    let archive = dir.path().join("export/locomo/local-tiny_t_vs_u.tar.zst");
    (dir, archive)
}

/// A comparison's archive (run → eval → compare → export --vs → verify) verifies under a
/// hostile environment, every file of the comparison recomputed from the comparison's recorded
/// judge calls; each forged member of it is named; a comparison made before its record was
/// kept is refused at export.
#[tokio::test]
async fn a_comparison_exports_verifies_and_names_every_forged_member() {
    let (dir, archive) = honest_comparison().await;
    let members = read_archive(&archive);
    for member in [COMPARE_RECORD, COMPARE_TAPE, RESULT_B, MANIFEST_B, RESULT, MANIFEST] {
        assert!(members.contains_key(member), "{member}: {:?}", members.keys());
    }
    let hostile_root = tempfile::tempdir().unwrap();
    let env = hostile_env(hostile_root.path().to_str().unwrap());
    let elsewhere = tempfile::tempdir().unwrap();
    let output = mragent_in(elsewhere.path(), &["verify", archive.to_str().unwrap()], &env).await;
    let (said, stderr) = (text(&output.stdout), text(&output.stderr));
    assert_eq!(output.status.code(), Some(0), "{said}{stderr}");
    assert!(said.starts_with("VERIFIED"), "{said}");
    assert_eq!(stderr, "", "verify is quiet unless asked");
    assert!(said.contains("the comparison of t with u (judge/x, 2 run(s))"), "{said}");
    assert!(said.contains("run t: F1, exact match and the judge tables"), "{said}");
    for manifest in [MANIFEST, MANIFEST_B] {
        assert!(said.contains(&format!("carried, not verified: {manifest}")), "{said}");
    }
    assert!(!said.contains(&format!("carried, not verified: {COMPARISON}")), "{said}");
    assert!(!said.contains("carried, not verified: log/"), "{said}");
    assert!(snapshot(hostile_root.path()).is_empty(), "verify wrote under MRAGENT_ROOT");

    let question_line = |name: &str| format!("{name} line");
    let mut cases: Vec<(&str, Forgery, Vec<String>)> = Vec::new();
    let page = format!("{COMPARISON}.md");
    cases.push((
        "a number on the comparison's page",
        Box::new({
            let page = page.clone();
            move |m| {
                let bytes = change_a_digit(&m[&page]);
                m.insert(page.clone(), bytes);
            }
        }),
        vec![question_line(&page)],
    ));
    let table = format!("{COMPARISON}.json");
    cases.push((
        "the comparison's table",
        Box::new({
            let table = table.clone();
            move |m| edit_json(m, &table, |t| t["rows"][0]["n"] = 99.into())
        }),
        vec![question_line(&table)],
    ));
    cases.push((
        "a summary of run B scored for the comparison",
        Box::new(|m| {
            edit_json(m, &format!("{COMPARISON}/u/summary.json"), |s| s["judge_runs"] = 3.into())
        }),
        vec![format!("{COMPARISON}/u/summary.json: field judge_runs")],
    ));
    cases.push((
        "a verdict of run A scored for the comparison",
        Box::new(|m| flip_a_verdict(m, &format!("{COMPARISON}/t/scores.jsonl"))),
        vec![format!("{COMPARISON}/t/scores.jsonl line"), "(question conv-7:".into()],
    ));
    cases.push((
        "the comparison's record",
        Box::new(|m| edit_json(m, COMPARE_RECORD, |r| r["bootstrap"]["seed"] = 7.into())),
        vec![format!("archive.json: its comparison settings differ from {COMPARE_RECORD}")],
    ));
    cases.push((
        "the comparison's record, both copies",
        Box::new(|m| {
            edit_json(m, COMPARE_RECORD, |r| r["settings"]["judge_runs"] = 1.into());
            edit_json(m, "archive.json", |i| {
                i["compared"]["comparison"]["settings"]["judge_runs"] = 1.into()
            });
        }),
        vec![format!("{COMPARISON}/")],
    ));
    cases.push((
        "the comparison's bootstrap seed, both copies",
        Box::new(|m| {
            edit_json(m, COMPARE_RECORD, |r| r["bootstrap"]["seed"] = 7.into());
            edit_json(m, "archive.json", |i| {
                i["compared"]["comparison"]["bootstrap"]["seed"] = 7.into()
            });
        }),
        vec![format!("{COMPARE_RECORD}: its bootstrap (")],
    ));
    cases.push((
        "a verdict recorded by the comparison's judge",
        Box::new(|m| delete_call(m, COMPARE_TAPE, "chat", "judging question conv-7:")),
        vec![COMPARE_TAPE.into(), "judging question conv-7:".into()],
    ));
    cases.push((
        "the comparison removed",
        Box::new({
            let table = table.clone();
            move |m| {
                m.remove(&table);
            }
        }),
        vec![format!("{table}: the comparison is not archived")],
    ));
    cases.push((
        "a prediction of run B",
        Box::new(|m| super::learn_archive::forge_prediction(m, RESULT_B)),
        vec![RESULT_B.into(), "question conv-7:".into()],
    ));
    cases.push((
        "archive.json's copy of run B's manifest",
        Box::new(|m| {
            edit_json(m, "archive.json", |i| {
                i["compared"]["manifest"]["settings"]["traces"] = false.into()
            })
        }),
        vec![format!("archive.json: its copy of the manifest differs from {MANIFEST_B}")],
    ));
    cases.push((
        "run B named as run A's replay",
        Box::new(|m| edit_json(m, "archive.json", |i| i["compared"]["file"] = "t-verify".into())),
        vec!["archive.json: its runs t and t-verify cannot be replayed apart".into()],
    ));
    let extra = "result/locomo/conv-99_result_local-tiny_u.jsonl";
    cases.push((
        "a result file of run B for no conversation its manifest names",
        Box::new(move |m| {
            let lines = String::from_utf8(m[RESULT_B].clone()).unwrap();
            m.insert(extra.into(), lines.replace("conv-7:", "conv-99:").into_bytes());
        }),
        vec![format!("{extra}: a result file of run u for no conversation its manifest names")],
    ));
    let trace_b = members.keys().find(|name| name.starts_with("log/locomo/u/")).unwrap().clone();
    cases.push((
        "a trace of run B",
        Box::new({
            let trace_b = trace_b.clone();
            move |m| {
                let bytes = [&m[&trace_b][..], b"{\"forged\":true}\n"].concat();
                m.insert(trace_b.clone(), bytes);
            }
        }),
        vec![format!("{trace_b} (question")],
    ));
    assert_each_forgery_is_named(&members, &cases, elsewhere.path()).await;

    // A comparison without its record (made by an older version) is not exported.
    std::fs::remove_file(dir.path().join(COMPARE_RECORD)).unwrap();
    let export = ["export", "--model", "local/tiny", "--file", "t", "--vs", "u"];
    let output = mragent_in(dir.path(), &export, &[]).await;
    assert!(!output.status.success());
    assert!(text(&output.stderr).contains("mragent compare t u"), "{}", text(&output.stderr));
}

/// An honest eval whose judge failed one judgement at the endpoint (scored partial) exports
/// and verifies: the failure is on the judge's tape with its error, and the replay meets it. A
/// later eval asks it afresh; that too verifies, with no judgement failed.
#[tokio::test]
async fn an_eval_whose_judge_failed_at_the_endpoint_exports_and_verifies() {
    use mragent::llm::scripted::ScriptedReply;
    let (dir, data) = project(|_| {});
    let live = judging_server().await;
    let output = mragent_in(dir.path(), &run_args(&data, &live, "t"), &[]).await;
    assert!(output.status.success(), "{}", text(&output.stderr));
    let failing = super::safety::server(|request| {
        let asked = request.last_message_text().to_lowercase();
        if asked.contains("gold answer:") && asked.contains("harbour marathon") {
            return Some(ScriptedReply::Status { status: 400, message: "judge is down".into() });
        }
        mragent::eval::judge::scripted_verdict(request)
    })
    .await;
    let archive = dir.path().join("export/locomo/local-tiny_t.tar.zst");
    let export = ["export", "--model", "local/tiny", "--file", "t"];
    let elsewhere = tempfile::tempdir().unwrap();
    for (judge, failed) in [(&failing, 2), (&live, 0)] {
        let mut eval = vec!["eval", "--file", "t"];
        eval.extend(scoring(&data, judge.base_url()));
        let output = mragent_in(dir.path(), &eval, &[]).await;
        assert_eq!(output.status.success(), failed == 0, "{}", text(&output.stderr));
        let summary = std::fs::read(dir.path().join(EVAL).join("summary.json")).unwrap();
        let summary: Value = serde_json::from_slice(&summary).unwrap();
        assert_eq!(summary["judge_failed"], failed, "{summary}");
        let output = mragent_in(dir.path(), &export, &[]).await;
        assert!(output.status.success(), "{}", text(&output.stderr));
        let (code, said) = verify(elsewhere.path(), &archive).await;
        assert_eq!(code, Some(0), "{failed} failed: {said}");
        assert!(said.starts_with("VERIFIED"), "{said}");
    }
    let judged = mragent::llm::tape::CallStore::open_read_only(
        &dir.path().join("record/locomo/local-tiny_t.judge.sqlite"),
    )
    .unwrap()
    .calls()
    .unwrap();
    assert!(judged.iter().all(|call| call.kind == "chat"), "the failures were replaced");
}

/// A comparison made without a judge (F1 alone) of two runs never judged, after a judged one,
/// exports and verifies: no judge tape is archived or needed, and its outputs are recomputed.
#[tokio::test]
async fn an_unjudged_comparison_exports_and_verifies() {
    let (dir, data) = project(|_| {});
    let live = judging_server().await;
    for tag in ["t", "u"] {
        let output = mragent_in(dir.path(), &run_args(&data, &live, tag), &[]).await;
        assert!(output.status.success(), "{}", text(&output.stderr));
    }
    // A judged comparison first: what it wrote that an unjudged one does not (the matrices of
    // each run scored for it, the judge's tape) is not taken for the unjudged one's.
    let mut judged = vec!["compare", "t", "u"];
    judged.extend(scoring(&data, live.base_url()));
    let output = mragent_in(dir.path(), &judged, &[]).await;
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(dir.path().join(format!("{COMPARISON}/t/matrix.json")).is_file());
    drop(live);
    let data_file = data.to_str().unwrap();
    let compare =
        ["compare", "t", "u", "--data-file", data_file, "--model", "local/tiny", "--no-audit"];
    let output = mragent_in(dir.path(), &compare, &[]).await;
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(!dir.path().join(format!("{COMPARISON}/t/matrix.json")).exists());
    let export = ["export", "--model", "local/tiny", "--file", "t", "--vs", "u"];
    let output = mragent_in(dir.path(), &export, &[]).await;
    assert!(output.status.success(), "{}", text(&output.stderr));
    let archive = dir.path().join("export/locomo/local-tiny_t_vs_u.tar.zst");
    assert!(!read_archive(&archive).contains_key(COMPARE_TAPE));
    let elsewhere = tempfile::tempdir().unwrap();
    let (code, said) = verify(elsewhere.path(), &archive).await;
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("the comparison of t with u (F1) recomputed is identical"), "{said}");
    assert!(!said.contains(&format!("carried, not verified: {COMPARISON}")), "{said}");
}
