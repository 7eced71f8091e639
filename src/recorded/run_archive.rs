//! The archive of a run (`mragent export --file TAG`), or of a comparison of two runs (`--vs
//! B`): each run's manifest, result files, traces, recorded calls (and the judge's with how it
//! judged), eval folder and the memory caches its answers were made from; the dataset file;
//! the rules and audit files they read; and, for a comparison, how it was made, its recorded
//! judge calls and its outputs. `verify` replays each run and recomputes every table.

use std::path::{Path, PathBuf};

use anyhow::Context as _;

use super::RunFiles;
use super::archive::{
    ARCHIVE_FORMAT, ArchiveIndex, COMPARISON_FORMAT, ComparedRun, file_name, files_under, listed,
    memory_caches, read_json, relative,
};
use super::eval_record::{CompareRecord, EvalRecord};
use crate::settings::ExportJob;

/// The index of `job`'s archive and each member's source file.
pub fn collect(job: &ExportJob) -> anyhow::Result<(ArchiveIndex, Vec<PathBuf>)> {
    let root = &job.paths.root;
    let mut members: Vec<(String, PathBuf)> = Vec::new();
    let run = run_part(job, &job.file, &mut members)?;
    let dataset_file = PathBuf::from(run.manifest["dataset_file"].as_str().unwrap_or_default());
    let dataset_member = format!("data/{}", file_name(&dataset_file)?);
    members.push((dataset_member.clone(), root.join(&dataset_file)));
    let compared = match &job.vs {
        Some(other) => Some(compared_part(job, other, &run.manifest, &mut members)?),
        None => None,
    };
    let (files, sources) = listed(members)?;
    let index = ArchiveIndex {
        format: if compared.is_some() { COMPARISON_FORMAT } else { ARCHIVE_FORMAT }.to_string(),
        dataset: job.dataset.as_str().to_string(),
        model: job.model.clone(),
        file: job.file.clone(),
        dataset_file: dataset_member,
        meta_rules: run.meta_rules,
        manifest: run.manifest,
        eval: run.eval,
        build: Some(crate::provenance::Build::of_this_binary()),
        learn: None,
        compared,
        files,
    };
    Ok((index, sources))
}

/// What one run of an archive says of itself, beside its members.
struct RunPart {
    manifest: serde_json::Value,
    eval: Option<EvalRecord>,
    meta_rules: Option<String>,
}

/// The run `tag` of `job`'s dataset and model: its manifest, recorded calls, outputs, rules
/// and audit added to `members`.
fn run_part(
    job: &ExportJob,
    tag: &str,
    members: &mut Vec<(String, PathBuf)>,
) -> anyhow::Result<RunPart> {
    let root = &job.paths.root;
    let files = RunFiles::new(root, job.dataset.as_str(), &job.model, tag);
    let (manifest_path, manifest) = complete_manifest(&files, tag, &job.model)?;
    let (calls, mut eval) = recorded_calls(&files, tag)?;
    let samples: Vec<String> = manifest["settings"]["samples"]
        .as_array()
        .map(|samples| samples.iter().filter_map(|s| s.as_str().map(str::to_string)).collect())
        .unwrap_or_default();
    let mut paths = vec![manifest_path];
    paths.extend(calls);
    paths.extend(run_outputs(&files, &samples)?);
    for path in paths {
        members.push((relative(root, &path)?, path));
    }
    let meta_rules = rules_member(&manifest, root, members)?;
    if let Some(record) = eval.as_mut() {
        audit_member(record, root, members)?;
    }
    Ok(RunPart { manifest, eval, meta_rules })
}

/// Run B of a comparison (`export --vs B`), the comparison's record, recorded judge calls and
/// outputs, added to `members`.
fn compared_part(
    job: &ExportJob,
    other: &str,
    manifest_a: &serde_json::Value,
    members: &mut Vec<(String, PathBuf)>,
) -> anyhow::Result<ComparedRun> {
    let root = &job.paths.root;
    let run = run_part(job, other, members)?;
    // One dataset file: the same content under the same name, wherever each run read it.
    let name = |manifest: &serde_json::Value| {
        Path::new(manifest["dataset_file"].as_str().unwrap_or_default())
            .file_name()
            .map(|name| name.to_owned())
    };
    if name(&run.manifest) != name(manifest_a)
        || run.manifest["dataset_sha256"] != manifest_a["dataset_sha256"]
    {
        anyhow::bail!(
            "runs {} and {other} answered different dataset files (name or SHA-256): a comparison archive holds one",
            job.file
        );
    }
    let files = RunFiles::new(root, job.dataset.as_str(), &job.model, &job.file);
    let record_path = files.comparison_record(other);
    let text = std::fs::read_to_string(&record_path).with_context(|| {
        format!(
            "run {} was not compared with run {other} by this version ({} is missing): run `mragent compare {} {other}` first",
            job.file,
            record_path.display(),
            job.file
        )
    })?;
    let mut comparison: CompareRecord = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a comparison record", record_path.display()))?;
    if comparison.run_b != other {
        anyhow::bail!("{} names run {}, not {other}", record_path.display(), comparison.run_b);
    }
    let mut paths = vec![record_path];
    if comparison.judged {
        let tape = files.comparison_judge_calls(other);
        if !tape.is_file() {
            anyhow::bail!("the comparison's recorded judge calls are missing ({})", tape.display());
        }
        crate::llm::tape::CallStore::open(&tape)?.checkpoint()?;
        paths.push(tape);
    }
    for output in files.comparison_outputs(other) {
        if !output.is_file() {
            anyhow::bail!(
                "the comparison's {} is missing: run `mragent compare {} {other}` again",
                output.display(),
                job.file
            );
        }
        paths.push(output);
    }
    let scored = files_under(&files.comparison_folder(other))?;
    paths.extend(scored.into_iter().filter(|path| !is_judge_cache(path)));
    for path in paths {
        members.push((relative(root, &path)?, path));
    }
    audit_member(&mut comparison.settings, root, members)?;
    Ok(ComparedRun {
        file: other.to_string(),
        manifest: run.manifest,
        eval: run.eval,
        meta_rules: run.meta_rules,
        comparison,
    })
}

