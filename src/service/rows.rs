//! The store's rows as the service answers them: the bodies every door sends and the OpenAPI
//! document describes (under the names clients know, `schema(as = …)`). Each is a type of its
//! own, made from its row, so that a column of the store and a field of the API change apart;
//! the pinned replies (`tests/it/pinned.rs`) hold their JSON.

use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use crate::store;

/// `From<$row> for $own`, field by field, the row destructured whole: a column the store adds
/// does not compile here until the API decides what to do with it.
macro_rules! from_row {
    ($row:path => $own:ident { $($field:ident),+ }) => {
        impl From<$row> for $own {
            fn from(row: $row) -> Self {
                let $row { $($field),+ } = row;
                Self { $($field),+ }
            }
        }
    };
}

/// One conversation in the listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[schema(as = ConversationInfo)]
pub struct ConversationSummary {
    /// Its id.
    pub id: String,
    /// The embedder its vectors come from (`local` or an API model id).
    pub embedder: String,
    /// When it was first added to (RFC 3339).
    pub created_at: String,
    /// The user it belongs to, if any.
    pub user: Option<String>,
    /// The agent it belongs to, if any.
    pub agent: Option<String>,
    /// Messages stored.
    pub messages: i64,
    /// Sessions stored.
    pub sessions: i64,
    /// Sessions whose stage outputs are stored (the rest failed or were interrupted; the next
    /// add retries them).
    pub built_sessions: i64,
    /// Time of the earliest and latest timestamped message.
    pub first_message: Option<String>,
    /// See `first_message`.
    pub last_message: Option<String>,
}

from_row!(store::ConversationInfo => ConversationSummary { id, embedder, created_at, user, agent, messages, sessions, built_sessions, first_message, last_message });

/// Where a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = JobState)]
pub enum BackgroundState {
    /// Stored, not started (or its runner died and it waits for the next).
    Queued,
    /// A runner is building its sessions.
    Running,
    /// Every session it found pending is built.
    Done,
    /// Some session failed (the next add or job retries it), or the job could not run.
    Failed,
}

impl BackgroundState {
    /// The state's name as served.
    pub fn name(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Running => "running",
            Self::Done => "done",
            Self::Failed => "failed",
        }
    }
}

impl From<store::JobState> for BackgroundState {
    fn from(state: store::JobState) -> Self {
        match state {
            store::JobState::Queued => Self::Queued,
            store::JobState::Running => Self::Running,
            store::JobState::Done => Self::Done,
            store::JobState::Failed => Self::Failed,
        }
    }
}

/// One error of a job: a session that failed, or why the job could not run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[schema(as = JobError)]
pub struct JobFault {
    /// `D<n>`, or absent for an error of the whole job.
    pub session: Option<String>,
    /// What went wrong.
    pub error: String,
}

/// A job's session counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[schema(as = JobSessions)]
pub struct JobCounts {
    /// Built by this job.
    pub done: u64,
    /// Failed in its last run.
    pub failed: u64,
    /// Still to build in its current run (all of them while it is queued).
    pub pending: u64,
}

/// A job's token use (chat calls of the build, re-asks included).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[schema(as = JobTokens)]
pub struct JobUsage {
    /// Prompt tokens.
    pub prompt: u64,
    /// Completion tokens.
    pub completion: u64,
}

from_row!(store::JobError => JobFault { session, error });
from_row!(store::JobSessions => JobCounts { done, failed, pending });
from_row!(store::JobTokens => JobUsage { prompt, completion });

/// A background build job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[schema(as = Job)]
pub struct BackgroundJob {
    /// Its id.
    pub id: i64,
    /// The conversation it builds.
    pub conversation: String,
    /// Where it is.
    pub state: BackgroundState,
    /// When it was queued (RFC 3339).
    pub created_at: String,
    /// When its last run started.
    pub started_at: Option<String>,
    /// When it ended.
    pub finished_at: Option<String>,
    /// Runs started (more than 1 after a runner died).
    pub attempts: u32,
    /// Messages its add stored.
    pub new_messages: u64,
    /// Messages its add found stored already.
    pub duplicates: u64,
    /// Session counts.
    pub sessions: JobCounts,
    /// Chat calls made.
    pub chat_calls: u64,
    /// Tokens used.
    pub tokens: JobUsage,
    /// Failed sessions and job errors.
    pub errors: Vec<JobFault>,
}

