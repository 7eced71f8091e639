//! A `learn` run's archive (`export --learn`): the learning replayed from its recorded calls in
//! a fresh project holding only the inputs (the dataset, the memories, the calls), with every
//! setting from the archived manifest, and every file the learning writes compared with the
//! archived one: the plan, each fold's step records and kept rules, the passes' answers, the
//! test answers, the top-level rules, report and curve.

use std::collections::BTreeSet;
use std::path::Path;

use clap::{CommandFactory as _, FromArgMatches as _};

use super::replay::without_env;
use super::{Replayer, Report, compare_file};
use crate::recorded::LearnFiles;
use crate::recorded::archive::{ArchiveIndex, INDEX, files_under};

/// What writes the replayed files, in messages.
const REPLAYED: &str = "the replay of the learning";

/// Where the learning is replayed, inside the folder the archive is unpacked into.
const REPLAY: &str = "replay";

/// Checks a learn archive whose members matched `archive.json`.
pub(super) async fn verify_learn(
    index: ArchiveIndex,
    root: &Path,
    replayer: &impl Replayer,
) -> anyhow::Result<Result<Report, String>> {
    let manifest = match check_index(&index, root)? {
        Ok(manifest) => manifest,
        Err(mismatch) => return Ok(Err(mismatch)),
    };
    let inside = LearnFiles::named(Path::new(""), &index.dataset, &index.file);
    let replay_root = root.join(REPLAY);
    if replay_root.exists() {
        return Ok(Err(format!("{REPLAY}/: the archive holds a file where verify replays")));
    }
    let mut report = Report::default();
    let inputs = match inputs(&index, root, &inside)? {
        Ok(inputs) => inputs,
        Err(mismatch) => return Ok(Err(mismatch)),
    };
    for path in &inputs {
        copy(&root.join(path), &replay_root.join(path))?;
        report.inputs.insert(path.clone());
    }
    let folds = folds_of(&index, &inside);
    let want: Vec<u32> = (0..manifest["settings"]["folds"].as_u64().unwrap_or(0) as u32).collect();
    if folds.is_empty() || folds != want {
        return Ok(Err(format!(
            "{}: the archive holds the step records of folds {folds:?}, the learning has folds {want:?}",
            inside.dir().display()
        )));
    }
    for fold in &folds {
        if let Err(mismatch) =
            replay_fold((&index, &manifest), &replay_root, *fold, replayer).await?
        {
            let calls = inside.calls().display().to_string();
            return Ok(Err(format!("replaying fold {fold} from {calls}: {mismatch}")));
        }
    }
    // An input the replay wrote again (a memory it rebuilt from the tape) must come out the
    // same.
    for path in &inputs {
        if let Some(mismatch) =
            compare_file(&root.join(path), &replay_root.join(path), path, REPLAYED)?
        {
            return Ok(Err(mismatch));
        }
    }
    if let Some(mismatch) = compare_outputs(&index, root, &replay_root, &mut report)? {
        return Ok(Err(mismatch));
    }
    report.carried.insert(inside.manifest().display().to_string());
    report.judged =
        format!("the learning of {} folds replayed from its recorded calls", folds.len());
    Ok(Ok(report))
}

