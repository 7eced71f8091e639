//! Background build jobs: an add that does not wait (`"wait": false`, `memory add --no-wait`)
//! stores its messages and queues a job in one transaction; a runner (`service::jobs`) takes the
//! conversation's lock, builds every session pending at that moment, and keeps the job's
//! counters current after each session. Jobs are rows, so they outlive the process: a runner
//! that starts finds the queued jobs, and the running jobs whose runner died (their
//! conversation's lock is free again), and runs them. Sessions already built are never built
//! again: a job builds only what has no outputs for its current content.

use chrono::{SecondsFormat, TimeDelta, Utc};
use serde::{Deserialize, Serialize};

use super::db::{Backend, Conn, Row, params};
use super::write::{AddScope, Added, add_in};
use super::{Store, StoreError, check_conversation_id};
use crate::convo::Message;

/// Where a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// Stored, not started (or its runner died and it waits for the next).
    Queued,
    /// A runner is building its sessions.
    Running,
    /// Every session it found pending is built.
    Done,
    /// Some session failed (the next add or job retries it), or the job could not run.
    Failed,
}

impl JobState {
    fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Done => "done",
            JobState::Failed => "failed",
        }
    }

    fn parse(text: &str) -> Result<Self, StoreError> {
        Ok(match text {
            "queued" => JobState::Queued,
            "running" => JobState::Running,
            "done" => JobState::Done,
            "failed" => JobState::Failed,
            other => return Err(StoreError::Corrupt(format!("job state {other:?}"))),
        })
    }

    /// Every state, in order (for listings and metrics).
    pub const ALL: [JobState; 4] =
        [JobState::Queued, JobState::Running, JobState::Done, JobState::Failed];

    /// The state's name as stored and served.
    pub fn name(self) -> &'static str {
        self.as_str()
    }
}

/// One error of a job: a session that failed, or why the job could not run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobError {
    /// `D<n>`, or absent for an error of the whole job.
    pub session: Option<String>,
    /// What went wrong.
    pub error: String,
}

/// A job's session counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct JobSessions {
    /// Built by this job.
    pub done: u64,
    /// Failed in its last run.
    pub failed: u64,
    /// Still to build in its current run (all of them while it is queued).
    pub pending: u64,
}

/// A job's token use (chat calls of the build, re-asks included).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct JobTokens {
    /// Prompt tokens.
    pub prompt: u64,
    /// Completion tokens.
    pub completion: u64,
}

/// A background build job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Job {
    /// Its id.
    pub id: i64,
    /// The conversation it builds.
    pub conversation: String,
    /// Where it is.
    pub state: JobState,
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
    pub sessions: JobSessions,
    /// Chat calls made.
    pub chat_calls: u64,
    /// Tokens used.
    pub tokens: JobTokens,
    /// Failed sessions and job errors.
    pub errors: Vec<JobError>,
}

/// What one built or failed session adds to a running job.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobStep {
    /// Whether the session was built.
    pub built: bool,
    /// Chat calls it made.
    pub chat_calls: u64,
    /// Prompt tokens.
    pub prompt_tokens: u64,
    /// Completion tokens.
    pub completion_tokens: u64,
    /// Why it failed.
    pub error: Option<JobError>,
}

const JOB_COLUMNS: &str =
    "id, conversation_id, state, created_at, started_at, finished_at, attempts,
    new_messages, duplicates, sessions_done, sessions_failed, sessions_pending, chat_calls,
    prompt_tokens, completion_tokens, errors";

fn job_of_row(row: &Row) -> Result<(Job, String, String), StoreError> {
    let count = |index: usize| row.get::<i64>(index).map(|value| value.max(0) as u64);
    let job = Job {
        id: row.get(0)?,
        conversation: row.get(1)?,
        state: JobState::Queued,
        created_at: row.get(3)?,
        started_at: row.get(4)?,
        finished_at: row.get(5)?,
        attempts: u32::try_from(count(6)?).unwrap_or(u32::MAX),
        new_messages: count(7)?,
        duplicates: count(8)?,
        sessions: JobSessions { done: count(9)?, failed: count(10)?, pending: count(11)? },
        chat_calls: count(12)?,
        tokens: JobTokens { prompt: count(13)?, completion: count(14)? },
        errors: Vec::new(),
    };
    Ok((job, row.get(2)?, row.get(15)?))
}

