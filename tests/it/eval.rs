//! Evaluation: the scorer against ground truth computed by the Python reference (NLTK stems and
//! the official LoCoMo rules), the audit mapping against the shipped dataset, and `evaluate` end
//! to end on fixture runs, with the judge served by the scripted endpoint over real HTTP.

// Test helpers outside `#[test]` functions panic on broken fixtures by design.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use mragent::dataset::{Category, DatasetKind};
use mragent::eval::audit::{AuditAction, load_audit};
use mragent::eval::judge::JudgeProtocol;
use mragent::eval::report::Prices;
use mragent::eval::{EvalSettings, EvalSummary, ItemScore, evaluate, f1};
use mragent::llm::scripted::{RecordedRequest, ScriptedReply, ScriptedServer};
use mragent::llm::secret::Secret;
use mragent::llm::stack::{Client, LlmConfig, build_chat_model};
use mragent::llm::tape::{CallStore, StoredCall, TapedChat};
use mragent::llm::{ChatModel, ChatRequest, ChatResponse};
use mragent::results::{ResultLine, Status};
use mragent::text::porter;
use serde_json::{Value, json};

pub(crate) fn fixture(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/eval").join(relative)
}

pub(crate) fn repo(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

#[test]
fn unicode_word_boundaries_match_the_official_regex_module() {
    // Expected values from the official normalisation run with the `regex` module the
    // official scorer pins (scripts/locomo_unicode_vectors.py).
    let text = std::fs::read_to_string(fixture("f1_unicode.jsonl")).unwrap();
    let mut checked = 0;
    for line in text.lines() {
        let case: Value = serde_json::from_str(line).unwrap();
        let name = case["case"].as_str().unwrap();
        let category = case["category"].as_u64().unwrap() as u8;
        let prediction = case["prediction"].as_str().unwrap();
        let gold = case["gold"].as_str().unwrap();
        assert_eq!(
            f1::normalize_answer(prediction),
            case["normalized_prediction"].as_str().unwrap(),
            "{name}: prediction"
        );
        let scored_gold = if category == 3 { f1::open_domain_gold(gold) } else { gold };
        assert_eq!(
            f1::normalize_answer(scored_gold),
            case["normalized_gold"].as_str().unwrap(),
            "{name}: gold"
        );
        let score = f1::score_locomo(category, prediction, Some(gold)).unwrap();
        assert!((score.f1 - case["f1"].as_f64().unwrap()).abs() < 1e-12, "{name}: {}", score.f1);
        assert_eq!(score.stored, case["stored"].as_f64().unwrap(), "{name}: stored");
        checked += 1;
    }
    // Combining marks, ZWJ/ZWNJ, connector punctuation and their non-word neighbours.
    assert_eq!(checked, 18);
}

#[test]
fn porter_matches_nltk_on_every_vector() {
    let text = std::fs::read_to_string(fixture("porter_nltk.tsv")).unwrap();
    let mut checked = 0;
    let mut mismatches = Vec::new();
    for line in text.lines().filter(|line| !line.starts_with('#')) {
        let (word, expected) = line.split_once('\t').unwrap();
        if porter::stem(word) != expected {
            mismatches.push(format!("{word}: {} != {expected}", porter::stem(word)));
        }
        checked += 1;
    }
    assert!(checked > 6000, "only {checked} vectors");
    assert!(
        mismatches.is_empty(),
        "{} mismatches: {:?}",
        mismatches.len(),
        &mismatches[..mismatches.len().min(20)]
    );
}

#[test]
fn locomo_scorer_matches_the_python_reference_on_every_vector() {
    let text = std::fs::read_to_string(fixture("f1_vectors.jsonl")).unwrap();
    let mut checked = 0;
    for line in text.lines() {
        let vector: Value = serde_json::from_str(line).unwrap();
        let category = vector["category"].as_u64().unwrap() as u8;
        let prediction = vector["prediction"].as_str().unwrap();
        let gold = vector["gold"].as_str();
        let score = f1::score_locomo(category, prediction, gold).unwrap();
        let expected = vector["f1"].as_f64().unwrap();
        assert!(
            (score.f1 - expected).abs() < 1e-12,
            "{}: cat {category} {prediction:?} vs {gold:?}: {} != {expected}",
            vector["id"],
            score.f1
        );
        assert_eq!(
            score.exact_match,
            vector["em"].as_bool().unwrap(),
            "{}: exact match",
            vector["id"]
        );
        checked += 1;
    }
    assert_eq!(checked, 1986 + 17);
}

#[test]
fn audit_entries_point_at_the_questions_they_describe() {
    let dataset: Value = serde_json::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("data/dataset_locomo.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let samples = dataset.as_array().unwrap();
    let audit = load_audit(&repo("data/locomo_audit.json")).unwrap();
    for entry in audit.values() {
        let (sample_id, number) = entry.question_id.split_once(":q").unwrap();
        let sample = samples.iter().find(|sample| sample["sample_id"] == sample_id).unwrap();
        let qa = &sample["qa"][number.parse::<usize>().unwrap() - 1];
        assert_eq!(qa["category"], entry.category, "{entry:?}");
        if let AuditAction::Corrected { answer } = &entry.action {
            let gold = match &qa["answer"] {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            };
            assert_ne!(answer, &gold, "{}: correction equals the gold answer", entry.question_id);
        }
    }
    // Spot check by text: the audit's locomo_1_qa31 is conv-30's 32nd question.
    assert_eq!(
        samples[1]["qa"][31]["question"],
        "How long did it take for Jon to open his studio?"
    );
}

/// A temporary project root holding a copy of the fixture `result/` tree.
pub(crate) fn project() -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    for dataset in ["locomo", "LM"] {
        let target = root.path().join("result").join(dataset);
        std::fs::create_dir_all(&target).unwrap();
        for entry in std::fs::read_dir(fixture(&format!("run/result/{dataset}"))).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), target.join(entry.file_name())).unwrap();
        }
    }
    root
}

