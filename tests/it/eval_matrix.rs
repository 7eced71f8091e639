//! The judge matrix (`eval --judge-protocol mem0,strict --judge-runs 3`) and `mragent compare`
//! through the built binary against the scripted judge over real HTTP; the bootstrap intervals
//! against an independent reference computation on a fixed seed.

use std::path::Path;

use mragent::dataset::DatasetKind;
use mragent::eval::judge::JudgeProtocol;
use mragent::eval::matrix::JudgeMatrix;
use mragent::eval::paired::{self, BootstrapSettings, Interval};
use mragent::eval::{ItemScore, evaluate_matrix};
use mragent::llm::scripted::ScriptedServer;
use mragent::llm::tape::CallStore;
use rand::{Rng as _, SeedableRng as _};
use rand_chacha::ChaCha8Rng;

use crate::eval::{client, fixture_judge, project, repo, settings, single_question_project};
use crate::support::mragent_command;

/// The bootstrap written out the plain way: `resamples` times, draw `n` indices uniformly with
/// one ChaCha8 generator seeded once, average the drawn values; sort the means and read the
/// 2.5th and 97.5th percentiles by linear interpolation at position p·(resamples − 1).
fn reference_interval(values: &[f64], resamples: usize, seed: u64) -> (f64, f64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let n = values.len();
    let mut means = Vec::with_capacity(resamples);
    for _ in 0..resamples {
        let mut sum = 0.0;
        for _ in 0..n {
            let index: usize = rng.random_range(0..n);
            sum += values[index];
        }
        means.push(sum / n as f64);
    }
    means.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let at = |p: f64| {
        let position = p * (resamples - 1) as f64;
        let below = position.floor() as usize;
        let above = if below + 1 < resamples { below + 1 } else { below };
        means[below] + (position - below as f64) * (means[above] - means[below])
    };
    (at(0.025), at(0.975))
}

#[test]
fn bootstrap_intervals_match_a_reference_computation_on_a_fixed_seed() {
    // 0/1 judge scores, fractional scores over three runs, F1-like values.
    let binary: Vec<f64> = (0..97).map(|i| f64::from(u8::from(i % 3 != 0 && i % 7 != 1))).collect();
    let thirds: Vec<f64> = (0..40).map(|i| f64::from((i * 5 % 4).min(3)) / 3.0).collect();
    let fractional: Vec<f64> = (0..23).map(|i| ((i * 37 % 101) as f64) / 100.0).collect();
    for (name, values) in [("binary", &binary), ("thirds", &thirds), ("fractional", &fractional)] {
        for settings in [
            BootstrapSettings::default(),
            BootstrapSettings { resamples: 999, seed: 7 },
            BootstrapSettings { resamples: 10, seed: 0 },
        ] {
            let (low, high) = reference_interval(values, settings.resamples, settings.seed);
            let interval = paired::bootstrap_interval(values, settings).unwrap();
            assert_eq!(interval, Interval { low, high }, "{name} {settings:?}");
            // The paired interval is the same bootstrap over the differences a − b.
            let pairs: Vec<(f64, f64)> =
                values.iter().zip(values.iter().rev()).map(|(a, b)| (*a, *b)).collect();
            let differences: Vec<f64> = pairs.iter().map(|(a, b)| a - b).collect();
            let (low, high) = reference_interval(&differences, settings.resamples, settings.seed);
            let stats = paired::paired_stats(&pairs, settings).unwrap();
            assert_eq!(stats.interval, Interval { low, high }, "{name} paired {settings:?}");
            assert_eq!(stats.inside_noise, low <= 0.0 && 0.0 <= high);
        }
    }
}

#[test]
fn bootstrap_intervals_checked_by_hand() {
    let settings = BootstrapSettings::default();
    // Every value equal: every resample mean is that value, a zero-width interval.
    let same = paired::bootstrap_interval(&[0.25; 12], settings).unwrap();
    assert_eq!(same, Interval { low: 0.25, high: 0.25 });
    let pairs = vec![(1.0, 0.5); 9];
    let stats = paired::paired_stats(&pairs, settings).unwrap();
    assert_eq!((stats.difference, stats.interval), (0.5, Interval { low: 0.5, high: 0.5 }));
    assert!(!stats.inside_noise);
    // One question: the interval is its value.
    assert_eq!(
        paired::bootstrap_interval(&[0.3], settings),
        Some(Interval { low: 0.3, high: 0.3 })
    );
    // Two questions scored 0 and 1: a resample mean is 0, 1/2 or 1 with chances 1/4, 1/2,
    // 1/4, so of 2,000 sorted means the ~500 lowest are 0 and the ~500 highest 1: the 2.5th
    // percentile (position 49.975) is 0 and the 97.5th (position 1,949.025) is 1.
    assert_eq!(
        paired::bootstrap_interval(&[0.0, 1.0], settings),
        Some(Interval { low: 0.0, high: 1.0 })
    );
    assert_eq!(paired::bootstrap_interval(&[], settings), None);
}

