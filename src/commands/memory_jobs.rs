//! `memory add` (one file or a batch, waiting for the build or not) and `memory jobs`.
//!
//! `--no-wait` stores the messages with a job each and starts a worker process
//! (`mragent memory jobs --run`, detached, with this command's endpoint and model options as
//! environment variables) that builds them and exits. The jobs are rows in the store, so a
//! killed worker loses nothing: `memory jobs --run`, a later worker or `serve` finishes them.

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::Context as _;
use serde_json::Value;

use super::Outcome;
use super::output::outln;
use super::own::{open_store, operator, service};
use crate::service::ops::add::{AddReply, AddRequest, Wait};
use crate::service::ops::{self, ApiError};
use crate::service::{BackgroundJob, BackgroundState};
use crate::settings::{OwnSettings, ProjectPaths};

/// `memory add`: each entry through the add operation, waiting for its whole build (or, not
/// waiting, queued for the worker started then).
pub(super) async fn add(
    own: &OwnSettings,
    adds: Vec<(String, AddRequest)>,
    batch: bool,
    worker_env: &[(&'static str, String)],
    json: bool,
) -> anyhow::Result<Outcome> {
    own.models.require_key()?;
    let store = open_store(&own.paths)?;
    // Each conversation keeps the embedder it was created with; new ones take `--embedder`.
    let mut services = BTreeMap::new();
    let mut specs = Vec::with_capacity(adds.len());
    for (conversation, _) in &adds {
        let spec = match store.info(conversation)? {
            Some(info) => info.embedder,
            None => own.service.embedder.clone(),
        };
        if !services.contains_key(&spec) {
            services.insert(spec.clone(), Arc::new(service(own, &spec).await?));
        }
        specs.push(spec);
    }
    let queued = adds.iter().any(|(_, add)| !add.wait);
    let access = operator();
    let outcomes = futures::future::join_all(adds.into_iter().zip(&specs).map(
        |((conversation, request), spec)| {
            // Every spec was given its service above.
            let (service, access) = (Arc::clone(&services[spec]), &access);
            async move {
                let added =
                    ops::add::run_within(&service, access, &conversation, request, Wait::Whole)
                        .await;
                (conversation, added)
            }
        },
    ))
    .await;
    if queued {
        for spec in services.keys() {
            let pid = start_worker(&own.paths, worker_env, spec)?;
            tracing::info!(pid, embedder = %spec, "started a build worker");
        }
    }
    report(outcomes, !batch, json)
}

/// Prints every entry's outcome; partial when one failed or left sessions unbuilt; an error
/// when the only entry failed.
fn report(
    outcomes: Vec<(String, Result<AddReply, ApiError>)>,
    single: bool,
    json: bool,
) -> anyhow::Result<Outcome> {
    let mut outcome = Outcome::Success;
    let mut listed = Vec::new();
    for (conversation, done) in outcomes {
        let added = match done {
            Ok(added) => added,
            Err(error) if single => return Err(error.into()),
            Err(error) => {
                outcome = Outcome::Partial;
                let error = error.to_string();
                if !json {
                    outln!("{conversation}: failed: {error}")?;
                }
                listed.push(serde_json::json!({"conversation": conversation, "error": error}));
                continue;
            }
        };
        if added.incomplete() {
            outcome = Outcome::Partial;
        }
        if json {
            listed.push(serde_json::to_value(&added)?);
            continue;
        }
        match added {
            AddReply::Done(report) => outln!("{report}")?,
            AddReply::Building(queued) => outln!("{queued}")?,
        }
    }
    if json {
        let value = if single { listed.pop().unwrap_or_default() } else { Value::Array(listed) };
        outln!("{}", serde_json::to_string_pretty(&value)?)?;
    }
    Ok(outcome)
}

/// Starts a detached `mragent memory jobs --run` for conversations embedded with `spec`.
fn start_worker(
    paths: &ProjectPaths,
    env: &[(&'static str, String)],
    spec: &str,
) -> anyhow::Result<u32> {
    let exe = std::env::current_exe().context("finding the mragent binary for the worker")?;
    let mut command = std::process::Command::new(exe);
    // The store URL may hold a password: the environment, not the command line (`ps`).
    if let Some(url) = &paths.store {
        command.env("MRAGENT_STORE_URL", url);
    }
    command
        .arg("--root")
        .arg(&paths.root)
        .args(["--quiet", "memory", "jobs", "--run"])
        .envs(env.iter().map(|(name, value)| (*name, value.as_str())))
        .env("MRAGENT_STORE_EMBEDDER", spec)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // Its own process group: a Ctrl-C meant for the shell's next command does not stop it.
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    let child = command.spawn().context("starting the build worker")?;
    Ok(child.id())
}

/// `memory jobs --run`: build the unfinished jobs now; partial when one failed.
pub(super) async fn run(own: &OwnSettings, json: bool) -> anyhow::Result<Outcome> {
    own.models.require_key()?;
    let service = Arc::new(service(own, &own.service.embedder).await?);
    let jobs: Vec<BackgroundJob> =
        service.run_jobs(true).await.ended.into_values().rev().map(Into::into).collect();
    print_jobs(&jobs, false, json)?;
    if !json {
        outln!("{} jobs ended", jobs.len())?;
    }
    let failed = jobs.iter().any(|job| job.state == BackgroundState::Failed);
    Ok(if failed { Outcome::Partial } else { Outcome::Success })
}

/// Jobs, or (`one`) the one job asked for.
pub(super) fn print_jobs(jobs: &[BackgroundJob], one: bool, json: bool) -> anyhow::Result<()> {
    if json {
        let value = match (one, jobs.first()) {
            (true, Some(job)) => serde_json::to_value(job)?,
            _ => serde_json::to_value(jobs)?,
        };
        outln!("{}", serde_json::to_string_pretty(&value)?)?;
        return Ok(());
    }
    for job in jobs {
        outln!("{job}")?;
    }
    Ok(())
}
