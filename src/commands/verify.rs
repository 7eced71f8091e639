//! `mragent verify ARCHIVE`: checks an archive of `mragent export` offline, in order, and stops
//! at the first mismatch, naming the file (its path inside the archive), the line and the
//! question:
//!
//! 1. every member against the SHA-256 and size in `archive.json`, and nothing unlisted;
//! 2. `archive.json` against the hashed manifest member, which drives every later check
//!    (samples, traces, replay arguments), and against the archived judge settings;
//! 3. a trace for every result line (when the run wrote traces);
//! 4. the answers replayed from the recorded calls, every result line against the archived
//!    one (latency aside), with every setting from the manifest and none from the verifier's
//!    environment; a trace for every question the replay traced;
//! 5. the eval folder recomputed (official F1 and exact match from the results and the
//!    dataset, the judge tables and matrix from the recorded judge calls) against the
//!    archived one.
//!
//! What it cannot recompute it lists as "carried, not verified". Nothing is sent anywhere: the
//! judge and the run are played back from their tapes, and a request that is not on them is a
//! mismatch.

use std::collections::BTreeSet;
use std::io::Read as _;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use clap::{CommandFactory as _, FromArgMatches as _};

use super::Outcome;
use super::export::{ARCHIVE_FORMAT, ArchiveIndex, INDEX};
use super::output::outln;
use crate::llm::tape::{CallStore, Offline, Tape, TapeMode, TapedChat};
use crate::llm::{ChatModel, ChatRequest, ChatResponse, Error as LlmError, Step};
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
    // Messages name paths inside the archive, never the folder it was unpacked into.
    let inside = |text: String| text.replace(&format!("{}/", folder.display()), "");
    match verify(&job.archive, &folder)
        .await
        .map_err(|error| anyhow::anyhow!(inside(format!("{error:#}"))))?
    {
        Ok(report) => {
            outln!("VERIFIED {}: {}", job.archive.display(), inside(report.summary()))?;
            for path in &report.carried {
                outln!("  carried, not verified: {path}")?;
            }
            Ok(Outcome::Success)
        }
        Err(mismatch) => {
            outln!("MISMATCH {}: {}", job.archive.display(), inside(mismatch))?;
            anyhow::bail!("{} is not verified", job.archive.display())
        }
    }
}

/// What a verified archive was checked for: each member is in exactly one set.
#[derive(Debug, Default)]
struct Report {
    /// Members recomputed from the recorded calls and the inputs, and identical.
    recomputed: BTreeSet<String>,
    /// Members the recomputation read (the dataset, the recorded calls, the memory, the rules,
    /// the audit, the manifest's settings): an alteration that matters shows in what is
    /// recomputed.
    inputs: BTreeSet<String>,
    /// Members verify cannot recompute, listed, never counted among what matches.
    carried: BTreeSet<String>,
    /// Result lines replayed.
    lines: usize,
    /// What the eval check did.
    judged: String,
}

impl Report {
    fn summary(&self) -> String {
        format!(
            "{} files recomputed and identical, {} inputs they were recomputed from, {} carried, not verified; {}; {} result lines replayed from the recorded calls are identical (latency aside)",
            self.recomputed.len(),
            self.inputs.len(),
            self.carried.len(),
            self.judged,
            self.lines
        )
    }
}

/// The archive's settings as its hashed members say them: the manifest member drives every
/// check, and `archive.json` is checked against it.
struct Checked {
    index: ArchiveIndex,
    manifest: serde_json::Value,
    manifest_member: String,
    eval: Option<super::eval::EvalRecord>,
}

impl Checked {
    fn samples(&self) -> Vec<String> {
        self.manifest["settings"]["samples"]
            .as_array()
            .map(|samples| samples.iter().filter_map(|s| s.as_str().map(str::to_string)).collect())
            .unwrap_or_default()
    }
}

