//! `eval --paired-with`: a run with more right answers against its twin on the LoCoMo fixture
//! run, judged by the scripted endpoint over real HTTP (through the library), and the same
//! without a judge through the built binary.

use std::path::Path;

use mragent::dataset::{Category, DatasetKind};
use mragent::eval::compare::{LeftOut, PairedRow, PairedSummary, paired_markdown};
use mragent::eval::paired::{BootstrapSettings, Flips, Interval};
use mragent::eval::{evaluate, evaluate_paired};
use mragent::llm::scripted::ScriptedServer;
use mragent::llm::tape::{CallStore, TapedChat};
use mragent::results::{ResultLine, Status};

use crate::eval::{client, fixture, fixture_judge, judge_tape, settings, taped};
use crate::support::{mragent_command, repo_path};

/// The fixture run's 17 answers (conv-26 and conv-30).
fn fixture_lines() -> Vec<ResultLine> {
    let mut lines = Vec::new();
    for sample in ["conv-26", "conv-30"] {
        let file = fixture(&format!("run/result/locomo/{sample}_result_fixture_run1.jsonl"));
        let text = std::fs::read_to_string(file).unwrap();
        for line in text.lines().filter(|line| !line.trim().is_empty()) {
            lines.push(serde_json::from_str(line).unwrap());
        }
    }
    lines
}

/// Write `lines` as run `tag` of model `fixture`, one file per sample.
fn write_run(root: &Path, tag: &str, lines: &[ResultLine]) {
    let directory = root.join("result/locomo");
    std::fs::create_dir_all(&directory).unwrap();
    for sample in ["conv-26", "conv-30"] {
        let text: String = lines
            .iter()
            .filter(|line| line.sample == sample)
            .map(|line| serde_json::to_string(line).unwrap() + "\n")
            .collect();
        std::fs::write(directory.join(format!("{sample}_result_fixture_{tag}.jsonl")), text)
            .unwrap();
    }
}

/// A (`meta-t`): every question of categories 1–4 answered with its gold (the fixture's failed
/// conv-26:q11 too), category 5 as in the fixture, conv-30:q29 not answered. B
/// (`meta-t-base`): the fixture's answers (q11 failed), with conv-26:q2 answered "Last year".
pub(crate) fn twin_runs(root: &Path) {
    let lines = fixture_lines();
    assert_eq!(lines.len(), 17);
    let with_rules: Vec<ResultLine> = lines
        .iter()
        .filter(|line| line.question_id != "conv-30:q29")
        .map(|line| {
            let mut line = line.clone();
            if line.category != Category::Locomo(5) {
                line.prediction = line.answer.clone().unwrap();
                line.status = Status::Ok;
                line.error = None;
            }
            line
        })
        .collect();
    let base: Vec<ResultLine> = lines
        .into_iter()
        .map(|mut line| {
            if line.question_id == "conv-26:q2" {
                line.prediction = "Last year".into();
            }
            line
        })
        .collect();
    write_run(root, "meta-t", &with_rules);
    write_run(root, "meta-t-base", &base);
}

fn row<'a>(summary: &'a PairedSummary, key: &str) -> &'a PairedRow {
    summary.rows.iter().find(|row| row.key == key).unwrap()
}

