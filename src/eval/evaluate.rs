//! The `eval` pipeline: find the result files, match them against the dataset, score, judge,
//! aggregate, and write the outputs.

use std::path::{Path, PathBuf};

use anyhow::Context as _;

use super::audit;
use super::compare::{self, PairedSummary};
use super::input::{self, Matched, Selection};
use super::judge::{self, CustomPrompt, JudgeProtocol};
use super::matrix::{JudgeMatrix, ProtocolRun, matrix_markdown};
use super::paired::BootstrapSettings;
use super::report::Coverage;
use super::summary::{RunFacts, build_summary};
use super::{
    EvalSettings, EvalSummary, ItemScore, check_audit, score_results, summary_markdown, svg,
};
use crate::dataset::DatasetKind;
use crate::llm::ChatModel;

/// Find the run's result files: `result/<dataset>/*_result_<model>_<file>.jsonl`, sorted by name.
pub fn find_result_files(settings: &EvalSettings) -> anyhow::Result<Vec<PathBuf>> {
    let directory = settings.root.join("result").join(settings.dataset.as_str());
    let suffix = format!("_result_{}_{}.jsonl", settings.model, settings.file);
    let entries = std::fs::read_dir(&directory)
        .with_context(|| format!("reading result directory {}", directory.display()))?;
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.with_context(|| format!("listing {}", directory.display()))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.ends_with(&suffix) && name.len() > suffix.len() && entry.path().is_file() {
            files.push(entry.path());
        }
    }
    files.sort();
    if files.is_empty() {
        anyhow::bail!("no result files match {}/*{suffix}", directory.display());
    }
    Ok(files)
}

/// Evaluate a run: check its result lines against the dataset, score them, judge them when
/// `judge` is given (with `settings.judge_model` naming the model to request), and write
/// `eval/<dataset>/<file>/`.
///
/// Returns the summary; the caller prints [`EvalSummary::table`]. Result files that do not
/// match the dataset selection are an [`input::RunError`].
pub async fn evaluate<M: ChatModel>(
    settings: &EvalSettings,
    judge: Option<&M>,
) -> anyhow::Result<EvalSummary> {
    Ok(evaluate_run(settings, judge).await?.0)
}

/// [`evaluate`], returning the scored items (in dataset order) beside the summary.
async fn evaluate_run<M: ChatModel>(
    settings: &EvalSettings,
    judge: Option<&M>,
) -> anyhow::Result<(EvalSummary, Vec<ItemScore>)> {
    let mut judged = judge_protocols(settings, &[settings.protocol], judge).await?;
    Ok(judged.runs.remove(0))
}

/// A run judged under several protocols (`eval --judge-protocol mem0,strict`).
#[derive(Debug, Clone, PartialEq)]
pub struct MatrixEvaluation {
    /// The first protocol's summary (what `summary.json` holds).
    pub summary: EvalSummary,
    /// The matrix, when judged.
    pub matrix: Option<JudgeMatrix>,
    /// `eval/<dataset>/<file>/matrix.md`, when judged.
    pub markdown_file: Option<PathBuf>,
}

/// Evaluate a run as [`evaluate`] does, judging it once per protocol in `protocols` (each
/// protocol's prompt is its own request, so its own call on the judge's tape).
/// `summary.*`, `scores.jsonl` and the plots are the first protocol's; the matrix of every
/// protocol goes to `matrix.md` and `matrix.json`.
pub async fn evaluate_matrix<M: ChatModel>(
    settings: &EvalSettings,
    protocols: &[JudgeProtocol],
    judge: Option<&M>,
) -> anyhow::Result<MatrixEvaluation> {
    let judged = judge_protocols(settings, protocols, judge).await?;
    let markdown_file = judged.matrix.as_ref().map(|_| settings.output_dir().join(MATRIX_MARKDOWN));
    let summary = judged.runs.into_iter().next().map(|(summary, _)| summary);
    let summary = summary.context("no judge protocol given")?;
    Ok(MatrixEvaluation { summary, matrix: judged.matrix, markdown_file })
}