/// Copy the datasets and the audit into `root/data/`, where `eval` looks by default.
fn with_data(root: &Path) {
    let data = root.join("data");
    if data.join("dataset_locomo.json").is_file() {
        return;
    }
    std::fs::create_dir_all(&data).unwrap();
    std::fs::copy(repo("data/dataset_locomo.json"), data.join("dataset_locomo.json")).unwrap();
    std::fs::copy(repo("data/locomo_audit.json"), data.join("locomo_audit.json")).unwrap();
    std::fs::copy(fixture("run/data/dataset_LM.json"), data.join("dataset_LM.json")).unwrap();
}

pub(crate) fn settings(root: &Path, dataset: DatasetKind, judge_runs: u32) -> EvalSettings {
    // The project's data/ (see `with_data`) holds the dataset and the audit at their default
    // places; the fixture run answered 17 of LoCoMo's 1,986 questions.
    with_data(root);
    let mut settings = EvalSettings::new(root, dataset, "fixture", "run1");
    settings.partial = dataset == DatasetKind::Locomo;
    settings.judge_model = Some("judge-model".into());
    settings.judge_runs = judge_runs;
    settings.concurrency = 4;
    settings.prices = Some(Prices { input_per_million: 0.3, output_per_million: 2.5 });
    settings
}

/// The judge recording on the eval's own tape (`record/<dataset>/<model>_<file>.judge.sqlite`),
/// as `mragent eval` judges; opened afresh per evaluation, as each command opens it.
pub(crate) fn taped<'a>(judge: &'a Client, settings: &EvalSettings) -> TapedChat<&'a Client> {
    let path = mragent::recorded::RunFiles::of_eval(settings).judge_calls();
    TapedChat::new(judge, mragent::recorded::tape::recording(&path).unwrap())
}

/// The calls on the eval's judge tape, in the order they were recorded.
pub(crate) fn judge_tape(settings: &EvalSettings) -> Vec<StoredCall> {
    let path = mragent::recorded::RunFiles::of_eval(settings).judge_calls();
    CallStore::open_read_only(&path).unwrap().calls().unwrap()
}

pub(crate) fn client(server: &ScriptedServer) -> Client {
    let mut config = LlmConfig::new(server.base_url(), Secret::new("sk-test-key"), "judge-model");
    config.retry.base_delay = Duration::from_millis(5);
    config.retry.max_delay = Duration::from_millis(20);
    build_chat_model(&config).unwrap()
}

/// The field after `label` up to the end of its line in the rendered judge prompt.
fn prompt_field(text: &str, label: &str) -> String {
    text.lines().find_map(|line| line.strip_prefix(label)).unwrap_or_default().trim().to_string()
}

/// A deterministic judge: CORRECT when the answer contains the gold answer's first word
/// (case-insensitive), and in run 1 (seed 1) every temporal LoCoMo question flips, so runs
/// differ and the std is not zero.
pub(crate) fn fixture_judge(request: &RecordedRequest) -> ScriptedReply {
    let text = request.last_message_text().to_string();
    let (gold, prediction) = if text.contains("Gold answer:") {
        (prompt_field(&text, "Gold answer:"), prompt_field(&text, "Assistant's answer:"))
    } else {
        let gold = ["Correct answer:", "Rubric:", "Why it cannot be answered:"]
            .iter()
            .map(|label| prompt_field(&text, label))
            .find(|field| !field.is_empty())
            .unwrap_or_default();
        (gold, prompt_field(&text, "Response:"))
    };
    let first_word = gold.split_whitespace().next().unwrap_or_default().to_lowercase();
    let mut correct = !first_word.is_empty() && prediction.to_lowercase().contains(&first_word);
    if text.contains("cannot be answered") {
        correct = prediction.contains("don't have");
    }
    let seed = request.body.get("seed").and_then(Value::as_i64).unwrap_or(0);
    if seed == 1 && text.contains("Question: When") {
        correct = !correct;
    }
    let label = if correct { "CORRECT" } else { "WRONG" };
    ScriptedReply::json(
        &json!({"reason": format!("first gold word {first_word:?}"), "label": label}),
    )
    .with_usage(120, 15)
}

fn item<'a>(items: &'a [ItemScore], question_id: &str) -> &'a ItemScore {
    items.iter().find(|item| item.question_id == question_id).unwrap()
}

fn read_scores(root: &Path, dataset: &str) -> Vec<ItemScore> {
    let text =
        std::fs::read_to_string(root.join("eval").join(dataset).join("run1/scores.jsonl")).unwrap();
    text.lines().map(|line| serde_json::from_str(line).unwrap()).collect()
}

