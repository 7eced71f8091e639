//! Hedged requests: the [`Hedged`] decorator races a slow chat request with a second, identical
//! one, so that one hung reply never idles a worker until the timeout.
//!
//! The deadline after which the second request goes out follows the endpoint's observed
//! latency ([`HedgePolicy::delay`]): the `quantile` (default p95) of the last `window`
//! successful request latencies, times `factor` (default 3), never below `floor` (default
//! 2 s). Latencies are kept per `max_tokens` value, which the per-step token budgets
//! (`budget.rs`) make a proxy for the step, so a long rewrite is not compared with a short
//! rerank. Until `min_samples` (default 8) latencies of its own step are known, a request is
//! hedged from what the other steps' replies say about the endpoint: their pooled quantile
//! times `factor` and times [`UNKNOWN_STEP_FACTOR`] again (another step's replies may be
//! shorter), at least `floor`, at most `initial`; before `min_samples` replies of any step are
//! known, after the conservative `initial` (default 30 s). A deadline at or beyond the
//! per-attempt timeout means no hedge: the timeout and the retry layer handle that case.
//!
//! Bounded: at most one hedge per attempt. The first successful reply wins and the other
//! request is dropped, which cancels it (reqwest aborts the connection). If the first request
//! fails, the hedge is awaited (if it fails too, the first request's error is returned); if
//! the hedge fails while the first request is still out, that one is dropped as well and the
//! hedge's error returned, so a hung request never holds the retry layer until its timeout. The
//! hedge waits on the shared rate limits like any request (it sits below the concurrency
//! limiter and does not take a second slot). A hedge shows in [`ChatResponse::calls`] and in
//! the run's [`UsageMeter`] totals.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::rate_limit::{RateLimits, estimate_request_tokens};
use super::usage::UsageMeter;
use super::{ChatModel, ChatRequest, ChatResponse, Error};

/// The extra margin on the pooled deadline of a step with no history of its own.
pub const UNKNOWN_STEP_FACTOR: f64 = 2.0;

/// When to send a hedging request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HedgePolicy {
    /// Whether hedging is on at all.
    pub enabled: bool,
    /// Quantile of recent successful latencies the deadline is based on (0..=1).
    pub quantile: f64,
    /// Multiplier on that quantile.
    pub factor: f64,
    /// The deadline is never shorter than this.
    pub floor: Duration,
    /// The deadline while fewer than `min_samples` latencies are known.
    pub initial: Duration,
    /// Latencies needed before the observed quantile is trusted.
    pub min_samples: usize,
    /// How many recent latencies are kept per `max_tokens` value.
    pub window: usize,
}

impl Default for HedgePolicy {
    /// p95 × 3, at least 2 s; 30 s until 8 latencies are known; the last 64 kept.
    fn default() -> Self {
        Self {
            enabled: true,
            quantile: 0.95,
            factor: 3.0,
            floor: Duration::from_secs(2),
            initial: Duration::from_secs(30),
            min_samples: 8,
            window: 64,
        }
    }
}

impl HedgePolicy {
    /// No hedging.
    pub fn disabled() -> Self {
        Self { enabled: false, ..Self::default() }
    }

    /// The hedging deadline given the recent successful latencies of the request's own step
    /// (oldest first) and those of every step (`pooled`); see the module docs.
    pub fn delay(&self, own: &[Duration], pooled: &[Duration]) -> Duration {
        let enough = self.min_samples.max(1);
        if own.len() >= enough {
            return self.scaled(own, 1.0);
        }
        if pooled.len() >= enough {
            return self.scaled(pooled, UNKNOWN_STEP_FACTOR).min(self.initial.max(self.floor));
        }
        self.initial.max(self.floor)
    }