fn decode(row: (Job, String, String)) -> Result<Job, StoreError> {
    let (mut job, state, errors) = row;
    job.state = JobState::parse(&state)?;
    job.errors = serde_json::from_str(&errors)
        .map_err(|error| StoreError::Corrupt(format!("job {} errors: {error}", job.id)))?;
    Ok(job)
}

fn now() -> String {
    stamp(Utc::now())
}

/// The end of a lease of `lease` from now (at most a day).
fn lease_end(lease: std::time::Duration) -> String {
    let day = TimeDelta::days(1);
    stamp(Utc::now() + TimeDelta::from_std(lease).unwrap_or(day).min(day))
}

/// A time as the jobs table keeps it: RFC 3339 UTC with milliseconds, fixed width, so that
/// text order is time order (leases are compared as text on both backends).
fn stamp(time: chrono::DateTime<Utc>) -> String {
    time.to_rfc3339_opts(SecondsFormat::Millis, true)
}

fn read_job(connection: &Conn, id: i64) -> Result<Job, StoreError> {
    let row = connection
        .query_opt(
            &format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?1"),
            params![id],
            job_of_row,
        )?
        .ok_or(StoreError::UnknownJob(id))?;
    decode(row)
}

fn errors_json(errors: &[JobError]) -> Result<String, StoreError> {
    serde_json::to_string(errors).map_err(|error| StoreError::Corrupt(error.to_string()))
}

