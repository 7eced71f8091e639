//! `mragent memory …`: add messages to the store, search, list, show and forget own
//! conversations, and print what was done.

use std::io::Read as _;
use std::path::Path;

use anyhow::Context as _;

use super::Outcome;
use super::output::{out, outln};
use super::own::{open_store, recorded_embedder, service};
use crate::service::{AddReport, LOCAL_EMBEDDER, SearchHit};
use crate::settings::{MemoryJob, OwnSettings, ProjectPaths};

/// Does the job and prints its report; partial when some sessions could not be built.
pub async fn execute(job: MemoryJob) -> anyhow::Result<Outcome> {
    match job {
        MemoryJob::Add { conversation, file, json, own } => {
            let report = add(&own, &conversation, &file).await?;
            if json {
                outln!("{}", serde_json::to_string_pretty(&report)?)?;
            } else {
                outln!("{report}")?;
            }
            Ok(if report.is_complete() { Outcome::Success } else { Outcome::Partial })
        }
        MemoryJob::Search { conversation, query, k, json, own } => {
            let hits = search(&own, &conversation, &query, k).await?;
            print_hits(&hits, json)?;
            Ok(Outcome::Success)
        }
        MemoryJob::List { paths, json } => {
            list(&paths, json)?;
            Ok(Outcome::Success)
        }
        MemoryJob::Show { paths, conversation, json } => {
            let stored = open_store(&paths)?.load(&conversation)?;
            out!("{}", render_conversation(&stored, json)?)?;
            Ok(Outcome::Success)
        }
        MemoryJob::Forget { paths, conversation, message } => {
            forget(&paths, &conversation, message.as_ref()).await
        }
    }
}

/// `memory add`: parse first (a bad file changes nothing), then add.
async fn add(own: &OwnSettings, conversation: &str, file: &Path) -> anyhow::Result<AddReport> {
    let text = if file.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text).context("reading messages from stdin")?;
        text
    } else {
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?
    };
    let messages = crate::convo::parse(&text)
        .with_context(|| format!("{} is not a usable conversation", file.display()))?;
    crate::store::check_conversation_id(conversation)?;
    crate::service::check_limits(&messages)
        .with_context(|| format!("{} cannot be added", file.display()))?;
    own.models.require_key()?;
    let spec = match open_store(&own.paths)?.info(conversation)? {
        Some(info) => info.embedder,
        None => own.service.embedder.clone(),
    };
    let service = service(own, &spec).await?;
    Ok(service.add(conversation, messages).await?)
}

/// `memory search`: a key is needed only for an API embedder.
async fn search(
    own: &OwnSettings,
    conversation: &str,
    query: &str,
    k: usize,
) -> anyhow::Result<Vec<SearchHit>> {
    let spec = recorded_embedder(&own.paths, conversation)?;
    if spec != LOCAL_EMBEDDER {
        own.models.require_key()?;
    }
    let service = service(own, &spec).await?;
    Ok(service.search(conversation, query, k).await?)
}

fn print_hits(hits: &[SearchHit], json: bool) -> anyhow::Result<()> {
    if json {
        outln!("{}", serde_json::to_string_pretty(&hits)?)?;
    }
    for hit in hits.iter().filter(|_| !json) {
        let when = hit.timestamp.as_deref().or(hit.date.as_deref()).unwrap_or("?");
        outln!(
            "{:.3}  [{}] {when} {}: {}  ({})",
            hit.score,
            hit.dia_id,
            hit.speaker,
            hit.text,
            hit.id
        )?;
    }
    Ok(())
}

/// `memory list`.
fn list(paths: &ProjectPaths, json: bool) -> anyhow::Result<()> {
    let conversations = open_store(paths)?.list()?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&conversations)?)?;
    }
    for info in conversations.iter().filter(|_| !json) {
        outln!(
            "{}  {} messages, {} sessions ({} built), {} to {}, embedder {}",
            info.id,
            info.messages,
            info.sessions,
            info.built_sessions,
            info.first_message.as_deref().unwrap_or("?"),
            info.last_message.as_deref().unwrap_or("?"),
            info.embedder
        )?;
    }
    Ok(())
}

/// `memory forget`: a conversation (no model needed), or one message (its session is rebuilt,
/// which needs the model).
async fn forget(
    paths: &ProjectPaths,
    conversation: &str,
    message: Option<&(String, OwnSettings)>,
) -> anyhow::Result<Outcome> {
    let Some((message, own)) = message else {
        let info = {
            let store = open_store(paths)?;
            let _lock = store.lock_conversation(conversation)?;
            store.forget(conversation)?
        };
        outln!("forgot {}: {} messages, {} sessions", info.id, info.messages, info.sessions)?;
        return Ok(Outcome::Success);
    };
    let spec = recorded_embedder(paths, conversation)?;
    own.models.require_key()?;
    let service = service(own, &spec).await?;
    let (forgotten, report) = service.forget_message(conversation, message).await?;
    let removed = if forgotten.session_removed { ", now empty and removed" } else { "" };
    outln!(
        "forgot message {} of {} (session {}{removed})",
        forgotten.message,
        forgotten.conversation,
        forgotten.session
    )?;
    outln!("{report}")?;
    Ok(if report.is_complete() { Outcome::Success } else { Outcome::Partial })
}

/// `memory show`: the sessions and messages of a conversation, as text or JSON.
pub fn render_conversation(
    stored: &crate::store::StoredConversation,
    json: bool,
) -> anyhow::Result<String> {
    let sessions: Vec<serde_json::Value> = stored
        .sessions
        .iter()
        .map(|session| {
            serde_json::json!({
                "session": format!("D{}", session.number),
                "key": session.key,
                "date": session.to_session().date_time,
                "built": session.outputs.is_some(),
                "failure": session.failure,
                "messages": session.messages,
            })
        })
        .collect();
    if json {
        let value = serde_json::json!({"conversation": stored.info, "sessions": sessions});
        return Ok(format!("{}\n", serde_json::to_string_pretty(&value)?));
    }
    let mut out = format!(
        "{}: {} messages in {} sessions ({} built), embedder {}\n",
        stored.info.id,
        stored.info.messages,
        stored.info.sessions,
        stored.info.built_sessions,
        stored.info.embedder
    );
    for session in &stored.sessions {
        let date = session.to_session().date_time.unwrap_or_else(|| "no date".into());
        let built = match (&session.outputs, &session.failure) {
            (Some(_), _) => String::new(),
            (None, Some(failure)) => format!(
                " (not built: failed {} time(s), last: {}; the next add retries it)",
                failure.attempts, failure.error
            ),
            (None, None) => " (not built yet; the next add builds it)".to_string(),
        };
        out.push_str(&format!("D{} {date}{built}\n", session.number));
        for (position, message) in session.messages.iter().enumerate() {
            out.push_str(&format!(
                "  D{}:{} {}: {}  [id {}]\n",
                session.number,
                position + 1,
                message.speaker,
                message.text,
                message.id
            ));
        }
    }
    Ok(out)
}
