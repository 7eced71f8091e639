//! The archive itself: unpacking it, every member against `archive.json`, and `archive.json`
//! against the hashed manifest member ([`ArchiveClaims`]).

use std::io::Read as _;
use std::path::{Component, Path, PathBuf};

use anyhow::Context as _;

use super::ArchiveClaims;
use crate::commands::export::{ARCHIVE_FORMAT, ArchiveIndex, INDEX};

/// The hashed manifest member, and `archive.json` checked against it and the other members.
pub(super) fn check_index(
    index: ArchiveIndex,
    root: &Path,
) -> anyhow::Result<Result<ArchiveClaims, String>> {
    let manifest_member =
        format!("result/{}/{}_{}.manifest.json", index.dataset, index.model, index.file);
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
    if manifest["dataset_sha256"] != crate::commands::manifest::sha256_hex(&dataset).as_str() {
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
        Ok(text) => match serde_json::from_str::<crate::commands::eval::EvalRecord>(&text) {
            Ok(record) => Some(record),
            Err(_) => return Ok(Err(format!("{record_member} is not an eval record"))),
        },
        Err(_) => None,
    };
    // The index names the archived audit file where the record names the project's.
    let audit_member = |record: &crate::commands::eval::EvalRecord| {
        record.audit_file.as_ref().map(|audit| {
            let name =
                Path::new(audit).file_name().unwrap_or_default().to_string_lossy().into_owned();
            format!("data/audit/{name}")
        })
    };
    let eval = eval.map(|mut record| {
        record.audit_file = audit_member(&record);
        record
    });
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

/// Unpacks the archive under `root` (plain files at safe relative paths only) and reads its index.
pub(super) fn unpack(archive: &Path, root: &Path) -> anyhow::Result<ArchiveIndex> {
    let file =
        std::fs::File::open(archive).with_context(|| format!("opening {}", archive.display()))?;
    let decoder = zstd::Decoder::new(file).context("the archive is not zstd-compressed")?;
    let mut tar = tar::Archive::new(decoder);
    let mut index = None;
    for entry in tar.entries().context("the archive is not a tar stream")? {
        let mut entry = entry.context("the archive is damaged")?;
        let path = entry.path().context("an archive member has no readable path")?.into_owned();
        if !entry.header().entry_type().is_file() || !is_safe(&path) {
            anyhow::bail!(
                "archive member {} is not a plain file at a relative path",
                path.display()
            );
        }
        let mut bytes = Vec::new();
        entry
            .read_to_end(&mut bytes)
            .with_context(|| format!("archive member {} is damaged", path.display()))?;
        if path == Path::new(INDEX) {
            index = Some(
                serde_json::from_slice::<ArchiveIndex>(&bytes)
                    .context("archive.json is not an archive index")?,
            );
            continue;
        }
        let target = root.join(&path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&target, bytes).with_context(|| format!("writing {}", target.display()))?;
    }
    let index = index.context("the archive has no archive.json")?;
    if index.format != ARCHIVE_FORMAT {
        anyhow::bail!("archive format {:?} is not {ARCHIVE_FORMAT}", index.format);
    }
    Ok(index)
}

/// Whether `path` is relative and goes through no `..`, root or prefix.
fn is_safe(path: &Path) -> bool {
    path.components().all(|part| matches!(part, Component::Normal(_)))
}

/// Every member against its hash and size, and no file that the index does not list.
pub(super) fn check_members(index: &ArchiveIndex, root: &Path) -> anyhow::Result<Option<String>> {
    for member in &index.files {
        let path = root.join(&member.path);
        let Ok(bytes) = std::fs::read(&path) else {
            return Ok(Some(format!("{} is listed in archive.json but missing", member.path)));
        };
        if bytes.len() as u64 != member.bytes
            || crate::commands::manifest::sha256_hex(&bytes) != member.sha256
        {
            return Ok(Some(format!(
                "{}: its SHA-256 differs from archive.json (altered or damaged)",
                member.path
            )));
        }
    }
    let listed: std::collections::BTreeSet<PathBuf> =
        index.files.iter().map(|member| root.join(&member.path)).collect();
    if let Some(extra) =
        crate::commands::export::files_under(root)?.into_iter().find(|path| !listed.contains(path))
    {
        return Ok(Some(format!("{} is in the archive but not in archive.json", extra.display())));
    }
    Ok(None)
}