/// The checks in order: `Ok(Err(first mismatch))` when one fails, `Ok(Ok(report))` when all pass.
async fn verify(archive: &Path, root: &Path) -> anyhow::Result<Result<Report, String>> {
    let index = match unpack(archive, root) {
        Ok(index) => index,
        Err(error) => return Ok(Err(format!("{error:#}"))),
    };
    if let Some(mismatch) = check_members(&index, root)? {
        return Ok(Err(mismatch));
    }
    let checked = match check_index(index, root)? {
        Ok(checked) => checked,
        Err(mismatch) => return Ok(Err(mismatch)),
    };
    let lines = match check_traces(&checked, root)? {
        Ok(lines) => lines,
        Err(mismatch) => return Ok(Err(mismatch)),
    };
    let mut report = Report { lines, ..Report::default() };
    if let Err(mismatch) = replay(&checked, root).await? {
        return Ok(Err(mismatch));
    }
    if let Some(mismatch) = check_replayed_traces(&checked, root)? {
        return Ok(Err(mismatch));
    }
    report.judged = match check_eval(&checked, root, &mut report).await? {
        Ok(judged) => judged,
        Err(mismatch) => return Ok(Err(mismatch)),
    };
    classify(&checked, &mut report);
    Ok(Ok(report))
}

/// Sorts every member into recomputed, inputs and carried (see [`Report`]).
fn classify(checked: &Checked, report: &mut Report) {
    let index = &checked.index;
    let samples = checked.samples();
    for member in &index.files {
        let path = member.path.as_str();
        if report.recomputed.contains(path) {
            continue;
        }
        let result_file = samples.iter().any(|sample| {
            let file = crate::results::result_path(
                Path::new(""),
                &index.dataset,
                sample,
                &index.model,
                &index.file,
            );
            file.to_string_lossy() == path
        });
        let input = result_file
            || path == index.dataset_file
            || index.meta_rules.as_deref() == Some(path)
            || checked.eval.as_ref().and_then(|eval| eval.audit_file.as_deref()) == Some(path)
            || path.ends_with(".calls.sqlite")
            || path.ends_with(".judge.sqlite")
            || path.ends_with(".eval.json")
            || (path.starts_with("data/") && !path.starts_with("data/audit/"));
        if result_file {
            // Every result line was replayed from the recorded calls and found identical.
            report.recomputed.insert(path.to_string());
        } else if input {
            report.inputs.insert(path.to_string());
        } else {
            report.carried.insert(path.to_string());
        }
    }
    // The manifest's replay arguments, settings and dataset hash were used; its counts, times
    // and host were not checked.
    report.carried.insert(checked.manifest_member.clone());
    report.inputs.remove(&checked.manifest_member);
}