/// The hashed manifest member of the learn run, and `archive.json` checked against it.
fn check_index(
    index: &ArchiveIndex,
    root: &Path,
) -> anyhow::Result<Result<serde_json::Value, String>> {
    let files = LearnFiles::named(Path::new(""), &index.dataset, &index.file);
    let member = files.manifest().display().to_string();
    let Ok(text) = std::fs::read_to_string(root.join(&member)) else {
        return Ok(Err(format!("{member}: the learn run's manifest is not in the archive")));
    };
    let Ok(manifest) = serde_json::from_str::<serde_json::Value>(&text) else {
        return Ok(Err(format!("{member} is not JSON")));
    };
    let given = manifest["replay_args"].as_array().cloned().unwrap_or_default();
    let flags = crate::settings::LEARN_REPLAY_FLAGS;
    let foreign = given
        .iter()
        .filter_map(|arg| arg.as_str())
        .find(|arg| arg.starts_with("--") && !flags.contains(arg));
    let name = given.iter().position(|arg| arg == "--name").and_then(|at| given.get(at + 1));
    let dataset_name = Path::new(manifest["dataset_file"].as_str().unwrap_or_default())
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let dataset = std::fs::read(root.join(&index.dataset_file)).unwrap_or_default();
    let problem = if let Some(flag) = foreign {
        Some(format!(
            "{member}: its replay_args hold {flag}, which a learning's manifest never does"
        ))
    } else if manifest["status"] != "complete" {
        Some(format!("{member}: the learning is {}, not complete", manifest["status"]))
    } else if index.manifest != manifest {
        Some(format!("{INDEX}: its copy of the manifest differs from {member}"))
    } else if manifest["dataset"] != index.dataset.as_str() {
        Some(format!("{INDEX}: its dataset differs from {member}"))
    } else if name.and_then(|name| name.as_str()) != Some(index.file.as_str()) {
        Some(format!("{INDEX}: its learn run's name differs from {member}"))
    } else if manifest["settings"]["model_alias"] != index.model.as_str() {
        Some(format!("{INDEX}: its model differs from {member}"))
    } else if index.dataset_file != format!("data/{dataset_name}") {
        Some(format!("{INDEX}: its dataset file differs from {member}"))
    } else if manifest["dataset_sha256"] != crate::recorded::manifest::sha256_hex(&dataset).as_str()
    {
        Some(format!(
            "{}: its SHA-256 differs from the dataset_sha256 of {member}",
            index.dataset_file
        ))
    } else if index.eval.is_some() || index.meta_rules.is_some() {
        Some(format!("{INDEX}: a learn run has no judge settings or rules file of its own"))
    } else {
        None
    };
    Ok(problem.map_or(Ok(manifest), Err))
}

/// What the learning is replayed from, exactly: the dataset file, the recorded calls and the
/// memory caches of the conversations its plan draws from. Any other member is a file the
/// learning must write again (or a mismatch).
fn inputs(
    index: &ArchiveIndex,
    root: &Path,
    inside: &LearnFiles,
) -> anyhow::Result<Result<Vec<String>, String>> {
    let archived = LearnFiles::new(&root.join(inside.dir()));
    let samples = match crate::recorded::learn_archive::plan_samples(&archived) {
        Ok(samples) => samples,
        Err(error) => return Ok(Err(format!("{}: {error:#}", inside.plan().display()))),
    };
    let memory = root.join("data").join(&index.dataset);
    let mut inputs = vec![index.dataset_file.clone(), inside.calls().display().to_string()];
    for path in crate::recorded::archive::memory_caches(&memory, &samples)? {
        inputs.push(path.strip_prefix(root)?.to_string_lossy().replace('\\', "/"));
    }
    let listed: std::collections::BTreeSet<&str> =
        index.files.iter().map(|member| member.path.as_str()).collect();
    inputs.retain(|path| listed.contains(path.as_str()));
    inputs.sort();
    inputs.dedup();
    Ok(Ok(inputs))
}

/// The folds whose step records the archive holds (`fold<k>/step0.json`), in order.
fn folds_of(index: &ArchiveIndex, files: &LearnFiles) -> Vec<u32> {
    let folds: BTreeSet<u32> = index
        .files
        .iter()
        .filter_map(|member| {
            let inside = Path::new(&member.path).strip_prefix(files.dir()).ok()?;
            let mut parts = inside.iter().map(|part| part.to_string_lossy());
            let fold = parts.next()?.strip_prefix("fold")?.parse().ok()?;
            (parts.next()? == "step0.json").then_some(fold)
        })
        .collect();
    folds.into_iter().collect()
}