fn row<'a>(summary: &'a EvalSummary, key: &str) -> &'a mragent::eval::report::TableRow {
    summary.rows.iter().find(|row| row.key == key).unwrap()
}

#[tokio::test]
async fn locomo_fixture_run_writes_every_output_and_pins_the_summary() {
    let root = project();
    let server = ScriptedServer::with_responder(fixture_judge).await.unwrap();
    let judge = client(&server);
    let settings = settings(root.path(), DatasetKind::Locomo, 2);
    let summary = evaluate(&settings, Some(&taped(&judge, &settings))).await.unwrap();

    let out = root.path().join("eval/locomo/run1");
    // The verdicts are kept on the judge's tape alone, each call with its question.
    assert!(!out.join("judgements.jsonl").exists());
    let calls = judge_tape(&settings);
    assert_eq!(calls.len(), (13 + 2) * 2);
    assert!(calls.iter().all(|call| call.context.starts_with("judging question conv-")));
    for name in ["scores.jsonl", "summary.json", "summary.md", "accuracy.svg", "tokens.svg"] {
        assert!(out.join(name).is_file(), "{name} missing");
    }
    // 13 + 4 questions; the run2 file is not read.
    assert_eq!(summary.questions, 17);
    assert_eq!(summary.expected_questions, 1986);
    assert_eq!(summary.partial.as_deref(), Some("PARTIAL 17/1986"));
    assert!(summary.table().contains("PARTIAL 17/1986"));
    assert_eq!(summary.result_files.len(), 2);
    assert_eq!(summary.judge_protocol.as_deref(), Some("mem0"));
    let items = read_scores(root.path(), "locomo");
    assert_eq!(item(&items, "conv-30:q29").prediction, "June, 2023");
    // Scores come out in dataset order with 0-based positions beside the ids.
    let ids: Vec<&str> = items.iter().map(|item| item.question_id.as_str()).collect();
    assert_eq!(&ids[..3], ["conv-26:q1", "conv-26:q2", "conv-26:q3"]);
    assert_eq!(item(&items, "conv-26:q1").qa_index, Some(0));
    assert_eq!(item(&items, "conv-30:q96").qa_index, Some(95));
    // Every judge token is counted: 30 judgements of 120 + 15 tokens.
    assert_eq!(summary.judge_usage.total(), 30 * 135);
    assert_eq!(summary.judge_usage_total.total(), 30 * 135);

    // Judged: the 14 questions of categories 1–4 except the failed q11, plus the two audit
    // corrections judged against their corrected gold, for two runs.
    assert_eq!(server.request_count(), (13 + 2) * 2);
    assert_eq!(summary.judge_new, 30);
    assert_eq!(summary.judge_cached, 0);
    // The failed question is WRONG in every run without a model call.
    assert!(item(&items, "conv-26:q11").judge.iter().all(|verdict| !verdict.correct));
    assert_eq!(item(&items, "conv-26:q11").judge.len(), 2);
    // Category 5 is not judged.
    assert!(item(&items, "conv-26:q153").judge.is_empty());

    // Audit: q3 corrected to the prediction itself, q27 excluded, q2 gets corrected evidence.
    let corrected = item(&items, "conv-26:q3").audit.as_ref().unwrap();
    assert_eq!(corrected.f1, Some(1.0));
    assert!(item(&items, "conv-26:q27").audit.as_ref().unwrap().excluded);
    assert_eq!(item(&items, "conv-26:q2").recall.unwrap().fraction, 0.0);
    assert_eq!(item(&items, "conv-26:q2").audit.as_ref().unwrap().recall.unwrap().fraction, 1.0);
    assert_eq!(summary.audit_corrected, 2);
    assert_eq!(summary.audit_excluded, 1);
    // The changed golds are listed with their effect on this run.
    let changed: Vec<&str> =
        summary.audit_changes.iter().map(|change| change.question_id.as_str()).collect();
    assert_eq!(changed, ["conv-26:q3", "conv-26:q27", "conv-30:q32"]);
    let q3 = &summary.audit_changes[0];
    assert_eq!(q3.qa_index, Some(2));
    assert_eq!(q3.old_gold.as_deref(), Some("Psychology, counseling certification"));
    assert_eq!(q3.f1_audited, Some(1.0));
    assert!(summary.audit_changes[1].new_gold.is_none());

    let overall = row(&summary, "overall_1_4");
    assert_eq!(overall.raw.count, 14);
    assert_eq!(overall.audited.as_ref().unwrap().count, 13);
    let judge = overall.raw.judge.unwrap();
    assert_eq!(judge.runs, 2);
    assert_eq!((judge.judged, judge.failed), (28, 0));
    assert!(judge.std > 0.0);
    // No LoCoMo row mixes category 5 into an overall; category 5 is the refusal rate.
    assert!(summary.rows.iter().all(|row| row.key != "overall"));
    assert_eq!(row(&summary, "5").label, "5 adversarial: refusal rate");
    assert!(row(&summary, "5").raw.judge.is_none());

    // Every output file is readable by everyone.
    #[cfg(unix)]
    for entry in std::fs::read_dir(&out).unwrap() {
        use std::os::unix::fs::PermissionsExt as _;
        let entry = entry.unwrap();
        let mode = entry.metadata().unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o644, "{}", entry.path().display());
    }

    let markdown = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert_eq!(markdown, mragent::eval::summary_markdown(&summary));
    insta::assert_snapshot!("eval_locomo_fixture_summary", markdown);
    let accuracy_svg = std::fs::read_to_string(out.join("accuracy.svg")).unwrap();
    assert!(accuracy_svg.starts_with("<svg") && accuracy_svg.contains("1 multi-hop"));
}