/// [`evaluate_matrix`] with `judge` behind a latch: the first refused key or unknown model
/// stops the whole evaluation with one message (the judgements already made are on the
/// judge's tape and a rerun keeps them). `eval`, and `verify` recomputing its tables.
pub async fn evaluate_latched<M: ChatModel>(
    settings: &EvalSettings,
    protocols: &[JudgeProtocol],
    judge: Option<&M>,
    key_variable: &str,
) -> anyhow::Result<MatrixEvaluation> {
    use crate::llm::fatal::{AfterFatal, FatalLatch, Latched, until_fatal};
    let latch = std::sync::Arc::new(FatalLatch::default());
    let judge =
        judge.map(|client| Latched::sharing(client, &latch, key_variable, AfterFatal::Wait));
    until_fatal(&latch, evaluate_matrix(settings, protocols, judge.as_ref())).await
}

/// The matrix page's file name in the run's eval folder (`matrix.json` beside it).
const MATRIX_MARKDOWN: &str = "matrix.md";

/// Every protocol's judged run, and the matrix over them when judged.
struct JudgedRuns {
    runs: Vec<(EvalSummary, Vec<ItemScore>)>,
    matrix: Option<JudgeMatrix>,
}

/// Score the run once, judge it under each protocol, write the first protocol's outputs and,
/// when judged, the matrix.
async fn judge_protocols<M: ChatModel>(
    settings: &EvalSettings,
    protocols: &[JudgeProtocol],
    judge: Option<&M>,
) -> anyhow::Result<JudgedRuns> {
    let judging = match (judge, &settings.judge_model) {
        (Some(model), Some(name)) => Some((model, name.clone())),
        (None, None) => None,
        (Some(_), None) => anyhow::bail!("a judge client was given but no judge model name"),
        (None, Some(name)) => {
            anyhow::bail!("judge model {name} is set but no judge client was given")
        }
    };
    if settings.judge_runs == 0 {
        anyhow::bail!("judge runs must be at least 1");
    }
    check_protocols(settings, protocols, judging.is_some())?;
    let custom = settings.judge_prompt.as_deref().map(CustomPrompt::load).transpose()?;
    let relative =
        |path: &Path| path.strip_prefix(&settings.root).unwrap_or(path).display().to_string();
    let scored = score_run(settings, &relative)?;
    let mut runs = Vec::new();
    for &protocol in protocols {
        let mut items = scored.items.clone();
        let judge_stats = match &judging {
            Some((model, name)) => {
                let custom = custom.clone();
                run_judge(*model, name.clone(), settings, protocol, custom, &mut items).await?
            }
            None => judge::JudgeStats::default(),
        };
        let protocol_name = custom.as_ref().map_or_else(
            || match settings.dataset {
                DatasetKind::Locomo | DatasetKind::LongMemEval => protocol.as_str().to_string(),
                DatasetKind::Own => "own".to_string(),
            },
            |custom| custom.name.clone(),
        );
        let facts = RunFacts {
            files: scored.files.clone(),
            expected: scored.expected,
            protocol_name,
            audit_file: scored.audit_file.clone(),
        };
        let summary = build_summary(settings, &items, facts, &judge_stats, &relative);
        if runs.is_empty() {
            write_outputs(&scored.output_dir, &items, &summary)?;
        }
        runs.push((summary, items));
    }
    let matrix = match judging {
        Some(_) => write_matrix(&scored.output_dir, &runs)?,
        None => None,
    };
    Ok(JudgedRuns { runs, matrix })
}

/// Protocols must be given, distinct, and apply to the dataset; a prompt file replaces the
/// protocol's prompt, so it takes one protocol only.
fn check_protocols(
    settings: &EvalSettings,
    protocols: &[JudgeProtocol],
    judging: bool,
) -> anyhow::Result<()> {
    if protocols.is_empty() {
        anyhow::bail!("no judge protocol given");
    }
    for (index, protocol) in protocols.iter().enumerate() {
        if protocols[..index].contains(protocol) {
            anyhow::bail!("judge protocol {} is named twice", protocol.as_str());
        }
    }
    if protocols.len() > 1 && !judging {
        anyhow::bail!("several judge protocols need a judge model (--judge-model)");
    }
    if protocols.len() > 1 && settings.judge_prompt.is_some() {
        anyhow::bail!("--judge-prompt replaces the protocol's prompt: give one --judge-protocol");
    }
    if judging {
        for protocol in protocols {
            protocol.check_dataset(settings.dataset)?;
        }
    }
    Ok(())
}

