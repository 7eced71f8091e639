//! `mragent memory …`: each subcommand runs its operation (`service::ops`) as the operator
//! and prints the reply: search, list, show and forget here, adds and jobs in `memory_jobs`,
//! facts and edits in `memory_edits`.

use super::Outcome;
use super::output::{out, outln};
use super::own::{operator, recorded_embedder, scope_embedder, service, store_service};
use crate::service::ConversationSummary;
use crate::service::LOCAL_EMBEDDER;
use crate::service::ops::{self, forget_message::ForgetMessageReply, search::Found};
use crate::settings::{MemoryJob, MemoryOp};

/// Runs the operation and prints its reply; partial when some sessions could not be built.
pub async fn execute(job: MemoryJob) -> anyhow::Result<Outcome> {
    let MemoryJob { paths, op, json } = job;
    let (access, store) = (operator(), || store_service(&paths, LOCAL_EMBEDDER));
    match op {
        MemoryOp::Add { adds, batch, worker_env, own } => {
            return super::memory_jobs::add(&own, adds, batch, &worker_env, json).await;
        }
        MemoryOp::Job(id) => super::memory_jobs::print_jobs(
            &[ops::job::run(&store()?, &access, id).await?],
            true,
            json,
        )?,
        MemoryOp::Jobs(request) => super::memory_jobs::print_jobs(
            &ops::jobs::run(&store()?, &access, request).await?.jobs,
            false,
            json,
        )?,
        MemoryOp::RunJobs(own) => return super::memory_jobs::run(&own, json).await,
        MemoryOp::Search(scope, request, own) => {
            let spec = scope_embedder(&paths, &scope)?;
            if spec != LOCAL_EMBEDDER {
                own.models.require_key()?;
            }
            print_hits(
                ops::search::run(&service(&own, &spec).await?, &access, scope, request).await?,
                json,
            )?;
        }
        MemoryOp::List(request) => {
            list(&ops::list::run(&store()?, &access, request).await?.conversations, json)?
        }
        MemoryOp::Show(id) => {
            let stored = ops::show::sessions(&store()?, &access, &id).await?;
            out!("{}", render_conversation(&stored, json)?)?;
        }
        MemoryOp::Forget(id) => {
            let info = ops::forget::run(&store()?, &access, &id).await?.deleted;
            outln!("forgot {}: {} messages, {} sessions", info.id, info.messages, info.sessions)?;
        }
        MemoryOp::ForgetMessage(conversation, message, own) => {
            let spec = recorded_embedder(&paths, &conversation)?;
            own.models.require_key()?;
            let service = service(&own, &spec).await?;
            let reply = ops::forget_message::run(&service, &access, &conversation, &message);
            let ForgetMessageReply { forgotten, rebuilt: report } = reply.await?;
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
            return Ok(if report.is_complete() { Outcome::Success } else { Outcome::Partial });
        }
        MemoryOp::Facts(scope, query) => {
            super::memory_edits::facts(&paths, scope, query, json).await?
        }
        MemoryOp::Correct(fact, request) => super::memory_edits::print_edit(
            &ops::correct::run(&store()?, &access, fact, request).await?,
            json,
        )?,
        MemoryOp::History(request) => super::memory_edits::history(
            &ops::history::run(&store()?, &access, request).await?.edits,
            json,
        )?,
        MemoryOp::Undo(edit, own) => return super::memory_edits::undo(&own, edit, json).await,
    }
    Ok(Outcome::Success)
}

/// The hits (over a user: each with its conversation).
fn print_hits(found: Found, json: bool) -> anyhow::Result<()> {
    let (hits, user) = match &found {
        Found::Conversation(reply) => (&reply.hits, false),
        Found::User(reply) => (&reply.hits, true),
    };
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
fn list(conversations: &[ConversationSummary], json: bool) -> anyhow::Result<()> {
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