impl From<store::Job> for BackgroundJob {
    fn from(row: store::Job) -> Self {
        let store::Job {
            id,
            conversation,
            state,
            created_at,
            started_at,
            finished_at,
            attempts,
            new_messages,
            duplicates,
            sessions,
            chat_calls,
            tokens,
            errors,
        } = row;
        Self {
            id,
            conversation,
            state: state.into(),
            created_at,
            started_at,
            finished_at,
            attempts,
            new_messages,
            duplicates,
            sessions: sessions.into(),
            chat_calls,
            tokens: tokens.into(),
            errors: errors.into_iter().map(Into::into).collect(),
        }
    }
}

/// What the command line prints of a job: one line, then one per error.
impl std::fmt::Display for BackgroundJob {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (sessions, tokens) = (&self.sessions, &self.tokens);
        write!(
            formatter,
            "job {} {}: {}, sessions {} built, {} failed, {} pending; {} model calls, {} + {} tokens; {} run(s); queued {}",
            self.id,
            self.conversation,
            self.state.name(),
            sessions.done,
            sessions.failed,
            sessions.pending,
            self.chat_calls,
            tokens.prompt,
            tokens.completion,
            self.attempts,
            self.created_at
        )?;
        for error in &self.errors {
            let session = error.session.as_deref().unwrap_or("job");
            write!(formatter, "\n  {session}: {}", error.error)?;
        }
        Ok(())
    }
}

/// One row of the audit log.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[schema(as = Edit)]
pub struct EditEntry {
    /// Its id (`memory undo ID`).
    pub id: i64,
    /// When (RFC 3339).
    pub at: String,
    /// Who: the HTTP token's or key's name, or `cli`.
    pub actor: String,
    /// The id of the store key (`mragent keys`) that made it, if one did.
    pub actor_key: Option<String>,
    /// `forget_message`, `correct_fact`, `undo` or `correction_lapsed`.
    pub kind: String,
    /// The conversation it changed.
    pub conversation: String,
    /// What it changed: a message id, a fact id, or the edit undone.
    pub target: String,
    /// The state before (the message, or the fact's value).
    #[schema(value_type = Option<Object>)]
    pub before: Option<Value>,
    /// The state after.
    #[schema(value_type = Option<Object>)]
    pub after: Option<Value>,
    /// The edit this one undoes.
    pub undoes: Option<i64>,
    /// The edit that undid this one, if any.
    pub undone_by: Option<i64>,
    /// For a correction: the `correction_lapsed` row saying it no longer holds, if any.
    pub lapsed_by: Option<i64>,
}

from_row!(store::Edit => EditEntry { id, at, actor, actor_key, kind, conversation, target, before, after, undoes, undone_by, lapsed_by });

/// One fact with its validity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[schema(as = StoredFact)]
pub struct FactEntry {
    /// The fact's id (`memory correct --fact ID`).
    pub id: i64,
    /// The conversation it was said in.
    pub conversation: String,
    /// Its session (`D<n>`).
    pub session: String,
    /// Its id in the session's rewrite (`D3:p1`).
    pub key: String,
    /// Who it is about.
    pub person: String,
    /// What about them (`job`, `home`…).
    pub aspect: String,
    /// The fact as memory holds it (a correction replaces the extracted value).
    pub value: String,
    /// The fact as the build extracted it.
    pub extracted: String,
    /// The turns it was drawn from (`D3:2`).
    pub origins: Vec<String>,
    /// When it became known: its session's first message (RFC 3339), if timed.
    pub valid_from: Option<String>,
    /// When a later fact replaced it, if one did.
    pub valid_to: Option<String>,
    /// The fact that replaced it.
    pub superseded_by: Option<i64>,
    /// The message it was drawn from (its id, as `memory show` lists it): with the aspect,
    /// what identifies the fact across rebuilds of its session (a correction follows it).
    pub source: Option<String>,
}

from_row!(store::StoredFact => FactEntry { id, conversation, session, key, person, aspect, value, extracted, origins, valid_from, valid_to, superseded_by, source });

/// What forgetting one message changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[schema(as = ForgottenMessage)]
pub struct MessageForgotten {
    /// Conversation id.
    pub conversation: String,
    /// The message id (its content hash).
    pub message: String,
    /// The session it was in (`D<n>`).
    pub session: String,
    /// The session held no other message and is gone too.
    pub session_removed: bool,
    /// The edit's id in the audit log (`memory undo` reverts it).
    pub edit: i64,
    /// Corrections (their edit ids) that lapsed: their facts came from this message. Each
    /// has a `correction_lapsed` row in the audit log.
    pub lapsed_corrections: Vec<i64>,
}

from_row!(store::ForgottenMessage => MessageForgotten { conversation, message, session, session_removed, edit, lapsed_corrections });
