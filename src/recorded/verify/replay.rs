//! The run's answers replayed from the recorded calls with the archived manifest's settings and
//! none from the environment.

use std::path::Path;

use clap::{CommandFactory as _, FromArgMatches as _};

use super::{ArchiveClaims, replay_tag};

/// The answers replayed from the recorded calls into a `-verify` tag, compared line by line.
/// Every setting comes from the archived manifest: the arguments are parsed with no
/// environment variable read, and resolved against an empty environment.
pub(super) async fn replay(
    checked: &ArchiveClaims,
    root: &Path,
    replayer: &impl super::Replayer,
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
    let to = replay_tag(index);
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
    Ok(replayer
        .run(&job)
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