/// The audit file `record` names, archived under `data/audit/`; the record names the member.
fn audit_member(
    record: &mut EvalRecord,
    root: &Path,
    members: &mut Vec<(String, PathBuf)>,
) -> anyhow::Result<()> {
    if let Some(audit) = &record.audit_file {
        file_name(Path::new(audit))?;
        members.push((super::eval_record::audit_member(audit), root.join(audit)));
    }
    *record = record.clone().archived();
    Ok(())
}

/// The run's manifest (its path and its JSON), refused unless the run is complete.
fn complete_manifest(
    files: &RunFiles,
    tag: &str,
    model: &str,
) -> anyhow::Result<(PathBuf, serde_json::Value)> {
    let manifest_path = files.manifest();
    let manifest: serde_json::Value = read_json(&manifest_path)
        .with_context(|| format!("run {tag} of model {model} has no manifest; run it first"))?;
    if manifest["status"] != "complete" {
        anyhow::bail!(
            "run {tag} is {} (see {}): export a complete run",
            manifest["status"],
            manifest_path.display()
        );
    }
    Ok((manifest_path, manifest))
}

/// The run's recorded calls, and the judge's with the eval record when the run was judged
/// (the record too), each call store checkpointed into one file.
fn recorded_calls(
    files: &RunFiles,
    tag: &str,
) -> anyhow::Result<(Vec<PathBuf>, Option<EvalRecord>)> {
    let calls = files.calls();
    if !calls.is_file() {
        anyhow::bail!("run {tag} has no recorded calls ({} is missing)", calls.display());
    }
    let (judge_calls, eval_record) = (files.judge_calls(), files.eval_record());
    let eval_settings: Option<EvalRecord> = if judge_calls.is_file() {
        let text = std::fs::read_to_string(&eval_record)
            .with_context(|| format!("reading {}", eval_record.display()))?;
        Some(serde_json::from_str(&text).with_context(|| format!("{}", eval_record.display()))?)
    } else {
        None
    };
    for store in std::iter::once(&calls).chain(judge_calls.is_file().then_some(&judge_calls)) {
        // One file holds everything once the write-ahead log is folded in.
        crate::llm::tape::CallStore::open(store)?.checkpoint()?;
    }
    let mut paths = vec![calls];
    if eval_settings.is_some() {
        paths.extend([judge_calls, eval_record]);
    }
    Ok((paths, eval_settings))
}

/// What the run wrote for `samples`: its result files, traces, eval folder (the judge cache
/// aside) and the memory caches its answers were made from.
fn run_outputs(files: &RunFiles, samples: &[String]) -> anyhow::Result<Vec<PathBuf>> {
    let mut paths = Vec::new();
    for sample in samples {
        let result = files.results(sample);
        paths.extend(result.is_file().then_some(result));
    }
    paths.extend(files_under(&files.traces())?);
    paths.extend(
        files_under(&files.eval_folder())?.into_iter().filter(|path| !is_judge_cache(path)),
    );
    paths.extend(memory_caches(&files.memory_dir(), samples)?);
    Ok(paths)
}

/// A judge cache an older version left in an eval folder (`eval` writes none now: its judge's
/// tape is the memo): not a result, never archived.
pub fn is_judge_cache(path: &Path) -> bool {
    path.file_name().is_some_and(|name| name == "judgements.jsonl")
}

/// The meta-rules file of the run, archived under `rules/`.
fn rules_member(
    manifest: &serde_json::Value,
    root: &Path,
    members: &mut Vec<(String, PathBuf)>,
) -> anyhow::Result<Option<String>> {
    let Some(given) = manifest["meta_rules"]["file"].as_str() else { return Ok(None) };
    let source = root.join(given);
    let member = format!("rules/{}", file_name(Path::new(given))?);
    members.push((member.clone(), source));
    Ok(Some(member))
}
