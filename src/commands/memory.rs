//! `mragent memory …`: add messages to the store, search, list, show and forget own
//! conversations, and print what was done.

use super::Outcome;
use super::output::{out, outln};
use super::own::{open_store, recorded_embedder, scope_embedder, service};
use crate::service::{LOCAL_EMBEDDER, Scope, SearchHit};
use crate::settings::{MemoryJob, OwnSettings, ProjectPaths};

/// Does the job and prints its report; partial when some sessions could not be built.
pub async fn execute(job: MemoryJob) -> anyhow::Result<Outcome> {
    match job {
        MemoryJob::Add { input, wait, worker_env, json, own } => {
            super::memory_jobs::add(&own, input, wait, &worker_env, json).await
        }
        MemoryJob::Jobs { job, conversation, unfinished, run, json, own } => {
            super::memory_jobs::jobs(&own, job, conversation.as_deref(), unfinished, run, json)
                .await
        }
        MemoryJob::Search { scope, filters, query, k, json, own } => {
            let spec = scope_embedder(&own.paths, &scope)?;
            if spec != LOCAL_EMBEDDER {
                own.models.require_key()?;
            }
            let service = service(&own, &spec).await?;
            let hits = service.search_scoped(&scope, &query, k, &filters).await?;
            print_hits(&hits, matches!(scope, Scope::User(_)), json)?;
            Ok(Outcome::Success)
        }
        MemoryJob::List { paths, user, json } => {
            list(&paths, user.as_deref(), json)?;
            Ok(Outcome::Success)
        }
        MemoryJob::Facts { paths, query, json } => {
            super::memory_edits::facts(&paths, &query, json).await
        }
        MemoryJob::Correct { paths, fact, value, json } => {
            super::memory_edits::correct(&paths, fact, &value, json).await
        }
        MemoryJob::History { paths, user, conversation, json } => {
            super::memory_edits::history(&paths, user.as_deref(), conversation.as_deref(), json)
        }
        MemoryJob::Undo { edit, json, own } => super::memory_edits::undo(&own, edit, json).await,
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

/// The hits (over a user: each with its conversation).
fn print_hits(hits: &[SearchHit], user: bool, json: bool) -> anyhow::Result<()> {
    if json {
        outln!("{}", serde_json::to_string_pretty(&hits)?)?;
    }
    for hit in hits.iter().filter(|_| !json) {
        let when = hit.timestamp.as_deref().or(hit.date.as_deref()).unwrap_or("?");
        let place =
            if user { format!("{} {}", hit.conversation, hit.dia_id) } else { hit.dia_id.clone() };
        outln!("{:.3}  [{place}] {when} {}: {}  ({})", hit.score, hit.speaker, hit.text, hit.id)?;
    }
    Ok(())
}

/// `memory list`.
fn list(paths: &ProjectPaths, user: Option<&str>, json: bool) -> anyhow::Result<()> {
    let conversations = open_store(paths)?.list_of(user)?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&conversations)?)?;
    }
    for info in conversations.iter().filter(|_| !json) {
        let owner = info.user.as_deref().map(|user| format!(", user {user}")).unwrap_or_default();
        outln!(
            "{}  {} messages, {} sessions ({} built), {} to {}, embedder {}{owner}",
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
    let (forgotten, report) = service.forget_message(conversation, message, "cli").await?;
    let removed = if forgotten.session_removed { ", now empty and removed" } else { "" };
    outln!(
        "forgot message {} of {} (session {}{removed}); edit {} (`memory undo {}` reverts it)",
        forgotten.message,
        forgotten.conversation,
        forgotten.session,
        forgotten.edit,
        forgotten.edit
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
