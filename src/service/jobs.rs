//! Adds that do not wait: [`MemoryService::add_queued`] stores the messages and a job in one
//! transaction and returns at once; [`MemoryService::run_jobs`] (started by `serve`, by
//! `memory jobs --run`, and by the worker `memory add --no-wait` leaves behind) builds them.
//!
//! A runner claims jobs with a lease (`Store::claim_jobs`: on PostgreSQL `FOR UPDATE SKIP
//! LOCKED`), renews it while the job runs, and builds a job only while holding its
//! conversation's lock, taken without waiting (an OS file lock, or a PostgreSQL advisory lock,
//! released when its holder dies). So two runners (two processes or replicas, or a runner and a
//! blocking add) never build one conversation at once, and a job whose runner was killed is
//! taken over by another runner once its lease expires (`MRAGENT_JOB_LEASE`), or at once by a
//! runner of the same host, which can tell the claiming process is gone. A job builds only
//! the sessions without outputs for their current content, so what a dead runner committed is
//! never built again.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use super::add::check_add;
use super::{AddReport, MemoryService, ServiceError, blocking};
use crate::convo::Message;
use crate::llm::{ChatModel, Embedder};
use crate::store::{AddScope, ConversationLock, Job, JobError, StoreError};

/// Jobs a runner builds at once (each builds up to `workers` sessions at once; the model
/// client's adaptive limit bounds the requests in flight across all of them).
pub const MAX_RUNNING_JOBS: usize = 8;

/// How often an idle runner looks for jobs queued by another process, or freed by a dead one.
const POLL: Duration = Duration::from_millis(500);

/// What an add that does not wait answers: what it stored, and the job that builds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Queued {
    /// Conversation id.
    pub conversation: String,
    /// The conversation was created by this add.
    pub created: bool,
    /// Messages stored now.
    pub new_messages: usize,
    /// Messages that were stored already (skipped).
    pub duplicates: usize,
    /// The build job (`GET /v1/jobs/{id}`, `mragent memory jobs ID`).
    pub job: super::BackgroundJob,
}

/// What the command line prints of a queued add.
impl std::fmt::Display for Queued {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            formatter,
            "{}: {} new messages ({} already stored); job {} queued, {} sessions to build in the background (`mragent memory jobs {}` shows its progress)",
            self.conversation,
            self.new_messages,
            self.duplicates,
            self.job.id,
            self.job.sessions.pending,
            self.job.id
        )
    }
}

/// What an add that waits a bounded time answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Waited {
    /// Built within the bound: the add's report.
    Done(Box<AddReport>),
    /// Still building when the bound passed: what was stored, and the job that goes on.
    Building(Box<Queued>),
}

/// What a runner did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobsRun {
    /// The jobs it ended, by id, with the state they ended in.
    pub ended: BTreeMap<i64, Job>,
}

