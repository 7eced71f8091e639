//! The eval folder recomputed from the results, the dataset and the recorded judge calls
//! (played back, nothing sent), against the archived one.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;

use super::{ArchiveClaims, Report, compare_file, relative};
use crate::llm::tape::{CallStore, Offline, Tape, TapeMode, TapedChat};

/// The files of an eval folder that `eval` writes and `verify` recomputes.
const RECOMPUTED: &[&str] =
    &[SCORES, SUMMARY, SUMMARY_MARKDOWN, MATRIX, MATRIX_MARKDOWN, "accuracy.svg", "tokens.svg"];

/// The eval folder recomputed from the results, the dataset and the recorded judge calls,
/// against the archived one.
pub(super) async fn check_eval(
    checked: &ArchiveClaims,
    root: &Path,
    report: &mut Report,
) -> anyhow::Result<Result<String, String>> {
    let index = &checked.index;
    let folder = root.join("eval").join(&index.dataset).join(&index.file);
    if !folder.is_dir() {
        return Ok(Ok("no eval tables in the archive".to_string()));
    }
    let kept = set_aside(root, &folder)?;
    if let Err(mismatch) = recompute(checked, root).await? {
        return Ok(Err(mismatch));
    }
    if let Some(mismatch) = compare_tables(root, &kept, &folder)? {
        return Ok(Err(mismatch));
    }
    let inside = format!("eval/{}/{}", index.dataset, index.file);
    sort_eval_members(&kept, &inside, report)?;
    Ok(Ok(what_was_judged(checked)))
}

/// Moves the archived `path` (a file or folder under `root`) aside, under `.archived/` at the
/// same relative path, so that a recomputation writes it anew: where it now is.
pub(super) fn set_aside(root: &Path, path: &Path) -> anyhow::Result<std::path::PathBuf> {
    let kept = root.join(".archived").join(path.strip_prefix(root).unwrap_or(path));
    if let Some(parent) = kept.parent() {
        std::fs::create_dir_all(parent).context("making the folder of archived files")?;
    }
    std::fs::rename(path, &kept)
        .with_context(|| format!("setting {} aside", relative(root, path)))?;
    Ok(kept)
}

/// Writes the eval folder anew from the results and the dataset, judged (when the run was)
/// by the judge played back from its recorded calls.
async fn recompute(checked: &ArchiveClaims, root: &Path) -> anyhow::Result<Result<(), String>> {
    let index = &checked.index;
    let dataset = crate::dataset::DatasetKind::from_name(&index.dataset)?;
    let mut settings = crate::eval::EvalSettings::new(root, dataset, &index.model, &index.file);
    settings.data_file = root.join(&index.dataset_file);
    let summary = match &checked.eval {
        Some(record) => {
            record.apply(&mut settings);
            match judged_from_tape(checked, root, &settings, record).await? {
                Ok(judged) => judged,
                Err(mismatch) => return Ok(Err(mismatch)),
            }
        }
        None => {
            let protocols = [settings.protocol];
            crate::eval::evaluate_latched::<Offline>(&settings, &protocols, None, KEY).await
        }
    };
    if let Err(error) = summary {
        let judge_calls =
            format!("record/{}/{}_{}.judge.sqlite", index.dataset, index.model, index.file);
        return Ok(Err(format!("recomputing the eval tables from {judge_calls}: {error:#}")));
    }
    Ok(Ok(()))
}

/// The judged tables with the judge played back from the archived judge calls: `Err` when
/// they are not archived or a judge call is not on them.
async fn judged_from_tape(
    checked: &ArchiveClaims,
    root: &Path,
    settings: &crate::eval::EvalSettings,
    record: &crate::recorded::eval_record::EvalRecord,
) -> anyhow::Result<Result<anyhow::Result<crate::eval::MatrixEvaluation>, String>> {
    let index = &checked.index;
    let path = crate::recorded::RunFiles::new(root, &index.dataset, &index.model, &index.file)
        .judge_calls();
    if !path.is_file() {
        return Ok(Err(format!(
            "{}: the recorded judge calls are not in the archive",
            relative(root, &path)
        )));
    }
    let store = Arc::new(CallStore::open_archived(&path)?);
    let tape = Tape::new(store, TapeMode::Replay { fill: false });
    let judge = TapedChat::new(Offline, Arc::clone(&tape));
    let judged =
        crate::eval::evaluate_latched(settings, &record.protocols, Some(&judge), KEY).await;
    // A judgement that fails is graded, not fatal: a verdict missing from the tape is a
    // mismatch of the judge's tape itself.
    if let Some(what) = tape.first_unrecorded() {
        let judge_calls = relative(root, &path);
        return Ok(Err(format!("{judge_calls}: a judge call was never recorded: {what}")));
    }
    Ok(Ok(judged))
}

