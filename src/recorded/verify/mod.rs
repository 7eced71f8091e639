//! `mragent verify ARCHIVE` (the command prints what this room finds): checks an archive of
//! `mragent export` offline, in order, and stops
//! at the first mismatch, naming the file (its path inside the archive), the line and the
//! question:
//!
//! 1. every member against the SHA-256 and size in `archive.json`, and nothing unlisted;
//! 2. `archive.json` against the hashed manifest member, which drives every later check
//!    (samples, traces, replay arguments), and against the archived judge settings;
//! 3. a trace for every result line (when the run wrote traces);
//! 4. the answers replayed from the recorded calls into the tag `<tag>-verify`, every result
//!    line against the archived one (latency aside), with every setting from the manifest and
//!    none from the verifier's environment;
//! 5. every archived trace against the replay's trace of the same question, line by line, its
//!    times and its run's tag aside (`traces::normalised`); a trace the replay made that the
//!    archive lacks, or an archived one the replay did not make, is a mismatch;
//! 6. the eval folder recomputed (official F1 and exact match from the results and the
//!    dataset, the judge tables and matrix from the recorded judge calls) against the
//!    archived one;
//! 7. in a comparison's archive (`export --vs B`), steps 2 to 6 for run B too, then the
//!    comparison recomputed from both runs' results and its own recorded judge calls, with
//!    the settings of its hashed record, against the archived one: each run scored for it, its
//!    table and its page (`comparison`).
//!
//! What it cannot recompute it lists as "carried, not verified": the manifest's counts, times
//! and host, the earlier attempts of a trace (a question answered again after a failure or an
//! interruption: its last attempt is compared), and any member the run did not write. Nothing
//! is sent anywhere: the judge and the run are played back from their tapes, and a request
//! that is not on them is a mismatch.

mod archive;
mod comparison;
mod learn;
mod replay;
mod tables;
mod traces;

use std::collections::BTreeSet;
use std::path::Path;

use self::archive::check_index;
use self::replay::replay;
use self::tables::check_eval;
use self::traces::{check_traces, compare_traces};
use crate::recorded::archive::{ArchiveIndex, INDEX};
use crate::recorded::archive::{check_members, unpack};

/// What `verify` plays back that the commands own: a run's answers (`run`'s pipeline with a
/// replaying tape) and a learning run (`learn`'s). Each answers `Ok(Err(what))` when the
/// replay met a request its tape does not hold or failed.
pub trait Replayer {
    /// The run `job` (its `replay` set) played back; what it replayed.
    fn run(
        &self,
        job: &crate::settings::RunJob,
    ) -> impl std::future::Future<Output = anyhow::Result<Result<String, String>>>;
    /// The learning `job` (its `replay` set) played back from the tape in its folder.
    fn learn(
        &self,
        job: &crate::settings::LearnJob,
    ) -> impl std::future::Future<Output = anyhow::Result<Result<(), String>>>;
}

/// What a verified archive was checked for: each member is in exactly one set.
#[derive(Debug, Default)]
pub struct Report {
    /// Members recomputed from the recorded calls and the inputs, and identical.
    recomputed: BTreeSet<String>,
    /// Members the recomputation read (the dataset, the recorded calls, the memory, the rules,
    /// the audit, the manifest's settings): an alteration that matters shows in what is
    /// recomputed.
    inputs: BTreeSet<String>,
    /// Members verify cannot recompute, or not whole (a trace with earlier attempts), listed,
    /// never counted among what matches.
    carried: BTreeSet<String>,
    /// Result lines replayed.
    lines: usize,
    /// What the eval check did.
    judged: String,
}

impl Report {
    /// Members verify cannot recompute, in path order.
    pub fn carried(&self) -> impl Iterator<Item = &str> {
        self.carried.iter().map(String::as_str)
    }

