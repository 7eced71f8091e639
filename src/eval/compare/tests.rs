use super::*;
use crate::eval::judge::Verdict;

fn item(id: &str, category: u8, prediction: &str, correct: Option<bool>, f1: f64) -> ItemScore {
    ItemScore {
        question_id: id.into(),
        qa_index: None,
        sample: "conv-1".into(),
        category: Category::Locomo(category),
        question: "q?".into(),
        answer: Some("gold".into()),
        prediction: prediction.into(),
        status: Status::Ok,
        f1: Some(f1),
        f1_unrounded: Some(f1),
        exact_match: Some(f1 == 1.0),
        recall: None,
        judge: correct
            .map(|correct| vec![Verdict { run: 0, correct, reason: String::new() }])
            .unwrap_or_default(),
        judge_failed: Vec::new(),
        audit: None,
        prompt_tokens: 0,
        completion_tokens: 0,
    }
}

#[test]
fn pairing_keeps_what_both_answered_and_counts_the_rest() {
    let failed = |id: &str| ItemScore { status: Status::Error, ..item(id, 1, "", None, 0.0) };
    let ok = |id: &str| item(id, 1, "an answer", Some(true), 1.0);
    let a = vec![ok("q1"), ok("q2"), failed("q3"), failed("q4"), ok("q5"), ok("q6")];
    let b = vec![ok("q7"), ok("q1"), failed("q2"), ok("q3"), failed("q4"), ok("q5")];
    let (pairs, left_out) = pair_items(&a, &b);
    let ids: Vec<&str> = pairs.iter().map(|pair| pair.a.question_id.as_str()).collect();
    assert_eq!(ids, ["q1", "q5"]);
    assert_eq!(
        left_out,
        LeftOut { only_a: 1, only_b: 1, failed_a: 1, failed_b: 1, failed_both: 1 }
    );
    assert_eq!(left_out.total(), 5);
    assert_eq!(
        left_out.describe(),
        "1 answered by A only, 1 answered by B only, 1 failed in A, 1 failed in B, 1 failed in both"
    );
    assert_eq!(LeftOut::default().describe(), "none");
}

#[test]
fn rows_per_category_then_overall_with_category_five_last() {
    let a = vec![
        item("q1", 4, "one two three", Some(true), 1.0),
        item("q2", 1, "one", Some(true), 0.5),
        item("q3", 5, "Not mentioned", None, 1.0),
        item("q4", 1, "Mel's dog", Some(false), 0.0),
    ];
    let b = vec![
        item("q1", 4, "one", Some(false), 0.0),
        item("q2", 1, "one", Some(true), 0.5),
        item("q3", 5, "a cat", None, 0.0),
        item("q4", 1, "x", Some(true), 1.0),
    ];
    let (pairs, _) = pair_items(&a, &b);
    let rows = paired_rows(&pairs, true, BootstrapSettings::default());
    let labels: Vec<&str> = rows.iter().map(|row| row.label.as_str()).collect();
    assert_eq!(
        labels,
        ["1 multi-hop", "4 single-hop", "overall (1–4)", "5 adversarial: refusal rate"]
    );
    let overall = &rows[2];
    assert_eq!(overall.n, 3);
    let judge = overall.judge.unwrap();
    assert_eq!((judge.mean_a, judge.mean_b), (2.0 / 3.0, 2.0 / 3.0));
    assert_eq!(judge.flips, Some(paired::Flips { gained: 1, lost: 1 }));
    // Words: "one two three" 3, "one" 1, "Mel's dog" 2 → 2.0; B: 1, 1, 1 → 1.0.
    assert_eq!((overall.words_a, overall.words_b), (2.0, 1.0));
    // Category 5 is never judged; its F1 is the refusal rate.
    let refusals = &rows[3];
    assert!(refusals.judge.is_none());
    assert_eq!(refusals.f1.unwrap().difference, 1.0);
}

#[test]
fn a_failed_judgement_leaves_j_but_not_f1() {
    let mut failed = item("q2", 1, "b", None, 1.0);
    failed.judge_failed = vec![0];
    let a = vec![item("q1", 1, "a", Some(true), 1.0), failed];
    let b = vec![item("q1", 1, "a", Some(false), 0.0), item("q2", 1, "b", Some(true), 0.0)];
    let (pairs, _) = pair_items(&a, &b);
    let rows = paired_rows(&pairs, false, BootstrapSettings::default());
    assert_eq!(rows.iter().map(|row| row.key.as_str()).collect::<Vec<_>>(), ["1", "overall"]);
    let overall = &rows[1];
    assert_eq!((overall.n, overall.judge_failed), (2, 1));
    assert_eq!(overall.judge.unwrap().n, 1);
    assert_eq!(overall.f1.unwrap().n, 2);
}

#[test]
fn the_table_drops_the_judge_columns_without_a_judge() {
    let a = vec![item("q1", 2, "7 May 2023", None, 1.0)];
    let b = vec![item("q1", 2, "May", None, 0.5)];
    let summary_a = |file: &str| EvalSummary {
        dataset: "locomo".into(),
        data_file: "data/dataset_locomo.json".into(),
        model: "m".into(),
        file: file.into(),
        result_files: Vec::new(),
        questions: 1,
        expected_questions: 3,
        partial: Some("PARTIAL 1/3".into()),
        judge_model: None,
        judge_protocol: None,
        judge_runs: 1,
        judge_cached: 0,
        judge_new: 0,
        judge_failed: 0,
        judge_usage: Default::default(),
        judge_usage_total: Default::default(),
        judge_cost_usd: None,
        judge_cost_total_usd: None,
        audit_file: None,
        audit_corrected: 0,
        audit_excluded: 0,
        audit_evidence_only: 0,
        audit_changes: Vec::new(),
        rows: Vec::new(),
    };
    let summary = PairedSummary::new(
        (&summary_a("x"), &a),
        (&summary_a("x-base"), &b),
        BootstrapSettings::default(),
    );
    assert_eq!(summary.file_stem(), "m_x_vs_x-base");
    let table = summary.table();
    assert!(!table.contains("J % A"), "{table}");
    assert!(
        table.contains(
            "| 2 temporal | 1 | 100.0 | 50.0 | +50.0 [+50.0, +50.0] | +1 / −0 | 0 | 0 | 3.0 | 1.0 |"
        ),
        "{table}"
    );
    let page = paired_markdown(&summary);
    assert!(page.contains("1 question(s) paired of 3 expected"), "{page}");
    assert!(page.contains("Judge: none (F1 only)"), "{page}");
    // Said in plain words: no judge, then each row's difference against its interval.
    assert_eq!(
        summary.noise_lines(),
        [
            "No judge model (--judge-model): only F1 is compared, not J.",
            "F1, 2 temporal: +50.0 points, 95% interval [+50.0, +50.0]: A is higher, outside the noise.",
            "F1, overall (1–4): +50.0 points, 95% interval [+50.0, +50.0]: A is higher, outside the noise.",
        ]
    );
    assert!(page.contains("- No judge model (--judge-model): only F1 is compared"), "{page}");
}
