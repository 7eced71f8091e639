//! A comparison's archive (`export --vs B`): both runs are checked as a run's archive is, then
//! the comparison is recomputed from both runs' results and its recorded judge calls (played
//! back, nothing sent) and compared with the archived one: each run scored for it, its table
//! (`.json`) and its page (`.md`).

use std::path::Path;
use std::sync::Arc;

use super::tables::{compare_tables, set_aside, sort_eval_members};
use super::{Report, compare_file, relative, replay_tag};
use crate::recorded::RunFiles;
use crate::recorded::archive::{ArchiveIndex, ComparedRun, INDEX};
use crate::recorded::eval_record::CompareRecord;

/// The runs of the archive, each as a run's own archive would index it: the archive's run and,
/// in a comparison's archive, run B. `Err` when the two cannot be told apart, or a replay of
/// one would answer into the other.
pub(super) fn runs_of(index: &ArchiveIndex) -> Result<Vec<ArchiveIndex>, String> {
    let run = ArchiveIndex { compared: None, ..index.clone() };
    let Some(compared) = &index.compared else { return Ok(vec![run]) };
    let (a, b) = (index.file.as_str(), compared.file.as_str());
    if a == b || replay_tag(index) == b || format!("{b}-verify") == a {
        return Err(format!("{INDEX}: its runs {a} and {b} cannot be replayed apart"));
    }
    let other = ArchiveIndex {
        file: compared.file.clone(),
        manifest: compared.manifest.clone(),
        eval: compared.eval.clone(),
        meta_rules: compared.meta_rules.clone(),
        ..run.clone()
    };
    Ok(vec![run, other])
}

/// The comparison recomputed and compared (see the module documentation): what was
/// recomputed, or the first mismatch.
pub(super) async fn check_comparison(
    index: &ArchiveIndex,
    compared: &ComparedRun,
    root: &Path,
    report: &mut Report,
) -> anyhow::Result<Result<String, String>> {
    let files = RunFiles::new(root, &index.dataset, &index.model, &index.file);
    let other = compared.file.as_str();
    let record = match checked_record(&files, compared, root) {
        Ok(record) => record,
        Err(mismatch) => return Ok(Err(mismatch)),
    };
    let [markdown, json] = files.comparison_outputs(other);
    let folder = files.comparison_folder(other);
    for path in [&markdown, &json, &folder] {
        if !path.exists() {
            return Ok(Err(format!("{}: the comparison is not archived", relative(root, path))));
        }
    }
    let kept_folder = set_aside(root, &folder)?;
    let kept_markdown = set_aside(root, &markdown)?;
    let kept_json = set_aside(root, &json)?;
    if let Err(mismatch) = recompute(index, &files, &record, root).await? {
        return Ok(Err(mismatch));
    }
    for run in [index.file.as_str(), other] {
        if let Some(mismatch) = compare_tables(root, &kept_folder.join(run), &folder.join(run))? {
            return Ok(Err(mismatch));
        }
    }
    if let Some(mismatch) = compare_outputs(root, (&kept_json, &kept_markdown), (&json, &markdown))?
    {
        return Ok(Err(mismatch));
    }
    let inside = relative(root, &folder);
    for run in [index.file.as_str(), other] {
        sort_eval_members(&kept_folder.join(run), &format!("{inside}/{run}"), report)?;
    }
    for path in crate::recorded::archive::files_under(&kept_folder)? {
        let name = format!("{inside}/{}", relative(&kept_folder, &path));
        if !report.recomputed.contains(&name) {
            report.carried.insert(name);
        }
    }
    report.recomputed.extend([relative(root, &json), relative(root, &markdown)]);
    let selection = selection(&record);
    Ok(Ok(match record.judged {
        true => format!(
            "the comparison of {} with {other} ({}, {} run(s){selection}) recomputed from its recorded judge calls is identical",
            index.file, record.settings.judge_model, record.settings.judge_runs
        ),
        false => format!(
            "the comparison of {} with {other} (F1{selection}) recomputed is identical",
            index.file
        ),
    }))
}

/// Which questions the comparison took, when not the whole dataset: its sample, its type and
/// whether questions without a result line were left out.
fn selection(record: &CompareRecord) -> String {
    let settings = &record.settings;
    let mut said = String::new();
    if let Some(sample) = &settings.sample {
        said += &format!(", sample {sample}");
    }
    if let Some(kind) = settings.question_type {
        said += &format!(", type {}", serde_json::to_value(kind).unwrap_or_default());
    }
    if settings.partial {
        said += ", partial: questions without a result line left out";
    }
    said
}

