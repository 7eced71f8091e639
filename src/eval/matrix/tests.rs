use std::path::Path;

use super::*;
use crate::eval::audit::{AuditAction, load_audit};
use crate::eval::judge::Verdict;
use crate::eval::report::{RowOptions, build_rows};
use crate::eval::{AuditedScore, EvalSummary};
use crate::results::Status;

/// A LoCoMo item of `category` judged `verdicts` (one per run) against the dataset's gold;
/// `wrong_gold`: the audit excludes it.
fn item(id: &str, category: u8, verdicts: &[bool], wrong_gold: bool) -> ItemScore {
    let judge: Vec<Verdict> = verdicts
        .iter()
        .enumerate()
        .map(|(run, correct)| Verdict { run: run as u32, correct: *correct, reason: String::new() })
        .collect();
    ItemScore {
        question_id: id.into(),
        qa_index: None,
        sample: "conv-1".into(),
        category: Category::Locomo(category),
        question: "q?".into(),
        answer: Some("gold".into()),
        prediction: "p".into(),
        status: Status::Ok,
        f1: Some(0.5),
        f1_unrounded: Some(0.5),
        exact_match: Some(false),
        recall: None,
        judge,
        judge_failed: Vec::new(),
        audit: wrong_gold.then(|| AuditedScore {
            error_type: "hallucination".into(),
            excluded: true,
            answer: None,
            f1: None,
            exact_match: None,
            judge: Vec::new(),
            judge_failed: Vec::new(),
            evidence: None,
            recall: None,
        }),
        prompt_tokens: 0,
        completion_tokens: 0,
    }
}

fn summary(protocol: &str, items: &[ItemScore]) -> EvalSummary {
    let options =
        RowOptions { locomo: true, audit: true, overall_with_adversarial: false, prices: None };
    EvalSummary {
        dataset: "locomo".into(),
        data_file: "data/dataset_locomo.json".into(),
        model: "m".into(),
        file: "t".into(),
        result_files: Vec::new(),
        questions: items.len(),
        expected_questions: items.len(),
        partial: None,
        judge_model: Some("judge".into()),
        judge_protocol: Some(protocol.into()),
        judge_runs: 3,
        judge_cached: 0,
        judge_new: 0,
        judge_failed: 0,
        judge_usage: Default::default(),
        judge_usage_total: Default::default(),
        judge_cost_usd: None,
        judge_cost_total_usd: None,
        audit_file: Some("data/locomo_audit.json".into()),
        audit_corrected: 0,
        audit_excluded: 0,
        audit_evidence_only: 0,
        audit_changes: Vec::new(),
        rows: build_rows(items, options),
    }
}

#[test]
fn the_ceiling_of_the_full_answer_key_is_the_published_one() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let audit = load_audit(&root.join("data/locomo_audit.json")).unwrap();
    let conversations =
        crate::dataset::load_locomo(&root.join("data/dataset_locomo.json")).unwrap();
    let questions: Vec<_> =
        conversations.iter().flat_map(|conversation| &conversation.questions).collect();
    let wrong = |id: &str| {
        audit.get(id).is_some_and(|entry| !matches!(entry.action, AuditAction::EvidenceOnly))
    };
    let ceiling = |wanted: &dyn Fn(u8) -> bool| {
        Ceiling::count(questions.iter().filter_map(|question| match question.category {
            Category::Locomo(number) if wanted(number) => Some(wrong(&question.id)),
            _ => None,
        }))
    };
    // locomo-audit's published ceilings: c1 90.07, c2 91.90, c3 90.62, c4 95.72, overall 93.57.
    let expected =
        [(1, 282, 28, 90.07), (2, 321, 26, 91.90), (3, 96, 9, 90.62), (4, 841, 36, 95.72)];
    for (category, questions, wrong_gold, percent) in expected {
        let found = ceiling(&|number| number == category);
        assert_eq!(found, Ceiling { questions, wrong_gold }, "category {category}");
        let accuracy = found.accuracy().unwrap() * 100.0;
        assert!((accuracy - percent).abs() < 0.006, "category {category}: {accuracy}");
    }
    let overall = ceiling(&|number| (1..=4).contains(&number));
    assert_eq!(overall, Ceiling { questions: 1540, wrong_gold: 99 });
    assert!((overall.accuracy().unwrap() * 100.0 - 93.57).abs() < 0.005);
    assert_eq!(Ceiling::default().accuracy(), None);
}

