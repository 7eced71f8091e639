//! The machinery every unit-by-unit stage run shares (the build's three stages and the MemGAS
//! granules): the worker [`Pool`], the per-conversation [`ConversationTally`], and [`settle`], which
//! records a unit's result in its cache and the tally through a [`Ledger`].

use std::future::Future;
use std::sync::Mutex as StdMutex;

use anyhow::Context as _;
use futures::stream::{FuturesUnordered, StreamExt as _};
use serde::Serialize;
use tokio::sync::{Mutex, Semaphore};
use tracing::Instrument as _;

use crate::dataset::Conversation;
use crate::ingest::ask::{self, AskFailure, AskSettings};
use crate::ingest::cache::{PlannedUnit, StageCache, StageLookup, UnitEntry};
use crate::ingest::progress::BuildProgress;
use crate::ingest::unit::Unit;
use crate::ingest::{BuildSettings, FailedUnit, Stage};
use crate::llm::{self, Usage};

/// What a run shares across all its units: the ask settings, the worker permits, the
/// progress bar and the cache-invalidation notices.
pub(super) struct Pool {
    pub(super) ask: AskSettings,
    /// Bounds the units in flight across all conversations to `settings.workers`. A unit
    /// holds one permit from its first model call until its last stage is written, so the
    /// number of concurrent requests never exceeds the number of workers.
    permits: Semaphore,
    pub(super) progress: BuildProgress,
    /// Cache-invalidation notices, in the order they were found.
    notices: StdMutex<Vec<String>>,
}

impl Pool {
    /// A pool for `settings.workers` units at a time, its progress bar counting the sessions
    /// with turns of `conversations`.
    pub(super) fn new(settings: &BuildSettings, conversations: &[Conversation]) -> Self {
        let total: usize = conversations
            .iter()
            .map(|c| c.sessions.iter().filter(|s| !s.turns.is_empty()).count())
            .sum();
        Self {
            ask: AskSettings { model: settings.model.clone(), max_reasks: settings.max_reasks },
            permits: Semaphore::new(settings.workers.max(1)),
            progress: BuildProgress::new(total as u64, settings.progress),
            notices: StdMutex::new(Vec::new()),
        }
    }

    pub(super) fn notice(&self, notice: String) {
        tracing::warn!("{notice}");
        self.notices.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(notice);
    }

    /// Wait for a worker permit (`closed` names the pool in the impossible error).
    pub(super) async fn permit(
        &self,
        closed: &'static str,
    ) -> anyhow::Result<tokio::sync::SemaphorePermit<'_>> {
        self.permits.acquire().await.context(closed)
    }

    /// Run one unit's `work` under a worker permit and `span`, then count its `sessions` as
    /// done on the progress bar.
    pub(super) async fn run_unit(
        &self,
        closed: &'static str,
        span: tracing::Span,
        sessions: usize,
        work: impl Future<Output = anyhow::Result<()>>,
    ) -> anyhow::Result<()> {
        let _permit = self.permit(closed).await?;
        let result = work.instrument(span).await;
        self.progress.done(sessions);
        result
    }

    /// End the run: finish the progress bar; the notices and the summed usage of `usages`.
    pub(super) fn finish(self, usages: impl Iterator<Item = Usage>) -> (Vec<String>, Usage) {
        self.progress.finish();
        let usage = usages.fold(Usage::default(), |total, usage| total + usage);
        (self.notices.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner), usage)
    }
}

/// Drive every unit future to completion; the first `Err` aborts the run.
pub(super) async fn run_all(
    units: impl IntoIterator<Item = impl Future<Output = anyhow::Result<()>>>,
) -> anyhow::Result<()> {
    let mut in_flight: FuturesUnordered<_> = units.into_iter().collect();
    while let Some(result) = in_flight.next().await {
        result?;
    }
    Ok(())
}

