//! Benchmark: scoring a full LoCoMo run (1,986 result lines built from the shipped dataset's gold
//! answers with seeded perturbations), both the pure scorer and `evaluate` end to end (read the
//! result files, score, aggregate, write `eval/`), without a judge.

// A benchmark's setup may panic on a missing dataset file; there is no caller to report to.
#![allow(clippy::expect_used)]

use criterion::{Criterion, criterion_group, criterion_main};
use mragent::dataset::{Category, DatasetKind};
use mragent::eval::input::{Selection, load_expected, match_results, read_result_lines};
use mragent::eval::{EvalSettings, audit, evaluate, score_results};
use mragent::llm::Client;
use mragent::results::{ResultLine, Status};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::Value;

/// One result line per LoCoMo question, grouped by sample; predictions are the gold answer
/// perturbed in one of several seeded ways (kept, reworded, cut, padded, refused, swapped).
fn synthetic_run() -> Vec<(String, Vec<ResultLine>)> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/data/dataset_locomo.json");
    let dataset: Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("dataset")).expect("json");
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let mut samples = Vec::new();
    for sample in dataset.as_array().expect("samples") {
        let sample_id = sample["sample_id"].as_str().expect("sample_id").to_string();
        let mut lines = Vec::new();
        for (index, qa) in sample["qa"].as_array().expect("qa").iter().enumerate() {
            let text = |value: &Value| match value {
                Value::String(text) => text.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            };
            let category = qa["category"].as_u64().expect("category") as u8;
            // The gold as the loader reads it: absent for most category-5 questions.
            let gold = (!qa["answer"].is_null()).then(|| text(&qa["answer"]));
            let base = match category {
                5 => text(&qa["adversarial_answer"]),
                _ => gold.clone().unwrap_or_default(),
            };
            let prediction = match rng.random_range(0..6) {
                0 => base.clone(),
                1 => format!("I believe it was {base}, as mentioned in the conversation."),
                2 => base.split_whitespace().take(2).collect::<Vec<_>>().join(" "),
                3 => "Not mentioned in the conversation".to_string(),
                4 => base.to_uppercase(),
                _ => format!("{base}; also something else entirely"),
            };
            let evidence: Vec<String> =
                qa["evidence"].as_array().expect("evidence").iter().map(&text).collect();
            let context = evidence.iter().take(1).cloned().collect();
            lines.push(ResultLine {
                question_id: format!("{sample_id}:q{}", index + 1),
                sample: sample_id.clone(),
                question: text(&qa["question"]),
                answer: gold,
                prediction,
                category: Category::Locomo(category),
                evidence,
                prediction_context: context,
                status: Status::Ok,
                error: None,
                rounds: 3,
                tool_calls: 4,
                prompt_tokens: 2000,
                completion_tokens: 60,
                latency_ms: 1000,
                path: None,
                provenance: Default::default(),
            });
        }
        samples.push((sample_id, lines));
    }
    samples
}

fn bench_eval(criterion: &mut Criterion) {
    let samples = synthetic_run();
    let lines: Vec<ResultLine> = samples.iter().flat_map(|(_, lines)| lines.clone()).collect();
    assert_eq!(lines.len(), 1986);
    let root = tempfile::tempdir().expect("tempdir");
    let directory = root.path().join("result/locomo");
    std::fs::create_dir_all(&directory).expect("result dir");
    for (sample_id, lines) in &samples {
        let text: String =
            lines.iter().map(|line| serde_json::to_string(line).expect("line") + "\n").collect();
        std::fs::write(directory.join(format!("{sample_id}_result_bench_run.jsonl")), text)
            .expect("write");
    }
    let data_file =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("data/dataset_locomo.json");
    let audit_file =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("data/locomo_audit.json");
    let mut settings = EvalSettings::new(root.path(), DatasetKind::Locomo, "bench", "run");
    settings.data_file = data_file.clone();
    settings.audit_file = Some(audit_file.clone());
    let files = mragent::eval::find_result_files(&settings).expect("files");
    let selection = Selection {
        dataset: DatasetKind::Locomo,
        file: &data_file,
        sample: None,
        question_type: None,
    };
    let expected = load_expected(&selection).expect("dataset");
    let shown = |path: &std::path::Path| path.display().to_string();
    let matched = match_results(
        "dataset",
        &expected,
        &files,
        read_result_lines(&files).expect("read"),
        false,
        &shown,
    )
    .expect("complete run");
    assert_eq!(matched.len(), 1986);
    let audit = audit::load_audit(&audit_file).expect("audit");
    criterion.bench_function("score_results_1986_lines", |bench| {
        bench.iter(|| score_results(&matched, DatasetKind::Locomo, Some(&audit)))
    });

    let runtime = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
    criterion.bench_function("evaluate_1986_lines_no_judge", |bench| {
        bench.iter(|| runtime.block_on(evaluate::<Client>(&settings, None)).expect("evaluate"))
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10);
    targets = bench_eval
}
criterion_main!(benches);