/// The `eval` arguments of the fixture run judged at `url` (`run1`: 17 of LoCoMo's questions).
fn matrix_args(url: &str, extra: &[&str]) -> Vec<String> {
    let data = repo("data/dataset_locomo.json");
    let audit = repo("data/locomo_audit.json");
    let mut args: Vec<String> = [
        "eval",
        "--model",
        "fixture",
        "--file",
        "run1",
        "--partial",
        "--data-file",
        data.to_str().unwrap(),
        "--audit-file",
        audit.to_str().unwrap(),
        "--judge-model",
        "judge-model",
        "--base-url",
        url,
    ]
    .iter()
    .map(|arg| arg.to_string())
    .collect();
    args.extend(extra.iter().map(|arg| arg.to_string()));
    args
}

async fn run_binary(root: &Path, args: &[String]) -> String {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let output = mragent_command(root, &args).output().await.unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap()
}

#[tokio::test]
async fn two_protocols_three_runs_print_one_matrix_and_a_rerun_asks_nothing() {
    let root = project();
    let server = ScriptedServer::with_responder(fixture_judge).await.unwrap();
    let args =
        matrix_args(server.base_url(), &["--judge-protocol", "mem0,strict", "--judge-runs", "3"]);
    let stdout = run_binary(root.path(), &args).await;
    // Judged per protocol and run: the 13 answered questions of categories 1–4 and the two
    // audit corrections against their corrected gold (15 judged items) × 2 protocols × 3 runs.
    assert_eq!(server.request_count(), 15 * 2 * 3);
    let strict = server
        .requests()
        .iter()
        .filter(|r| r.last_message_text().contains("Grade strictly"))
        .count();
    assert_eq!(strict, 15 * 3);
    // One table, both protocols, the ceiling and the audited columns.
    assert_eq!(stdout.lines().filter(|line| line.starts_with("| category")).count(), 1, "{stdout}");
    assert!(
        stdout.contains(
            "| category (PARTIAL 17/1986) | n | ceiling % | mem0 J % | mem0 95% CI | mem0 J % (audited) | strict J % | strict 95% CI | strict J % (audited) |"
        ),
        "{stdout}"
    );
    // Category 2 has five questions, conv-26:q27 excluded by the audit: ceiling 80%.
    let temporal = stdout.lines().find(|line| line.starts_with("| 2 temporal |")).unwrap();
    assert!(temporal.starts_with("| 2 temporal | 5 | 80.00 |"), "{temporal}");
    assert!(stdout.contains("Above the ceiling the audited answer key allows"), "{stdout}");

    // The matrix is written beside the summary; its intervals are the bootstrap of the
    // per-question scores (the share of runs accepting), as a reference computes them.
    let out = root.path().join("eval/locomo/run1");
    let matrix: JudgeMatrix =
        serde_json::from_str(&std::fs::read_to_string(out.join("matrix.json")).unwrap()).unwrap();
    assert_eq!(
        (matrix.protocols.as_slice(), matrix.judge_runs),
        (&["mem0".to_string(), "strict".to_string()][..], 3)
    );
    let page = std::fs::read_to_string(out.join("matrix.md")).unwrap();
    assert!(page.contains(&matrix.table()), "{page}");
    let scores: Vec<ItemScore> = std::fs::read_to_string(out.join("scores.jsonl"))
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let per_question: Vec<f64> = scores
        .iter()
        .filter(|item| !item.judge.is_empty())
        .map(|item| item.judge.iter().filter(|v| v.correct).count() as f64 / 3.0)
        .collect();
    assert_eq!(per_question.len(), 14);
    let overall = matrix.rows.iter().find(|row| row.key == "overall_1_4").unwrap();
    let (low, high) = reference_interval(&per_question, 2_000, 25);
    assert_eq!(overall.cells[0].interval, Some(Interval { low, high }));
    // summary.json is the first protocol's.
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(
        (summary["judge_protocol"].as_str(), summary["judge_runs"].as_u64()),
        (Some("mem0"), Some(3))
    );

    // A rerun finds every verdict on the judge's tape, and prints the same table.
    let again = run_binary(root.path(), &args).await;
    assert_eq!(server.request_count(), 15 * 2 * 3);
    assert_eq!(again, stdout);
}

