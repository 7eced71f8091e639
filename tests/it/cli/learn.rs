//! `mragent learn` end to end against the scripted endpoint: a scripted model that answers
//! temporal questions right only when a rule about session dates is in its system prompt (and
//! otherwise by a coin on the request's seed), a judge that compares with the gold answer, and
//! a reviewer and proposer that suggest that rule from the failures (and one that names a
//! training speaker, which must be refused).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use mragent::llm::scripted::{RecordedRequest, ScriptedReply, ScriptedServer};
use mragent::prompts;
use serde_json::{Value, json};
use sha2::Digest as _;

use super::mragent_in;
use crate::support::{build_and_answer, mragent_command, project_with, read_lines};

/// The rule the proposer suggests; the scripted model answers temporal questions right when
/// its system prompt holds "session date".
pub(super) const GOOD_RULE: &str =
    "For when-questions, read the session date of each event before answering.";

/// A rule that makes every answer wrong (the scripted model's reaction to it).
const HARMFUL_RULE: &str = "Answer at once, without calling any tool.";

/// The answer fixture twice (`conv-7` and a renamed `conv-8`), every judged question made
/// temporal.
pub(super) fn fixture(data: &mut Value) {
    let text = serde_json::to_string(&data[0])
        .unwrap()
        .replace("Lena", "Marguerite")
        .replace("Omar", "Bastien");
    let mut second: Value = serde_json::from_str(&text).unwrap();
    second["sample_id"] = Value::from("conv-8");
    data.as_array_mut().unwrap().push(second);
    for conversation in data.as_array_mut().unwrap() {
        for qa in conversation["qa"].as_array_mut().unwrap() {
            if qa["category"] != 5 {
                qa["category"] = Value::from(2);
            }
        }
    }
}

/// Question text → gold answer, over the fixture.
fn golds(data: &Path) -> BTreeMap<String, String> {
    let value: Value = serde_json::from_str(&std::fs::read_to_string(data).unwrap()).unwrap();
    let mut golds = BTreeMap::new();
    for conversation in value.as_array().unwrap() {
        for qa in conversation["qa"].as_array().unwrap() {
            if let Some(answer) = qa.get("answer") {
                golds.insert(
                    qa["question"].as_str().unwrap().to_string(),
                    answer.as_str().map_or(answer.to_string(), str::to_string),
                );
            }
        }
    }
    golds
}