    /// What was checked, counted.
    pub fn summary(&self) -> String {
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
struct ArchiveClaims {
    index: ArchiveIndex,
    manifest: serde_json::Value,
    manifest_member: String,
    eval: Option<crate::recorded::eval_record::EvalRecord>,
}

impl ArchiveClaims {
    fn samples(&self) -> Vec<String> {
        self.manifest["settings"]["samples"]
            .as_array()
            .map(|samples| samples.iter().filter_map(|s| s.as_str().map(str::to_string)).collect())
            .unwrap_or_default()
    }
}

/// Unpacks `archive` into the empty folder `root` and checks it, in order (see the module
/// documentation): `Ok(Err(first mismatch))` when one fails, `Ok(Ok(report))` when all pass.
/// Messages may name paths under `root`; the caller names them inside the archive.
pub async fn verify(
    archive: &Path,
    root: &Path,
    replayer: &impl Replayer,
) -> anyhow::Result<Result<Report, String>> {
    let index = match unpack(archive, root) {
        Ok(index) => index,
        Err(error) => return Ok(Err(format!("{error:#}"))),
    };
    if let Some(mismatch) = check_members(&index, root)? {
        return Ok(Err(mismatch));
    }
    if index.learn.is_some() {
        if index.compared.is_some() {
            return Ok(Err(format!("{INDEX}: a learn run's archive holds no comparison")));
        }
        return learn::verify_learn(index, root, replayer).await;
    }
    let runs = match comparison::runs_of(&index) {
        Ok(runs) => runs,
        Err(mismatch) => return Ok(Err(mismatch)),
    };
    let mut claims = Vec::new();
    for run in runs {
        match check_index(run, root)? {
            Ok(checked) => claims.push(checked),
            Err(mismatch) => return Ok(Err(mismatch)),
        }
    }
    let mut report = Report::default();
    let mut judged = Vec::new();
    for checked in &claims {
        match check_run(checked, root, replayer, &mut report).await? {
            Ok(said) if claims.len() > 1 => {
                judged.push(format!("run {}: {said}", checked.index.file))
            }
            Ok(said) => judged.push(said),
            Err(mismatch) => return Ok(Err(mismatch)),
        }
    }
    if let Some(compared) = &index.compared {
        match comparison::check_comparison(&index, compared, root, &mut report).await? {
            Ok(said) => judged.push(said),
            Err(mismatch) => return Ok(Err(mismatch)),
        }
    }
    report.judged = judged.join("; ");
    classify(&index, &claims, &mut report);
    Ok(Ok(report))
}

/// One run of the archive checked (steps 3 to 6): what its eval check did.
async fn check_run(
    checked: &ArchiveClaims,
    root: &Path,
    replayer: &impl Replayer,
    report: &mut Report,
) -> anyhow::Result<Result<String, String>> {
    if let Some(mismatch) = unreplayed_results(checked, root)? {
        return Ok(Err(mismatch));
    }
    report.lines += match check_traces(checked, root)? {
        Ok(lines) => lines,
        Err(mismatch) => return Ok(Err(mismatch)),
    };
    if let Err(mismatch) = replay(checked, root, replayer).await? {
        return Ok(Err(mismatch));
    }
    if let Some(mismatch) = compare_traces(checked, root, report)? {
        return Ok(Err(mismatch));
    }
    check_eval(checked, root, report).await
}

/// A result file of the run for no conversation its manifest names: the replay never made it,
/// yet scoring the run (`eval::find_result_files`) would read it.
fn unreplayed_results(checked: &ArchiveClaims, root: &Path) -> anyhow::Result<Option<String>> {
    let run = &checked.index;
    let dataset = crate::dataset::DatasetKind::from_name(&run.dataset)?;
    let settings = crate::eval::EvalSettings::new(root, dataset, &run.model, &run.file);
    let Ok(found) = crate::eval::find_result_files(&settings) else { return Ok(None) };
    let replayed: BTreeSet<std::path::PathBuf> = checked
        .samples()
        .iter()
        .map(|sample| {
            crate::results::result_path(root, &run.dataset, sample, &run.model, &run.file)
        })
        .collect();
    Ok(found.into_iter().find(|file| !replayed.contains(file)).map(|file| {
        format!(
            "{}: a result file of run {} for no conversation its manifest names (never replayed)",
            relative(root, &file),
            run.file
        )
    }))
}

/// Sorts every member into recomputed, inputs and carried (see [`Report`]).
fn classify(index: &ArchiveIndex, claims: &[ArchiveClaims], report: &mut Report) {
    let result_files: BTreeSet<String> = claims
        .iter()
        .flat_map(|checked| {
            let run = &checked.index;
            checked.samples().into_iter().map(move |sample| {
                crate::results::result_path(
                    Path::new(""),
                    &run.dataset,
                    &sample,
                    &run.model,
                    &run.file,
                )
                .to_string_lossy()
                .into_owned()
            })
        })
        .collect();
    let mut read: BTreeSet<String> = BTreeSet::from([index.dataset_file.clone()]);
    for checked in claims {
        let run = &checked.index;
        let files = crate::recorded::RunFiles::in_archive(&run.dataset, &run.model, &run.file);
        read.insert(files.calls().display().to_string());
        read.extend(run.meta_rules.clone());
        if let Some(eval) = &checked.eval {
            read.extend(eval.audit_file.clone());
            read.insert(files.judge_calls().display().to_string());
            read.insert(files.eval_record().display().to_string());
        }
    }
    if let Some(compared) = &index.compared {
        let files =
            crate::recorded::RunFiles::in_archive(&index.dataset, &index.model, &index.file);
        let record = &compared.comparison;
        read.extend(record.settings.audit_file.clone());
        read.insert(files.comparison_record(&compared.file).display().to_string());
        if record.judged {
            read.insert(files.comparison_judge_calls(&compared.file).display().to_string());
        }
    }
    let samples: Vec<String> = claims.iter().flat_map(ArchiveClaims::samples).collect();
    let memory = Path::new("data").join(&index.dataset);
    for member in &index.files {
        let path = member.path.as_str();
        if report.recomputed.contains(path) || report.carried.contains(path) {
            continue;
        }
        let input = read.contains(path)
            || Path::new(path)
                .strip_prefix(&memory)
                .is_ok_and(|inside| crate::recorded::archive::is_memory_cache(inside, &samples));
        if result_files.contains(path) {
            // Every result line was replayed from the recorded calls and found identical.
            report.recomputed.insert(path.to_string());
        } else if input {
            report.inputs.insert(path.to_string());
        } else {
            report.carried.insert(path.to_string());
        }
    }
    // The manifests' replay arguments, settings and dataset hash were used; their counts,
    // times and host were not checked.
    for checked in claims {
        report.carried.insert(checked.manifest_member.clone());
        report.inputs.remove(&checked.manifest_member);
    }
}

/// The tag the replay answers into: `<tag>-verify`.
fn replay_tag(index: &ArchiveIndex) -> String {
    format!("{}-verify", index.file)
}

/// The archived file against the one `by` wrote (`name`: its path inside the archive): `None`
/// when their bytes are equal; else the first differing line, with its question when the line
/// is a result or score line. A file on one side only is a mismatch, and so are bytes that
/// differ only where text is not (an encoding, the line endings).
fn compare_file(
    archived: &Path,
    made: &Path,
    name: &str,
    by: &str,
) -> anyhow::Result<Option<String>> {
    let read = |path: &Path| match std::fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(anyhow::Error::new(error).context(format!("reading {}", path.display()))),
    };
    let (want, have) = match (read(archived)?, read(made)?) {
        (None, None) => return Ok(None),
        (Some(_), None) => {
            return Ok(Some(format!("{name}: archived, but {by} does not write it")));
        }
        (None, Some(_)) => {
            return Ok(Some(format!("{name}: {by} writes it, but it is not archived")));
        }
        (Some(want), Some(have)) if want == have => return Ok(None),
        (Some(want), Some(have)) => (want, have),
    };
    let (want, have) = (String::from_utf8_lossy(&want), String::from_utf8_lossy(&have));
    let (want, have): (Vec<&str>, Vec<&str>) = (want.lines().collect(), have.lines().collect());
    let Some(number) = (0..want.len().max(have.len())).find(|&n| want.get(n) != have.get(n)) else {
        return Ok(Some(format!(
            "{name}: its bytes differ from what {by} writes (encoding or line endings)"
        )));
    };
    let (a, b) = (want.get(number).copied(), have.get(number).copied());
    let question = a
        .and_then(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .and_then(|value| value["question_id"].as_str().map(str::to_string))
        .map_or_else(String::new, |id| format!(" (question {id})"));
    let excerpt =
        |line: Option<&str>| line.unwrap_or("(none)").chars().take(200).collect::<String>();
    Ok(Some(format!(
        "{name} line {}{question}: the archived line differs from the one {by} writes: {:?} ≠ {:?}",
        number + 1,
        excerpt(a),
        excerpt(b)
    )))
}

/// `path` as a path inside the archive unpacked at `root`.
fn relative(root: &Path, path: &Path) -> String {
    path.strip_prefix(root).unwrap_or(path).display().to_string()
}