#[tokio::test]
async fn outputs_deleted_with_the_judge_tape_kept_are_written_again_without_a_request() {
    let root = project();
    let server = ScriptedServer::with_responder(fixture_judge).await.unwrap();
    let extra = ["--judge-protocol", "mem0,strict", "--judge-runs", "2"];
    let args = matrix_args(server.base_url(), &extra);
    let stdout = run_binary(root.path(), &args).await;
    // 15 judged items, 2 protocols, 2 runs.
    assert_eq!(server.request_count(), 15 * 2 * 2);
    let out = root.path().join("eval/locomo/run1");
    let outputs = ["scores.jsonl", "summary.json", "summary.md", "matrix.json", "matrix.md"];
    let read = || outputs.map(|name| std::fs::read_to_string(out.join(name)).unwrap());
    let before = read();
    // No verdict is kept beside the outputs: the judge's tape is the one memo.
    assert!(!out.join("judgements.jsonl").exists());
    let tape = root.path().join("record/locomo/fixture_run1.judge.sqlite");
    assert_eq!(CallStore::open_read_only(&tape).unwrap().calls().unwrap().len(), 15 * 2 * 2);

    // Every verdict the outputs held is deleted; the tape answers the rerun whole.
    std::fs::remove_dir_all(&out).unwrap();
    let again = run_binary(root.path(), &args).await;
    assert_eq!(server.request_count(), 15 * 2 * 2, "the rerun sent requests");
    assert_eq!(again, stdout);
    let after = read();
    for (name, (before, after)) in outputs.iter().zip(before.iter().zip(after.iter())) {
        // The summary counts where this run's verdicts came from; every score is the same.
        if *name == "summary.json" {
            let strip = |text: &str| {
                let mut value: serde_json::Value = serde_json::from_str(text).unwrap();
                let object = value.as_object_mut().unwrap();
                for field in ["judge_cached", "judge_new", "judge_usage", "judge_cost_usd"] {
                    object.remove(field);
                }
                value
            };
            assert_eq!(strip(before), strip(after));
            let summary: serde_json::Value = serde_json::from_str(after).unwrap();
            assert_eq!(
                (summary["judge_cached"].as_u64(), summary["judge_new"].as_u64()),
                (Some(30), Some(0))
            );
        } else if *name == "summary.md" {
            let verdicts = |text: &str| {
                let lines = text.lines().filter(|line| !line.starts_with("- Judge verdicts: "));
                lines.map(str::to_string).collect::<Vec<_>>()
            };
            assert_eq!(verdicts(before), verdicts(after));
            assert!(after.contains("- Judge verdicts: 30 from the judge's tape, 0 new, 0 failed."));
        } else {
            assert_eq!(before, after, "{name} differs");
        }
    }
}

#[tokio::test]
async fn protocols_must_fit_the_dataset_and_longmemeval_judges_locomo_by_its_rule() {
    let root = single_question_project();
    let server = ScriptedServer::with_responder(fixture_judge).await.unwrap();
    let judge = client(&server);
    let settings = settings(root.path(), DatasetKind::Locomo, 1);
    let protocols = [JudgeProtocol::Mem0, JudgeProtocol::LongMemEval];
    let evaluation = evaluate_matrix(&settings, &protocols, Some(&judge)).await.unwrap();
    assert_eq!(server.request_count(), 2);
    assert!(server.requests()[1].last_message_text().contains("Correct answer: 7 May 2023"));
    let matrix = evaluation.matrix.unwrap();
    assert_eq!(matrix.protocols, ["mem0", "longmemeval"]);
    assert_eq!(evaluation.summary.judge_protocol.as_deref(), Some("mem0"));
    // Twice the same protocol, or a LoCoMo protocol on LongMemEval data, is refused.
    let twice = [JudgeProtocol::Strict, JudgeProtocol::Strict];
    let error =
        format!("{:#}", evaluate_matrix(&settings, &twice, Some(&judge)).await.unwrap_err());
    assert!(error.contains("judge protocol strict is named twice"), "{error}");
    let lm = settings_for_lm(root.path());
    let error = format!(
        "{:#}",
        evaluate_matrix(&lm, &[JudgeProtocol::Strict], Some(&judge)).await.unwrap_err()
    );
    assert!(error.contains("judge protocol strict does not apply to LongMemEval data"), "{error}");
    assert_eq!(server.request_count(), 2);
}

