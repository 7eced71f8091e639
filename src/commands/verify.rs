//! `mragent verify ARCHIVE`: checks an archive of `mragent export` offline, in order, and stops
//! at the first mismatch, naming the file, the line and the question:
//!
//! 1. every member against the SHA-256 and size in `archive.json`, and nothing unlisted;
//! 2. a trace for every result line (when the run wrote traces);
//! 3. the answers replayed from the recorded calls, every result line against the archived
//!    one (latency aside);
//! 4. the eval folder recomputed (official F1 and exact match from the results and the
//!    dataset, the judge tables from the recorded judge calls) against the archived one.
//!
//! Nothing is sent anywhere: the judge and the run are played back from their tapes, and a
//! request that is not on them is a mismatch.

use std::io::Read as _;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use clap::Parser as _;

use super::Outcome;
use super::export::{ARCHIVE_FORMAT, ArchiveIndex, INDEX};
use super::output::outln;
use crate::llm::tape::{CallStore, Offline, Tape, TapeMode, TapedChat};
use crate::settings::VerifyJob;

/// Checks the archive; prints VERIFIED, or the first mismatch and fails.
pub async fn execute(job: &VerifyJob) -> anyhow::Result<Outcome> {
    let temporary;
    let folder = match &job.keep {
        Some(folder) => {
            std::fs::create_dir_all(folder)
                .with_context(|| format!("creating {}", folder.display()))?;
            if std::fs::read_dir(folder)?.next().is_some() {
                anyhow::bail!("--keep {}: the folder is not empty", folder.display());
            }
            folder.clone()
        }
        None => {
            temporary = tempfile::tempdir().context("creating a temporary folder")?;
            temporary.path().to_path_buf()
        }
    };
    match verify(&job.archive, &folder).await? {
        Ok(report) => {
            outln!("VERIFIED {}: {report}", job.archive.display())?;
            Ok(Outcome::Success)
        }
        Err(mismatch) => {
            outln!("MISMATCH {}: {mismatch}", job.archive.display())?;
            anyhow::bail!("{} is not verified", job.archive.display())
        }
    }
}

/// The checks in order: `Ok(Err(first mismatch))` when one fails, `Ok(Ok(report))` when all pass.
async fn verify(archive: &Path, root: &Path) -> anyhow::Result<Result<String, String>> {
    let index = match unpack(archive, root) {
        Ok(index) => index,
        Err(error) => return Ok(Err(format!("{error:#}"))),
    };
    if let Some(mismatch) = check_members(&index, root)? {
        return Ok(Err(mismatch));
    }
    let lines = match check_traces(&index, root)? {
        Ok(lines) => lines,
        Err(mismatch) => return Ok(Err(mismatch)),
    };
    if let Err(mismatch) = replay(&index, root).await? {
        return Ok(Err(mismatch));
    }
    let judged = match check_eval(&index, root).await? {
        Ok(judged) => judged,
        Err(mismatch) => return Ok(Err(mismatch)),
    };
    Ok(Ok(format!(
        "{} files match their SHA-256; {judged}; {lines} result lines replayed from the recorded calls are identical (latency aside)",
        index.files.len()
    )))
}