/// Write `matrix.md` and `matrix.json` for the judged runs.
fn write_matrix(
    output_dir: &Path,
    runs: &[(EvalSummary, Vec<ItemScore>)],
) -> anyhow::Result<Option<JudgeMatrix>> {
    let views: Vec<ProtocolRun<'_>> =
        runs.iter().map(|(summary, items)| ProtocolRun { summary, items }).collect();
    let Some(matrix) = JudgeMatrix::new(&views, BootstrapSettings::default()) else {
        return Ok(None);
    };
    write_matrix_files(output_dir, &matrix)?;
    Ok(Some(matrix))
}

/// Writes `matrix` as `matrix.md` and `matrix.json` in `output_dir`.
pub fn write_matrix_files(output_dir: &Path, matrix: &JudgeMatrix) -> anyhow::Result<()> {
    crate::fsutil::write_atomic(&output_dir.join(MATRIX_MARKDOWN), matrix_markdown(matrix))?;
    let json = serde_json::to_string_pretty(matrix).context("serialising the judge matrix")?;
    crate::fsutil::write_atomic(&output_dir.join("matrix.json"), json + "\n")
}

/// A run's result lines matched and scored without a judge.
struct ScoredItem {
    files: Vec<String>,
    expected: usize,
    audit_file: Option<String>,
    items: Vec<ItemScore>,
    output_dir: PathBuf,
}

/// Read and match the result files, apply the audit, score, and create the output folder.
fn score_run(
    settings: &EvalSettings,
    relative: &dyn Fn(&Path) -> String,
) -> anyhow::Result<ScoredItem> {
    let (files, expected, matched) = load_matched(settings, relative)?;
    let audit = match settings.audit_in_use() {
        Some(path) => {
            let audit = audit::load_audit(path)?;
            check_audit(&audit, path, &expected)?;
            Some(audit)
        }
        None => None,
    };
    let items = score_results(&matched, settings.dataset, audit.as_ref());
    tracing::info!(questions = items.len(), files = files.len(), "scored result lines");
    let output_dir = settings.output_dir();
    std::fs::create_dir_all(&output_dir)
        .with_context(|| format!("creating {}", output_dir.display()))?;
    Ok(ScoredItem {
        files: files.iter().map(|file| relative(file)).collect(),
        expected: expected.len(),
        audit_file: audit.as_ref().and(settings.audit_in_use()).map(relative),
        items,
        output_dir,
    })
}

/// A run compared with its twin: each scored as [`evaluate`] scores it, and the comparison.
#[derive(Debug, Clone, PartialEq)]
pub struct PairedEvaluation {
    /// Run A (`settings.file`).
    pub a: EvalSummary,
    /// Run B (the twin).
    pub b: EvalSummary,
    /// The comparison on the questions both answered.
    pub paired: PairedSummary,
    /// `eval/<dataset>/<model>_<A>_vs_<B>.md`.
    pub markdown_file: PathBuf,
    /// `eval/<dataset>/<model>_<A>_vs_<B>.json`.
    pub json_file: PathBuf,
}

/// Score run `settings.file` (A) and its twin `other` (B) with the same dataset selection,
/// judge and protocol, each into its own `eval/<dataset>/<file>/` (the judge's tape answers a
/// judgement recorded before), then compare them question by question and write
/// `eval/<dataset>/<model>_<A>_vs_<B>.md` and `.json`.
pub async fn evaluate_paired<M: ChatModel>(
    settings: &EvalSettings,
    other: &str,
    bootstrap: BootstrapSettings,
    judge: Option<&M>,
) -> anyhow::Result<PairedEvaluation> {
    if other == settings.file {
        anyhow::bail!("--paired-with names the run --file already names ({other})");
    }
    // Each run is scored into the comparison's own folder, never into the run's: reading a run
    // never changes it.
    let directory = settings.root.join("eval").join(settings.dataset.as_str());
    let own = directory.join(format!("{}_{}_vs_{other}", settings.model, settings.file));
    // What an earlier comparison of the two left there (a matrix an unjudged one would not
    // write again) goes first: the folder is this comparison's alone.
    match std::fs::remove_dir_all(&own) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => {
            return Err(error).with_context(|| format!("clearing {}", own.display()));
        }
    }
    let run_a = EvalSettings { output: Some(own.join(&settings.file)), ..settings.clone() };
    let run_b =
        EvalSettings { file: other.to_string(), output: Some(own.join(other)), ..settings.clone() };
    let (a, items_a) = evaluate_run(&run_a, judge)
        .await
        .with_context(|| format!("scoring run A ({})", settings.file))?;
    let (b, items_b) =
        evaluate_run(&run_b, judge).await.with_context(|| format!("scoring run B ({other})"))?;
    let paired = PairedSummary::new((&a, &items_a), (&b, &items_b), bootstrap);
    if paired.paired == 0 {
        anyhow::bail!(
            "no question was answered successfully by both {} and {other} (left out: {})",
            settings.file,
            paired.left_out.describe()
        );
    }
    let directory = settings.root.join("eval").join(settings.dataset.as_str());
    let stem = paired.file_stem();
    let markdown_file = directory.join(format!("{stem}.md"));
    let json_file = directory.join(format!("{stem}.json"));
    crate::fsutil::write_atomic(&markdown_file, compare::paired_markdown(&paired))?;
    let json = serde_json::to_string_pretty(&paired).context("serialising the comparison")?;
    crate::fsutil::write_atomic(&json_file, json + "\n")?;
    Ok(PairedEvaluation { a, b, paired, markdown_file, json_file })
}

