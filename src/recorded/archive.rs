//! The archive format (`.tar.zst`): what `mragent export` writes and `mragent verify` checks
//! offline, and its index.
//!
//! It holds `archive.json` (the run, its manifest, the judge settings of its evaluation, run B
//! and the comparison in a comparison's archive, and the SHA-256 and size of every other
//! member), then the members under the paths they have in a project. What goes in is chosen
//! by [`super::run_archive`] (a run, or two runs and their comparison) and
//! [`super::learn_archive`] (a learning); this module writes, unpacks and checks the members.

use std::io::Read as _;
use std::path::{Component, Path, PathBuf};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

use super::eval_record::{CompareRecord, EvalRecord};

/// The archive format.
pub const ARCHIVE_FORMAT: &str = "mragent-archive-1";
/// The format of a comparison's archive (`export --vs`): a verifier that knows only
/// [`ARCHIVE_FORMAT`] refuses it rather than check run A alone.
pub const COMPARISON_FORMAT: &str = "mragent-archive-2";
/// The index member.
pub const INDEX: &str = "archive.json";

/// `archive.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ArchiveIndex {
    /// [`ARCHIVE_FORMAT`].
    pub format: String,
    /// Dataset kind (`locomo`, `LM`).
    pub dataset: String,
    /// Build model alias (names the result files).
    pub model: String,
    /// Run tag.
    pub file: String,
    /// The dataset file inside the archive.
    pub dataset_file: String,
    /// The meta-rules file inside the archive, when the run had one.
    pub meta_rules: Option<String>,
    /// The run's manifest as it was written.
    pub manifest: serde_json::Value,
    /// How the run was last evaluated with a judge (`record/…/<model>_<tag>.eval.json`), when
    /// it was: what `verify` recomputes the tables with.
    pub eval: Option<EvalRecord>,
    /// The build of the mragent that wrote the archive.
    #[serde(default)]
    pub build: Option<crate::provenance::Build>,
    /// A `learn` run's archive: its name (`file` too), its folder's manifest in `manifest`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub learn: Option<String>,
    /// A comparison's archive (`export --vs B`): run B, and how the runs were compared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compared: Option<ComparedRun>,
    /// Every other member, in path order.
    pub files: Vec<Member>,
}

/// Run B of a comparison's archive, and the comparison (run A is the archive's run).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComparedRun {
    /// Run B's tag (same dataset and model as run A).
    pub file: String,
    /// Run B's manifest as it was written.
    pub manifest: serde_json::Value,
    /// How run B was last evaluated with a judge, when it was.
    pub eval: Option<EvalRecord>,
    /// Run B's meta-rules file inside the archive, when it had one.
    pub meta_rules: Option<String>,
    /// How the runs were compared (`record/…/<model>_<A>_vs_<B>.compare.json`), its audit
    /// file named by its member.
    pub comparison: CompareRecord,
}

/// One archived file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    /// Path inside the archive (`/`-separated, relative).
    pub path: String,
    /// Lower-case hex SHA-256.
    pub sha256: String,
    /// Size in bytes.
    pub bytes: u64,
}

/// The members `(path inside the archive, source)` in path order, each once, hashed; and their
/// sources in the same order. Two sources under one path are refused.
pub(super) fn listed(
    mut members: Vec<(String, PathBuf)>,
) -> anyhow::Result<(Vec<Member>, Vec<PathBuf>)> {
    members.sort();
    members.dedup();
    if let Some(pair) = members.windows(2).find(|pair| pair[0].0 == pair[1].0) {
        anyhow::bail!(
            "{} and {} would both be archived as {}: rename one",
            pair[0].1.display(),
            pair[1].1.display(),
            pair[0].0
        );
    }
    let files = members
        .iter()
        .map(|(path, source)| member(path, source))
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok((files, members.into_iter().map(|(_, source)| source).collect()))
}

/// Files of the memory of `samples` under `data/<dataset>/`: every file whose name starts with
/// a sample id followed by `_` or `.`, outside learning folders (`meta/`).
pub(super) fn memory_caches(directory: &Path, samples: &[String]) -> anyhow::Result<Vec<PathBuf>> {
    Ok(files_under(directory)?
        .into_iter()
        .filter(|path| is_memory_cache(path.strip_prefix(directory).unwrap_or(path), samples))
        .collect())
}

