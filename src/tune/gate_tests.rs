//! Tests of `tune::gate`: the choice on dev, the report held out.

use super::*;

fn row(sample: &str, confidence: f64, single: bool, reach: bool) -> GateRow {
    let signals = GateSignals { coverage: confidence, margin: confidence, agreement: confidence };
    GateRow {
        question_id: format!("{sample}:{confidence}"),
        sample: sample.into(),
        category: "single-hop".into(),
        evidence: vec!["D1:1".into()],
        loop_holds: reach,
        shown_holds: reach,
        sizes: HEAD_SIZES
            .iter()
            .map(|&ContextSize { k, window }| AtSize {
                k,
                window,
                signals,
                confidence,
                single_holds: single,
                top_k_holds: single,
            })
            .collect(),
        top: Vec::new(),
    }
}

#[test]
fn the_chosen_threshold_is_admissible_and_sends_the_most() {
    // A seeded walk over dev sets: whatever the rows, the chosen gate keeps its promise on
    // them, and no admissible threshold sends more questions.
    let mut state = 43_u64;
    let mut next = || {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        state >> 33
    };
    for _ in 0..200 {
        let rows: Vec<GateRow> = (0..(next() % 30))
            .map(|_| {
                let confidence = (next() % 11) as f64 / 10.0;
                let reach = next() % 4 != 0;
                let single = reach && next() % 3 != 0;
                row("conv-26", confidence, single, reach)
            })
            .collect();
        let dev: Vec<&GateRow> = rows.iter().collect();
        let (threshold, chosen) = best_threshold(&dev, 0);
        assert!(chosen.admissible(), "{chosen:?}");
        assert_eq!(chosen, cell(&dev, 0, threshold));
        for other in rows.iter().map(|row| row.sizes[0].confidence) {
            let candidate = cell(&dev, 0, other);
            assert!(!candidate.admissible() || candidate.single <= chosen.single);
        }
    }
}

#[test]
fn the_gate_is_chosen_on_dev_and_reported_on_the_rest() {
    let rows = vec![
        row("conv-26", 0.9, true, true),
        row("conv-26", 0.5, false, true),
        row("conv-30", 0.8, true, true),
        row("conv-41", 0.95, true, true),
        row("conv-41", 0.85, false, true),
        row("conv-41", 0.2, false, false),
    ];
    let report = gate_report(&rows, 3, 0.0);
    let first = HEAD_SIZES[0];
    assert_eq!(report.choice, GateChoice { k: first.k, window: first.window, threshold: 0.8 });
    assert_eq!((report.dev.questions, report.dev.single), (3, 2));
    assert_eq!((report.held_out.questions, report.held_out.single), (3, 2));
    assert!(!report.held_out.admissible(), "held out, one head misses evidence");
    assert!(report.held_out.keeps_promise(), "the shown context holds what the reach holds");
    assert!(report.markdown.contains("keeps its promise"), "{}", report.markdown);
    assert!(report.markdown.contains("its head breaks"), "{}", report.markdown);
    // A shown context that misses what the reach holds breaks the promise.
    let mut rows = rows;
    rows[4].shown_holds = false;
    let report = gate_report(&rows, 3, 0.0);
    assert!(!report.held_out.keeps_promise());
    assert!(report.markdown.contains("breaks its promise"), "{}", report.markdown);
}