fn system_text(request: &RecordedRequest) -> String {
    request
        .messages()
        .first()
        .and_then(|m| m.get("content"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

fn is_loop(request: &RecordedRequest) -> bool {
    request.is_chat()
        && system_text(request).starts_with(prompts::ANSWER_SYSTEM.text.lines().next().unwrap())
}

fn field(text: &str, label: &str) -> String {
    text.lines().find_map(|line| line.strip_prefix(label)).unwrap_or_default().trim().to_string()
}

/// A fair coin on (seed, question).
fn coin(seed: i64, question: &str) -> bool {
    sha2::Sha256::digest(format!("{seed}:{question}").as_bytes())[0] % 2 == 0
}

/// The scripted world (see the module documentation); `proposed` is the rule the proposer adds.
fn world(
    golds: BTreeMap<String, String>,
    proposed: &'static str,
    delay: Duration,
) -> impl Fn(&RecordedRequest) -> ScriptedReply + Send + Sync + 'static {
    let rest = build_and_answer(|_| None);
    let golds = Arc::new(golds);
    move |request| {
        let text = request.last_message_text().to_string();
        if is_loop(request) {
            let system = system_text(request);
            let user = request
                .messages()
                .get(1)
                .and_then(|m| m.get("content"))
                .and_then(Value::as_str)
                .unwrap_or("");
            let (question, gold) = golds
                .iter()
                .filter(|(q, _)| user.contains(q.as_str()))
                .max_by_key(|(q, _)| q.len())
                .map(|(q, g)| (q.clone(), g.clone()))
                .unwrap_or_default();
            let seed = request.body.get("seed").and_then(Value::as_i64).unwrap_or(0);
            let right = !system.contains(HARMFUL_RULE)
                && (system.contains("session date") || coin(seed, &question));
            let answer = if right { gold } else { "I cannot tell".to_string() };
            return ScriptedReply::json(
                &json!({"mode": "answer", "answer": answer, "supports": [], "confidence": 0.8}),
            )
            .delayed(delay);
        }
        if text.contains("Gold answer:") && text.contains("Assistant's answer:") {
            let same = field(&text, "Gold answer:")
                .eq_ignore_ascii_case(&field(&text, "Assistant's answer:"));
            return ScriptedReply::json(
                &json!({"reason": "compared", "label": if same { "CORRECT" } else { "WRONG" }}),
            );
        }
        if text.starts_with(prompts::LEARN_SUMMARY.text.lines().next().unwrap()) {
            let wrong = text.contains("Verdict: judged wrong");
            return ScriptedReply::json(&json!({
                "evidence_used": field(&text, "Question:"),
                "mistake": if wrong { "it guessed the date without reading when the session took place" } else { "none" },
                "decision_points": "whether to read the session dates",
                "lesson": "read the session date before answering a when-question"
            }));
        }
        if text.starts_with(prompts::LEARN_PROPOSE.text.lines().next().unwrap()) {
            let name = if text.contains("Marguerite") { "Marguerite" } else { "Lena" };
            return ScriptedReply::json(&json!({"ops": [
                {"op": "add", "text": proposed},
                {"op": "add", "text": format!("Trust what {name} says about dates.")}
            ]}));
        }
        if text.starts_with(prompts::LEARN_CONSOLIDATE.text.lines().next().unwrap()) {
            return ScriptedReply::json(
                &json!({"ops": [{"op": "add", "text": proposed, "from": [1, 2]}]}),
            );
        }
        rest(request)
    }
}

pub(super) async fn world_server(
    data: &Path,
    proposed: &'static str,
    delay: Duration,
) -> ScriptedServer {
    ScriptedServer::with_responder(world(golds(data), proposed, delay)).await.unwrap()
}

pub(super) fn learn_args<'a>(
    data: &'a Path,
    server: &'a ScriptedServer,
    name: &'a str,
) -> Vec<&'a str> {
    vec![
        "learn",
        "--data-file",
        data.to_str().unwrap(),
        "--base-url",
        server.base_url(),
        "--model",
        "local/tiny",
        "--judge-model",
        "judge-model",
        "--folds",
        "2",
        "--batch",
        "4",
        "--validation",
        "4",
        "--samples",
        "3",
        "--name",
        name,
        "--no-memgas",
        "-q",
    ]
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(
        &std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
    )
    .unwrap()
}

/// Right answers in a result file.
fn right(dir: &Path, sample: &str, tag: &str, golds: &BTreeMap<String, String>) -> usize {
    read_lines(&dir.join(format!("result/locomo/{sample}_result_local-tiny_{tag}.jsonl")))
        .iter()
        .filter(|line| {
            golds
                .get(&line.question)
                .is_some_and(|gold| gold.eq_ignore_ascii_case(&line.prediction))
        })
        .count()
}