impl Store {
    /// [`Store::add_messages`] that also queues a build job, in the same transaction: once this
    /// returns, both the messages and the job survive a crash.
    pub fn queue_messages(
        &self,
        conversation: &str,
        embedder: &str,
        scope: &AddScope,
        messages: &[Message],
        gap: TimeDelta,
    ) -> Result<(Added, Job), StoreError> {
        check_conversation_id(conversation)?;
        scope.check()?;
        let mut connection = self.connect()?;
        let transaction = connection.write()?;
        let added = add_in(&transaction, conversation, embedder, scope, messages, gap)?;
        let pending: i64 = transaction.query_row(
            "SELECT COUNT(*) FROM sessions s WHERE s.conversation_id = ?1 AND NOT EXISTS
             (SELECT 1 FROM session_outputs o
              WHERE o.conversation_id = s.conversation_id AND o.session_number = s.number)",
            params![conversation],
            |row| row.get(0),
        )?;
        let id: i64 = transaction.query_row(
            "INSERT INTO jobs (conversation_id, state, created_at, new_messages, duplicates,
                sessions_pending)
             VALUES (?1, 'queued', ?2, ?3, ?4, ?5) RETURNING id",
            params![
                conversation,
                now(),
                added.new_messages as i64,
                added.duplicates as i64,
                pending
            ],
            |row| row.get(0),
        )?;
        let job = read_job(&transaction, id)?;
        transaction.commit()?;
        Ok((added, job))
    }

    /// One job.
    pub fn job(&self, id: i64) -> Result<Job, StoreError> {
        read_job(&self.connect()?, id)
    }

    /// Jobs, newest first: of one conversation or all, only the unfinished ones (queued or
    /// running) or all, at most `limit`.
    pub fn jobs(
        &self,
        conversation: Option<&str>,
        unfinished: bool,
        limit: usize,
    ) -> Result<Vec<Job>, StoreError> {
        if let Some(conversation) = conversation {
            check_conversation_id(conversation)?;
        }
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self.connect()?.query(
            &format!(
                "SELECT {JOB_COLUMNS} FROM jobs
                 WHERE (CAST(?1 AS TEXT) IS NULL OR conversation_id = ?1)
                   AND (?2 = 0 OR state IN ('queued', 'running'))
                 ORDER BY id DESC LIMIT ?3"
            ),
            params![conversation, unfinished, limit],
            job_of_row,
        )?;
        rows.into_iter().map(decode).collect()
    }

    /// Jobs of the conversations `conversations`, newest first, at most `limit` (the jobs a
    /// user-bound key reaches).
    pub fn jobs_of(
        &self,
        conversations: &[String],
        unfinished: bool,
        limit: usize,
    ) -> Result<Vec<Job>, StoreError> {
        let mut jobs = Vec::new();
        for conversation in conversations {
            jobs.extend(self.jobs(Some(conversation), unfinished, limit)?);
        }
        jobs.sort_by_key(|job| std::cmp::Reverse(job.id));
        jobs.truncate(limit);
        Ok(jobs)
    }

    /// Claims up to `limit` unfinished jobs for `owner` until `lease` from now, oldest first:
    /// the queued ones and the running ones whose lease has expired (their runner died or lost
    /// the database), none claimed by another runner whose lease still holds. On PostgreSQL
    /// the rows are taken `FOR UPDATE SKIP LOCKED`, so runners claiming at once never wait for
    /// or take each other's jobs. Returns `(job, conversation)` by id.
    pub fn claim_jobs(
        &self,
        owner: &str,
        lease: std::time::Duration,
        limit: usize,
    ) -> Result<Vec<(i64, String)>, StoreError> {
        let connection = self.connect()?;
        let skip_locked = match connection.backend() {
            Backend::Postgres => "FOR UPDATE SKIP LOCKED",
            Backend::Sqlite => "",
        };
        let now = Utc::now();
        let mut claimed = connection.query(
            &format!(
                "UPDATE jobs SET lease_owner = ?1, lease_until = ?2
                 WHERE id IN (SELECT id FROM jobs
                     WHERE state IN ('queued', 'running')
                       AND (lease_until IS NULL OR lease_until < ?3)
                     ORDER BY id LIMIT ?4 {skip_locked})
                 RETURNING id, conversation_id"
            ),
            params![owner, lease_end(lease), stamp(now), limit],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )?;
        claimed.sort();
        Ok(claimed)
    }

    /// The unfinished jobs claimed by a runner, with the claiming runner.
    pub fn claimed_jobs(&self) -> Result<Vec<(i64, String)>, StoreError> {
        self.connect()?.query(
            "SELECT id, lease_owner FROM jobs
             WHERE state IN ('queued', 'running') AND lease_owner IS NOT NULL ORDER BY id",
            params![],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
    }

    /// Gives up `owner`'s claim on job `id` (another runner may claim it at once).
    pub fn release_job(&self, id: i64, owner: &str) -> Result<(), StoreError> {
        self.connect()?.execute(
            "UPDATE jobs SET lease_owner = NULL, lease_until = NULL
             WHERE id = ?1 AND lease_owner = ?2",
            params![id, owner],
        )?;
        Ok(())
    }

    /// Gives up every claim of `owner` (a runner shutting down): its unfinished jobs can be
    /// claimed by another runner at once instead of when their leases expire. Returns how many.
    pub fn release_jobs_of(&self, owner: &str) -> Result<u64, StoreError> {
        self.connect()?.execute(
            "UPDATE jobs SET lease_owner = NULL, lease_until = NULL
             WHERE lease_owner = ?1 AND state IN ('queued', 'running')",
            params![owner],
        )
    }

    /// Extends `owner`'s lease on job `id` to `lease` from now; `false` when the claim was lost
    /// (the job ended, or another runner took it over after the lease expired).
    pub fn renew_job(
        &self,
        id: i64,
        owner: &str,
        lease: std::time::Duration,
    ) -> Result<bool, StoreError> {
        let changed = self.connect()?.execute(
            "UPDATE jobs SET lease_until = ?3
             WHERE id = ?1 AND lease_owner = ?2 AND state IN ('queued', 'running')",
            params![id, owner, lease_end(lease)],
        )?;
        Ok(changed == 1)
    }

    /// The lease of job `id`: its owner and until when (RFC 3339).
    pub fn job_lease(&self, id: i64) -> Result<(Option<String>, Option<String>), StoreError> {
        self.connect()?
            .query_opt(
                "SELECT lease_owner, lease_until FROM jobs WHERE id = ?1",
                params![id],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )?
            .ok_or(StoreError::UnknownJob(id))
    }

    /// Starts a run of job `id` (the caller holds its conversation's lock) with `pending`
    /// sessions to build. `None` when the job has ended meanwhile (another runner did it).
    pub fn start_job(&self, id: i64, pending: usize) -> Result<Option<Job>, StoreError> {
        let connection = self.connect()?;
        let changed = connection.execute(
            "UPDATE jobs SET state = 'running', started_at = ?2, attempts = attempts + 1,
                sessions_pending = ?3, sessions_failed = 0
             WHERE id = ?1 AND state IN ('queued', 'running')",
            params![id, now(), pending as i64],
        )?;
        if changed == 0 {
            read_job(&connection, id)?;
            return Ok(None);
        }
        read_job(&connection, id).map(Some)
    }

    /// Counts one session of a running job.
    pub fn job_step(&self, id: i64, step: &JobStep) -> Result<(), StoreError> {
        let mut connection = self.connect()?;
        let transaction = connection.write()?;
        let mut errors = read_job(&transaction, id)?.errors;
        errors.extend(step.error.clone());
        transaction.execute(
            "UPDATE jobs SET sessions_done = sessions_done + ?2,
                sessions_failed = sessions_failed + ?3,
                sessions_pending = CASE WHEN sessions_pending > 0 THEN sessions_pending - 1
                    ELSE 0 END,
                chat_calls = chat_calls + ?4, prompt_tokens = prompt_tokens + ?5,
                completion_tokens = completion_tokens + ?6, errors = ?7
             WHERE id = ?1",
            params![
                id,
                i64::from(step.built),
                i64::from(!step.built),
                step.chat_calls as i64,
                step.prompt_tokens as i64,
                step.completion_tokens as i64,
                errors_json(&errors)?
            ],
        )?;
        transaction.commit()?;
        Ok(())
    }

    /// Counts calls job `id` made beside its sessions' builds (settling their facts): only
    /// `step`'s calls and tokens.
    pub fn job_spent(&self, id: i64, step: &JobStep) -> Result<(), StoreError> {
        self.connect()?.execute(
            "UPDATE jobs SET chat_calls = chat_calls + ?2, prompt_tokens = prompt_tokens + ?3,
                completion_tokens = completion_tokens + ?4
             WHERE id = ?1",
            params![
                id,
                step.chat_calls as i64,
                step.prompt_tokens as i64,
                step.completion_tokens as i64
            ],
        )?;
        Ok(())
    }

    /// Ends job `id`: done, or failed with `error` (or with the failed sessions it counted).
    pub fn finish_job(&self, id: i64, error: Option<JobError>) -> Result<Job, StoreError> {
        let mut connection = self.connect()?;
        let transaction = connection.write()?;
        let mut job = read_job(&transaction, id)?;
        job.errors.extend(error.clone());
        let failed = error.is_some() || job.sessions.failed > 0;
        let state = if failed { JobState::Failed } else { JobState::Done };
        transaction.execute(
            "UPDATE jobs SET state = ?2, finished_at = ?3, errors = ?4,
                sessions_pending = CASE WHEN ?5 = 1 THEN sessions_pending ELSE 0 END,
                lease_owner = NULL, lease_until = NULL
             WHERE id = ?1",
            params![id, state.as_str(), now(), errors_json(&job.errors)?, error.is_some()],
        )?;
        let job = read_job(&transaction, id)?;
        transaction.commit()?;
        Ok(job)
    }
}