/// The first difference between the archived eval folder (`kept`) and the recomputed one
/// (`folder`): the tables and plots, the summary's fields, then its page.
pub(super) fn compare_tables(
    root: &Path,
    kept: &Path,
    folder: &Path,
) -> anyhow::Result<Option<String>> {
    let name = |file: &str| relative(root, &folder.join(file));
    match (kept.join(SUMMARY).is_file(), folder.join(SUMMARY).is_file()) {
        (true, true) => {}
        (false, _) => return Ok(Some(format!("{}: it is not archived", name(SUMMARY)))),
        (true, false) => return Ok(Some(format!("{}: {TABLES} does not write it", name(SUMMARY)))),
    }
    if let Some(mismatch) = matrix_with_archived_audit_path(kept, folder, &name(MATRIX))? {
        return Ok(Some(mismatch));
    }
    for file in [SCORES, MATRIX, MATRIX_MARKDOWN, "accuracy.svg", "tokens.svg"] {
        if let Some(mismatch) =
            compare_file(&kept.join(file), &folder.join(file), &name(file), TABLES)?
        {
            return Ok(Some(mismatch));
        }
    }
    if let Some(mismatch) = compare_summary(&kept.join(SUMMARY), &folder.join(SUMMARY))? {
        return Ok(Some(format!("{}: {mismatch}", name(SUMMARY))));
    }
    compare_summary_markdown(kept, folder, &name(SUMMARY_MARKDOWN))
}

/// Sorts the archived eval folder's files (`kept`, at `folder` inside the archive) into
/// recomputed (those of [`RECOMPUTED`] at its top) and carried.
pub(super) fn sort_eval_members(
    kept: &Path,
    folder: &str,
    report: &mut Report,
) -> anyhow::Result<()> {
    for file in crate::recorded::archive::files_under(kept)? {
        let file_name = file.file_name().unwrap_or_default().to_string_lossy().into_owned();
        let inside = format!("{folder}/{}", relative(kept, &file));
        if RECOMPUTED.contains(&file_name.as_str()) && file.parent() == Some(kept) {
            report.recomputed.insert(inside);
        } else {
            report.carried.insert(inside);
        }
    }
    Ok(())
}

/// What the eval check recomputed, for the report.
fn what_was_judged(checked: &ArchiveClaims) -> String {
    match &checked.eval {
        Some(record) => format!(
            "F1, exact match and the judge tables ({}, {} run(s), {} protocol(s)) recomputed from the recorded judge calls are identical",
            record.judge_model,
            record.judge_runs,
            record.protocols.len()
        ),
        None => "F1 and exact match recomputed are identical (the run was not judged)".to_string(),
    }
}

/// What writes the recomputed tables, in messages.
const TABLES: &str = "recomputing the eval tables";
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

/// Rewrites the recomputed `matrix.json` and `matrix.md` with the archived matrix's `audit_file`:
/// where the audit was on the host that judged (an invocation field, as the summary's), while
/// the recomputation read the archived audit member. The two must name the same file; the
/// audit's content is checked by its hash and by what it changes in the tables.
fn matrix_with_archived_audit_path(
    kept: &Path,
    folder: &Path,
    name: &str,
) -> anyhow::Result<Option<String>> {
    let (archived, recomputed) = (kept.join(MATRIX), folder.join(MATRIX));
    if !archived.is_file() || !recomputed.is_file() {
        return Ok(None);
    }
    let archived = crate::recorded::archive::read_json(&archived)?;
    let mut matrix = crate::recorded::archive::read_json(&recomputed)?;
    let file_name = |value: &serde_json::Value| {
        value.as_str().and_then(|path| Path::new(path).file_name().map(|name| name.to_owned()))
    };
    if file_name(&archived["audit_file"]) != file_name(&matrix["audit_file"]) {
        return Ok(Some(format!(
            "{name}: its audit_file names another file than the audit that was archived"
        )));
    }
    matrix["audit_file"] = archived["audit_file"].clone();
    let Ok(matrix) = serde_json::from_value::<crate::eval::matrix::JudgeMatrix>(matrix) else {
        return Ok(Some(format!("{name}: the recomputed matrix does not read back")));
    };
    crate::eval::write_matrix_files(folder, &matrix)?;
    Ok(None)
}

/// The first field in which the archived summary and the recomputed one differ, the fields of
/// [`INVOCATION_FIELDS`] aside.
fn compare_summary(archived: &Path, recomputed: &Path) -> anyhow::Result<Option<String>> {
    let read = |path: &Path| -> anyhow::Result<serde_json::Map<String, serde_json::Value>> {
        let mut value = crate::recorded::archive::read_json(path)?;
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
    let archived = crate::recorded::archive::read_json(&kept.join(SUMMARY))?;
    let mut recomputed = crate::recorded::archive::read_json(&folder.join(SUMMARY))?;
    for field in INVOCATION_FIELDS {
        recomputed[*field] = archived[*field].clone();
    }
    let Ok(summary) = serde_json::from_value::<crate::eval::EvalSummary>(recomputed) else {
        return Ok(Some(format!("{}: its invocation fields are malformed", SUMMARY)));
    };
    std::fs::write(folder.join(SUMMARY_MARKDOWN), crate::eval::summary_markdown(&summary))
        .context("writing the recomputed summary page")?;
    compare_file(&kept.join(SUMMARY_MARKDOWN), &folder.join(SUMMARY_MARKDOWN), name, TABLES)
}