#[tokio::test]
async fn learn_keeps_the_session_date_rule_refuses_a_leak_and_improves_the_test_folds() {
    let (dir, data) = project_with("tests/fixtures/answer/tiny_conversation.json", fixture);
    let server = world_server(&data, GOOD_RULE, Duration::ZERO).await;
    let output = mragent_in(dir.path(), &learn_args(&data, &server, "t"), &[]).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    let meta = dir.path().join("data/locomo/meta/t");
    let rules = read_json(&meta.join("rules.json"));
    let texts: Vec<&str> =
        rules["rules"].as_array().unwrap().iter().map(|r| r["text"].as_str().unwrap()).collect();
    assert_eq!(texts, vec![GOOD_RULE], "{stdout}");
    let plan = read_json(&meta.join("plan.json"));
    for fold in plan["plan"]["folds"].as_array().unwrap() {
        let k = fold["index"].as_u64().unwrap();
        let test: Vec<&str> =
            fold["test_samples"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
        let step0 = read_json(&meta.join(format!("fold{k}/step0.json")));
        let step1 = read_json(&meta.join(format!("fold{k}/step1.json")));
        // Validation improves with the rule, and the leaky proposal was refused.
        assert!(
            step1["validation"]["accuracy"].as_f64() > step0["validation"]["accuracy"].as_f64(),
            "{step0}\n{step1}"
        );
        let refused: Vec<&Value> = step1["ops"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|op| op.get("refused").is_some())
            .collect();
        assert!(refused.iter().any(|op| op["refused"]["reason"] == "name"), "{step1}");
        // No test conversation in any training batch or validation question.
        for id in
            step1["batch"].as_array().unwrap().iter().chain(fold["validation"].as_array().unwrap())
        {
            let sample = id.as_str().unwrap().split(':').next().unwrap();
            assert!(!test.contains(&sample), "{id} of test conversation {sample} was learned from");
        }
    }
    // The test folds improve: answered with their fold's rules, against the twin without.
    let golds = golds(&data);
    let with: usize =
        ["conv-7", "conv-8"].iter().map(|s| right(dir.path(), s, "meta-t", &golds)).sum();
    let without: usize =
        ["conv-7", "conv-8"].iter().map(|s| right(dir.path(), s, "meta-t-base", &golds)).sum();
    assert_eq!(with, 16, "every judged question of both test folds is right with the rule");
    assert!(without < with, "{without} right without the rule");
    // Every loop request that carries rules carries the block exactly once, in its system prompt.
    let heading = prompts::ANSWER_META_RULES.text.lines().next().unwrap();
    let loops: Vec<RecordedRequest> = server.requests().into_iter().filter(is_loop).collect();
    assert!(loops.iter().any(|r| system_text(r).contains(heading)));
    for request in &loops {
        let transcript = request.transcript();
        assert!(transcript.matches(heading).count() <= 1, "{transcript}");
        if transcript.contains(heading) {
            assert_eq!(system_text(request).matches(GOOD_RULE).count(), 1);
        }
    }
    assert!(stdout.contains("--paired-with meta-t-base"), "{stdout}");
}

#[tokio::test]
async fn a_rule_set_that_lowers_validation_is_not_kept() {
    let (dir, data) = project_with("tests/fixtures/answer/tiny_conversation.json", fixture);
    let server = world_server(&data, HARMFUL_RULE, Duration::ZERO).await;
    let mut args = learn_args(&data, &server, "h");
    args.push("--no-test");
    let output = mragent_in(dir.path(), &args, &[]).await;
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let meta = dir.path().join("data/locomo/meta/h");
    for k in 0..2 {
        let step1 = read_json(&meta.join(format!("fold{k}/step1.json")));
        assert_eq!(step1["rules"]["rules"][0]["text"], HARMFUL_RULE, "the rule was learned");
        assert_eq!(step1["validation"]["accuracy"], 0.0);
        assert_eq!(
            read_json(&meta.join(format!("fold{k}/rules.json")))["rules"],
            json!([]),
            "but not kept"
        );
    }
    assert_eq!(read_json(&meta.join("rules.json"))["rules"], json!([]));
    let report = std::fs::read_to_string(meta.join("report.md")).unwrap();
    assert!(report.contains("no rule set beat the empty one"), "{report}");
}

/// The step records, whole: a resumed step's tokens are those the tape recorded, so a resumed
/// run's records equal an uninterrupted one's.
fn records(meta: &Path) -> Vec<Value> {
    let mut all = Vec::new();
    for k in 0..2 {
        for step in 0..2 {
            all.push(read_json(&meta.join(format!("fold{k}/step{step}.json"))));
        }
    }
    all
}

/// Every model call a learn run makes is on its tape, with its work item: a rerun that kept
/// only the tape (the step records, answers, traces and kept rules deleted) sends not one
/// request, and ends with the same records and rules. No second memo is written.
#[tokio::test]
async fn a_learn_rerun_is_answered_from_its_tape_and_sends_nothing() {
    let (dir, data) = project_with("tests/fixtures/answer/tiny_conversation.json", fixture);
    let server = world_server(&data, GOOD_RULE, Duration::ZERO).await;
    let args = learn_args(&data, &server, "r");
    let output = mragent_in(dir.path(), &args, &[]).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    let meta = dir.path().join("data/locomo/meta/r");
    let (rules, steps) = (read_json(&meta.join("rules.json")), records(&meta));
    let report = std::fs::read_to_string(meta.join("report.md")).unwrap();
    let first = server.requests();
    let loops = first.iter().filter(|r| is_loop(r)).count();
    let embeddings = first.iter().filter(|r| r.is_embeddings()).count();
    let tape = meta.join("calls.sqlite");
    let store = mragent::llm::tape::CallStore::open_read_only(&tape).unwrap();
    let contexts: Vec<String> = store.calls().unwrap().into_iter().map(|c| c.context).collect();
    drop(store);
    for item in [
        "learn fold 0 step 0: validation: question ",
        "learn fold 0 step 1: attempt 2: question ",
        "learn fold 0 step 1: attempt 0: judging question ",
        "learn fold 1 step 1: review of question ",
        "learn fold 1 step 1: proposal from question ",
        "learn fold 0 step 1: consolidation",
        "learn fold 1 step 1: validation: judging question ",
        "learn fold 0 test meta-r-base: question ",
    ] {
        assert!(contexts.iter().any(|c| c.starts_with(item)), "no call of {item:?}: {contexts:?}");
    }
    for memo in ["calls.jsonl", "judgements.jsonl"] {
        assert!(!meta.join(memo).exists(), "{memo} is a second memo beside the tape");
    }
    eprintln!(
        "learn run: {} requests ({loops} answer-loop, {embeddings} embedding), tape {} bytes, {} calls",
        first.len(),
        std::fs::metadata(&tape).unwrap().len(),
        contexts.len()
    );
    // Everything but the tape, the plan and the memories goes.
    for k in 0..2 {
        std::fs::remove_dir_all(meta.join(format!("fold{k}"))).unwrap();
    }
    std::fs::remove_dir_all(meta.join("runs")).unwrap();
    for file in ["rules.json", "report.md"] {
        std::fs::remove_file(meta.join(file)).unwrap();
    }
    for entry in std::fs::read_dir(dir.path().join("result/locomo")).unwrap().flatten() {
        if entry.file_name().to_string_lossy().contains("_meta-r") {
            std::fs::remove_file(entry.path()).unwrap();
        }
    }
    let output = mragent_in(dir.path(), &args, &[]).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    let sent = server.requests().len() - first.len();
    eprintln!("rerun from the tape alone: {sent} requests");
    assert_eq!(sent, 0, "the rerun sent requests the tape holds\n{stdout}");
    assert!(stdout.contains("model calls: 0 sent and recorded"), "{stdout}");
    assert_eq!(read_json(&meta.join("rules.json")), rules);
    assert_eq!(records(&meta), steps);
    // The report is made from the step records alone: the rerun, which spent nothing, writes
    // the same one.
    assert_eq!(std::fs::read_to_string(meta.join("report.md")).unwrap(), report);
}

/// Starts `mragent args` in `dir` and kills it (-9) once the second rollout of fold 0's first
/// step of learn run `name` has started writing; fails if it ended before.
async fn kill_mid_step(dir: &Path, args: &[&str], name: &str, within: Duration) {
    let mut child = mragent_command(dir, args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let marker = dir.join(format!("data/locomo/meta/{name}/runs/result/locomo"));
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let started = std::fs::read_dir(&marker).ok().is_some_and(|entries| {
            entries.flatten().any(|e| e.file_name().to_string_lossy().ends_with("_f0-s1-k1.jsonl"))
        });
        let exited = child.try_wait().unwrap().is_some();
        if started || exited || tokio::time::Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    child.start_kill().unwrap();
    assert!(!child.wait().await.unwrap().success(), "the run finished before the kill");
}

#[tokio::test]
async fn a_learn_killed_mid_step_resumes_to_the_same_rules() {
    let (dir, data) = project_with("tests/fixtures/answer/tiny_conversation.json", fixture);
    let server = world_server(&data, GOOD_RULE, Duration::from_millis(40)).await;
    let args = learn_args(&data, &server, "k");
    kill_mid_step(dir.path(), &args, "k", Duration::from_secs(120)).await;
    assert!(
        !dir.path().join("data/locomo/meta/k/fold0/step1.json").exists(),
        "killed after the step"
    );
    let killed = server.requests().len();
    let output = mragent_in(dir.path(), &args, &[]).await;
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    // An uninterrupted run of the same command elsewhere ends the same.
    let (clean, clean_data) = project_with("tests/fixtures/answer/tiny_conversation.json", fixture);
    let clean_server = world_server(&clean_data, GOOD_RULE, Duration::ZERO).await;
    let output = mragent_in(clean.path(), &learn_args(&clean_data, &clean_server, "k"), &[]).await;
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    // The resumed run sends again only what was in flight at the kill (sent, never answered):
    // at most one request per worker (`--workers`, 10); everything answered is on the tape.
    // An uninterrupted run sends no request twice (identical ones in flight wait for each
    // other: two attempts with the same trajectory ask for the same review).
    let repeated = |requests: Vec<RecordedRequest>| {
        let mut bodies: Vec<String> = requests.iter().map(|r| r.body.to_string()).collect();
        bodies.sort_unstable();
        let total = bodies.len();
        bodies.dedup();
        (total, total - bodies.len())
    };
    let ((total, twice), (clean_total, clean_twice)) =
        (repeated(server.requests()), repeated(clean_server.requests()));
    eprintln!(
        "kill and resume: {killed} requests before the kill, {} after, {twice} bodies sent more than once; uninterrupted: {clean_total} requests, {clean_twice} bodies more than once",
        total - killed
    );
    assert_eq!(clean_twice, 0, "an uninterrupted run sends no request twice");
    assert!(twice <= 10, "{twice} requests were sent twice over the kill and the resume");
    assert!(total <= clean_total + 10, "{total} requests over the kill and the resume");
    let (resumed, uninterrupted) =
        (dir.path().join("data/locomo/meta/k"), clean.path().join("data/locomo/meta/k"));
    assert_eq!(
        read_json(&resumed.join("rules.json")),
        read_json(&uninterrupted.join("rules.json"))
    );
    assert_eq!(records(&resumed), records(&uninterrupted));
}

#[tokio::test]
async fn dry_run_prints_the_folds_and_the_estimate_and_sends_nothing() {
    let (dir, data) = project_with("tests/fixtures/answer/tiny_conversation.json", fixture);
    let server = world_server(&data, GOOD_RULE, Duration::ZERO).await;
    let mut args = learn_args(&data, &server, "d");
    args.push("--dry-run");
    let output = mragent_in(dir.path(), &args, &[]).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    assert!(stdout.contains("fold 0: test conv-"), "{stdout}");
    assert!(stdout.contains("rollouts") && stdout.contains("estimated cost"), "{stdout}");
    assert!(stdout.contains("dry run: nothing was sent"), "{stdout}");
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn a_token_budget_stops_cleanly_and_the_rerun_finishes() {
    let (dir, data) = project_with("tests/fixtures/answer/tiny_conversation.json", fixture);
    let server = world_server(&data, GOOD_RULE, Duration::ZERO).await;
    let mut args = learn_args(&data, &server, "b");
    args.extend(["--no-test", "--max-tokens-total", "1"]);
    let output = mragent_in(dir.path(), &args, &[]).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--max-tokens-total 1 reached") && stderr.contains("resume"),
        "{stderr}"
    );
    assert!(!server.requests().iter().any(is_loop), "nothing is answered past the budget");
    args.truncate(args.len() - 2);
    let output = mragent_in(dir.path(), &args, &[]).await;
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(dir.path().join("data/locomo/meta/b/rules.json").exists());
}

/// Two conversations of the real LoCoMo file: learning finishes, resumes after kill -9 and keeps
/// the rule.
#[tokio::test]
async fn two_locomo_conversations_learn_and_resume_after_kill() {
    let (dir, data) = project_with("data/dataset_locomo.json", |data| {
        data.as_array_mut()
            .unwrap()
            .retain(|c| c["sample_id"] == "conv-26" || c["sample_id"] == "conv-30");
    });
    let server = world_server(&data, GOOD_RULE, Duration::from_millis(20)).await;
    let mut args = learn_args(&data, &server, "real");
    for (flag, value) in [("--batch", "8"), ("--validation", "8"), ("--samples", "2")] {
        let at = args.iter().position(|arg| *arg == flag).unwrap();
        args[at + 1] = value;
    }
    args.extend(["--steps", "1", "--no-test"]);
    kill_mid_step(dir.path(), &args, "real", Duration::from_secs(300)).await;
    let output = mragent_in(dir.path(), &args, &[]).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    let meta = dir.path().join("data/locomo/meta/real");
    for k in 0..2 {
        let step1 = read_json(&meta.join(format!("fold{k}/step1.json")));
        assert_eq!(step1["batch"].as_array().unwrap().len(), 8);
    }
    let rules = read_json(&meta.join("rules.json"));
    assert_eq!(rules["rules"][0]["text"], GOOD_RULE, "{stdout}");
}

#[tokio::test]
async fn a_judge_that_fails_every_judgement_stops_the_run_with_a_clear_error() {
    let (dir, data) = project_with("tests/fixtures/answer/tiny_conversation.json", fixture);
    let world = world(golds(&data), GOOD_RULE, Duration::ZERO);
    let server = ScriptedServer::with_responder(move |request| {
        let text = request.last_message_text();
        if text.contains("Gold answer:") && text.contains("Assistant's answer:") {
            ScriptedReply::text("I refuse to grade this.")
        } else {
            world(request)
        }
    })
    .await
    .unwrap();
    let output = mragent_in(dir.path(), &learn_args(&data, &server, "j"), &[]).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("the judge (judge-model) failed all 4 judgements"), "{stderr}");
    assert!(!dir.path().join("data/locomo/meta/j/fold0/step0.json").exists());
    // The judge answered, unreadably: its replies are on the tape, which a rerun replays, and
    // the message says what works instead.
    assert!(stderr.contains("learn under another --name with a working judge"), "{stderr}");
    let output = mragent_in(dir.path(), &learn_args(&data, &server, "j"), &[]).await;
    let again = String::from_utf8_lossy(&output.stderr);
    assert!(again.contains("failed all 4 judgements"), "{again}");
}

/// `--max-cost` cannot bound a model whose price is unknown: refused before any request,
/// naming the model and the bound that works.
#[tokio::test]
async fn max_cost_with_an_unpriced_model_is_refused_before_any_request() {
    let (dir, data) = project_with("tests/fixtures/answer/tiny_conversation.json", fixture);
    let server = world_server(&data, GOOD_RULE, Duration::ZERO).await;
    let mut args = learn_args(&data, &server, "c");
    args.extend(["--no-test", "--max-cost", "1"]);
    let output = mragent_in(dir.path(), &args, &[]).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("local/tiny") && stderr.contains("--max-tokens-total"), "{stderr}");
    assert!(server.requests().is_empty(), "{} requests sent", server.requests().len());
}