/// One fold's learning replayed in `replay_root` with the manifest's arguments and none of
/// the verifier's environment.
async fn replay_fold(
    (index, manifest): (&ArchiveIndex, &serde_json::Value),
    replay_root: &Path,
    fold: u32,
    replayer: &impl Replayer,
) -> anyhow::Result<Result<(), String>> {
    let mut args: Vec<String> = vec!["mragent".into(), "-q".into(), "learn".into()];
    args.extend(
        manifest["replay_args"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|arg| arg.as_str().map(str::to_string)),
    );
    args.extend([
        "--data-file".into(),
        index.dataset_file.clone(),
        "--fold".into(),
        fold.to_string(),
    ]);
    let parsed = without_env(crate::cli::Cli::command())
        .try_get_matches_from(&args)
        .and_then(|matches| crate::cli::Cli::from_arg_matches(&matches));
    let cli = match parsed {
        Ok(cli) => cli,
        Err(error) => return Ok(Err(format!("its replay_args do not parse: {error}"))),
    };
    let paths = crate::settings::ProjectPaths { root: replay_root.to_path_buf(), store: None };
    let resolved = crate::settings::resolve(cli.command, &paths, true, &crate::settings::NoEnv);
    let mut job = match resolved {
        Ok(crate::settings::Resolved::Learn(job)) => job,
        Ok(_) => return Ok(Err("its replay_args do not make a learning run".into())),
        Err(error) => return Ok(Err(format!("its replay_args are refused: {error:#}"))),
    };
    job.replay = true;
    replayer.learn(&job).await
}

/// Every file the learning wrote against the archived one, and none written that the archive
/// lacks: result lines by question (latency aside), the rest byte for byte.
fn compare_outputs(
    index: &ArchiveIndex,
    root: &Path,
    replay_root: &Path,
    report: &mut Report,
) -> anyhow::Result<Option<String>> {
    let inside = LearnFiles::named(Path::new(""), &index.dataset, &index.file);
    let archived: BTreeSet<&str> = index.files.iter().map(|member| member.path.as_str()).collect();
    for member in &index.files {
        let path = member.path.as_str();
        if report.inputs.contains(path) || Path::new(path) == inside.manifest() {
            continue;
        }
        let (kept, made) = (root.join(path), replay_root.join(path));
        let mismatch = if is_trace(path) {
            match same_trace(&kept, &made, path)? {
                Ok(true) => {
                    report.carried.insert(path.to_string());
                    continue;
                }
                Ok(false) => None,
                Err(mismatch) => Some(mismatch),
            }
        } else if is_result_file(path) {
            let comparison = crate::recorded::tape::compare_results(&[(kept, made)])?;
            report.lines += comparison.compared;
            comparison.first_mismatch
        } else {
            compare_file(&kept, &made, path, REPLAYED)?
        };
        if let Some(mismatch) = mismatch {
            return Ok(Some(
                mismatch.replace(&format!("{}/", replay_root.display()), "the replay's "),
            ));
        }
        report.recomputed.insert(path.to_string());
    }
    for made in files_under(replay_root)? {
        let path = made.strip_prefix(replay_root)?.to_string_lossy().replace('\\', "/");
        let sidecar = crate::recorded::learn_archive::is_store_sidecar(Path::new(&path));
        if !archived.contains(path.as_str()) && !sidecar {
            return Ok(Some(format!(
                "{path}: the replay of the learning writes it, but it is not in the archive"
            )));
        }
    }
    Ok(None)
}

/// A question's trace (`log/…`, the passes' under the learn folder's `runs/log/…`).
fn is_trace(path: &str) -> bool {
    path.starts_with("log/") || path.contains("/log/")
}

/// A result file of answers (`result/…`, the passes' under `runs/result/…`).
fn is_result_file(path: &str) -> bool {
    (path.starts_with("result/") || path.contains("/result/")) && path.ends_with(".jsonl")
}

/// The archived trace against the replay's (see [`super::traces::compare_trace`]): whether it
/// holds earlier attempts, which are carried, or the first difference, named.
fn same_trace(kept: &Path, made: &Path, name: &str) -> anyhow::Result<Result<bool, String>> {
    let Ok(theirs) = std::fs::read(made) else {
        return Ok(Err(format!("{name}: archived, but {REPLAYED} does not write it")));
    };
    let ours = std::fs::read(kept)?;
    let (ours, theirs) = (String::from_utf8_lossy(&ours), String::from_utf8_lossy(&theirs));
    Ok(super::traces::compare_trace(&ours, &theirs, None)
        .map_err(|difference| format!("{name}: {difference}")))
}

/// Copies an input member into the replay's project.
fn copy(from: &Path, to: &Path) -> anyhow::Result<()> {
    use anyhow::Context as _;
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    std::fs::copy(from, to).with_context(|| format!("copying {}", from.display()))?;
    Ok(())
}