#[tokio::test]
async fn rerun_resumes_from_the_judge_tape_without_rejudging() {
    let root = project();
    let server = ScriptedServer::with_responder(fixture_judge).await.unwrap();
    let judge = client(&server);
    let one_run = settings(root.path(), DatasetKind::Locomo, 1);
    let evaluate_taped = |settings: EvalSettings| {
        let judge = &judge;
        async move { evaluate(&settings, Some(&taped(judge, &settings))).await.unwrap() }
    };
    let first = evaluate_taped(one_run.clone()).await;
    let after_first = server.request_count();
    assert_eq!(after_first, 15);
    assert_eq!(first.judge_new, 15);
    assert_eq!(judge_tape(&one_run).len(), 15);

    // Same settings: everything is answered from the tape.
    let second = evaluate_taped(one_run.clone()).await;
    assert_eq!(server.request_count(), after_first);
    assert_eq!((second.judge_cached, second.judge_new), (15, 0));
    assert_eq!(second.rows, first.rows);
    // Nothing was spent now, but the report's verdicts still cost what they cost.
    assert_eq!(second.judge_usage.total(), 0);
    assert_eq!(second.judge_usage_total.total(), 15 * 135);

    // An interrupted run never recorded its last two judgements: only those two are judged
    // again.
    let path = mragent::recorded::RunFiles::of_eval(&one_run).judge_calls();
    let store = CallStore::open(&path).unwrap();
    for call in judge_tape(&one_run).iter().rev().take(2) {
        assert!(store.forget_reply(&call.key, &call.reply).unwrap());
    }
    drop(store);
    let third = evaluate_taped(one_run.clone()).await;
    assert_eq!(server.request_count(), after_first + 2);
    assert_eq!((third.judge_cached, third.judge_new), (13, 2));
    assert_eq!(third.judge_usage.total(), 2 * 135);
    assert_eq!(third.rows, first.rows);

    // A second judge run adds only run 1.
    let two_runs = settings(root.path(), DatasetKind::Locomo, 2);
    let fourth = evaluate_taped(two_runs.clone()).await;
    assert_eq!(server.request_count(), after_first + 2 + 15);
    assert_eq!((fourth.judge_cached, fourth.judge_new), (15, 15));

    // A changed prediction is judged afresh; nothing else is.
    let results = root.path().join("result/locomo/conv-26_result_fixture_run1.jsonl");
    let edited = std::fs::read_to_string(&results)
        .unwrap()
        .replace("That running is fun", "Self-care is important");
    std::fs::write(&results, edited).unwrap();
    let fifth = evaluate_taped(two_runs).await;
    assert_eq!(fifth.judge_new, 2);
    assert_eq!(server.request_count(), after_first + 2 + 15 + 2);
    let items = read_scores(root.path(), "locomo");
    assert!(item(&items, "conv-26:q84").judge.iter().all(|verdict| verdict.correct));
}

/// Only `conv-26:q1` in the run: one judgement per fault scenario.
pub(crate) fn single_question_project() -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    let target = root.path().join("result/locomo");
    std::fs::create_dir_all(&target).unwrap();
    let text =
        std::fs::read_to_string(fixture("run/result/locomo/conv-26_result_fixture_run1.jsonl"))
            .unwrap();
    std::fs::write(target.join("conv-26_result_fixture_run1.jsonl"), text.lines().next().unwrap())
        .unwrap();
    root
}

#[tokio::test]
async fn judge_survives_a_server_error_and_malformed_json() {
    let root = single_question_project();
    let valid = || ScriptedReply::json(&json!({"reason": "same date", "label": "CORRECT"}));
    let server = ScriptedServer::with_script([
        ScriptedReply::server_error(500),
        ScriptedReply::text("The answer looks right to me."),
        ScriptedReply::json(&json!({"reason": "same date", "label": "MAYBE"})),
        valid(),
    ])
    .await
    .unwrap();
    let judge = client(&server);
    let settings = settings(root.path(), DatasetKind::Locomo, 1);
    let summary = evaluate(&settings, Some(&taped(&judge, &settings))).await.unwrap();
    assert_eq!(server.request_count(), 4);
    assert_eq!(server.remaining(), 0);
    assert_eq!((summary.judge_new, summary.judge_failed), (1, 0));
    let items = read_scores(root.path(), "locomo");
    assert!(items[0].judge[0].correct);
    assert_eq!(items[0].judge[0].reason, "same date");
    // The re-asks carried the rejected reply and the complaint back to the judge.
    let last = &server.requests()[3];
    assert_eq!(last.messages().len(), 5);
    assert!(last.transcript().contains("MAYBE"));
    // The tape records the three replies the judgement took (the 500 was retried below it),
    // each under the judgement's work item; a rerun is answered from them and asks nothing.
    let calls = judge_tape(&settings);
    assert_eq!(calls.len(), 3);
    assert!(
        calls
            .iter()
            .all(|call| call.context == "judging question conv-26:q1 (judge_locomo, run 0)")
    );
    let again = evaluate(&settings, Some(&taped(&judge, &settings))).await.unwrap();
    assert_eq!(server.request_count(), 4);
    assert_eq!((again.judge_cached, again.judge_new, again.judge_failed), (1, 0, 0));
    assert_eq!(again.rows, summary.rows);
}

