//! The run's answers: a trace for every result line, and the answers replayed from the
//! recorded calls with the archived manifest's settings and none from the environment.

use std::path::Path;

use anyhow::Context as _;
use clap::{CommandFactory as _, FromArgMatches as _};

use super::{ArchiveClaims, relative};

/// The result lines of the run, as `(sample, question id, file, line number)`.
fn result_lines(
    checked: &ArchiveClaims,
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

/// A trace for every result line, when the run wrote traces; the number of result lines.
pub(super) fn check_traces(
    checked: &ArchiveClaims,
    root: &Path,
) -> anyhow::Result<Result<usize, String>> {
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
pub(super) fn check_replayed_traces(
    checked: &ArchiveClaims,
    root: &Path,
) -> anyhow::Result<Option<String>> {
    let index = &checked.index;
    let log = root.join("log").join(&index.dataset);
    let replayed = log.join(format!("{}-verify", index.file));
    for trace in crate::recorded::archive::files_under(&replayed)? {
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

/// The answers replayed from the recorded calls into a `-verify` tag, compared line by line.
/// Every setting comes from the archived manifest: the arguments are parsed with no
/// environment variable read, and resolved against an empty environment.
pub(super) async fn replay(
    checked: &ArchiveClaims,
    root: &Path,
) -> anyhow::Result<Result<(), String>> {
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
        crate::settings::Resolved::Run(job) => job,
        _ => anyhow::bail!("the archived replay_args do not make a replay"),
    };
    let calls = format!("record/{}/{}_{}.calls.sqlite", index.dataset, index.model, index.file);
    Ok(crate::commands::run::replay_silently(&job)
        .await?
        .map(|_| ())
        .map_err(|mismatch| format!("replaying from {calls}: {mismatch}")))
}

/// `command` with no argument read from an environment variable, its subcommands' neither.
pub(super) fn without_env(command: clap::Command) -> clap::Command {
    let names: Vec<String> =
        command.get_subcommands().map(|sub| sub.get_name().to_string()).collect();
    let mut command = command.mut_args(|arg| arg.env(None::<&'static str>));
    for name in names {
        command = command.mut_subcommand(name, without_env);
    }
    command
}
