//! The archive of a `learn` run (`mragent export --learn NAME`): its folder
//! `data/<dataset>/meta/<name>/` (manifest, plan, recorded calls, step records, the passes'
//! answers and traces, rules and report), its test answers and their traces, the dataset file,
//! and the memory caches of the conversations its folds drew from. `verify` replays the
//! learning from the recorded calls and compares every file it writes.

use std::path::{Path, PathBuf};

use anyhow::Context as _;

use super::LearnFiles;
use super::archive::{
    ARCHIVE_FORMAT, ArchiveIndex, files_under, listed, memory_caches, read_json, relative,
};
use crate::settings::ExportJob;

/// The index of the learn run's archive and each member's source file.
pub fn collect(job: &ExportJob) -> anyhow::Result<(ArchiveIndex, Vec<PathBuf>)> {
    let root = &job.paths.root;
    let dataset = job.dataset.as_str();
    let files = LearnFiles::named(root, dataset, &job.file);
    let manifest = complete_manifest(&files, &job.file)?;
    // One file holds every call once the write-ahead log is folded in.
    crate::llm::tape::CallStore::open(&files.calls())?.checkpoint()?;
    let mut paths: Vec<PathBuf> =
        files_under(files.dir())?.into_iter().filter(|path| !is_store_sidecar(path)).collect();
    let samples = plan_samples(&files)?;
    let model = manifest["settings"]["model_alias"].as_str().unwrap_or_default().to_string();
    if manifest["settings"]["test"] == true {
        for base in [false, true] {
            let tag = crate::learn::test_tag(&job.file, base);
            for sample in &samples {
                let result = crate::results::result_path(root, dataset, sample, &model, &tag);
                paths.extend(result.is_file().then_some(result));
            }
            paths.extend(files_under(&root.join("log").join(dataset).join(&tag))?);
        }
    }
    paths.extend(memory_caches(&root.join("data").join(dataset), &samples)?);
    let mut members: Vec<(String, PathBuf)> = paths
        .into_iter()
        .map(|path| Ok((relative(root, &path)?, path)))
        .collect::<anyhow::Result<_>>()?;
    let dataset_file = PathBuf::from(manifest["dataset_file"].as_str().unwrap_or_default());
    let dataset_member = format!("data/{}", super::archive::file_name(&dataset_file)?);
    members.push((dataset_member.clone(), root.join(&dataset_file)));
    let (files, sources) = listed(members)?;
    let index = ArchiveIndex {
        format: ARCHIVE_FORMAT.to_string(),
        dataset: dataset.to_string(),
        model,
        file: job.file.clone(),
        dataset_file: dataset_member,
        meta_rules: None,
        manifest,
        eval: None,
        build: Some(crate::provenance::Build::of_this_binary()),
        learn: Some(job.file.clone()),
        compared: None,
        files,
    };
    Ok((index, sources))
}

/// The learn run's manifest, refused unless its last invocation finished.
fn complete_manifest(files: &LearnFiles, name: &str) -> anyhow::Result<serde_json::Value> {
    let path = files.manifest();
    let manifest = read_json(&path).with_context(|| {
        format!(
            "learn run {name} has no manifest ({}); learn with this version first (a rerun is answered from its recorded calls)",
            path.display()
        )
    })?;
    if manifest["status"] != "complete" {
        anyhow::bail!(
            "learn run {name} is {} (see {}): export a finished learning run",
            manifest["status"],
            path.display()
        );
    }
    Ok(manifest)
}

/// Every conversation the folds of the run drew from, from its `plan.json`.
pub fn plan_samples(files: &LearnFiles) -> anyhow::Result<Vec<String>> {
    let plan = read_json(&files.plan())?;
    let mut samples: Vec<String> = plan["plan"]["folds"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|fold| {
            ["test_samples", "validation_samples", "train_samples"]
                .into_iter()
                .flat_map(move |part| fold[part].as_array().into_iter().flatten())
        })
        .filter_map(|sample| sample.as_str().map(str::to_string))
        .collect();
    samples.sort();
    samples.dedup();
    Ok(samples)
}

/// A SQLite write-ahead log or shared-memory file beside a call store: folded in, never
/// archived.
pub fn is_store_sidecar(path: &Path) -> bool {
    let name = path.file_name().map(|name| name.to_string_lossy()).unwrap_or_default();
    name.ends_with("-wal") || name.ends_with("-shm")
}