#[tokio::test]
async fn failed_judgement_is_reported_and_retried_on_the_next_run() {
    let root = single_question_project();
    let server =
        ScriptedServer::with_script(std::iter::repeat_n(ScriptedReply::text("no json here"), 3))
            .await
            .unwrap();
    let judge = client(&server);
    let settings = settings(root.path(), DatasetKind::Locomo, 1);
    let summary = evaluate(&settings, Some(&taped(&judge, &settings))).await.unwrap();
    assert_eq!((summary.judge_new, summary.judge_failed), (0, 1));
    // The failed judgement shows in the row's judge cell instead of a made-up score.
    let cell = row(&summary, "2").raw.judge.unwrap();
    assert_eq!((cell.judged, cell.failed), (0, 1));
    assert!(summary.table().contains("[0, 1 failed]"), "{}", summary.table());
    // The unreadable replies are on the tape (a replay of this run meets the same failure).
    assert_eq!(judge_tape(&settings).len(), 3);

    // The next run does not replay the failure: it asks the judge afresh.
    server.push(ScriptedReply::json(&json!({"reason": "r", "label": "WRONG"})));
    let summary = evaluate(&settings, Some(&taped(&judge, &settings))).await.unwrap();
    assert_eq!(server.request_count(), 4);
    assert_eq!((summary.judge_new, summary.judge_failed), (1, 0));
    assert_eq!(row(&summary, "2").raw.judge.unwrap().mean, 0.0);
    // The tape holds the verdict now, and only it; the run after asks nothing.
    assert_eq!(judge_tape(&settings).len(), 1);
    let summary = evaluate(&settings, Some(&taped(&judge, &settings))).await.unwrap();
    assert_eq!(server.request_count(), 4);
    assert_eq!((summary.judge_cached, summary.judge_new, summary.judge_failed), (1, 0, 0));
}

#[tokio::test]
async fn longmemeval_uses_per_type_prompts_and_reports_task_averaged_and_abstention() {
    let root = project();
    let seen = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let recorder = Arc::clone(&seen);
    let server = ScriptedServer::with_responder(move |request| {
        recorder.lock().unwrap().push(request.last_message_text().to_string());
        fixture_judge(request)
    })
    .await
    .unwrap();
    let judge = client(&server);
    let summary =
        evaluate(&settings(root.path(), DatasetKind::LongMemEval, 1), Some(&judge)).await.unwrap();
    assert_eq!(server.request_count(), 7);
    let prompts = seen.lock().unwrap().clone();
    let prompt_for =
        |question: &str| prompts.iter().find(|text| text.contains(question)).unwrap().clone();
    assert!(prompt_for("dentist visits").contains("off by one"));
    assert!(prompt_for("Where do I work now").contains("older information"));
    assert!(prompt_for("weekend activity").contains("Rubric:"));
    assert!(prompt_for("sister have").contains("cannot be answered"));

    // The scripted judge is literal (gold's first word in the response): ssu yes, ssa no,
    // preference yes ("the"), temporal "18" vs "19 days" no, knowledge-update yes,
    // multi-session "5" vs "3 books" no, abstention yes (it declines).
    let items = read_scores(root.path(), "LM");
    let verdict = |id: &str| item(&items, id).judge[0].correct;
    let expected = [
        ("e47becba", true),
        ("0e5e2d1a", false),
        ("06878be2", true),
        ("00ca467f", false),
        ("01493427", true),
        ("08f4fc43", false),
        ("031748ae_abs", true),
    ];
    for (id, correct) in expected {
        assert_eq!(verdict(id), correct, "{id}");
    }
    assert!(item(&items, "e47becba").f1.is_none());
    let overall = row(&summary, "overall").raw.judge.unwrap().mean;
    assert!((overall - 4.0 / 7.0).abs() < 1e-12);
    // Per type: ssu 1, ssa 0, preference 1, temporal 0, knowledge-update 1, multi-session 1/2.
    let task_averaged = row(&summary, "task_averaged").raw.judge.unwrap().mean;
    assert!((task_averaged - 3.5 / 6.0).abs() < 1e-12);
    assert_eq!(row(&summary, "abstention").raw.judge.unwrap().mean, 1.0);
    assert_eq!(row(&summary, "abstention").raw.count, 1);
    assert!(summary.table().contains("task-averaged"));
}

#[tokio::test]
async fn evaluation_without_a_judge_scores_f1_only() {
    let root = project();
    let mut settings = settings(root.path(), DatasetKind::Locomo, 1);
    settings.judge_model = None;
    let summary = evaluate::<Client>(&settings, None).await.unwrap();
    let overall = row(&summary, "overall_1_4");
    assert_eq!(overall.raw.count, 14);
    assert!(overall.raw.judge.is_none());
    assert!(overall.raw.f1.is_some());
    assert!(!root.path().join("eval/locomo/run1/judgements.jsonl").exists());
    // The category-5 row: one refusal, one adversarial answer, one "No information available";
    // the mean is rounded to 3 decimals as the official statistics are.
    let adversarial = row(&summary, "5");
    assert_eq!(adversarial.label, "5 adversarial: refusal rate");
    assert_eq!(adversarial.raw.f1, Some(0.667));
    // Missing files are an error naming the pattern.
    settings.file = "missing".into();
    let error = evaluate::<Client>(&settings, None).await.unwrap_err().to_string();
    assert!(error.contains("_result_fixture_missing.jsonl"), "{error}");
}

