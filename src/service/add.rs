//! `add`: store messages, then build the sessions that have no outputs for their content.

use std::time::Instant;

use futures::StreamExt as _;
use serde::Serialize;

use super::sink::StoreSink;
use super::{MemoryService, ServiceError, blocking};
use crate::convo::Message;
use crate::dataset::Conversation;
use crate::ingest::SessionError;
use crate::ingest::pipeline::{AskSettings, Models, run_stages, session_unit};
use crate::llm::{ChatModel, Embedder, Usage};
use crate::names::{MAX_MESSAGE_CHARS, MAX_MESSAGES_PER_ADD};
use crate::store::{AddScope, ForgottenMessage, JobError, JobStep};

/// A session the stages could not build; the next add retries it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct FailedSession {
    /// `D<number>`.
    pub session: String,
    /// Why.
    pub error: String,
}

/// What an add did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct AddReport {
    /// Conversation id.
    pub conversation: String,
    /// The conversation was created by this add.
    pub created: bool,
    /// Messages stored now.
    pub new_messages: usize,
    /// Messages that were stored already (skipped).
    pub duplicates: usize,
    /// Sessions built now (`D<n>`), in number order.
    pub built_sessions: Vec<String>,
    /// Sessions that failed to build.
    pub failed_sessions: Vec<FailedSession>,
    /// Sessions stored in all.
    pub sessions: usize,
    /// Chat calls made, re-asks included: the build's stages and the facts' settling.
    pub chat_calls: u32,
    /// Deciding whether the new facts replace older ones.
    pub facts: super::facts::FactsReport,
    /// Corrections (their edit ids) that lapsed in this add: the rebuilt session holds no fact
    /// of that aspect from that message any more. Each has a `correction_lapsed` row in the
    /// audit log (`memory history`).
    pub lapsed_corrections: Vec<i64>,
    /// Wall time in milliseconds.
    pub elapsed_ms: u64,
}

impl AddReport {
    /// The report of a write to `conversation` before its sessions are built.
    pub(super) fn before_build(
        conversation: &str,
        created: bool,
        new_messages: usize,
        duplicates: usize,
    ) -> Self {
        AddReport {
            conversation: conversation.to_string(),
            created,
            new_messages,
            duplicates,
            built_sessions: Vec::new(),
            failed_sessions: Vec::new(),
            sessions: 0,
            chat_calls: 0,
            facts: super::facts::FactsReport::default(),
            lapsed_corrections: Vec::new(),
            elapsed_ms: 0,
        }
    }

    /// Whether every session of the conversation is built.
    pub fn is_complete(&self) -> bool {
        self.failed_sessions.is_empty()
    }
}

impl std::fmt::Display for AddReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {} new messages ({} already stored), {} sessions built now, {} failed, {} sessions in all; {} model calls in {:.1}s",
            self.conversation,
            self.new_messages,
            self.duplicates,
            self.built_sessions.len(),
            self.failed_sessions.len(),
            self.sessions,
            self.chat_calls,
            self.elapsed_ms as f64 / 1000.0
        )?;
        for failed in &self.failed_sessions {
            write!(f, "\nfailed: {} ({})", failed.session, failed.error)?;
        }
        let facts = &self.facts;
        if facts.superseded > 0 || facts.undecided > 0 || !facts.errors.is_empty() {
            write!(
                f,
                "\nfacts: {} new, {} replaced an older value, {} pairs left undecided",
                facts.new_facts, facts.superseded, facts.undecided
            )?;
        }
        for error in &facts.errors {
            write!(f, "\nfacts undecided: {error}")?;
        }
        for edit in &self.lapsed_corrections {
            write!(
                f,
                "\ncorrection {edit} lapsed: its rebuilt session no longer holds the fact (see `memory history`)"
            )?;
        }
        Ok(())
    }
}

/// Refuses an add over the limits that the CLI and the HTTP API share ([`crate::names`]): no
/// messages, more than [`MAX_MESSAGES_PER_ADD`], or a text over [`MAX_MESSAGE_CHARS`]
/// characters. Each error names the field and the limit.
pub fn check_limits(messages: &[Message]) -> Result<(), ServiceError> {
    if messages.is_empty() {
        return Err(ServiceError::invalid("messages", "no messages"));
    }
    if messages.len() > MAX_MESSAGES_PER_ADD {
        return Err(ServiceError::invalid(
            "messages",
            format!(
                "{} messages in one add; the limit is {MAX_MESSAGES_PER_ADD} (split the input)",
                messages.len()
            ),
        ));
    }
    for (index, message) in messages.iter().enumerate() {
        let length = message.text.chars().count();
        if length > MAX_MESSAGE_CHARS {
            return Err(ServiceError::invalid(
                &format!("messages[{index}].text"),
                format!(
                    "{length} characters; the limit is {MAX_MESSAGE_CHARS} characters per message"
                ),
            ));
        }
    }
    Ok(())
}

