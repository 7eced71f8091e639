//! `archive.json` against the hashed manifest member ([`ArchiveClaims`]); unpacking and the
//! members' hashes are the archive's own (`recorded::archive`).

use std::path::Path;

use super::ArchiveClaims;
use crate::recorded::archive::{ArchiveIndex, INDEX};

/// The hashed manifest member, and `archive.json` checked against it and the other members.
pub(super) fn check_index(
    index: ArchiveIndex,
    root: &Path,
) -> anyhow::Result<Result<ArchiveClaims, String>> {
    let run = crate::recorded::RunFiles::in_archive(&index.dataset, &index.model, &index.file);
    let manifest_member = run.manifest().display().to_string();
    let Ok(text) = std::fs::read_to_string(root.join(&manifest_member)) else {
        return Ok(Err(format!("{manifest_member}: the run's manifest is not in the archive")));
    };
    let Ok(manifest) = serde_json::from_str::<serde_json::Value>(&text) else {
        return Ok(Err(format!("{manifest_member} is not JSON")));
    };
    if index.manifest != manifest {
        return Ok(Err(format!(
            "{INDEX}: its copy of the manifest differs from {manifest_member}"
        )));
    }
    if manifest["dataset"] != index.dataset.as_str() {
        return Ok(Err(format!("{INDEX}: its dataset differs from {manifest_member}")));
    }
    let given = manifest["replay_args"].as_array().cloned().unwrap_or_default();
    let tag = given.iter().position(|arg| arg == "--file").and_then(|at| given.get(at + 1));
    if tag.and_then(|tag| tag.as_str()) != Some(index.file.as_str()) {
        return Ok(Err(format!("{INDEX}: its run tag differs from {manifest_member}")));
    }
    let dataset_name = Path::new(manifest["dataset_file"].as_str().unwrap_or_default())
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    if index.dataset_file != format!("data/{dataset_name}") {
        return Ok(Err(format!("{INDEX}: its dataset file differs from {manifest_member}")));
    }
    let dataset = std::fs::read(root.join(&index.dataset_file)).unwrap_or_default();
    if manifest["dataset_sha256"] != crate::recorded::manifest::sha256_hex(&dataset).as_str() {
        return Ok(Err(format!(
            "{}: its SHA-256 differs from the dataset_sha256 of {manifest_member}",
            index.dataset_file
        )));
    }
    let rules = manifest["meta_rules"]["file"].as_str().map(|given| {
        let name = Path::new(given).file_name().unwrap_or_default().to_string_lossy().into_owned();
        format!("rules/{name}")
    });
    if rules != index.meta_rules {
        return Ok(Err(format!("{INDEX}: its meta-rules file differs from {manifest_member}")));
    }
    let record_member =
        format!("record/{}/{}_{}.eval.json", index.dataset, index.model, index.file);
    let eval = match std::fs::read_to_string(root.join(&record_member)) {
        Ok(text) => match serde_json::from_str::<crate::recorded::eval_record::EvalRecord>(&text) {
            Ok(record) => Some(record),
            Err(_) => return Ok(Err(format!("{record_member} is not an eval record"))),
        },
        Err(_) => None,
    };
    // The index names the archived audit file where the record names the project's.
    let eval = eval.map(crate::recorded::eval_record::EvalRecord::archived);
    if eval != index.eval {
        return Ok(Err(format!("{INDEX}: its judge settings differ from {record_member}")));
    }
    let judge_calls =
        format!("record/{}/{}_{}.judge.sqlite", index.dataset, index.model, index.file);
    if eval.is_none() && root.join(&judge_calls).is_file() {
        return Ok(Err(format!("{judge_calls} is archived without {record_member}")));
    }
    Ok(Ok(ArchiveClaims { index, manifest, manifest_member, eval }))
}
