//! `memory add` (one file or a batch, waiting for the build or not) and `memory jobs`.
//!
//! `--no-wait` stores the messages with a job each and starts a worker process
//! (`mragent memory jobs --run`, detached, with this command's endpoint and model options as
//! environment variables) that builds them and exits. The jobs are rows in the store, so a
//! killed worker loses nothing: `memory jobs --run`, a later worker or `serve` finishes them.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;
use serde_json::Value;

use super::Outcome;
use super::output::outln;
use super::own::{open_store, service};
use crate::convo::Message;
use crate::llm::Client;
use crate::service::ops::add::{AddReply, Wait};
use crate::service::{MemoryService, OwnEmbedder, ops};
use crate::settings::{AddInput, OwnSettings, ProjectPaths};
use crate::store::{AddScope, Job};

/// One conversation's add.
struct ConversationAdd {
    conversation: String,
    messages: Vec<Message>,
    scope: AddScope,
}

/// `memory add`: parse and check everything first (a bad file changes nothing), then add.
pub(super) async fn add(
    own: &OwnSettings,
    input: AddInput,
    wait: bool,
    worker_env: &[(&'static str, String)],
    json: bool,
) -> anyhow::Result<Outcome> {
    let single = matches!(input, AddInput::One { .. });
    let entries = read_input(input)?;
    own.models.require_key()?;
    let store = open_store(&own.paths)?;
    // Each conversation keeps the embedder it was created with; new ones take `--embedder`.
    let mut services: BTreeMap<String, Arc<MemoryService<Client, OwnEmbedder>>> = BTreeMap::new();
    let mut specs = Vec::with_capacity(entries.len());
    for entry in &entries {
        let spec = match store.info(&entry.conversation)? {
            Some(info) => info.embedder,
            None => own.service.embedder.clone(),
        };
        if !services.contains_key(&spec) {
            services.insert(spec.clone(), Arc::new(service(own, &spec).await?));
        }
        specs.push(spec);
    }
    let outcomes =
        futures::future::join_all(entries.into_iter().zip(&specs).map(|(entry, spec)| {
            let service = Arc::clone(&services[spec]);
            async move {
                let ConversationAdd { conversation, messages, scope } = entry;
                let wait = if wait { Wait::Whole } else { Wait::No };
                let done = ops::add::store(&service, &conversation, scope, messages, wait).await;
                (conversation, done)
            }
        }))
        .await;
    if !wait {
        for spec in services.keys() {
            let pid = start_worker(&own.paths, worker_env, spec)?;
            tracing::info!(pid, embedder = %spec, "started a build worker");
        }
    }
    report(outcomes, single, json)
}

/// Prints every entry's outcome; partial when one failed or left sessions unbuilt; an error
/// when the only entry failed.
fn report(
    outcomes: Vec<(String, Result<AddReply, crate::service::ServiceError>)>,
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
                listed.push(
                    serde_json::json!({"conversation": conversation, "error": error.to_string()}),
                );
                if !json {
                    outln!("{conversation}: failed: {error}")?;
                }
                continue;
            }
        };
        if matches!(&added, AddReply::Done(report) if !report.is_complete()) {
            outcome = Outcome::Partial;
        }
        let value = match &added {
            AddReply::Done(report) => serde_json::to_value(report)?,
            AddReply::Building(queued) => serde_json::to_value(queued)?,
        };
        if json {
            listed.push(value);
            continue;
        }
        match added {
            AddReply::Done(report) => outln!("{report}")?,
            AddReply::Building(queued) => outln!(
                "{}: {} new messages ({} already stored); job {} queued, {} sessions to build in the background (`mragent memory jobs {}` shows its progress)",
                queued.conversation,
                queued.new_messages,
                queued.duplicates,
                queued.job.id,
                queued.job.sessions.pending,
                queued.job.id
            )?,
        }
    }
    if json {
        let value = if single { listed.pop().unwrap_or_default() } else { Value::Array(listed) };
        outln!("{}", serde_json::to_string_pretty(&value)?)?;
    }
    Ok(outcome)
}

/// The text of `file` (`-`: standard input).
fn read_text(file: &Path) -> anyhow::Result<String> {
    if file.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text).context("reading standard input")?;
        return Ok(text);
    }
    std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))
}

