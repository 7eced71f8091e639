//! Run-wide token accounting: a [`UsageMeter`] that the client stack updates on every HTTP
//! attempt, so a run can report total requests and tokens at the end, and `serve` can expose
//! them per [`Step`] (`GET /metrics`, see `serve::metrics`).
//!
//! Per-question totals are not kept here: callers sum [`ChatResponse::usage`] of the calls they
//! made (see `structured::StructuredResponse::usage` for re-asks).
//!
//! Who counts what, each where the fact is known (a request's step travels with it in
//! [`ChatRequest::step`]):
//! - requests, failed requests, tokens: the transport (`openai`), once per HTTP attempt;
//! - hedges: the hedging layer (`hedge`);
//! - retries: the retry layer (`retry`), once per failed attempt it tries again;
//! - errors: the client (`stack`), once per call that returned an error, whether it failed after
//!   its retries or was refused at once by the fatal latch.
//!
//! [`ChatResponse::usage`]: super::ChatResponse::usage
//! [`ChatRequest::step`]: super::ChatRequest::step

use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use super::Usage;
use super::budget::Step;

/// Thread-safe counters shared (through `Arc`) by every clone of one client stack: the totals
/// and, for requests that name their step, the same counters per step.
///
/// Held by `OpenAiChat` / `OpenAiEmbedder`, which record each attempt they send; read by the
/// run driver via [`UsageMeter::totals`] and by `serve`'s metrics via [`UsageMeter::by_step`].
/// Relaxed atomics suffice: the counters are independent tallies and are only read for
/// reporting.
#[derive(Debug, Default)]
pub struct UsageMeter {
    all: UsageCounters,
    steps: [UsageCounters; Step::ALL.len()],
}

/// One set of tallies (see [`UsageTotals`] for what each counts).
#[derive(Debug, Default)]
struct UsageCounters {
    requests: AtomicU64,
    failed_requests: AtomicU64,
    hedges: AtomicU64,
    retries: AtomicU64,
    errors: AtomicU64,
    prompt_tokens: AtomicU64,
    completion_tokens: AtomicU64,
}

impl UsageCounters {
    fn totals(&self) -> UsageTotals {
        UsageTotals {
            requests: self.requests.load(Ordering::Relaxed),
            failed_requests: self.failed_requests.load(Ordering::Relaxed),
            hedges: self.hedges.load(Ordering::Relaxed),
            retries: self.retries.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            usage: Usage {
                prompt_tokens: self.prompt_tokens.load(Ordering::Relaxed),
                completion_tokens: self.completion_tokens.load(Ordering::Relaxed),
            },
        }
    }
}

/// A snapshot of a [`UsageMeter`] (or of one step's share of it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageTotals {
    /// HTTP requests sent (every attempt, including retried ones).
    pub requests: u64,
    /// Requests that did not produce a usable response (error status, timeout, bad body,
    /// empty answer).
    pub failed_requests: u64,
    /// Hedging requests sent because a request was slow (included in `requests`).
    #[serde(default)]
    pub hedges: u64,
    /// Failed attempts that the retry layer tried again (each is one of `failed_requests`).
    #[serde(default)]
    pub retries: u64,
    /// Calls that returned an error: failed after their retries, or refused at once by the
    /// fatal latch (a refused key or unknown model).
    #[serde(default)]
    pub errors: u64,
    /// Tokens reported by the endpoint over every request whose body carried a usage block,
    /// including unusable replies that were retried.
    pub usage: Usage,
}

impl UsageMeter {
    /// A meter with all counters at zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one to `counter` of the totals and of `step`'s share.
    fn add(&self, step: Option<Step>, counter: fn(&UsageCounters) -> &AtomicU64, amount: u64) {
        counter(&self.all).fetch_add(amount, Ordering::Relaxed);
        if let Some(step) = step {
            counter(&self.steps[step.index()]).fetch_add(amount, Ordering::Relaxed);
        }
    }

    /// Count one request (of `step`, if known) about to be sent.
    pub fn record_request(&self, step: Option<Step>) {
        self.add(step, |counters| &counters.requests, 1);
    }

    /// Count one request that failed.
    pub fn record_failure(&self, step: Option<Step>) {
        self.add(step, |counters| &counters.failed_requests, 1);
    }

    /// Count one hedging request.
    pub fn record_hedge(&self, step: Option<Step>) {
        self.add(step, |counters| &counters.hedges, 1);
    }