/// A rerun whose settings differ from the run's `plan.json` is refused before any memory is
/// built, so before anything is spent.
#[tokio::test]
async fn a_rerun_with_other_settings_is_refused_before_anything_is_sent() {
    let (dir, data) = project_with("tests/fixtures/answer/tiny_conversation.json", fixture);
    let server = world_server(&data, GOOD_RULE, Duration::ZERO).await;
    let meta = dir.path().join("data/locomo/meta/p");
    std::fs::create_dir_all(&meta).unwrap();
    let earlier = json!({"settings": {"seed": 1}, "plan": {"folds": []}});
    std::fs::write(meta.join("plan.json"), earlier.to_string()).unwrap();
    let mut args = learn_args(&data, &server, "p");
    args.push("--no-test");
    let output = mragent_in(dir.path(), &args, &[]).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("was made with other settings"), "{stderr}");
    assert!(server.requests().is_empty(), "{} requests sent", server.requests().len());
}

/// `--fold 1` after `--fold 0`: the top-level rules and report are those of both folds on
/// disk, as one invocation of both would write them.
#[tokio::test]
async fn top_level_rules_and_report_come_from_every_fold_on_disk() {
    let (dir, data) = project_with("tests/fixtures/answer/tiny_conversation.json", fixture);
    let server = world_server(&data, GOOD_RULE, Duration::ZERO).await;
    for fold in ["0", "1"] {
        let mut args = learn_args(&data, &server, "f");
        args.extend(["--no-test", "--fold", fold]);
        let output = mragent_in(dir.path(), &args, &[]).await;
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    }
    let meta = dir.path().join("data/locomo/meta/f");
    let report = std::fs::read_to_string(meta.join("report.md")).unwrap();
    assert!(report.contains("## Fold 0") && report.contains("## Fold 1"), "{report}");
    let kept = read_json(&meta.join("rules.json"));
    let texts: Vec<&str> =
        kept["rules"].as_array().unwrap().iter().map(|r| r["text"].as_str().unwrap()).collect();
    assert_eq!(texts, vec![GOOD_RULE]);
}
