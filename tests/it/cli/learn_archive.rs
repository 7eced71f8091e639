//! A `learn` run exports and verifies like a `run` (issue 39): `verify` replays the learning
//! from its recorded calls, offline, under a hostile environment, and compares every file it
//! writes; a forger who changes any of them, re-hashing `archive.json`, gets MISMATCH naming
//! the file.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use super::forger::{
    Forgery, assert_each_forgery_is_named, change_a_digit, delete_call, edit_json, hostile_env,
};
use super::learn::{GOOD_RULE, fixture, learn_args, world_server};
use super::mragent_in;
use super::record::{read_archive, text};
use crate::support::project_with;

const META: &str = "data/locomo/meta/v";
const TEST_RESULT: &str = "result/locomo/conv-7_result_local-tiny_meta-v.jsonl";

/// Every file under `dir`, relative to it.
fn listing(dir: &Path) -> Vec<String> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(folder) = pending.pop() {
        for entry in std::fs::read_dir(&folder).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else {
                files.push(path.strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    files.sort();
    files
}

/// Changes the prediction of the first line of the result file `name`.
pub(super) fn forge_prediction(members: &mut BTreeMap<String, Vec<u8>>, name: &str) {
    let text = String::from_utf8(members[name].clone()).unwrap();
    let mut lines: Vec<Value> =
        text.lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    lines[0]["prediction"] = "Paris".into();
    let text: String =
        lines.iter().map(|line| serde_json::to_string(line).unwrap() + "\n").collect();
    members.insert(name.to_string(), text.into_bytes());
}

/// The member holding conv-7's rewritten memory.
pub(super) fn rewritten_memory(members: &BTreeMap<String, Vec<u8>>) -> String {
    members
        .keys()
        .find(|name| name.starts_with("data/locomo/rewrite_") && name.contains("/conv-7_"))
        .unwrap()
        .clone()
}

/// Moves the first session of the rewritten memory `name` to another year.
pub(super) fn forge_memory(members: &mut BTreeMap<String, Vec<u8>>, name: &str) {
    let text = String::from_utf8(members[name].clone()).unwrap();
    let (from, to) = ("\"conversation_time\": \"2023", "\"conversation_time\": \"2031");
    assert!(text.contains(from), "{name}: {text}");
    members.insert(name.to_string(), text.replacen(from, to, 1).into_bytes());
}

#[tokio::test]
async fn a_learn_run_exports_verifies_and_names_every_forged_member() {
    let (dir, data) = project_with("tests/fixtures/answer/tiny_conversation.json", fixture);
    let server = world_server(&data, GOOD_RULE, Duration::ZERO).await;
    let output = mragent_in(dir.path(), &learn_args(&data, &server, "v"), &[]).await;
    assert!(output.status.success(), "{}", text(&output.stderr));
    drop(server);
    let manifest: Value = serde_json::from_slice(
        &std::fs::read(dir.path().join(META).join("manifest.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(manifest["status"], "complete", "{manifest}");
    assert!(manifest["calls"]["calls"].as_u64().unwrap() > 0, "{manifest}");
    let output = mragent_in(dir.path(), &["export", "--learn", "v"], &[]).await;
    assert!(output.status.success(), "{}", text(&output.stderr));
    let archive = dir.path().join("export/locomo/learn_v.tar.zst");

    // The honest archive verifies offline, under every MRAGENT_* variable hostile, quietly,
    // writing nothing where it runs or under the hostile root.
    let (here, hostile_root) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let env = hostile_env(hostile_root.path().to_str().unwrap());
    let output = mragent_in(here.path(), &["verify", archive.to_str().unwrap()], &env).await;
    let (said, stderr) = (text(&output.stdout), text(&output.stderr));
    assert_eq!(output.status.code(), Some(0), "{said}{stderr}");
    assert!(said.starts_with("VERIFIED"), "{said}");
    assert_eq!(stderr, "", "verify is quiet unless asked");
    assert!(listing(here.path()).is_empty(), "verify wrote where it ran");
    assert!(listing(hostile_root.path()).is_empty(), "verify wrote under MRAGENT_ROOT");
    assert!(said.contains(&format!("carried, not verified: {META}/manifest.json")), "{said}");
    // Only the manifest is carried: every other file the learning wrote, traces included, is
    // recomputed.
    let carried: Vec<&str> =
        said.lines().filter(|line| line.starts_with("  carried, not verified")).collect();
    assert_eq!(carried, [format!("  carried, not verified: {META}/manifest.json")], "{said}");

    let members = read_archive(&archive);
    let pass_result = members
        .keys()
        .find(|name| name.starts_with(&format!("{META}/runs/result/")) && name.ends_with(".jsonl"))
        .unwrap()
        .clone();
    let memory = rewritten_memory(&members);
    let mut cases: Vec<(String, Forgery, Vec<String>)> = Vec::new();
    for file in
        ["rules.json", "report.md", "validation.svg", "fold0/step1.json", "fold1/rules.json"]
    {
        let name = format!("{META}/{file}");
        let member = name.clone();
        cases.push((
            format!("a number in {file}"),
            Box::new(move |m| {
                let bytes = change_a_digit(&m[&member]);
                m.insert(member.clone(), bytes);
            }),
            vec![name],
        ));
    }
    cases.push((
        "a kept rule".into(),
        Box::new(|m| {
            edit_json(m, &format!("{META}/rules.json"), |rules| {
                rules["rules"][0]["text"] = "Always answer Paris.".into();
            });
        }),
        vec![format!("{META}/rules.json")],
    ));
    cases.push((
        "the plan".into(),
        Box::new(|m| {
            edit_json(m, &format!("{META}/plan.json"), |plan| {
                let folds = plan["plan"]["folds"].as_array_mut().unwrap();
                folds.swap(0, 1);
            });
        }),
        vec![format!("{META}/plan.json")],
    ));
    let forged_pass = pass_result.clone();
    cases.push((
        "a pass's answer".into(),
        Box::new(move |m| forge_prediction(m, &forged_pass)),
        vec![pass_result.clone(), "question conv-".into()],
    ));
    cases.push((
        "a test answer".into(),
        Box::new(|m| forge_prediction(m, TEST_RESULT)),
        vec![TEST_RESULT.into(), "question conv-7:".into()],
    ));
    let test_trace =
        members.keys().find(|name| name.starts_with("log/locomo/meta-v/")).unwrap().clone();
    let pass_trace =
        members.keys().find(|name| name.starts_with(&format!("{META}/runs/log/"))).unwrap().clone();
    for trace in [test_trace, pass_trace] {
        let forged_trace = trace.clone();
        cases.push((
            format!("the answer in {trace}"),
            Box::new(move |m| {
                let text = String::from_utf8(m[&forged_trace].clone()).unwrap();
                let mut lines: Vec<Value> =
                    text.lines().map(|line| serde_json::from_str(line).unwrap()).collect();
                let last = lines.len() - 1;
                lines[last]["forged"] = true.into();
                let text: String =
                    lines.iter().map(|line| serde_json::to_string(line).unwrap() + "\n").collect();
                m.insert(forged_trace.clone(), text.into_bytes());
            }),
            vec![trace.clone(), "field(s) forged".into()],
        ));
    }
    cases.push((
        "a step record removed".into(),
        Box::new(|m| {
            m.remove(&format!("{META}/fold1/step1.json"));
        }),
        vec![format!("{META}/fold1/step1.json: the replay of the learning writes it")],
    ));
    cases.push((
        "a recorded consolidation".into(),
        Box::new(|m| {
            delete_call(
                m,
                &format!("{META}/calls.sqlite"),
                "chat",
                "learn fold 0 step 1: consolidation",
            )
        }),
        vec![format!("{META}/calls.sqlite"), "was never recorded".into(), "consolidation".into()],
    ));
    cases.push((
        "archive.json's manifest".into(),
        Box::new(|m| {
            edit_json(m, "archive.json", |index| index["manifest"]["settings"]["seed"] = 7.into());
        }),
        vec![format!("archive.json: its copy of the manifest differs from {META}/manifest.json")],
    ));
    cases.push((
        "the replay arguments, in both manifests".into(),
        Box::new(|m| {
            let widen = |manifest: &mut Value| {
                let args = manifest["replay_args"].as_array_mut().unwrap();
                let at = args.iter().position(|arg| arg == "--max-rules").unwrap();
                args[at + 1] = "1".into();
            };
            edit_json(m, &format!("{META}/manifest.json"), widen);
            edit_json(m, "archive.json", |index| widen(&mut index["manifest"]));
        }),
        vec![format!("{META}/")],
    ));
    // What the review of this suite found a forger could do.
    cases.push((
        "a file beside the memories".into(),
        Box::new(|m| {
            m.insert("data/notes.md".into(), b"J = 99%\n".to_vec());
        }),
        vec!["data/notes.md: archived, but the replay of the learning does not write it".into()],
    ));
    cases.push((
        "the weaker fold dropped".into(),
        Box::new(|m| m.retain(|name, _| !name.starts_with(&format!("{META}/fold1/")))),
        vec!["the learning has folds [0, 1]".into()],
    ));
    cases.push((
        "a host folder in the replay arguments".into(),
        Box::new(|m| {
            let point = |manifest: &mut Value| {
                let args = manifest["replay_args"].as_array_mut().unwrap();
                args.extend(["--embed-model-dir".into(), "/etc".into()]);
            };
            edit_json(m, &format!("{META}/manifest.json"), point);
            edit_json(m, "archive.json", |index| point(&mut index["manifest"]));
        }),
        vec!["--embed-model-dir, which a learning's manifest never does".into()],
    ));
    let rebuilt = memory.clone();
    cases.push((
        "a memory the replay rebuilds from the tape".into(),
        Box::new(move |m| {
            let text = String::from_utf8(m[&rebuilt].clone()).unwrap();
            m.insert(
                rebuilt.clone(),
                text.replacen("\"format\": 1", "\"format\": 2", 1).into_bytes(),
            );
        }),
        vec![format!("{memory}")],
    ));
    cases.push((
        "a second line for a test answer".into(),
        Box::new(|m| {
            let text = String::from_utf8(m[TEST_RESULT].clone()).unwrap();
            let mut lines: Vec<&str> = text.lines().collect();
            lines.insert(0, lines[1]);
            m.insert(TEST_RESULT.into(), (lines.join("\n") + "\n").into_bytes());
        }),
        vec![TEST_RESULT.into(), "has two lines for it".into()],
    ));
    cases.push((
        "the memory".into(),
        Box::new(move |m| forge_memory(m, &memory)),
        vec!["question conv-7:".into(), "field(s) memory".into()],
    ));
    assert_each_forgery_is_named(&members, &cases, here.path()).await;
}

#[tokio::test]
async fn an_unfinished_learn_run_is_not_exported() {
    let (dir, _data) = project_with("tests/fixtures/answer/tiny_conversation.json", fixture);
    let output = mragent_in(dir.path(), &["export", "--learn", "nothing"], &[]).await;
    assert!(!output.status.success());
    assert!(
        text(&output.stderr).contains("learn run nothing has no manifest"),
        "{}",
        text(&output.stderr)
    );
}