/// Whether `path` (under the memory folder `data/<dataset>/`) is a file of the memory of
/// `samples`: outside learning folders (`meta/`), named by a sample id followed by `_` or `.`.
pub(super) fn is_memory_cache(path: &Path, samples: &[String]) -> bool {
    if path.components().any(|part| part.as_os_str() == "meta") {
        return false;
    }
    let name = path.file_name().map(|name| name.to_string_lossy()).unwrap_or_default();
    samples.iter().any(|sample| {
        name.strip_prefix(crate::fsutil::safe_name(sample, '_').as_str())
            .is_some_and(|rest| rest.starts_with('_') || rest.starts_with('.'))
    })
}

/// Every file under `directory` (none when it is missing), in path order.
pub fn files_under(directory: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut pending = vec![directory.to_path_buf()];
    while let Some(folder) = pending.pop() {
        let entries = match std::fs::read_dir(&folder) {
            Ok(entries) => entries,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
            Err(error) => {
                return Err(error).with_context(|| format!("listing {}", folder.display()));
            }
        };
        for entry in entries {
            let entry = entry.with_context(|| format!("listing {}", folder.display()))?;
            let kind =
                entry.file_type().with_context(|| format!("reading {}", folder.display()))?;
            if kind.is_dir() {
                pending.push(entry.path());
            } else if kind.is_file() {
                files.push(entry.path());
            }
        }
    }
    files.sort();
    Ok(files)
}

pub(super) fn relative(root: &Path, path: &Path) -> anyhow::Result<String> {
    let inside = path
        .strip_prefix(root)
        .with_context(|| format!("{} is outside the project {}", path.display(), root.display()))?;
    let parts: Vec<String> =
        inside.components().map(|part| part.as_os_str().to_string_lossy().into_owned()).collect();
    Ok(parts.join("/"))
}

pub(super) fn file_name(path: &Path) -> anyhow::Result<String> {
    path.file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .with_context(|| format!("{} names no file", path.display()))
}

fn member(path: &str, source: &Path) -> anyhow::Result<Member> {
    let bytes = std::fs::read(source).with_context(|| format!("reading {}", source.display()))?;
    Ok(Member {
        path: path.to_string(),
        sha256: super::manifest::sha256_hex(&bytes),
        bytes: bytes.len() as u64,
    })
}

pub fn read_json(path: &Path) -> anyhow::Result<serde_json::Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))
}

/// Writes `archive.json` then every member into a zstd-compressed tar, through a temporary
/// file renamed into place.
pub fn write_archive(
    output: &Path,
    index: &ArchiveIndex,
    sources: &[PathBuf],
) -> anyhow::Result<()> {
    let json = serde_json::to_vec_pretty(index).context("serialising the archive index")?;
    crate::fsutil::write_atomic_with(output, |file| {
        let encoder = zstd::Encoder::new(file, 9).context("starting the compression")?;
        let mut builder = tar::Builder::new(encoder);
        append(&mut builder, INDEX, &json)?;
        for (member, source) in index.files.iter().zip(sources) {
            let bytes =
                std::fs::read(source).with_context(|| format!("reading {}", source.display()))?;
            append(&mut builder, &member.path, &bytes)?;
        }
        let encoder = builder.into_inner().context("finishing the archive")?;
        encoder.finish().context("finishing the compression")?;
        Ok(())
    })
}

fn append<W: std::io::Write>(
    builder: &mut tar::Builder<W>,
    path: &str,
    bytes: &[u8],
) -> anyhow::Result<()> {
    let mut header = tar::Header::new_gnu();
    header.set_size(bytes.len() as u64);
    header.set_mode(0o644);
    header.set_mtime(0);
    header.set_cksum();
    builder.append_data(&mut header, path, bytes).with_context(|| format!("archiving {path}"))
}

/// Unpacks the archive under `root` (plain files at safe relative paths only) and reads its index.
pub fn unpack(archive: &Path, root: &Path) -> anyhow::Result<ArchiveIndex> {
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
    if index.format != ARCHIVE_FORMAT && index.format != COMPARISON_FORMAT {
        anyhow::bail!(
            "archive format {:?} is neither {ARCHIVE_FORMAT} nor {COMPARISON_FORMAT}",
            index.format
        );
    }
    Ok(index)
}

/// Whether `path` is relative and goes through no `..`, root or prefix.
fn is_safe(path: &Path) -> bool {
    path.components().all(|part| matches!(part, Component::Normal(_)))
}