    /// The `quantile` of `latencies` times `factor` times `extra`, at least `floor`.
    fn scaled(&self, latencies: &[Duration], extra: f64) -> Duration {
        let mut sorted = latencies.to_vec();
        sorted.sort_unstable();
        let rank = (self.quantile.clamp(0.0, 1.0) * (sorted.len() - 1) as f64).ceil() as usize;
        let observed = sorted[rank.min(sorted.len() - 1)];
        observed.mul_f64(self.factor.max(1.0) * extra).max(self.floor)
    }
}

/// Recent successful latencies per `max_tokens` value, shared by all clones of a stack.
#[derive(Debug, Default)]
struct Latencies {
    by_budget: Mutex<BTreeMap<Option<u32>, VecDeque<Duration>>>,
}

impl Latencies {
    fn record(&self, key: Option<u32>, latency: Duration, window: usize) {
        let mut map = self.by_budget.lock().unwrap_or_else(PoisonError::into_inner);
        let samples = map.entry(key).or_default();
        samples.push_back(latency);
        while samples.len() > window.max(1) {
            samples.pop_front();
        }
    }

    /// Every step's latencies together (each step's last `window` at most).
    fn pooled(&self) -> Vec<Duration> {
        let map = self.by_budget.lock().unwrap_or_else(PoisonError::into_inner);
        map.values().flatten().copied().collect()
    }

    fn snapshot(&self, key: Option<u32>) -> Vec<Duration> {
        let map = self.by_budget.lock().unwrap_or_else(PoisonError::into_inner);
        map.get(&key).map(|samples| samples.iter().copied().collect()).unwrap_or_default()
    }
}

/// A chat model whose slow requests are raced by a second one (see the module docs).
#[derive(Debug, Clone)]
pub struct Hedged<M> {
    inner: M,
    policy: HedgePolicy,
    timeout: Duration,
    latencies: Arc<Latencies>,
    limits: Option<Arc<RateLimits>>,
    meter: Option<Arc<UsageMeter>>,
}

impl<M> Hedged<M> {
    /// Hedge calls to `inner` under `policy`; no hedge is sent once the deadline reaches
    /// `timeout`. A hedge first waits on `limits` (when given) and is counted in `meter`.
    pub fn new(
        inner: M,
        policy: HedgePolicy,
        timeout: Duration,
        limits: Option<Arc<RateLimits>>,
        meter: Option<Arc<UsageMeter>>,
    ) -> Self {
        Self { inner, policy, timeout, latencies: Arc::default(), limits, meter }
    }

    /// The wrapped model.
    pub fn inner(&self) -> &M {
        &self.inner
    }

    /// The deadline a request with this `max_tokens` would be hedged after now (`None`: no
    /// hedge).
    pub fn current_delay(&self, max_tokens: Option<u32>) -> Option<Duration> {
        if !self.policy.enabled {
            return None;
        }
        let delay =
            self.policy.delay(&self.latencies.snapshot(max_tokens), &self.latencies.pooled());
        (delay < self.timeout).then_some(delay)
    }
}

impl<M: ChatModel> Hedged<M> {
    /// One request, timed; successful latencies are recorded.
    async fn timed(&self, request: &ChatRequest) -> Result<ChatResponse, Error> {
        let started = Instant::now();
        let result = self.inner.chat(request).await;
        if result.is_ok() {
            self.latencies.record(request.max_tokens, started.elapsed(), self.policy.window);
        }
        result
    }

    /// The hedging request: rate permits first, then the same request again.
    async fn hedge(&self, request: &ChatRequest) -> Result<ChatResponse, Error> {
        if let Some(limits) = &self.limits {
            limits.acquire(estimate_request_tokens(request)).await;
        }
        self.timed(request).await
    }
}