#[test]
fn cells_flag_accuracies_above_the_ceiling_and_bootstrap_per_question_scores() {
    // Category 1: four questions, one with a wrong gold (ceiling 75%). The generous protocol
    // accepts all of them in every run (100% > 75%); the strict one accepts two in every run
    // and a third in one run of three.
    let generous: Vec<ItemScore> = (1..=4)
        .map(|n| item(&format!("q{n}"), 1, &[true, true, true], n == 4))
        .chain([item("q5", 5, &[], false)])
        .collect();
    let strict_verdicts: [&[bool]; 4] =
        [&[true, true, true], &[true, true, true], &[true, false, false], &[false, false, false]];
    let strict: Vec<ItemScore> = strict_verdicts
        .iter()
        .enumerate()
        .map(|(index, verdicts)| item(&format!("q{}", index + 1), 1, verdicts, index == 3))
        .chain([item("q5", 5, &[], false)])
        .collect();
    let (mem0, ours) = (summary("mem0", &generous), summary("strict", &strict));
    let runs = [
        ProtocolRun { summary: &mem0, items: &generous },
        ProtocolRun { summary: &ours, items: &strict },
    ];
    let bootstrap = BootstrapSettings { resamples: 500, seed: 3 };
    let matrix = JudgeMatrix::new(&runs, bootstrap).unwrap();
    assert_eq!(matrix.protocols, ["mem0", "strict"]);
    let keys: Vec<&str> = matrix.rows.iter().map(|row| row.key.as_str()).collect();
    assert_eq!(keys, ["1", "overall_1_4"]);
    let row = &matrix.rows[0];
    assert_eq!((row.n, row.ceiling), (4, Some(Ceiling { questions: 4, wrong_gold: 1 })));
    let (mem0_cell, strict_cell) = (&row.cells[0], &row.cells[1]);
    assert!(mem0_cell.above_ceiling && !strict_cell.above_ceiling);
    // All per-question scores equal: a zero-width interval at 1.
    assert_eq!(mem0_cell.interval, Some(Interval { low: 1.0, high: 1.0 }));
    // Strict: per-question scores 1, 1, 1/3, 0 bootstrapped with the same draws.
    let scores = [1.0, 1.0, 1.0 / 3.0, 0.0];
    assert_eq!(strict_cell.interval, paired::bootstrap_interval(&scores, bootstrap));
    let judge = strict_cell.judge.unwrap();
    assert!((judge.mean - 7.0 / 12.0).abs() < 1e-12 && judge.runs == 3, "{judge:?}");
    // Audited: the excluded question leaves the row; the generous judge is then at 100%.
    assert_eq!(mem0_cell.audited.unwrap().mean, 1.0);
    assert_eq!(matrix.above_ceiling().len(), 2, "category 1 and the overall, mem0 only");

    let table = matrix.table();
    assert!(
        table.starts_with(
            "| category | n | ceiling % | mem0 J % | mem0 95% CI | mem0 J % (audited) | strict J % | strict 95% CI | strict J % (audited) |"
        ),
        "{table}"
    );
    assert!(table.contains("| 1 multi-hop | 4 | 75.00 | 100.00 ± 0.00 ▲ | [100.00, 100.00] | 100.00 ± 0.00 | 58.33 ± 11.79 |"), "{table}");
    assert!(
        table.contains("Above the ceiling the audited answer key allows (▲): mem0 on 1 multi-hop (100.00 > 75.00); mem0 on overall (1–4) (100.00 > 75.00)."),
        "{table}"
    );
    let page = matrix_markdown(&matrix);
    assert!(page.contains("protocols `mem0`, `strict`, 3 run(s) each") && page.contains(&table));
}