/// The archived comparison record, checked against `archive.json`'s copy.
fn checked_record(
    files: &RunFiles,
    compared: &ComparedRun,
    root: &Path,
) -> Result<CompareRecord, String> {
    let path = files.comparison_record(&compared.file);
    let member = relative(root, &path);
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Err(format!("{member}: how the runs were compared is not in the archive"));
    };
    let Ok(mut record) = serde_json::from_str::<CompareRecord>(&text) else {
        return Err(format!("{member} is not a comparison record"));
    };
    // The index names the archived audit file where the record names the project's.
    record.settings = record.settings.archived();
    if record != compared.comparison || record.run_b != compared.file {
        return Err(format!("{INDEX}: its comparison settings differ from {member}"));
    }
    // `compare` draws with one bootstrap: another (a seed tried until an interval excludes 0,
    // or resamples without end) was not made by it.
    let drawn = crate::eval::paired::BootstrapSettings::default();
    if record.bootstrap != drawn {
        return Err(format!(
            "{member}: its bootstrap ({} resamples, seed {}) is not the one compare draws ({} resamples, seed {})",
            record.bootstrap.resamples, record.bootstrap.seed, drawn.resamples, drawn.seed
        ));
    }
    Ok(record)
}

/// Writes the comparison anew from both runs' results and the dataset, judged (when it was)
/// by the judge played back from the comparison's recorded calls.
async fn recompute(
    index: &ArchiveIndex,
    files: &RunFiles,
    record: &CompareRecord,
    root: &Path,
) -> anyhow::Result<Result<(), String>> {
    use crate::llm::tape::{CallStore, Offline, Tape, TapeMode, TapedChat};
    let dataset = crate::dataset::DatasetKind::from_name(&index.dataset)?;
    let mut settings = crate::eval::EvalSettings::new(root, dataset, &index.model, &index.file);
    settings.data_file = root.join(&index.dataset_file);
    record.apply(&mut settings);
    let tape_path = files.comparison_judge_calls(&record.run_b);
    let tape_member = relative(root, &tape_path);
    let (evaluated, tape) = if record.judged {
        if !tape_path.is_file() {
            return Ok(Err(format!(
                "{tape_member}: the comparison's recorded judge calls are not in the archive"
            )));
        }
        let store = Arc::new(CallStore::open_archived(&tape_path)?);
        let tape = Tape::new(store, TapeMode::Replay { fill: false });
        let judge = TapedChat::new(Offline, Arc::clone(&tape));
        let evaluated =
            crate::eval::evaluate_paired(&settings, &record.run_b, record.bootstrap, Some(&judge))
                .await;
        (evaluated, Some(tape))
    } else {
        let evaluated = crate::eval::evaluate_paired::<Offline>(
            &settings,
            &record.run_b,
            record.bootstrap,
            None,
        )
        .await;
        (evaluated, None)
    };
    // A judgement that fails is graded, not fatal: a verdict missing from the tape is a
    // mismatch of the tape itself.
    if let Some(what) = tape.as_ref().and_then(|tape| tape.first_unrecorded()) {
        return Ok(Err(format!("{tape_member}: a judge call was never recorded: {what}")));
    }
    if let Err(error) = evaluated {
        return Ok(Err(format!("recomputing the comparison from {tape_member}: {error:#}")));
    }
    Ok(Ok(()))
}

/// The archived table and page (`kept`) against the recomputed ones (`made`), each `(json,
/// markdown)`. The table's `data_file` names where the dataset was on the host that compared
/// (an invocation field): it must name the archived dataset's file, and is taken from the
/// archived table before the page is rendered again.
fn compare_outputs(
    root: &Path,
    kept: (&Path, &Path),
    made: (&Path, &Path),
) -> anyhow::Result<Option<String>> {
    use crate::eval::compare::{PairedSummary, paired_markdown};
    let name = relative(root, made.0);
    let archived = std::fs::read(kept.0)
        .ok()
        .and_then(|bytes| serde_json::from_slice::<PairedSummary>(&bytes).ok());
    let Some(archived) = archived else {
        return Ok(Some(format!("{name}: it is not a comparison table")));
    };
    let mut recomputed: PairedSummary =
        serde_json::from_slice(&std::fs::read(made.0)?).map_err(anyhow::Error::new)?;
    let file_name = |path: &str| Path::new(path).file_name().map(|name| name.to_owned());
    if file_name(&archived.data_file) != file_name(&recomputed.data_file) {
        return Ok(Some(format!(
            "{name}: its data_file names another file than the dataset that was archived"
        )));
    }
    recomputed.data_file = archived.data_file;
    let json = serde_json::to_string_pretty(&recomputed).map_err(anyhow::Error::new)? + "\n";
    std::fs::write(made.0, json)?;
    std::fs::write(made.1, paired_markdown(&recomputed))?;
    if let Some(mismatch) = compare_file(kept.0, made.0, &name, COMPARING)? {
        return Ok(Some(mismatch));
    }
    compare_file(kept.1, made.1, &relative(root, made.1), COMPARING)
}

/// What writes the recomputed comparison, in messages.
const COMPARING: &str = "recomputing the comparison";