/// Counts judge calls in flight through the real client.
struct Counting {
    inner: Client,
    current: AtomicUsize,
    max: AtomicUsize,
}

impl ChatModel for Counting {
    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, mragent::llm::Error> {
        let now = self.current.fetch_add(1, Ordering::SeqCst) + 1;
        self.max.fetch_max(now, Ordering::SeqCst);
        let response = self.inner.chat(request).await;
        self.current.fetch_sub(1, Ordering::SeqCst);
        response
    }
}

#[tokio::test]
async fn judge_requests_in_flight_stay_within_the_limit() {
    let root = project();
    // Each reply is held back so that requests overlap.
    let server = ScriptedServer::with_responder(|request| {
        fixture_judge(request).delayed(Duration::from_millis(100))
    })
    .await
    .unwrap();
    let judge =
        Counting { inner: client(&server), current: AtomicUsize::new(0), max: AtomicUsize::new(0) };
    let mut settings = settings(root.path(), DatasetKind::Locomo, 1);
    settings.concurrency = 3;
    let summary = evaluate(&settings, Some(&judge)).await.unwrap();
    assert_eq!(summary.judge_new, 15);
    assert_eq!(judge.max.load(Ordering::SeqCst), 3);
}

/// A complete run of conv-30 (105 questions) written from the dataset: categories 1–4 are
/// answered with the gold every other question, category 5 refuses every other question.
fn complete_project() -> (tempfile::TempDir, Vec<ResultLine>) {
    let root = tempfile::tempdir().unwrap();
    let dataset: Value =
        serde_json::from_str(&std::fs::read_to_string(repo("data/dataset_locomo.json")).unwrap())
            .unwrap();
    let sample = dataset
        .as_array()
        .unwrap()
        .iter()
        .find(|sample| sample["sample_id"] == "conv-30")
        .unwrap()
        .clone();
    let text = |value: &Value| match value {
        Value::String(text) => Some(text.clone()),
        Value::Null => None,
        other => Some(other.to_string()),
    };
    let lines: Vec<ResultLine> = sample["qa"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(index, qa)| {
            let category = qa["category"].as_u64().unwrap() as u8;
            let answer = text(&qa["answer"]);
            let prediction = match (category, index % 2) {
                (5, 0) => "Not mentioned in the conversation".to_string(),
                (5, _) => text(&qa["adversarial_answer"]).unwrap_or_default(),
                (_, 0) => answer.clone().unwrap_or_default(),
                _ => "something else entirely".to_string(),
            };
            ResultLine {
                question_id: format!("conv-30:q{}", index + 1),
                sample: "conv-30".into(),
                question: qa["question"].as_str().unwrap().to_string(),
                answer,
                prediction,
                category: Category::Locomo(category),
                evidence: Vec::new(),
                prediction_context: Vec::new(),
                status: Status::Ok,
                error: None,
                rounds: 1,
                tool_calls: 0,
                prompt_tokens: 100,
                completion_tokens: 10,
                latency_ms: 5,
                path: None,
                provenance: Default::default(),
            }
        })
        .collect();
    write_run(root.path(), "conv-30", &lines);
    (root, lines)
}

fn write_run(root: &Path, sample: &str, lines: &[ResultLine]) {
    let directory = root.join("result/locomo");
    std::fs::create_dir_all(&directory).unwrap();
    let text: String =
        lines.iter().map(|line| serde_json::to_string(line).unwrap() + "\n").collect();
    std::fs::write(directory.join(format!("{sample}_result_fixture_full.jsonl")), text).unwrap();
}

fn complete_settings(root: &Path) -> EvalSettings {
    let mut settings = EvalSettings::new(root, DatasetKind::Locomo, "fixture", "full");
    settings.data_file = repo("data/dataset_locomo.json");
    settings.sample = Some("conv-30".into());
    settings.audit_file = Some(repo("data/locomo_audit.json"));
    settings
}

async fn eval_error(settings: &EvalSettings) -> String {
    format!("{:#}", evaluate::<Client>(settings, None).await.unwrap_err())
}

