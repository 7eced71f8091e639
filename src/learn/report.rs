//! The report of a learning run: `report.md` (settings, per fold the validation curve, the step
//! kept, every refused operation, tokens and cost, the final rules) and `validation.svg` (the
//! validation accuracy per step, one line per fold).

use std::fmt::Write as _;

use super::{LearnOutcome, LearnSettings};

/// Writes `report.md` and `validation.svg` into the learn directory.
pub fn write(settings: &LearnSettings, outcome: &LearnOutcome) -> anyhow::Result<()> {
    let dir = settings.dir();
    crate::fsutil::write_atomic(&dir.join("report.md"), markdown(settings, outcome))?;
    crate::fsutil::write_atomic(&dir.join("validation.svg"), curve_svg(outcome))?;
    Ok(())
}

/// The Markdown report: made from the step records alone, so a rerun, a resumed run and
/// `verify`'s replay write it identically.
pub fn markdown(settings: &LearnSettings, outcome: &LearnOutcome) -> String {
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = writeln!(out, "# Learned rules: {} ({})\n", settings.name, settings.dataset.as_str());
    let _ = writeln!(
        out,
        "Model {}, judge {} ({:?} protocol); {} folds (seed {}), {} epochs, batch {}, {} samples at temperature {}, at most {} rules, {} validation questions per fold.\n",
        settings.answer.model,
        settings.judge.model,
        settings.judge.protocol,
        settings.folds,
        settings.seed,
        settings.epochs,
        settings.batch,
        settings.samples,
        settings.temperature,
        settings.max_rules,
        settings.validation
    );
    let _ = writeln!(out, "![validation accuracy per step](validation.svg)\n");
    for fold in &outcome.folds {
        fold_section(&mut out, outcome, fold);
    }
    let _ = writeln!(out, "## Final rules ({})\n", outcome.rules.rules.len());
    for rule in &outcome.rules.rules {
        let _ = writeln!(out, "- {}: {}", rule.id, rule.text);
    }
    if outcome.rules.is_empty() {
        let _ = writeln!(out, "None: no rule set beat the empty one on validation.");
    }
    let learning = outcome
        .folds
        .iter()
        .flat_map(|fold| &fold.steps)
        .fold(crate::llm::Usage::default(), |total, record| total + record.learning_usage);
    let _ = writeln!(
        out,
        "\nThe reviews, proposals and consolidations of these steps took {} prompt + {} completion tokens, as recorded (what an invocation spent, answers and judgements included, is printed when it ends and kept in the manifest).",
        learning.prompt_tokens, learning.completion_tokens
    );
    let _ = writeln!(
        out,
        "\nTo report a gain honestly, judge the test answers with the same judge and protocol:\n`mragent eval --data {} --model {} --file {} --paired-with {} --judge-model {} --partial` (--partial: the folds that ran may not cover every conversation)",
        settings.dataset.as_str(),
        settings.answer.model_name,
        super::test_tag(&settings.name, false),
        super::test_tag(&settings.name, true),
        settings.judge.model
    );
    out
}