    /// Count one failed attempt that is tried again.
    pub fn record_retry(&self, step: Option<Step>) {
        self.add(step, |counters| &counters.retries, 1);
    }

    /// Count one call that returned an error.
    pub fn record_error(&self, step: Option<Step>) {
        self.add(step, |counters| &counters.errors, 1);
    }

    /// Add the tokens of one response (usable or not).
    pub fn record_usage(&self, step: Option<Step>, usage: Usage) {
        self.add(step, |counters| &counters.prompt_tokens, usage.prompt_tokens);
        self.add(step, |counters| &counters.completion_tokens, usage.completion_tokens);
    }

    /// Current totals, over every request whether it named its step or not.
    pub fn totals(&self) -> UsageTotals {
        self.all.totals()
    }

    /// Current totals of each step, in [`Step::ALL`] order. What they leave of
    /// [`UsageMeter::totals`] is the share of requests that named no step.
    pub fn by_step(&self) -> Vec<(Step, UsageTotals)> {
        Step::ALL.into_iter().map(|step| (step, self.steps[step.index()].totals())).collect()
    }
}

impl std::ops::Sub for UsageTotals {
    type Output = UsageTotals;

    /// What `self` counts beyond `other` (saturating at zero: the counters are read one by one
    /// while requests go on, so a later read of a part may exceed an earlier read of the whole).
    fn sub(self, other: UsageTotals) -> UsageTotals {
        UsageTotals {
            requests: self.requests.saturating_sub(other.requests),
            failed_requests: self.failed_requests.saturating_sub(other.failed_requests),
            hedges: self.hedges.saturating_sub(other.hedges),
            retries: self.retries.saturating_sub(other.retries),
            errors: self.errors.saturating_sub(other.errors),
            usage: Usage {
                prompt_tokens: self.usage.prompt_tokens.saturating_sub(other.usage.prompt_tokens),
                completion_tokens: self
                    .usage
                    .completion_tokens
                    .saturating_sub(other.usage.completion_tokens),
            },
        }
    }
}

impl std::ops::Add for UsageTotals {
    type Output = UsageTotals;

    fn add(self, other: UsageTotals) -> UsageTotals {
        UsageTotals {
            requests: self.requests + other.requests,
            failed_requests: self.failed_requests + other.failed_requests,
            hedges: self.hedges + other.hedges,
            retries: self.retries + other.retries,
            errors: self.errors + other.errors,
            usage: self.usage + other.usage,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn counts_from_many_threads() {
        let meter = Arc::new(UsageMeter::new());
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let meter = Arc::clone(&meter);
                std::thread::spawn(move || {
                    for _ in 0..100 {
                        meter.record_request(None);
                        meter.record_usage(None, Usage { prompt_tokens: 3, completion_tokens: 1 });
                    }
                    meter.record_failure(None);
                })
            })
            .collect();
        for handle in handles {
            handle.join().unwrap();
        }
        let totals = meter.totals();
        assert_eq!(totals.requests, 400);
        assert_eq!(totals.failed_requests, 4);
        assert_eq!(totals.usage, Usage { prompt_tokens: 1200, completion_tokens: 400 });
    }

    #[test]
    fn a_step_gets_its_share_and_the_totals_get_every_request() {
        let meter = UsageMeter::new();
        for step in [Some(Step::Rewrite), Some(Step::Rewrite), Some(Step::Answer), None] {
            meter.record_request(step);
            meter.record_usage(step, Usage { prompt_tokens: 10, completion_tokens: 2 });
        }
        meter.record_failure(Some(Step::Answer));
        meter.record_retry(Some(Step::Answer));
        meter.record_error(Some(Step::Facts));
        meter.record_hedge(None);
        let steps: std::collections::BTreeMap<Step, UsageTotals> =
            meter.by_step().into_iter().collect();
        let rewrite = steps[&Step::Rewrite];
        assert_eq!((rewrite.requests, rewrite.usage.prompt_tokens), (2, 20));
        let answer = steps[&Step::Answer];
        assert_eq!((answer.requests, answer.failed_requests, answer.retries), (1, 1, 1));
        assert_eq!((steps[&Step::Facts].errors, steps[&Step::Facts].requests), (1, 0));
        let named = steps.values().fold(UsageTotals::default(), |sum, step| sum + *step);
        let unnamed = meter.totals() - named;
        assert_eq!((unnamed.requests, unnamed.hedges, unnamed.usage.completion_tokens), (1, 1, 2));
        assert_eq!(meter.totals().requests, 4);
    }
}