/// A path `archive.json` lists that is not a plain relative path inside the archive (`..`, a
/// root, a backslash), names `archive.json` itself or is listed twice; or a dataset or run name
/// that is not a checked name. Listed paths are joined to the unpack folder, so each must stay
/// inside it.
fn unsafe_listing(index: &ArchiveIndex) -> Option<String> {
    let mut seen = std::collections::BTreeSet::new();
    for member in &index.files {
        let path = member.path.as_str();
        if !is_safe(Path::new(path)) || path.contains('\\') || path.is_empty() || path == INDEX {
            return Some(format!("{INDEX}: it lists {path:?}, not a path inside the archive"));
        }
        if !seen.insert(path) {
            return Some(format!("{INDEX}: it lists {path} twice"));
        }
    }
    let names = [
        (crate::names::NameKind::Tag, index.dataset.as_str()),
        (crate::names::NameKind::Tag, index.model.as_str()),
        (crate::names::NameKind::Tag, index.file.as_str()),
        (
            crate::names::NameKind::Tag,
            index.compared.as_ref().map_or("b", |compared| compared.file.as_str()),
        ),
    ];
    names.iter().find_map(|(kind, name)| {
        crate::names::check_name(*kind, name)
            .err()
            .map(|error| format!("{INDEX}: its run is not named by checked names: {error}"))
    })
}

/// Every member against its hash and size, and no file that the index does not list.
pub fn check_members(index: &ArchiveIndex, root: &Path) -> anyhow::Result<Option<String>> {
    if let Some(problem) = unsafe_listing(index) {
        return Ok(Some(problem));
    }
    for member in &index.files {
        let path = root.join(&member.path);
        let Ok(bytes) = std::fs::read(&path) else {
            return Ok(Some(format!("{} is listed in archive.json but missing", member.path)));
        };
        if bytes.len() as u64 != member.bytes
            || super::manifest::sha256_hex(&bytes) != member.sha256
        {
            return Ok(Some(format!(
                "{}: its SHA-256 differs from archive.json (altered or damaged)",
                member.path
            )));
        }
    }
    let listed: std::collections::BTreeSet<PathBuf> =
        index.files.iter().map(|member| root.join(&member.path)).collect();
    if let Some(extra) = files_under(root)?.into_iter().find(|path| !listed.contains(path)) {
        return Ok(Some(format!("{} is in the archive but not in archive.json", extra.display())));
    }
    Ok(None)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn index(paths: &[&str]) -> ArchiveIndex {
        ArchiveIndex {
            format: ARCHIVE_FORMAT.into(),
            dataset: "locomo".into(),
            model: "m".into(),
            file: "t".into(),
            dataset_file: "data/d.json".into(),
            meta_rules: None,
            manifest: serde_json::Value::Null,
            eval: None,
            build: None,
            learn: None,
            compared: None,
            files: paths
                .iter()
                .map(|path| Member { path: path.to_string(), sha256: String::new(), bytes: 0 })
                .collect(),
        }
    }

    #[test]
    fn two_files_under_one_member_path_are_refused_and_one_file_twice_is_kept_once() {
        let directory = tempfile::tempdir().unwrap();
        let (a, b) = (directory.path().join("a/rules.md"), directory.path().join("b/rules.md"));
        for (path, text) in [(&a, "rule one\n"), (&b, "rule two\n")] {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        let once = vec![("rules/rules.md".to_string(), a.clone()); 2];
        let (files, sources) = listed(once).unwrap();
        assert_eq!((files.len(), sources), (1, vec![a.clone()]));
        let error = listed(vec![("rules/rules.md".into(), b), ("rules/rules.md".into(), a)])
            .unwrap_err()
            .to_string();
        assert!(error.contains("would both be archived as rules/rules.md"), "{error}");
    }

    #[test]
    fn a_listed_path_outside_the_archive_or_listed_twice_is_refused_before_any_read() {
        let directory = tempfile::tempdir().unwrap();
        for (paths, said) in [
            (vec!["data/../../etc/hostname"], "not a path inside the archive"),
            (vec!["/proc/sys/kernel/ostype"], "not a path inside the archive"),
            (vec!["data\\..\\x"], "not a path inside the archive"),
            (vec!["archive.json"], "not a path inside the archive"),
            (vec!["data/a.json", "data/a.json"], "twice"),
        ] {
            let problem = check_members(&index(&paths), directory.path()).unwrap().unwrap();
            assert!(problem.contains(said), "{paths:?}: {problem}");
        }
        let mut forged = index(&["data/a.json"]);
        forged.file = "../t".into();
        let problem = check_members(&forged, directory.path()).unwrap().unwrap();
        assert!(problem.contains("checked names"), "{problem}");
    }
}