/// The entries of the input, each checked (id, limits, scope).
fn read_input(input: AddInput) -> anyhow::Result<Vec<ConversationAdd>> {
    let entries = match input {
        AddInput::One { conversation, file, scope } => {
            let messages = crate::convo::parse(&read_text(&file)?)
                .with_context(|| format!("{} is not a usable conversation", file.display()))?;
            vec![ConversationAdd { conversation, messages, scope }]
        }
        AddInput::Batch { file } => read_batch(&read_text(&file)?)
            .with_context(|| format!("{} is not a usable batch", file.display()))?,
    };
    for entry in &entries {
        crate::store::check_conversation_id(&entry.conversation)?;
        crate::service::check_limits(&entry.messages)
            .with_context(|| format!("conversation {} cannot be added", entry.conversation))?;
        entry.scope.check()?;
    }
    Ok(entries)
}

/// `{"conversations": [{"conversation", "messages", "user", "agent", "tags"}]}`.
fn read_batch(text: &str) -> anyhow::Result<Vec<ConversationAdd>> {
    let value: Value = serde_json::from_str(text).context("not JSON")?;
    let Some(Value::Array(items)) = value.get("conversations") else {
        anyhow::bail!("expected an object with a `conversations` array");
    };
    let mut entries = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        let at = format!("conversations[{index}]");
        let text = |field: &str| -> anyhow::Result<Option<String>> {
            match item.get(field) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(text)) => Ok(Some(text.clone())),
                Some(_) => anyhow::bail!("{at}.{field}: expected a string"),
            }
        };
        let conversation =
            text("conversation")?.with_context(|| format!("{at}.conversation: missing"))?;
        let Some(Value::Array(messages)) = item.get("messages") else {
            anyhow::bail!("{at}.messages: expected an array of messages");
        };
        let messages = crate::convo::parse_values(messages.clone())
            .with_context(|| format!("{at}.messages"))?;
        let tags = match item.get("tags") {
            None | Some(Value::Null) => BTreeMap::new(),
            Some(tags) => serde_json::from_value(tags.clone())
                .with_context(|| format!("{at}.tags: expected an object of strings"))?,
        };
        let scope = AddScope { user: text("user")?, agent: text("agent")?, tags };
        entries.push(ConversationAdd { conversation, messages, scope });
    }
    anyhow::ensure!(!entries.is_empty(), "no conversations");
    Ok(entries)
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

/// `memory jobs`: one job, the listing, or (`--run`) build the unfinished ones.
pub(super) async fn jobs(
    own: &OwnSettings,
    job: Option<i64>,
    conversation: Option<&str>,
    unfinished: bool,
    run: bool,
    json: bool,
) -> anyhow::Result<Outcome> {
    let store = open_store(&own.paths)?;
    let jobs = if run {
        own.models.require_key()?;
        let service = Arc::new(service(own, &own.service.embedder).await?);
        let ended = service.run_jobs(true).await.ended;
        ended.into_values().rev().collect()
    } else if let Some(id) = job {
        vec![store.job(id)?]
    } else {
        store.jobs(conversation, unfinished, 100)?
    };
    if json {
        let value = match (job, jobs.first()) {
            (Some(_), Some(one)) => serde_json::to_value(one)?,
            _ => serde_json::to_value(&jobs)?,
        };
        outln!("{}", serde_json::to_string_pretty(&value)?)?;
    } else {
        for job in &jobs {
            print_job(job)?;
        }
        if run {
            outln!("{} jobs ended", jobs.len())?;
        }
    }
    let failed = jobs.iter().any(|job| job.state == crate::store::JobState::Failed);
    Ok(if run && failed { Outcome::Partial } else { Outcome::Success })
}

fn print_job(job: &Job) -> anyhow::Result<()> {
    let sessions = &job.sessions;
    outln!(
        "job {} {}: {}, sessions {} built, {} failed, {} pending; {} model calls, {} + {} tokens; {} run(s); queued {}",
        job.id,
        job.conversation,
        job.state.name(),
        sessions.done,
        sessions.failed,
        sessions.pending,
        job.chat_calls,
        job.tokens.prompt,
        job.tokens.completion,
        job.attempts,
        job.created_at
    )?;
    for error in &job.errors {
        let session = error.session.as_deref().unwrap_or("job");
        outln!("  {session}: {}", error.error)?;
    }
    Ok(())
}