/// The hashed manifest member, and `archive.json` checked against it and the other members.
fn check_index(index: ArchiveIndex, root: &Path) -> anyhow::Result<Result<Checked, String>> {
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
    if manifest["dataset_sha256"] != super::manifest::sha256_hex(&dataset).as_str() {
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
        Ok(text) => match serde_json::from_str::<super::eval::EvalRecord>(&text) {
            Ok(record) => Some(record),
            Err(_) => return Ok(Err(format!("{record_member} is not an eval record"))),
        },
        Err(_) => None,
    };
    // The index names the archived audit file where the record names the project's.
    let audit_member = |record: &super::eval::EvalRecord| {
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
    Ok(Ok(Checked { index, manifest, manifest_member, eval }))
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
    checked: &Checked,
    root: &Path,
) -> anyhow::Result<Vec<(String, String, String, usize)>> {
    let index = &checked.index;
    let mut lines = Vec::new();
    for sample in checked.samples() {
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

fn relative(root: &Path, path: &Path) -> String {
    path.strip_prefix(root).unwrap_or(path).display().to_string()
}

/// A trace for every result line, when the run wrote traces; the number of result lines.
fn check_traces(checked: &Checked, root: &Path) -> anyhow::Result<Result<usize, String>> {
    let index = &checked.index;
    let lines = result_lines(checked, root)?;
    if checked.manifest["settings"]["traces"] != true {
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

/// Every question the replay traced has its trace in the archive, whatever the manifest says
/// of traces (the replay writes them as the recorded run did).
fn check_replayed_traces(checked: &Checked, root: &Path) -> anyhow::Result<Option<String>> {
    let index = &checked.index;
    let log = root.join("log").join(&index.dataset);
    let replayed = log.join(format!("{}-verify", index.file));
    for trace in super::export::files_under(&replayed)? {
        let archived = log.join(&index.file).join(trace.strip_prefix(&replayed)?);
        if !archived.is_file() {
            let question = trace.file_stem().unwrap_or_default().to_string_lossy().into_owned();
            return Ok(Some(format!(
                "question {question}: the replay traced it, but its trace {} is missing",
                relative(root, &archived)
            )));
        }
    }
    Ok(None)
}

/// The files of an eval folder that `eval` writes and `verify` recomputes.
const RECOMPUTED: &[&str] =
    &[SCORES, SUMMARY, SUMMARY_MARKDOWN, MATRIX, MATRIX_MARKDOWN, "accuracy.svg", "tokens.svg"];

/// The eval folder recomputed from the results, the dataset and the recorded judge calls,
/// against the archived one.
async fn check_eval(
    checked: &Checked,
    root: &Path,
    report: &mut Report,
) -> anyhow::Result<Result<String, String>> {
    let index = &checked.index;
    let folder = root.join("eval").join(&index.dataset).join(&index.file);
    if !folder.is_dir() {
        return Ok(Ok("no eval tables in the archive".to_string()));
    }
    let kept = root.join(".archived-eval");
    std::fs::rename(&folder, &kept).context("setting the archived eval folder aside")?;
    let dataset = crate::dataset::DatasetKind::from_name(&index.dataset)?;
    let mut settings = crate::eval::EvalSettings::new(root, dataset, &index.model, &index.file);
    settings.data_file = root.join(&index.dataset_file);
    let summary = match &checked.eval {
        Some(record) => {
            record.apply(&mut settings);
            let path =
                super::tape::judge_calls_path(root, &index.dataset, &index.model, &index.file);
            if !path.is_file() {
                return Ok(Err(format!(
                    "{}: the recorded judge calls are not in the archive",
                    relative(root, &path)
                )));
            }
            let store = Arc::new(CallStore::open_read_only(&path)?);
            let tape = Tape::new(store, TapeMode::Replay { fill: false });
            let judge = Unrecorded::new(TapedChat::new(Offline, tape));
            let judged = super::eval::judged(&settings, &record.protocols, Some(&judge), KEY).await;
            // A judgement that fails is graded, not fatal: a verdict missing from the tape is a
            // mismatch of the judge's tape itself.
            if let Some(what) = judge.first() {
                let judge_calls = relative(root, &path);
                return Ok(Err(format!("{judge_calls}: a judge call was never recorded: {what}")));
            }
            judged
        }
        None => {
            let protocols = [settings.protocol];
            super::eval::judged::<Offline>(&settings, &protocols, None, KEY).await
        }
    };
    if let Err(error) = summary {
        let judge_calls =
            format!("record/{}/{}_{}.judge.sqlite", index.dataset, index.model, index.file);
        return Ok(Err(format!("recomputing the eval tables from {judge_calls}: {error:#}")));
    }
    let name = |file: &str| relative(root, &folder.join(file));
    for file in [SCORES, MATRIX, MATRIX_MARKDOWN, "accuracy.svg", "tokens.svg"] {
        if let Some(mismatch) = compare_file(&kept.join(file), &folder.join(file), &name(file))? {
            return Ok(Err(mismatch));
        }
    }
    if let Some(mismatch) = compare_summary(&kept.join(SUMMARY), &folder.join(SUMMARY))? {
        return Ok(Err(format!("{}: {mismatch}", name(SUMMARY))));
    }
    if let Some(mismatch) = compare_summary_markdown(&kept, &folder, &name(SUMMARY_MARKDOWN))? {
        return Ok(Err(mismatch));
    }
    for file in super::export::files_under(&kept)? {
        let file_name = file.file_name().unwrap_or_default().to_string_lossy().into_owned();
        let inside = format!("eval/{}/{}/{}", index.dataset, index.file, relative(&kept, &file));
        if RECOMPUTED.contains(&file_name.as_str()) && file.parent() == Some(kept.as_path()) {
            report.recomputed.insert(inside);
        } else {
            report.carried.insert(inside);
        }
    }
    Ok(Ok(match &checked.eval {
        Some(record) => format!(
            "F1, exact match and the judge tables ({}, {} run(s), {} protocol(s)) recomputed from the recorded judge calls are identical",
            record.judge_model,
            record.judge_runs,
            record.protocols.len()
        ),
        None => "F1 and exact match recomputed are identical (the run was not judged)".to_string(),
    }))
}

/// The first line where `archived` and `recomputed` differ, naming the file (`name`, its path
/// inside the archive), line and question; a file on one side only is a mismatch.
fn compare_file(archived: &Path, recomputed: &Path, name: &str) -> anyhow::Result<Option<String>> {
    let (Ok(want), Ok(have)) =
        (std::fs::read_to_string(archived), std::fs::read_to_string(recomputed))
    else {
        return Ok((archived.is_file() != recomputed.is_file()).then(|| {
            if archived.is_file() {
                format!("{name}: archived, but recomputing the eval tables does not write it")
            } else {
                format!("{name}: recomputing the eval tables writes it, but it is not archived")
            }
        }));
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
const SUMMARY_MARKDOWN: &str = "summary.md";
const MATRIX: &str = "matrix.json";
const MATRIX_MARKDOWN: &str = "matrix.md";

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

/// `summary.md` rendered from the recomputed summary, with the fields of
/// [`INVOCATION_FIELDS`] taken from the archived `summary.json`, against the archived page.
fn compare_summary_markdown(
    kept: &Path,
    folder: &Path,
    name: &str,
) -> anyhow::Result<Option<String>> {
    let archived = super::export::read_json(&kept.join(SUMMARY))?;
    let mut recomputed = super::export::read_json(&folder.join(SUMMARY))?;
    for field in INVOCATION_FIELDS {
        recomputed[*field] = archived[*field].clone();
    }
    let Ok(summary) = serde_json::from_value::<crate::eval::EvalSummary>(recomputed) else {
        return Ok(Some(format!("{}: its invocation fields are malformed", SUMMARY)));
    };
    std::fs::write(folder.join(SUMMARY_MARKDOWN), crate::eval::summary_markdown(&summary))
        .context("writing the recomputed summary page")?;
    compare_file(&kept.join(SUMMARY_MARKDOWN), &folder.join(SUMMARY_MARKDOWN), name)
}

fn excerpt(text: &str) -> String {
    text.chars().take(200).collect()
}

/// The answers replayed from the recorded calls into a `-verify` tag, compared line by line.
/// Every setting comes from the archived manifest: the arguments are parsed with no
/// environment variable read, and resolved against an empty environment.
async fn replay(checked: &Checked, root: &Path) -> anyhow::Result<Result<(), String>> {
    let index = &checked.index;
    let mut args: Vec<String> = vec!["mragent".into(), "-q".into(), "replay".into()];
    let mut given: Vec<String> = checked.manifest["replay_args"]
        .as_array()
        .map(|args| args.iter().filter_map(|a| a.as_str().map(str::to_string)).collect())
        .unwrap_or_default();
    if given.is_empty() {
        return Ok(Err(format!(
            "{}: it has no replay_args (written by an older mragent)",
            checked.manifest_member
        )));
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
    let command = without_env(crate::cli::Cli::command());
    let parsed = command
        .try_get_matches_from(&args)
        .and_then(|matches| crate::cli::Cli::from_arg_matches(&matches));
    let cli = match parsed {
        Ok(cli) => cli,
        Err(error) => {
            return Ok(Err(format!(
                "{}: its replay_args do not parse: {error}",
                checked.manifest_member
            )));
        }
    };
    let paths = crate::settings::ProjectPaths { root: root.to_path_buf(), store: None };
    let job = match crate::settings::resolve(cli.command, &paths, true, &crate::settings::NoEnv)? {
        crate::settings::Job::Run(job) => job,
        _ => anyhow::bail!("the archived replay_args do not make a replay"),
    };
    let calls = format!("record/{}/{}_{}.calls.sqlite", index.dataset, index.model, index.file);
    Ok(super::run::replay_silently(&job)
        .await?
        .map(|_| ())
        .map_err(|mismatch| format!("replaying from {calls}: {mismatch}")))
}

/// A model whose first unrecorded request is kept (see [`check_eval`]).
struct Unrecorded<M> {
    inner: M,
    first: std::sync::Mutex<Option<String>>,
}

impl<M> Unrecorded<M> {
    fn new(inner: M) -> Self {
        Self { inner, first: std::sync::Mutex::new(None) }
    }

    fn first(&self) -> Option<String> {
        self.first.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }
}

impl<M: ChatModel> ChatModel for Unrecorded<M> {
    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let reply = self.inner.chat(request).await;
        if let Err(LlmError::Unrecorded { what }) = &reply {
            let mut first = self.first.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            first.get_or_insert_with(|| what.clone());
        }
        reply
    }

    fn max_tokens(&self, step: Step) -> Option<u32> {
        self.inner.max_tokens(step)
    }
}

/// `command` with no argument read from an environment variable, its subcommands' neither.
fn without_env(command: clap::Command) -> clap::Command {
    let names: Vec<String> =
        command.get_subcommands().map(|sub| sub.get_name().to_string()).collect();
    let mut command = command.mut_args(|arg| arg.env(None::<&'static str>));
    for name in names {
        command = command.mut_subcommand(name, without_env);
    }
    command
}