#[tokio::test]
async fn complete_run_is_scored_with_the_official_aggregation() {
    let (root, _) = complete_project();
    let mut settings = complete_settings(root.path());
    settings.overall_with_adversarial = true;
    let summary = evaluate::<Client>(&settings, None).await.unwrap();
    assert_eq!((summary.questions, summary.expected_questions), (105, 105));
    assert_eq!(summary.partial, None);
    assert!(!summary.table().contains("PARTIAL"));
    let text = std::fs::read_to_string(root.path().join("eval/locomo/full/scores.jsonl")).unwrap();
    let items: Vec<ItemScore> =
        text.lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    // The official means: per category, the sum of the stored (3-decimal) item values over
    // the count; overalls add the category sums in the order 4, 1, 2, 3 (then 5).
    let sum = |category: u8| -> (f64, usize) {
        let values: Vec<f64> = items
            .iter()
            .filter(|item| item.category == Category::Locomo(category))
            .map(|item| item.f1.unwrap())
            .collect();
        (values.iter().fold(0.0, |total, value| total + value), values.len())
    };
    let round3 = |value: f64| format!("{value:.3}").parse::<f64>().unwrap();
    // conv-30 has no category-3 question.
    for category in [1u8, 2, 4, 5] {
        let (total, count) = sum(category);
        assert_eq!(row(&summary, &category.to_string()).raw.f1, Some(round3(total / count as f64)));
    }
    let overall = |categories: &[u8]| {
        let (total, count) = categories.iter().fold((0.0, 0), |(total, count), category| {
            let (sum, n) = sum(*category);
            (total + sum, count + n)
        });
        round3(total / count as f64)
    };
    assert_eq!(row(&summary, "overall_1_4").raw.f1, Some(overall(&[4, 1, 2])));
    assert_eq!(row(&summary, "overall_1_4").raw.count, 81);
    assert_eq!(row(&summary, "overall_1_5").raw.f1, Some(overall(&[4, 1, 2, 5])));
    assert_eq!(row(&summary, "overall_1_5").raw.count, 105);
    // Stored item values are rounded to 3 decimals.
    for item in &items {
        let stored = item.f1.unwrap();
        assert_eq!(stored, round3(item.f1_unrounded.unwrap()), "{}", item.question_id);
    }
}

#[tokio::test]
async fn every_bad_input_is_an_error_naming_the_file_and_ids() {
    let (root, lines) = complete_project();
    let settings = complete_settings(root.path());
    let file = "result/locomo/conv-30_result_fixture_full.jsonl";

    // Missing questions.
    write_run(root.path(), "conv-30", &lines[2..]);
    let error = eval_error(&settings).await;
    assert!(
        error.contains("2 of 105 questions have no result line: conv-30:q1, conv-30:q2"),
        "{error}"
    );
    assert!(error.contains("--partial"), "{error}");
    // ... scored as PARTIAL with --partial.
    let mut partial = settings.clone();
    partial.partial = true;
    let summary = evaluate::<Client>(&partial, None).await.unwrap();
    assert_eq!(summary.partial.as_deref(), Some("PARTIAL 103/105"));
    let markdown =
        std::fs::read_to_string(root.path().join("eval/locomo/full/summary.md")).unwrap();
    assert!(
        markdown.contains("**PARTIAL 103/105**") && markdown.contains("category (PARTIAL 103/105)")
    );

    // A foreign id (another sample's question).
    let mut foreign = lines.clone();
    foreign[4].question_id = "conv-26:q1".into();
    write_run(root.path(), "conv-30", &foreign);
    let error = eval_error(&settings).await;
    assert!(
        error.contains(&format!("{file}: 1 id(s) not in the dataset selection: conv-26:q1")),
        "{error}"
    );

    // A duplicate id.
    let mut duplicate = lines.clone();
    duplicate.push(lines[7].clone());
    write_run(root.path(), "conv-30", &duplicate);
    let error = eval_error(&settings).await;
    assert!(
        error.contains(&format!("conv-30:q8 is answered 2 times: {file}:8, {file}:106")),
        "{error}"
    );

    // An unknown category.
    let mut unknown = lines.clone();
    unknown[0].category = Category::Locomo(7);
    write_run(root.path(), "conv-30", &unknown);
    let error = eval_error(&settings).await;
    assert!(error.contains(&format!("{file}:1: conv-30:q1 has unknown category 7")), "{error}");

    // A question whose text differs from the dataset's.
    let mut edited = lines.clone();
    edited[3].question = "Something else?".into();
    write_run(root.path(), "conv-30", &edited);
    let error = eval_error(&settings).await;
    assert!(
        error.contains(&format!("{file}:4: conv-30:q4 question differs from the dataset's")),
        "{error}"
    );
    assert!(error.contains("data/dataset_locomo.json"), "{error}");

    // An empty result file.
    write_run(root.path(), "conv-30", &lines);
    write_run(root.path(), "conv-41", &[]);
    let error = eval_error(&settings).await;
    assert!(
        error.contains("result/locomo/conv-41_result_fixture_full.jsonl: empty result file"),
        "{error}"
    );
}