/// Unpacks the archive under `root` (plain files at safe relative paths only) and reads its index.
fn unpack(archive: &Path, root: &Path) -> anyhow::Result<ArchiveIndex> {
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

fn is_safe(path: &Path) -> bool {
    path.components().all(|part| matches!(part, Component::Normal(_)))
}

/// Every member against its hash and size, and no file that the index does not list.
fn check_members(index: &ArchiveIndex, root: &Path) -> anyhow::Result<Option<String>> {
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
    if let Some(extra) =
        super::export::files_under(root)?.into_iter().find(|path| !listed.contains(path))
    {
        return Ok(Some(format!("{} is in the archive but not in archive.json", extra.display())));
    }
    Ok(None)
}

/// The result lines of the run, as `(sample, question id, file, line number)`.
fn result_lines(
    index: &ArchiveIndex,
    root: &Path,
) -> anyhow::Result<Vec<(String, String, String, usize)>> {
    let mut lines = Vec::new();
    for sample in samples(index) {
        let path =
            crate::results::result_path(root, &index.dataset, &sample, &index.model, &index.file);
        let Ok(text) = std::fs::read_to_string(&path) else { continue };
        let name = relative(root, &path);
        for (number, line) in text.lines().enumerate().filter(|(_, line)| !line.trim().is_empty()) {
            let value: serde_json::Value = serde_json::from_str(line)
                .with_context(|| format!("{name} line {} is not JSON", number + 1))?;
            let id = value["question_id"].as_str().unwrap_or_default().to_string();
            lines.push((sample.clone(), id, name.clone(), number + 1));
        }
    }
    Ok(lines)
}

fn samples(index: &ArchiveIndex) -> Vec<String> {
    index.manifest["settings"]["samples"]
        .as_array()
        .map(|samples| samples.iter().filter_map(|s| s.as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

fn relative(root: &Path, path: &Path) -> String {
    path.strip_prefix(root).unwrap_or(path).display().to_string()
}

/// A trace for every result line, when the run wrote traces; the number of result lines.
fn check_traces(index: &ArchiveIndex, root: &Path) -> anyhow::Result<Result<usize, String>> {
    let lines = result_lines(index, root)?;
    if index.manifest["settings"]["traces"] != true {
        return Ok(Ok(lines.len()));
    }
    for (sample, id, file, number) in &lines {
        let trace = crate::agent::trace::trace_path(root, &index.dataset, &index.file, sample, id);
        if !trace.is_file() {
            return Ok(Err(format!(
                "{file} line {number} (question {id}): its trace {} is missing",
                relative(root, &trace)
            )));
        }
    }
    Ok(Ok(lines.len()))
}

/// The eval folder recomputed from the results, the dataset and the recorded judge calls,
/// against the archived one.
async fn check_eval(index: &ArchiveIndex, root: &Path) -> anyhow::Result<Result<String, String>> {
    let folder = root.join("eval").join(&index.dataset).join(&index.file);
    if !folder.is_dir() {
        return Ok(Ok("no eval tables in the archive".to_string()));
    }
    let kept = root.join(".archived-eval");
    std::fs::rename(&folder, &kept).context("setting the archived eval folder aside")?;
    let dataset = crate::dataset::DatasetKind::from_name(&index.dataset)?;
    let mut settings = crate::eval::EvalSettings::new(root, dataset, &index.model, &index.file);
    settings.data_file = root.join(&index.dataset_file);
    let summary = match &index.eval {
        Some(record) => {
            record.apply(&mut settings);
            let path =
                super::tape::judge_calls_path(root, &index.dataset, &index.model, &index.file);
            let store = Arc::new(CallStore::open_read_only(&path)?);
            let tape = Tape::new(store, TapeMode::Replay { fill: false });
            let judge = TapedChat::new(Offline, tape);
            super::eval::judged(&settings, &record.protocols, Some(&judge), KEY).await
        }
        None => {
            let protocols = [settings.protocol];
            super::eval::judged::<Offline>(&settings, &protocols, None, KEY).await
        }
    };
    if let Err(error) = summary {
        return Ok(Err(format!("recomputing the eval tables: {error:#}")));
    }
    if let Some(mismatch) = compare_file(&kept.join(SCORES), &folder.join(SCORES), root, &folder)? {
        return Ok(Err(mismatch));
    }
    if let Some(mismatch) = compare_summary(&kept.join(SUMMARY), &folder.join(SUMMARY))? {
        let name = relative(root, &folder.join(SUMMARY));
        return Ok(Err(format!("{name}: {mismatch}")));
    }
    Ok(Ok(match &index.eval {
        Some(record) => format!(
            "F1, exact match and the judge tables ({}, {} run(s)) recomputed from the recorded judge calls are identical",
            record.judge_model, record.judge_runs
        ),
        None => "F1 and exact match recomputed are identical (the run was not judged)".to_string(),
    }))
}

/// The first line where `archived` and `recomputed` differ, naming the file, line and question.
fn compare_file(
    archived: &Path,
    recomputed: &Path,
    root: &Path,
    folder: &Path,
) -> anyhow::Result<Option<String>> {
    let name = relative(root, &folder.join(archived.file_name().unwrap_or_default()));
    let (Ok(want), Ok(have)) =
        (std::fs::read_to_string(archived), std::fs::read_to_string(recomputed))
    else {
        return Ok((archived.is_file() != recomputed.is_file())
            .then(|| format!("{name}: present on one side only")));
    };
    let (want, have): (Vec<&str>, Vec<&str>) = (want.lines().collect(), have.lines().collect());
    for number in 0..want.len().max(have.len()) {
        let (a, b) = (want.get(number).copied(), have.get(number).copied());
        if a != b {
            let question = a
                .and_then(|line| serde_json::from_str::<serde_json::Value>(line).ok())
                .and_then(|value| value["question_id"].as_str().map(str::to_string))
                .map_or_else(String::new, |id| format!(" (question {id})"));
            return Ok(Some(format!(
                "{name} line {}{question}: the archived line differs from the one recomputed: {:?} ≠ {:?}",
                number + 1,
                excerpt(a.unwrap_or("(none)")),
                excerpt(b.unwrap_or("(none)"))
            )));
        }
    }
    Ok(None)
}

const SCORES: &str = "scores.jsonl";
/// The key variable named in messages (nothing is sent, so no key is read).
const KEY: &str = "OPENAI_API_KEY";
const SUMMARY: &str = "summary.json";

/// Fields of `summary.json` that describe the evaluation that wrote it rather than its scores:
/// paths on the host, and what that invocation judged anew or took from its cache.
const INVOCATION_FIELDS: &[&str] = &[
    "data_file",
    "result_files",
    "audit_file",
    "judge_cached",
    "judge_new",
    "judge_usage",
    "judge_cost_usd",
];

/// The first field in which the archived summary and the recomputed one differ, the fields of
/// [`INVOCATION_FIELDS`] aside.
fn compare_summary(archived: &Path, recomputed: &Path) -> anyhow::Result<Option<String>> {
    let read = |path: &Path| -> anyhow::Result<serde_json::Map<String, serde_json::Value>> {
        let mut value = super::export::read_json(path)?;
        let object = value.as_object_mut().context("a summary is a JSON object")?;
        for field in INVOCATION_FIELDS {
            object.remove(*field);
        }
        Ok(std::mem::take(object))
    };
    let (want, have) = (read(archived)?, read(recomputed)?);
    let mut names: Vec<&String> = want.keys().chain(have.keys()).collect();
    names.sort();
    names.dedup();
    Ok(names.into_iter().find(|name| want.get(*name) != have.get(*name)).map(|name| {
        format!("field {name} differs from the one recomputed from the recorded judge calls")
    }))
}

fn excerpt(text: &str) -> String {
    text.chars().take(200).collect()
}

/// The answers replayed from the recorded calls into a `-verify` tag, compared line by line.
async fn replay(index: &ArchiveIndex, root: &Path) -> anyhow::Result<Result<(), String>> {
    let mut args: Vec<String> = vec!["mragent".into(), "-q".into(), "replay".into()];
    let mut given: Vec<String> = index.manifest["replay_args"]
        .as_array()
        .map(|args| args.iter().filter_map(|a| a.as_str().map(str::to_string)).collect())
        .unwrap_or_default();
    if given.is_empty() {
        anyhow::bail!(
            "the archived manifest has no replay_args: it was written by an older mragent"
        );
    }
    if let (Some(position), Some(rules)) =
        (given.iter().position(|arg| arg == "--meta-rules"), &index.meta_rules)
        && let Some(value) = given.get_mut(position + 1)
    {
        value.clone_from(rules);
    }
    args.append(&mut given);
    let to = format!("{}-verify", index.file);
    args.extend(["--data-file".into(), index.dataset_file.clone(), "--to".into(), to]);
    let cli = crate::cli::Cli::try_parse_from(&args)
        .map_err(|error| anyhow::anyhow!("the archived replay_args do not parse: {error}"))?;
    let paths = crate::settings::ProjectPaths { root: root.to_path_buf(), store: None };
    let job =
        match crate::settings::resolve(cli.command, &paths, true, &crate::settings::ProcessEnv)? {
            crate::settings::Job::Run(job) => job,
            _ => anyhow::bail!("the archived replay_args do not make a replay"),
        };
    Ok(super::run::replay_silently(&job).await?.map(|_| ()))
}