impl<M: ChatModel> ChatModel for Hedged<M> {
    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, Error> {
        let Some(delay) = self.current_delay(request.max_tokens) else {
            return self.timed(request).await;
        };
        let primary = self.timed(request);
        tokio::pin!(primary);
        tokio::select! {
            result = &mut primary => return result,
            () = tokio::time::sleep(delay) => {}
        }
        tracing::info!(
            model = %request.model,
            delay_ms = delay.as_millis() as u64,
            "request slower than the hedging deadline: sending a second one"
        );
        if let Some(meter) = &self.meter {
            meter.record_hedge(request.step);
        }
        let hedge = self.hedge(request);
        tokio::pin!(hedge);
        let (first, hedge_first) = tokio::select! {
            result = &mut primary => (result, false),
            result = &mut hedge => (result, true),
        };
        let outcome = match first {
            Ok(response) => Ok((response, hedge_first)),
            // The hedge failed while the first request, already past the deadline, is still
            // out: that one is most likely hung, so it is given up too and the retry layer
            // decides on the hedge's error (a new attempt after its backoff) instead of
            // waiting for the hang to reach the timeout.
            Err(hedge_error) if hedge_first => Err(hedge_error),
            Err(first_error) => match hedge.await {
                Ok(response) => Ok((response, true)),
                Err(_) => Err(first_error),
            },
        };
        outcome.map(|(mut response, hedge_won)| {
            response.calls.hedges += 1;
            response.calls.hedge_won = hedge_won;
            response
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(values: &[u64]) -> Vec<Duration> {
        values.iter().map(|value| Duration::from_millis(*value)).collect()
    }

    #[test]
    fn initial_deadline_until_enough_samples() {
        let policy = HedgePolicy::default();
        assert_eq!(policy.delay(&[], &[]), Duration::from_secs(30));
        assert_eq!(policy.delay(&ms(&[100; 7]), &ms(&[100; 7])), Duration::from_secs(30));
    }

    #[test]
    fn a_step_without_history_is_hedged_from_the_other_steps_replies() {
        let policy = HedgePolicy::default();
        // Eight 300 ms replies of other steps: p95 300 ms × 3 × 2 = 1.8 s, floored at 2 s.
        assert_eq!(policy.delay(&[], &ms(&[300; 8])), Duration::from_secs(2));
        // Slower replies: 1 s × 3 × 2 = 6 s, well before the 30 s of no history at all.
        assert_eq!(policy.delay(&ms(&[1000]), &ms(&[1000; 8])), Duration::from_secs(6));
        // Never beyond the initial deadline, however slow the others were.
        assert_eq!(policy.delay(&[], &ms(&[20_000; 8])), Duration::from_secs(30));
        // The step's own history, once long enough, decides alone.
        assert_eq!(policy.delay(&ms(&[100; 8]), &ms(&[5000; 64])), Duration::from_secs(2));
    }

    #[test]
    fn deadline_is_a_high_quantile_times_the_factor_with_a_floor() {
        let policy = HedgePolicy {
            floor: Duration::from_millis(10),
            min_samples: 4,
            ..HedgePolicy::default()
        };
        // 20 samples 100..=2000 ms: p95 rank ceil(0.95 * 19) = 19 → 2000 ms; × 3.
        let samples: Vec<u64> = (1..=20).map(|step| step * 100).collect();
        assert_eq!(policy.delay(&ms(&samples), &[]), Duration::from_millis(6000));
        // Fast endpoint: the floor applies.
        let floored = HedgePolicy { floor: Duration::from_secs(5), ..policy };
        assert_eq!(floored.delay(&ms(&[10, 12, 11, 9]), &[]), Duration::from_secs(5));
    }

    #[test]
    fn latencies_are_kept_per_budget_and_bounded() {
        let latencies = Latencies::default();
        for value in 0..10 {
            latencies.record(Some(64), Duration::from_millis(value), 4);
        }
        latencies.record(None, Duration::from_secs(1), 4);
        assert_eq!(latencies.snapshot(Some(64)), ms(&[6, 7, 8, 9]));
        assert_eq!(latencies.snapshot(None), vec![Duration::from_secs(1)]);
        assert!(latencies.snapshot(Some(1)).is_empty());
        assert_eq!(latencies.pooled().len(), 5, "each step's window, pooled");
    }
}