/// Read the run's result files and match them against the dataset selection.
fn load_matched(
    settings: &EvalSettings,
    relative: &dyn Fn(&Path) -> String,
) -> anyhow::Result<(Vec<PathBuf>, Vec<input::ExpectedQuestion>, Vec<Matched>)> {
    let files = find_result_files(settings)?;
    let selection = Selection {
        dataset: settings.dataset,
        file: &settings.data_file,
        sample: settings.sample.as_deref(),
        question_type: settings.question_type,
    };
    let expected = input::load_expected(&selection)?;
    let lines = input::read_result_lines(&files)?;
    let matched = input::match_results(
        &relative(&settings.data_file),
        &expected,
        &files,
        lines,
        settings.partial,
        relative,
    )?;
    let coverage = Coverage { scored: matched.len(), expected: expected.len() };
    if let Some(label) = coverage.label() {
        tracing::warn!(
            scored = coverage.scored,
            expected = coverage.expected,
            "{label}: scoring the questions that have a result line"
        );
    }
    Ok((files, expected, matched))
}

/// Judge the scored items (a taped judge answers what was recorded before).
async fn run_judge<M: ChatModel>(
    model: &M,
    name: String,
    settings: &EvalSettings,
    protocol: JudgeProtocol,
    custom: Option<CustomPrompt>,
    items: &mut [ItemScore],
) -> anyhow::Result<judge::JudgeStats> {
    let judge_settings = judge::JudgeSettings {
        model: name,
        runs: settings.judge_runs,
        concurrency: settings.concurrency,
        dataset: settings.dataset,
        protocol,
        custom: custom.map(std::sync::Arc::new),
    };
    let judge_stats = judge::judge_items(model, &judge_settings, items).await?;
    tracing::info!(
        cached = judge_stats.cached,
        new = judge_stats.new,
        failed = judge_stats.failed,
        "judged answers"
    );
    Ok(judge_stats)
}

/// Write `scores.jsonl`, `summary.json`, `summary.md` and the plots, each through a temporary
/// file renamed into place.
fn write_outputs(
    output_dir: &Path,
    items: &[ItemScore],
    summary: &EvalSummary,
) -> anyhow::Result<()> {
    let mut scores = String::new();
    for item in items {
        scores.push_str(&serde_json::to_string(item).context("serialising a score")?);
        scores.push('\n');
    }
    crate::fsutil::write_atomic(&output_dir.join("scores.jsonl"), &scores)?;
    let json = serde_json::to_string_pretty(summary).context("serialising the summary")?;
    crate::fsutil::write_atomic(&output_dir.join("summary.json"), json + "\n")?;
    crate::fsutil::write_atomic(&output_dir.join("summary.md"), summary_markdown(summary))?;
    let mut title = format!("{} / {} / {}", summary.dataset, summary.model, summary.file);
    if let Some(label) = &summary.partial {
        title = format!("{title} ({label})");
    }
    crate::fsutil::write_atomic(
        &output_dir.join("accuracy.svg"),
        svg::accuracy_chart(&format!("Accuracy: {title}"), &summary.rows),
    )?;
    crate::fsutil::write_atomic(
        &output_dir.join("tokens.svg"),
        svg::tokens_chart(&format!("Tokens per question: {title}"), &summary.rows),
    )?;
    Ok(())
}