fn settings_for_lm(root: &Path) -> mragent::eval::EvalSettings {
    settings(root, DatasetKind::LongMemEval, 1)
}

#[tokio::test]
async fn compare_prints_flips_and_the_noise_with_a_judge_and_f1_only_without() {
    let root = tempfile::tempdir().unwrap();
    crate::eval_paired::twin_runs(root.path());
    let server = ScriptedServer::with_responder(fixture_judge).await.unwrap();
    let data = repo("data/dataset_locomo.json");
    let base =
        ["compare", "meta-t", "meta-t-base", "--model", "fixture", "--partial", "--no-audit"];
    let mut args: Vec<String> = base.iter().map(|arg| arg.to_string()).collect();
    args.extend(["--data-file".into(), data.to_str().unwrap().to_string()]);
    let plain = run_binary(root.path(), &args).await;
    assert_eq!(server.request_count(), 0);
    assert!(
        plain.contains("No judge model (--judge-model): only F1 is compared, not J."),
        "{plain}"
    );
    assert!(!plain.contains("J % A"), "{plain}");
    assert!(plain.contains("| tokens/q A | tokens/q B | words A | words B |"), "{plain}");

    args.extend(
        ["--judge-model", "judge-model", "--base-url", server.base_url()].map(String::from),
    );
    let judged = run_binary(root.path(), &args).await;
    // Each run's 13 answered questions of categories 1–4, three judge runs each; the judge
    // calls go through the comparison's tape, so the 2 answers both runs share (the same
    // request) are judged once.
    assert_eq!(server.request_count(), 2 * 13 * 3 - 2 * 3);
    assert!(judged.contains("A = meta-t, B = meta-t-base: 15 question(s) paired"), "{judged}");
    let overall = judged.lines().find(|line| line.starts_with("| overall (1–4) | 12 |")).unwrap();
    // By the majority of the three runs (run 1 flips the "When" questions, runs 0 and 2 do
    // not), A is right on all 12 pairs and B on 7: five questions flip to right, none to wrong.
    assert!(overall.contains("| +5 / −0 |"), "{overall}");
    assert!(
        judged.lines().any(|line| line.starts_with("J, overall (1–4): +")
            && line.ends_with("A is higher, outside the noise.")),
        "{judged}"
    );
    // Category 5: the same answers in both runs, inside the noise.
    assert!(
        judged.contains("F1, 5 adversarial: refusal rate: +0.0 points, 95% interval [+0.0, +0.0]: inside the noise: the interval contains 0, so these 3 question(s) do not show that A and B differ."),
        "{judged}"
    );
    let page =
        std::fs::read_to_string(root.path().join("eval/locomo/fixture_meta-t_vs_meta-t-base.md"))
            .unwrap();
    assert!(page.contains("inside the noise") && page.contains("3 run(s)"), "{page}");

    // Every judge call of the comparison is on its own tape, each with its question; no verdict
    // cache is written anywhere, and the same comparison is answered from the tape alone.
    let tape = root.path().join("record/locomo/fixture_meta-t_vs_meta-t-base.judge.sqlite");
    let calls = mragent::llm::tape::CallStore::open_read_only(&tape).unwrap().calls().unwrap();
    assert_eq!(calls.len(), 2 * 13 * 3 - 2 * 3);
    let items: Vec<&str> = calls.iter().map(|call| call.context.as_str()).collect();
    assert!(items.iter().all(|item| item.starts_with("judging question ")), "{items:?}");
    for run in ["meta-t", "meta-t-base"] {
        let cache = format!("eval/locomo/fixture_meta-t_vs_meta-t-base/{run}/judgements.jsonl");
        assert!(!root.path().join(cache).exists());
    }
    let again = run_binary(root.path(), &args).await;
    assert_eq!(server.request_count(), 2 * 13 * 3 - 2 * 3, "the rerun sent requests");
    assert!(again.contains("| +5 / −0 |"), "{again}");
}