impl<M, E> MemoryService<M, E>
where
    M: ChatModel + 'static,
    E: Embedder + Clone + 'static,
{
    /// Stores `messages` in `conversation` (created if new) with a job that builds them, and
    /// wakes this service's runner. Checks as [`MemoryService::add_scoped`] does.
    pub async fn add_queued(
        &self,
        conversation: &str,
        scope: AddScope,
        messages: Vec<Message>,
    ) -> Result<Queued, ServiceError> {
        check_add(conversation, &scope, &messages)?;
        let (store, id) = (self.store.clone(), conversation.to_string());
        let (embedder, gap) = (self.settings.embedder.clone(), self.settings.session_gap);
        // No lock: a build in progress keeps its outputs only for sessions whose content did
        // not change (`Store::save_outputs`), and the new job builds the rest.
        let (added, job) =
            blocking(move || store.queue_messages(&id, &embedder, &scope, &messages, gap)).await?;
        self.jobs_wake.notify_one();
        tracing::info!(conversation, job = job.id, new = added.new_messages, "queued");
        Ok(Queued {
            conversation: conversation.to_string(),
            created: added.created,
            new_messages: added.new_messages,
            duplicates: added.duplicates,
            job: job.into(),
        })
    }

    /// Stores `messages` with a job (as [`MemoryService::add_queued`]) and builds them at
    /// once under the conversation's lock, as that job, waiting at most `bound`: the add's
    /// report if the build ended by then, else what was stored and the job, whose build goes
    /// on in the background (and is taken over by another runner if this process dies).
    pub async fn add_waiting(
        self: &Arc<Self>,
        conversation: &str,
        scope: AddScope,
        messages: Vec<Message>,
        bound: std::time::Duration,
    ) -> Result<Waited, ServiceError> {
        let started = std::time::Instant::now();
        check_add(conversation, &scope, &messages)?;
        let (store, id) = (self.store.clone(), conversation.to_string());
        let (embedder, gap) = (self.settings.embedder.clone(), self.settings.session_gap);
        // Lock and write in one blocking task, as `add` does. The wait for the lock counts
        // towards the bound: a lock still held then (a long job of the conversation) leaves
        // the messages to a queued job, as an add that does not wait would.
        let deadline = started + bound;
        let (lock, added, job) = blocking(move || {
            let lock = loop {
                if let Some(lock) = store.try_lock_conversation(&id)? {
                    break Some(lock);
                }
                if std::time::Instant::now() >= deadline {
                    break None;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            };
            let (added, job) = store.queue_messages(&id, &embedder, &scope, &messages, gap)?;
            Ok((lock, added, job))
        })
        .await?;
        let Some(lock) = lock else {
            self.jobs_wake.notify_one();
            return Ok(Waited::Building(Box::new(Queued {
                conversation: conversation.to_string(),
                created: added.created,
                new_messages: added.new_messages,
                duplicates: added.duplicates,
                job: job.into(),
            })));
        };
        let service = Arc::clone(self);
        let id = conversation.to_string();
        let (created, new_messages, duplicates) =
            (added.created, added.new_messages, added.duplicates);
        let (job, pending) = (job.id, usize::try_from(job.sessions.pending).unwrap_or(0));
        let build = tokio::spawn(async move {
            let mut report = AddReport::before_build(&id, created, new_messages, duplicates);
            let store = service.store.clone();
            blocking(move || store.start_job(job, pending)).await?;
            let built = service.build_pending(&mut report, Some(job)).await;
            let ended = service.end_job(job, built.as_ref().err().map(|e| e.to_string())).await;
            drop(lock);
            built?;
            ended?;
            report.elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
            Ok::<AddReport, ServiceError>(report)
        });
        match tokio::time::timeout(bound, build).await {
            Ok(Ok(report)) => Ok(Waited::Done(Box::new(report?))),
            Ok(Err(failed)) => Err(anyhow::anyhow!("the add's build task failed: {failed}").into()),
            Err(_) => {
                tracing::info!(conversation, job, "the add stopped waiting; its job goes on");
                Ok(Waited::Building(Box::new(Queued {
                    conversation: conversation.to_string(),
                    created,
                    new_messages,
                    duplicates,
                    job: self.job(job).await?.into(),
                })))
            }
        }
    }

    /// One job.
    pub async fn job(&self, id: i64) -> Result<Job, ServiceError> {
        let store = self.store.clone();
        blocking(move || store.job(id)).await
    }

    /// Jobs, newest first (see [`crate::store::Store::jobs`]).
    pub async fn jobs(
        &self,
        conversation: Option<String>,
        unfinished: bool,
        limit: usize,
    ) -> Result<Vec<Job>, ServiceError> {
        let store = self.store.clone();
        blocking(move || store.jobs(conversation.as_deref(), unfinished, limit)).await
    }

    /// Gives up this runner's claims (call once its runner has stopped): its unfinished jobs
    /// are taken over at once by another runner instead of when their leases expire.
    pub async fn release_jobs(&self) -> Result<u64, ServiceError> {
        let (store, runner) = (self.store.clone(), self.runner.clone());
        blocking(move || store.release_jobs_of(&runner)).await
    }

    /// Jobs of the conversations `conversations`, newest first, at most `limit`.
    pub async fn jobs_of(
        &self,
        conversations: Vec<String>,
        unfinished: bool,
        limit: usize,
    ) -> Result<Vec<Job>, ServiceError> {
        let store = self.store.clone();
        blocking(move || store.jobs_of(&conversations, unfinished, limit)).await
    }

    /// Sessions stored in `scope` but not built yet (a job or an add is building them, or
    /// they failed and wait for the next), so a search can say what it could not see yet.
    pub async fn pending_sessions(&self, scope: &super::Scope) -> Result<u64, ServiceError> {
        let (store, scope) = (self.store.clone(), scope.clone());
        blocking(move || {
            let infos = match &scope {
                super::Scope::Conversation(id) => store.info(id)?.into_iter().collect(),
                super::Scope::User(user) => store.list_of(Some(user))?,
            };
            let pending = infos.iter().map(|info| info.sessions - info.built_sessions);
            Ok(pending.map(|count| count.max(0) as u64).sum())
        })
        .await
    }

    /// Runs the unfinished jobs of conversations embedded with this service's embedder, up to
    /// [`MAX_RUNNING_JOBS`] at once. With `until_idle`, returns once none is left that this
    /// runner can take (jobs locked by another runner are left to it); otherwise runs until
    /// the task is dropped, waking on [`MemoryService::add_queued`] and every [`POLL`].
    pub async fn run_jobs(self: Arc<Self>, until_idle: bool) -> JobsRun {
        let mut tasks = tokio::task::JoinSet::new();
        let mut busy: BTreeMap<tokio::task::Id, String> = BTreeMap::new();
        let mut run = JobsRun::default();
        loop {
            let taken: BTreeSet<String> = busy.values().cloned().collect();
            match self.claim_jobs(&taken, MAX_RUNNING_JOBS.saturating_sub(tasks.len())).await {
                Ok(claimed) => {
                    for (id, conversation, lock) in claimed {
                        let service = Arc::clone(&self);
                        let name = conversation.clone();
                        let task = tasks.spawn(async move {
                            let result = service.run_job(id, &conversation, lock).await;
                            (id, result)
                        });
                        busy.insert(task.id(), name);
                    }
                }
                Err(error) => tracing::warn!(%error, "looking for jobs"),
            }
            if until_idle && tasks.is_empty() {
                return run;
            }
            tokio::select! {
                () = self.jobs_wake.notified() => {}
                () = tokio::time::sleep(POLL) => {}
                Some(joined) = tasks.join_next_with_id() => match joined {
                    Ok((task, (id, result))) => {
                        busy.remove(&task);
                        match result {
                            Ok(job) => {
                                tracing::info!(job = id, state = job.state.name(), "job ended");
                                run.ended.insert(id, job);
                            }
                            Err(error) => tracing::warn!(job = id, %error, "job left unfinished"),
                        }
                    }
                    Err(error) => {
                        busy.remove(&error.id());
                        tracing::error!(%error, "a job task failed");
                    }
                },
            }
        }
    }

    /// Up to `room` unfinished jobs this runner can take now, oldest first, each claimed
    /// with a lease ([`crate::store::Store::claim_jobs`]) and holding its conversation's lock:
    /// not of a conversation in `taken` (one job per conversation at once), not of one
    /// embedded otherwise, not of one whose lock another holder has. A claimed job this runner
    /// cannot take is released at once.
    async fn claim_jobs(
        &self,
        taken: &BTreeSet<String>,
        room: usize,
    ) -> Result<Vec<(i64, String, ConversationLock)>, ServiceError> {
        if room == 0 {
            return Ok(Vec::new());
        }
        let (store, taken) = (self.store.clone(), taken.clone());
        let embedder = self.settings.embedder.clone();
        let (runner, lease) = (self.runner.clone(), self.settings.job_lease);
        blocking(move || {
            // A claim of a runner known dead need not wait for its lease to expire.
            for (id, owner) in store.claimed_jobs()? {
                if runner_is_gone(&owner, &runner) {
                    store.release_job(id, &owner)?;
                }
            }
            let mut claimed: Vec<(i64, String, ConversationLock)> = Vec::new();
            for (id, conversation) in store.claim_jobs(&runner, lease, room)? {
                let free = !taken.contains(&conversation)
                    && !claimed.iter().any(|(_, other, _)| *other == conversation)
                    && store.info(&conversation)?.is_none_or(|info| info.embedder == embedder);
                let lock = if free { store.try_lock_conversation(&conversation)? } else { None };
                match lock {
                    Some(lock) => claimed.push((id, conversation, lock)),
                    None => store.release_job(id, &runner)?,
                }
            }
            Ok(claimed)
        })
        .await
    }

    /// Runs job `id` of `conversation`, whose lock the caller took and whose lease it holds
    /// (renewed every third of the lease while the job runs); the job as it ended.
    async fn run_job(
        &self,
        id: i64,
        conversation: &str,
        lock: ConversationLock,
    ) -> Result<Job, ServiceError> {
        let pending = match self.load_checked(conversation).await {
            Ok(stored) => stored.pending().len(),
            Err(ServiceError::Store(StoreError::UnknownConversation(_))) => {
                let why = "the conversation was forgotten before its job ran";
                return self.end_job(id, Some(why.to_string())).await;
            }
            Err(error) => return self.end_job(id, Some(error.to_string())).await,
        };
        let store = self.store.clone();
        let Some(job) = blocking(move || store.start_job(id, pending)).await? else {
            // Another runner ended it between the claim and the lock.
            return self.job(id).await;
        };
        tracing::info!(conversation, job = id, attempt = job.attempts, pending, "job started");
        let renewal = self.renew_lease(id);
        let mut report = AddReport::before_build(conversation, false, 0, 0);
        let built = self.build_pending(&mut report, Some(id)).await;
        renewal.abort();
        let ended = self.end_job(id, built.err().map(|error| error.to_string())).await;
        drop(lock);
        ended
    }

    /// A task renewing this runner's lease on job `id` until aborted.
    fn renew_lease(&self, id: i64) -> tokio::task::JoinHandle<()> {
        let (store, runner, lease) =
            (self.store.clone(), self.runner.clone(), self.settings.job_lease);
        tokio::spawn(async move {
            let mut every = tokio::time::interval(lease / 3);
            every.tick().await;
            loop {
                every.tick().await;
                let (store, runner) = (store.clone(), runner.clone());
                match blocking(move || store.renew_job(id, &runner, lease)).await {
                    Ok(true) => {}
                    Ok(false) => {
                        tracing::warn!(job = id, "the job's lease was lost");
                        return;
                    }
                    Err(error) => tracing::warn!(job = id, %error, "renewing the job's lease"),
                }
            }
        })
    }

    async fn end_job(&self, id: i64, error: Option<String>) -> Result<Job, ServiceError> {
        let store = self.store.clone();
        let error = error.map(|error| JobError { session: None, error });
        blocking(move || store.finish_job(id, error)).await
    }
}

/// A name for this process as a job runner: host (the pod's name under Kubernetes), process
/// id and start time, unique among the runners sharing one store.
pub(super) fn runner_name() -> String {
    let host = crate::settings::runner_host();
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|since| since.as_nanos())
        .unwrap_or_default();
    format!("{host}:{}:{started}", std::process::id())
}