#[tokio::test]
async fn judge_protocols_runs_and_prompt_files() {
    let root = single_question_project();
    let seen = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let recorder = Arc::clone(&seen);
    let server = ScriptedServer::with_responder(move |request| {
        let text = request.last_message_text().to_string();
        recorder.lock().unwrap().push(text.clone());
        if text.starts_with("MY PROMPT") {
            ScriptedReply::text("yes").with_usage(50, 1)
        } else {
            let seed = request.body.get("seed").and_then(Value::as_i64).unwrap_or(0);
            let label = if seed == 1 { "WRONG" } else { "CORRECT" };
            ScriptedReply::json(&json!({"reason": "r", "label": label})).with_usage(100, 10)
        }
    })
    .await
    .unwrap();
    let judge = client(&server);

    // mem0 (default), 3 runs: mean ± std over runs, counts in the cell.
    let mem0 =
        evaluate(&settings(root.path(), DatasetKind::Locomo, 3), Some(&judge)).await.unwrap();
    assert_eq!(mem0.judge_protocol.as_deref(), Some("mem0"));
    assert_eq!(mem0.judge_runs, 3);
    let judge_row = row(&mem0, "2").raw.judge.unwrap();
    assert!((judge_row.mean - 2.0 / 3.0).abs() < 1e-12);
    assert!((judge_row.std - (2.0f64 / 9.0).sqrt()).abs() < 1e-12);
    assert!(mem0.table().contains("66.67 ± 47.14 [3, 0 failed]"), "{}", mem0.table());
    assert!(seen.lock().unwrap().iter().all(|text| text.contains("Grade generously")));
    let json: Value = serde_json::from_str(
        &std::fs::read_to_string(root.path().join("eval/locomo/run1/summary.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(json["judge_protocol"], "mem0");
    assert_eq!(json["judge_model"], "judge-model");
    assert_eq!(json["judge_runs"], 3);

    // strict: its own prompt, judged afresh (another prompt version).
    seen.lock().unwrap().clear();
    let mut strict = settings(root.path(), DatasetKind::Locomo, 1);
    strict.protocol = JudgeProtocol::Strict;
    let summary = evaluate(&strict, Some(&judge)).await.unwrap();
    assert_eq!(summary.judge_protocol.as_deref(), Some("strict"));
    assert_eq!(summary.judge_new, 1);
    assert!(seen.lock().unwrap()[0].contains("Grade strictly"));

    // A prompt file, sent as written with its slots filled; "yes" is CORRECT.
    seen.lock().unwrap().clear();
    let prompt = root.path().join("published.txt");
    std::fs::write(&prompt, "MY PROMPT\nQ: {{question}}\nGold: {{gold}}\nSaid: {{prediction}}\n")
        .unwrap();
    let mut custom = settings(root.path(), DatasetKind::Locomo, 1);
    custom.judge_prompt = Some(prompt.clone());
    let summary = evaluate(&custom, Some(&judge)).await.unwrap();
    assert_eq!(summary.judge_protocol.as_deref(), Some("custom:published.txt"));
    let sent = seen.lock().unwrap()[0].clone();
    assert_eq!(
        sent,
        "MY PROMPT\nQ: When did Caroline go to the LGBTQ support group?\nGold: 7 May 2023\nSaid: 7 May 2023\n"
    );
    assert_eq!(row(&summary, "2").raw.judge.unwrap().mean, 1.0);
    assert_eq!(summary.judge_usage.total(), 51);
    // A prompt file without the gold slot is refused before any call.
    std::fs::write(&prompt, "{{question}} {{prediction}}").unwrap();
    let error = format!("{:#}", evaluate(&custom, Some(&judge)).await.unwrap_err());
    assert!(
        error.contains("missing slot(s) {{gold}}") && error.contains("published.txt"),
        "{error}"
    );
}

#[tokio::test]
async fn the_audit_is_read_from_its_file_at_run_time() {
    let root = project();
    let mut settings = settings(root.path(), DatasetKind::Locomo, 1);
    settings.judge_model = None;
    // A replacement audit: only conv-26:q1 ("7 May 2023") is corrected.
    let audit = root.path().join("my_audit.json");
    std::fs::write(
        &audit,
        r#"{"items": [{"question_id": "conv-26:q1", "audit_id": "locomo_0_qa0", "category": 2,
            "error_type": "temporal_error", "action": "corrected", "answer": "8 May 2023"}]}"#,
    )
    .unwrap();
    settings.audit_file = Some(audit.clone());
    let summary = evaluate::<Client>(&settings, None).await.unwrap();
    assert_eq!((summary.audit_corrected, summary.audit_excluded), (1, 0));
    assert_eq!(summary.audit_changes.len(), 1);
    let change = &summary.audit_changes[0];
    assert_eq!(change.question_id, "conv-26:q1");
    assert_eq!(change.old_gold.as_deref(), Some("7 May 2023"));
    assert_eq!(change.new_gold.as_deref(), Some("8 May 2023"));
    assert_eq!((change.f1_raw, change.f1_audited), (Some(1.0), Some(0.667)));
    let markdown =
        std::fs::read_to_string(root.path().join("eval/locomo/run1/summary.md")).unwrap();
    assert!(
        markdown.contains(
            "| conv-26:q1 | 0 | 2 | temporal_error | 7 May 2023 | 8 May 2023 | 100.0 → 66.7 |"
        ),
        "{markdown}"
    );

    // An audit that does not fit the dataset is refused.
    std::fs::write(
        &audit,
        r#"{"items": [{"question_id": "conv-26:q1", "audit_id": "locomo_0_qa0", "category": 4,
            "error_type": "x", "action": "excluded"}]}"#,
    )
    .unwrap();
    let error = format!("{:#}", evaluate::<Client>(&settings, None).await.unwrap_err());
    assert!(
        error.contains("my_audit.json") && error.contains("conv-26:q1 has category 4"),
        "{error}"
    );
    // Without the audit, no audited columns.
    settings.audit_file = None;
    let summary = evaluate::<Client>(&settings, None).await.unwrap();
    assert!(summary.rows.iter().all(|row| row.audited.is_none()));
    assert!(summary.audit_changes.is_empty());
}