/// One fold's part of the report: its parts, its steps, the step kept, refused operations.
fn fold_section(out: &mut String, outcome: &LearnOutcome, fold: &super::FoldOutcome) {
    let plan = &outcome.plan.folds[fold.fold as usize];
    let _ = writeln!(out, "## Fold {}\n", fold.fold);
    let _ = writeln!(
        out,
        "Test: {} ({} questions); validation: {} questions from {}; training: {} questions from {}.\n",
        plan.test_samples.join(", "),
        plan.test.len(),
        plan.validation.len(),
        plan.validation_samples.join(", "),
        plan.train.len(),
        plan.train_samples.len()
    );
    let _ = writeln!(
        out,
        "| step | epoch | rules | validation J | validation F1 | rollouts J | mixed | ops applied | ops refused |"
    );
    let _ = writeln!(out, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for record in &fold.steps {
        let applied = record.ops.iter().filter(|op| op.refused.is_none()).count();
        let refused = record.ops.len() - applied + record.malformed_ops.len();
        let mark = if record.at.step == fold.chosen { " **kept**" } else { "" };
        let _ = writeln!(
            out,
            "| {}{mark} | {} | {} | {:.1} | {} | {} | {} | {applied} | {refused} |",
            record.at.step,
            record.epoch.map_or("-".into(), |e| e.to_string()),
            record.rules.rules.len(),
            record.validation.accuracy,
            record.validation.f1.map_or("-".into(), |f1| format!("{f1:.1}")),
            record.rollouts.map_or("-".into(), |r| format!("{:.1}", r.accuracy)),
            record.mixed.len(),
        );
    }
    let _ = writeln!(
        out,
        "\nKept step {}: validation gain {:+.1} points over no rules.\n",
        fold.chosen,
        fold.gain()
    );
    let refused: Vec<String> = fold
        .steps
        .iter()
        .flat_map(|record| {
            let step = record.at.step;
            record
                .ops
                .iter()
                .filter_map(move |op| {
                    let reason = op.refused.as_ref()?;
                    Some(format!(
                        "- step {step}: `{}`: {reason}",
                        serde_json::to_string(&op.op.op).unwrap_or_default()
                    ))
                })
                .chain(
                    record
                        .malformed_ops
                        .iter()
                        .map(move |item| format!("- step {step}: not an operation: `{item}`")),
                )
        })
        .collect();
    if !refused.is_empty() {
        let _ = writeln!(out, "Refused operations:\n\n{}\n", refused.join("\n"));
    }
    let fallbacks = fold.steps.iter().filter(|r| r.consolidation_fallback).count();
    if fallbacks > 0 {
        let _ = writeln!(
            out,
            "{fallbacks} steps applied their proposals unmerged (the consolidation reply was unusable).\n"
        );
    }
}

/// The validation curve: accuracy (0–100) per step, one polyline per fold.
pub fn curve_svg(outcome: &LearnOutcome) -> String {
    const WIDTH: f64 = 640.0;
    const HEIGHT: f64 = 320.0;
    const PAD: f64 = 40.0;
    const COLOURS: &[&str] = &["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"];
    let steps = outcome.folds.iter().map(|f| f.steps.len()).max().unwrap_or(1).max(2) - 1;
    let x = |step: usize| PAD + (WIDTH - 2.0 * PAD) * step as f64 / steps as f64;
    let y =
        |accuracy: f64| HEIGHT - PAD - (HEIGHT - 2.0 * PAD) * accuracy.clamp(0.0, 100.0) / 100.0;
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{HEIGHT}\" font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"{PAD}\" y=\"20\">validation accuracy (J, %) per step</text>\n"
    );
    for tick in [0.0, 25.0, 50.0, 75.0, 100.0] {
        let (right, level, label) = (WIDTH - PAD, y(tick), y(tick) + 4.0);
        let _ = writeln!(
            svg,
            "<line x1=\"{PAD}\" x2=\"{right}\" y1=\"{level:.1}\" y2=\"{level:.1}\" stroke=\"#ddd\"/><text x=\"8\" y=\"{label:.1}\">{tick}</text>"
        );
    }
    for (index, fold) in outcome.folds.iter().enumerate() {
        let colour = COLOURS[index % COLOURS.len()];
        let points: Vec<String> = fold
            .steps
            .iter()
            .enumerate()
            .map(|(step, record)| format!("{:.1},{:.1}", x(step), y(record.validation.accuracy)))
            .collect();
        let _ = writeln!(
            svg,
            "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\" points=\"{}\"/>",
            points.join(" ")
        );
        let kept = fold.chosen_record();
        let _ = writeln!(
            svg,
            "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"4\" fill=\"{colour}\"/><text x=\"{:.1}\" y=\"{:.1}\" fill=\"{colour}\">fold {}</text>",
            x(fold.chosen as usize),
            y(kept.validation.accuracy),
            WIDTH - PAD + 4.0,
            y(fold.steps.last().map_or(0.0, |r| r.validation.accuracy)),
            fold.fold
        );
    }
    svg.push_str("</svg>\n");
    svg
}