/// Whether runner `owner` is known to be gone, as seen by runner `me`: it ran on this host (the
/// same name) and its process no longer exists, or it was an earlier process with this
/// process's id (a restarted container, whose server is process 1 again). A runner of another
/// host is never known gone: its claim ends when its lease expires.
pub(super) fn runner_is_gone(owner: &str, me: &str) -> bool {
    let parts = |name: &str| -> Option<(String, String)> {
        let mut parts = name.rsplitn(3, ':');
        let _started = parts.next()?;
        let pid = parts.next()?.to_string();
        Some((parts.next()?.to_string(), pid))
    };
    let (Some((host, pid)), Some((my_host, my_pid))) = (parts(owner), parts(me)) else {
        return false;
    };
    if host != my_host || owner == me {
        return false;
    }
    pid == my_pid || !std::path::Path::new("/proc").join(&pid).exists()
}

#[cfg(test)]
mod tests {
    use super::runner_is_gone;

    #[test]
    fn a_runner_is_known_gone_only_on_this_host() {
        let me = format!("pod-a:{}:100", std::process::id());
        assert!(!runner_is_gone(&me, &me));
        // An earlier process with this process id (a restarted container).
        assert!(runner_is_gone(&format!("pod-a:{}:50", std::process::id()), &me));
        // A process of this host that no longer exists; one that does (process 1).
        assert!(runner_is_gone("pod-a:4194304:7", &me));
        assert!(!runner_is_gone("pod-a:1:7", &me));
        // Another host's runner: only its lease tells.
        assert!(!runner_is_gone("pod-b:4194304:7", &me));
        assert!(!runner_is_gone("garbage", &me));
    }
}