/// What this run spent and what failed, for one conversation.
#[derive(Debug, Default)]
pub(super) struct ConversationTally {
    pub(super) usage: Usage,
    pub(super) chat_calls: u32,
    pub(super) failed: Vec<FailedUnit>,
}

impl ConversationTally {
    /// The tally out of its lock (a poisoned lock still holds a valid tally).
    pub(super) fn take(tally: StdMutex<ConversationTally>) -> ConversationTally {
        tally.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Where [`settle`] accounts for a stage result: the progress bar and one conversation's
/// tally. The build's stages and the MemGAS granules (`granules.rs`) settle their units
/// through it.
#[derive(Clone, Copy)]
pub(super) struct Ledger<'a> {
    pub(super) progress: &'a BuildProgress,
    pub(super) conversation: &'a Conversation,
    pub(super) tally: &'a StdMutex<ConversationTally>,
}

impl Ledger<'_> {
    pub(super) fn tally(&self) -> std::sync::MutexGuard<'_, ConversationTally> {
        self.tally.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Record a stage's result in its cache and the tally; the output when it succeeded.
pub(super) async fn settle<T: Serialize + serde::de::DeserializeOwned + Clone>(
    ledger: Ledger<'_>,
    unit: &Unit<'_>,
    stage: Stage,
    planned: &PlannedUnit,
    asked: Result<ask::Asked<T>, AskFailure>,
    cache: &Mutex<StageCache<T>>,
) -> anyhow::Result<Option<T>> {
    let (usage, attempts) = match &asked {
        Ok(asked) => (asked.usage, asked.attempts),
        Err(failure) => (failure.usage, failure.attempts),
    };
    ledger.progress.tokens(usage);
    {
        let mut tally = ledger.tally();
        tally.usage += usage;
        tally.chat_calls += attempts;
    }
    let (outcome, output) = match asked {
        Ok(asked) => (StageLookup::Done { output: asked.value.clone() }, Some(asked.value)),
        Err(failure) => {
            if let Some(error) = &failure.llm_error {
                abort_if_fatal(error)?;
            }
            ledger.progress.failure();
            tracing::warn!(sample = %ledger.conversation.sample_id, unit = %unit.key, %stage, error = %failure.error, "unit failed");
            ledger.tally().failed.push(failed_unit(
                ledger.conversation,
                unit,
                stage,
                failure.error.clone(),
                attempts,
            ));
            (StageLookup::Failed { error: failure.error }, None)
        }
    };
    let entry = UnitEntry {
        unit: planned.key.clone(),
        first_session: planned.first_session,
        input_hash: planned.input_hash.clone(),
        attempts,
        usage,
        outcome,
    };
    let mut cache = cache.lock().await;
    cache.record(entry).await.with_context(|| format!("writing {}", cache.path().display()))?;
    Ok(output)
}

/// Errors that would fail every unit the same way abort the build instead of being recorded
/// unit by unit: a configuration problem, a rejected key, an unknown model.
pub(super) fn abort_if_fatal(error: &llm::Error) -> anyhow::Result<()> {
    if is_fatal(error) {
        return Err(anyhow::anyhow!(
            "the endpoint refuses every request, stopping the build: {error}"
        ));
    }
    Ok(())
}

/// Whether `error` would fail every unit alike (see [`abort_if_fatal`]): a configuration problem
/// or what the LLM layer calls fatal (rejected key, unknown model).
pub(super) fn is_fatal(error: &llm::Error) -> bool {
    matches!(error, llm::Error::Config(_)) || error.is_fatal()
}

pub(super) fn failed_unit(
    conversation: &Conversation,
    unit: &Unit<'_>,
    stage: Stage,
    error: String,
    attempts: u32,
) -> FailedUnit {
    FailedUnit {
        sample_id: conversation.sample_id.clone(),
        unit: unit.key.clone(),
        sessions: unit.session_numbers(),
        stage,
        error,
        attempts,
    }
}