#[tokio::test]
async fn a_run_with_more_right_answers_beats_its_twin_outside_the_noise() {
    let root = tempfile::tempdir().unwrap();
    twin_runs(root.path());
    let server = ScriptedServer::with_responder(fixture_judge).await.unwrap();
    let judge = client(&server);
    let mut settings = settings(root.path(), DatasetKind::Locomo, 1);
    settings.file = "meta-t".into();

    // B evaluated on its own first: 13 answered questions of categories 1–4 and the two audit
    // corrections (conv-26:q3, conv-30:q32) judged against their corrected gold.
    let twin = mragent::eval::EvalSettings { file: "meta-t-base".into(), ..settings.clone() };
    evaluate(&twin, Some(&taped(&judge, &twin))).await.unwrap();
    assert_eq!(server.request_count(), 15);

    // The comparison judges on its own tape, which starts with the judge calls of each run's
    // `eval` (as `mragent compare` starts it; B's tape is only read).
    let files = mragent::recorded::RunFiles::of_eval(&settings);
    let tape = files.comparison_judge_calls("meta-t-base");
    let sources = [files.judge_calls(), mragent::recorded::RunFiles::of_eval(&twin).judge_calls()];
    mragent::recorded::tape::lend_calls(&sources, &tape).unwrap();
    let recording = || TapedChat::new(&judge, mragent::recorded::tape::recording(&tape).unwrap());
    let bootstrap = BootstrapSettings::default();
    let paired =
        evaluate_paired(&settings, "meta-t-base", bootstrap, Some(&recording())).await.unwrap();
    // Only A is judged now, B's verdicts come from the tape, and so do A's three judgements
    // that are B's to the letter (the same answer to the same question is the same request):
    // 12 of A's 15 (13 + 2 audit corrections) are sent.
    assert_eq!(server.request_count(), 27);
    let counts =
        (paired.a.judge_new, paired.a.judge_cached, paired.b.judge_new, paired.b.judge_cached);
    assert_eq!(counts, (12, 3, 0, 15));
    let summary = &paired.paired;
    assert_eq!(summary.paired, 15);
    assert_eq!((summary.questions_a, summary.questions_b), (16, 17));
    assert_eq!(summary.left_out, LeftOut { only_b: 1, failed_b: 1, ..LeftOut::default() });
    assert_eq!(summary.expected_questions, 1986);

    // Categories 1–4: A is right on all 12 pairs; B on 7 (wrong: q2, q3, q27, q84, conv-30:q30).
    let overall = row(summary, "overall_1_4");
    assert_eq!(overall.n, 12);
    let judged = overall.judge.unwrap();
    assert_eq!((judged.mean_a, judged.mean_b), (1.0, 7.0 / 12.0));
    assert_eq!(judged.flips, Some(Flips { gained: 5, lost: 0 }));
    assert!(judged.interval.low > 0.0 && !judged.inside_noise, "{:?}", judged.interval);
    assert!(judged.interval.high <= 1.0);
    assert!(overall.f1.unwrap().difference > 0.0);
    // Mean words: A's gold answers 37 / 12, B's answers 35 / 12.
    assert!((overall.words_a - 37.0 / 12.0).abs() < 1e-12, "{}", overall.words_a);
    assert!((overall.words_b - 35.0 / 12.0).abs() < 1e-12, "{}", overall.words_b);
    // Temporal: q1, q2, q27 paired (q11 failed in B, q29 is B's only).
    let temporal = row(summary, "2").judge.unwrap();
    assert_eq!((temporal.n, temporal.flips), (3, Some(Flips { gained: 2, lost: 0 })));
    // Category 5: the same answers, never judged: no difference at all.
    let refusals = row(summary, "5");
    assert!(refusals.judge.is_none());
    let refusal_rate = refusals.f1.unwrap();
    assert_eq!(refusal_rate.interval, Interval { low: 0.0, high: 0.0 });
    assert!(refusal_rate.inside_noise);

    let table = summary.table();
    assert!(table.contains("| overall (1–4) | 12 | 100.00 | 58.33 | +41.67 ["), "{table}");
    let overall_line = table.lines().find(|line| line.contains("overall (1–4)")).unwrap();
    assert!(overall_line.contains("| +5 / −0 |") && overall_line.ends_with("| 3.1 | 2.9 |"));
    assert!(!overall_line.contains("(noise)"), "{overall_line}");
    assert!(table.contains("| 5 adversarial: refusal rate | 3 | not judged |"), "{table}");

    // Written beside the runs' own folders, and the same again on a rerun without any call.
    let markdown = root.path().join("eval/locomo/fixture_meta-t_vs_meta-t-base.md");
    assert_eq!(paired.markdown_file, markdown);
    let page = std::fs::read_to_string(&markdown).unwrap();
    assert_eq!(page, paired_markdown(summary));
    assert!(
        page.contains(
            "15 question(s) paired of 1986 expected (16 with a line in A, 17 in B); left out: 1 answered by B only, 1 failed in B."
        ),
        "{page}"
    );
    let json: PairedSummary =
        serde_json::from_str(&std::fs::read_to_string(&paired.json_file).unwrap()).unwrap();
    assert_eq!(&json, summary);
    // The comparison keeps its verdicts on its own tape, no cache in any folder; run A's folder
    // was never written (reading a run never changes it), and B's tape was only read.
    let calls = CallStore::open_read_only(&tape).unwrap().calls().unwrap();
    assert_eq!(calls.len(), 27);
    assert_eq!(judge_tape(&twin).len(), 15);
    for run in ["meta-t", "meta-t-base"] {
        let cache = format!("eval/locomo/fixture_meta-t_vs_meta-t-base/{run}/judgements.jsonl");
        assert!(!root.path().join(cache).exists());
        assert!(
            root.path()
                .join(format!("eval/locomo/fixture_meta-t_vs_meta-t-base/{run}/scores.jsonl"))
                .is_file()
        );
    }
    assert!(!root.path().join("eval/locomo/meta-t").exists());
    let again =
        evaluate_paired(&settings, "meta-t-base", bootstrap, Some(&recording())).await.unwrap();
    assert_eq!(server.request_count(), 27);
    assert_eq!(&again.paired, summary);
}

#[tokio::test]
async fn without_a_judge_the_binary_prints_f1_and_lengths_only() {
    let root = tempfile::tempdir().unwrap();
    twin_runs(root.path());
    let data = repo_path("data/dataset_locomo.json");
    let args = [
        "eval",
        "--model",
        "fixture",
        "--file",
        "meta-t",
        "--paired-with",
        "meta-t-base",
        "--data-file",
        data.to_str().unwrap(),
        "--no-audit",
        "--partial",
    ];
    let output = mragent_command(root.path(), &args).output().await.unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("A = meta-t, B = meta-t-base: 15 question(s) paired"), "{stdout}");
    assert!(!stdout.contains("J % A") && !stdout.contains("flips"), "{stdout}");
    assert!(
        stdout.contains(
            "| category | n | F1 % A | F1 % B | ΔF1 [95% CI] | F1 +/− | tokens/q A | tokens/q B | words A | words B |"
        ),
        "{stdout}"
    );
    let overall = stdout.lines().find(|line| line.contains("overall (1–4)")).unwrap();
    assert!(overall.starts_with("| overall (1–4) | 12 |") && overall.ends_with("| 3.1 | 2.9 |"));
    assert!(stdout.contains("fixture_meta-t_vs_meta-t-base.md"), "{stdout}");
    assert!(root.path().join("eval/locomo/fixture_meta-t_vs_meta-t-base.json").is_file());
}