/// The checks of every add, before anything is stored: the id, the limits, the scope.
pub(super) fn check_add(
    conversation: &str,
    scope: &AddScope,
    messages: &[Message],
) -> Result<(), ServiceError> {
    crate::store::check_conversation_id(conversation)
        .map_err(|error| ServiceError::invalid("conversation", error.to_string()))?;
    check_limits(messages)?;
    scope.check().map_err(|error| ServiceError::invalid("scope", error.to_string()))
}

/// The content hash recorded for session `number` when the build started.
fn content_hash(hashes: &[(u32, String)], number: u32) -> String {
    hashes.iter().find(|(n, _)| *n == number).map(|(_, hash)| hash.clone()).unwrap_or_default()
}

/// `D12` → 12, for ordering sessions by number rather than as text.
fn session_number(session: &str) -> u32 {
    session.trim_start_matches('D').parse().unwrap_or(u32::MAX)
}

impl<M, E> MemoryService<M, E>
where
    M: ChatModel,
    E: Embedder + Clone + 'static,
{
    /// Adds `messages` to `conversation` (created if new) and builds what is missing.
    pub async fn add(
        &self,
        conversation: &str,
        messages: Vec<Message>,
    ) -> Result<AddReport, ServiceError> {
        self.add_scoped(conversation, AddScope::default(), messages).await
    }

    /// [`MemoryService::add`] with the conversation's user and agent and the messages' tags.
    pub async fn add_scoped(
        &self,
        conversation: &str,
        scope: AddScope,
        messages: Vec<Message>,
    ) -> Result<AddReport, ServiceError> {
        let started = Instant::now();
        check_add(conversation, &scope, &messages)?;
        let (store, id) = (self.store.clone(), conversation.to_string());
        let (embedder, gap) = (self.settings.embedder.clone(), self.settings.session_gap);
        // The lock is taken and the messages written by one blocking task: if the caller is
        // dropped meanwhile (an HTTP client gave up), the write still happens under the lock,
        // never after it was released (a forget in between would be undone).
        let (lock, added) = blocking(move || {
            let lock = store.lock_conversation(&id)?;
            let added = store.add_messages(&id, &embedder, &scope, &messages, gap)?;
            Ok((lock, added))
        })
        .await?;
        let mut report = AddReport::before_build(
            conversation,
            added.created,
            added.new_messages,
            added.duplicates,
        );
        self.build_pending(&mut report, None).await?;
        drop(lock);
        report.elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        Ok(report)
    }

    /// Forgets one message of `conversation` (its id as `memory show` lists it), then rebuilds
    /// the session it was in from the messages left, as an add would.
    /// The edit is logged as `actor`'s.
    pub async fn forget_message(
        &self,
        conversation: &str,
        message: &str,
        actor: &str,
    ) -> Result<(ForgottenMessage, AddReport), ServiceError> {
        let started = Instant::now();
        let (store, id, hash) = (self.store.clone(), conversation.to_string(), message.to_string());
        let actor = actor.to_string();
        // Lock and write in one blocking task, as in `add`.
        let (lock, forgotten) = blocking(move || {
            let lock = store.lock_conversation(&id)?;
            let forgotten = store.forget_message(&id, &hash, &actor)?;
            Ok((lock, forgotten))
        })
        .await?;
        let mut report = AddReport::before_build(conversation, false, 0, 0);
        self.build_pending(&mut report, None).await?;
        drop(lock);
        report.elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        Ok((forgotten, report))
    }

    /// Builds every session of `report.conversation` without outputs for its content (the
    /// caller holds the conversation's lock), recording each failure in the store so that
    /// `memory show` and `ask` can say which sessions are missing and why.
    /// With `job`, each session's outcome is counted in that job's row as soon as it is known.
    pub(super) async fn build_pending(
        &self,
        report: &mut AddReport,
        job: Option<i64>,
    ) -> Result<(), ServiceError> {
        let conversation = report.conversation.clone();
        let conversation = conversation.as_str();
        let store = self.store.clone();
        let last_edit = blocking(move || store.last_edit()).await?;
        let stored = self.load_checked(conversation).await?;
        let pending = stored.pending();
        let dialogue = stored.to_conversation();
        tracing::info!(conversation, new = report.new_messages, pending = pending.len(), "adding");
        report.sessions = stored.sessions.len();
        let hashes: Vec<(u32, String)> = stored
            .sessions
            .iter()
            .map(|session| (session.number, session.content_hash.clone()))
            .collect();
        self.build_sessions(report, job, &dialogue, pending, &hashes).await?;
        self.settle_into(report, job).await?;
        let (store, id) = (self.store.clone(), conversation.to_string());
        report.lapsed_corrections = blocking(move || store.lapses_since(&id, last_edit)).await?;
        if self.cache.contains(conversation) {
            // Bring the cached index up to date now (only the new sessions are indexed), so the
            // next query finds it current. A failure here is the next query's to report.
            if let Err(error) = self.cached(conversation).await {
                tracing::warn!(conversation, %error, "updating the cached index");
            }
        }
        Ok(())
    }

    /// Builds the sessions `pending` of `dialogue`, `workers` at a time, into `report` (built,
    /// failed, chat calls), counting each outcome in `job`'s row; the endpoint refusing every
    /// request ends it.
    async fn build_sessions(
        &self,
        report: &mut AddReport,
        job: Option<i64>,
        dialogue: &Conversation,
        pending: Vec<u32>,
        hashes: &[(u32, String)],
    ) -> Result<(), ServiceError> {
        let mut results = futures::stream::iter(pending)
            .map(|number| async move { (number, self.build_one(dialogue, number, hashes).await) })
            .buffer_unordered(self.settings.workers.max(1));
        let mut built = Vec::new();
        while let Some((number, result)) = results.next().await {
            let step = match result {
                Ok((calls, usage)) => {
                    report.chat_calls += calls;
                    built.push(number);
                    JobStep {
                        built: true,
                        chat_calls: u64::from(calls),
                        prompt_tokens: usage.prompt_tokens,
                        completion_tokens: usage.completion_tokens,
                        error: None,
                    }
                }
                Err(SessionError::Fatal(error)) => {
                    return Err(
                        anyhow::anyhow!("the endpoint refuses every request: {error}").into()
                    );
                }
                Err(error) => self.record_failure(report, number, &error, hashes).await?,
            };
            if let Some(job) = job {
                let store = self.store.clone();
                blocking(move || store.job_step(job, &step)).await?;
            }
        }
        drop(results);
        built.sort_unstable();
        report.built_sessions = built.into_iter().map(|number| format!("D{number}")).collect();
        report.failed_sessions.sort_by_key(|failed| session_number(&failed.session));
        Ok(())
    }

    /// Records session `number`'s failure in the store and in `report`; the job step saying so.
    async fn record_failure(
        &self,
        report: &mut AddReport,
        number: u32,
        error: &SessionError,
        hashes: &[(u32, String)],
    ) -> Result<JobStep, ServiceError> {
        let error = error.to_string();
        let hash = content_hash(hashes, number);
        let (store, id, why) = (self.store.clone(), report.conversation.clone(), error.clone());
        blocking(move || store.record_failure(&id, number, &hash, &why)).await?;
        let session = format!("D{number}");
        let step = JobStep {
            error: Some(JobError { session: Some(session.clone()), error: error.clone() }),
            ..JobStep::default()
        };
        report.failed_sessions.push(FailedSession { session, error });
        Ok(step)
    }

    /// Settles the facts of the conversation's scope into `report`, its chat calls counted
    /// there and in `job`'s row.
    async fn settle_into(
        &self,
        report: &mut AddReport,
        job: Option<i64>,
    ) -> Result<(), ServiceError> {
        report.facts = self.settle_facts(&report.conversation).await?;
        report.chat_calls += report.facts.model_calls;
        if let Some(job) = job {
            // The settling's calls are the job's too.
            let facts = &report.facts;
            let step = JobStep {
                chat_calls: u64::from(facts.model_calls),
                prompt_tokens: facts.prompt_tokens,
                completion_tokens: facts.completion_tokens,
                ..JobStep::default()
            };
            let store = self.store.clone();
            blocking(move || store.job_spent(job, &step)).await?;
        }
        Ok(())
    }

    /// Builds one session through the stage sequence into the store; the chat calls it made.
    async fn build_one(
        &self,
        conversation: &Conversation,
        number: u32,
        hashes: &[(u32, String)],
    ) -> Result<(u32, Usage), SessionError> {
        let unit = session_unit(conversation, number).ok_or(SessionError::NoSuchSession(number))?;
        let ask = AskSettings {
            model: self.settings.model.clone(),
            max_reasks: self.settings.max_reasks,
        };
        let models = Models { chat: &self.chat, embedder: &self.embedder, ask: &ask };
        let sink = StoreSink::new(self, conversation, number, content_hash(hashes, number));
        run_stages(&models, &sink, &unit).await?;
        Ok(sink.spent())
    }
}
