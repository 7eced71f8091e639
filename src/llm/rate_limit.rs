//! Client-side limits: [`RateLimits`] (an adaptive concurrency limit, see `adaptive.rs`, and
//! optional `governor` limiters for requests and tokens per minute, for providers that publish
//! such limits) and the [`RateLimited`] decorator that waits on them before every attempt.
//!
//! By default there is no fixed rate: concurrency adapts to the endpoint (AIMD), shrinking on
//! 429/503 replies and growing back when they stop.
//!
//! Token counts are estimated before sending (about four characters per token), because the
//! real count is only known from the response. The estimate is capped at the limiter's burst so
//! one very long prompt waits for a full bucket instead of failing.
//!
//! A 429 that names a wait (`Retry-After`) also pauses every other worker sharing the limits
//! until that instant, and no longer: the endpoint's budget is shared, so a second worker
//! firing into the same storm would only collect another 429.

use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use governor::{DefaultDirectRateLimiter, Jitter, Quota, RateLimiter};

use super::adaptive::{AdaptiveLimit, AimdPolicy, LimitSlot};
use super::{ChatModel, ChatRequest, ChatResponse, Embedder, Embeddings, Error};

/// Longest shared pause a single `Retry-After` can impose on all workers.
const MAX_COOLDOWN: Duration = Duration::from_secs(300);

/// Upper bound of the random extra wait added when a limiter makes a caller wait, so that many
/// workers released at the same instant do not hit the endpoint together.
const WAKE_JITTER: Duration = Duration::from_millis(20);

/// The shared request and token budgets of one endpoint.
///
/// Held in an `Arc` by every [`RateLimited`] clone, i.e. by all workers using one client
/// stack. A permit is taken before each HTTP attempt (retries included) and never returned:
/// `governor` refills the buckets continuously at the configured rate (GCRA). Either limiter
/// may be absent (`None` rate = unlimited).
#[derive(Debug)]
pub struct RateLimits {
    /// Requests per minute; limits how often any worker may start an HTTP attempt.
    requests: Option<DefaultDirectRateLimiter>,
    /// Estimated prompt tokens per minute; each attempt takes as many cells as its estimate.
    tokens: Option<(DefaultDirectRateLimiter, NonZeroU32)>,
    /// Requests in flight, adapted to the endpoint's 429s (`None`: unbounded).
    concurrency: Option<AdaptiveLimit>,
    /// No attempt starts before this instant; set from a 429's `Retry-After` by whichever
    /// worker received it, read by every worker in [`RateLimits::acquire`]. The lock is held
    /// only to read or raise the instant, never across an `.await`.
    cooldown_until: Mutex<Option<tokio::time::Instant>>,
}

impl RateLimits {
    /// Limits of `requests_per_minute` and `tokens_per_minute`. The burst of each limiter is
    /// what the rate allows in `burst_window` (at least 1): a short window spreads requests
    /// evenly, a long one lets a run start quickly.
    pub fn new(
        requests_per_minute: Option<NonZeroU32>,
        tokens_per_minute: Option<NonZeroU32>,
        burst_window: Duration,
    ) -> Self {
        let requests =
            requests_per_minute.map(|rate| RateLimiter::direct(quota(rate, burst_window)));
        let tokens = tokens_per_minute.map(|rate| {
            let quota = quota(rate, burst_window);
            (RateLimiter::direct(quota), quota.burst_size())
        });
        let concurrency = Some(AdaptiveLimit::new(AimdPolicy::default()));
        Self { requests, tokens, concurrency, cooldown_until: Mutex::new(None) }
    }

    /// These limits with the adaptive concurrency limit following `policy` (`None`: no
    /// concurrency limit at all).
    pub fn with_concurrency(mut self, policy: Option<AimdPolicy>) -> Self {
        self.concurrency = policy.map(AdaptiveLimit::new);
        self
    }

    /// The adaptive concurrency limit, if any.
    pub fn concurrency(&self) -> Option<&AdaptiveLimit> {
        self.concurrency.as_ref()
    }

    /// Wait for a slot under the concurrency limit (`None` when there is no such limit).
    pub async fn acquire_slot(&self) -> Option<LimitSlot<'_>> {
        match &self.concurrency {
            Some(limit) => Some(limit.acquire().await),
            None => None,
        }
    }

    /// Feed an attempt's outcome back: a success grows the concurrency limit; a 429 (or 503)
    /// counts as overload, and when overloads are confirmed (the limit is cut, see
    /// [`AdaptiveLimit`]) a 429's `Retry-After` pauses every worker for that long. An isolated
    /// 429 pauses only its own request (the retry layer waits its `Retry-After`). Without a
    /// concurrency limit every `Retry-After` pauses every worker.
    pub fn observe<T>(&self, result: &Result<T, Error>, slot: Option<LimitSlot<'_>>) {
        let (overload, retry_after) = match result {
            Ok(_) => (false, None),
            Err(Error::RateLimited { retry_after, .. }) => (true, *retry_after),
            Err(Error::Api { status: 503, .. }) => (true, None),
            Err(_) => {
                drop(slot);
                return;
            }
        };
        let confirmed = match (&self.concurrency, slot) {
            (Some(limit), Some(slot)) if overload => limit.overload(slot),
            (Some(limit), Some(slot)) => {
                limit.success(slot);
                false
            }
            _ => overload,
        };
        if let (true, Some(wait)) = (confirmed, retry_after) {
            self.cool_down(wait);
        }
    }

    /// No rate limits (concurrency still adapts, and a 429's `Retry-After` still pauses all
    /// workers).
    pub fn unlimited() -> Self {
        Self::new(None, None, Duration::from_secs(1))
    }

    /// Pause every worker for `wait` (at most five minutes) from now, unless a longer pause is
    /// already in force.
    pub fn cool_down(&self, wait: Duration) {
        let until = tokio::time::Instant::now() + wait.min(MAX_COOLDOWN);
        let mut cooldown = self.cooldown_until.lock().unwrap_or_else(PoisonError::into_inner);
        if cooldown.is_none_or(|current| current < until) {
            *cooldown = Some(until);
        }
    }

    /// Wait out any cooldown, then until one request and `estimated_tokens` tokens may be
    /// spent.
    pub async fn acquire(&self, estimated_tokens: u32) {
        let cooldown = *self.cooldown_until.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(until) = cooldown
            && until > tokio::time::Instant::now()
        {
            tracing::debug!(
                wait_ms = (until - tokio::time::Instant::now()).as_millis() as u64,
                "waiting out a shared cooldown"
            );
            tokio::time::sleep_until(until).await;
        }
        if let Some(requests) = &self.requests {
            requests.until_ready_with_jitter(Jitter::up_to(WAKE_JITTER)).await;
        }
        if let Some((tokens, burst)) = &self.tokens {
            let wanted =
                NonZeroU32::new(estimated_tokens.min(burst.get())).unwrap_or(NonZeroU32::MIN);
            // `wanted` never exceeds the burst, so governor cannot report insufficient capacity;
            // should it anyway, sending without the token wait is the safe fallback.
            if tokens.until_n_ready_with_jitter(wanted, Jitter::up_to(WAKE_JITTER)).await.is_err() {
                tracing::debug!(wanted = wanted.get(), "token estimate exceeds the limiter burst");
            }
        }
    }
}

/// A quota refilling `per_minute` cells per minute, with a burst of what `burst_window` allows.
fn quota(per_minute: NonZeroU32, burst_window: Duration) -> Quota {
    let burst = (f64::from(per_minute.get()) * burst_window.as_secs_f64() / 60.0).floor();
    let burst = NonZeroU32::new(burst.min(f64::from(u32::MAX)) as u32).unwrap_or(NonZeroU32::MIN);
    Quota::per_minute(per_minute).allow_burst(burst)
}

/// Estimated prompt tokens of a request: characters of all message texts, tool-call
/// arguments and tool schemas, divided by four (rounded up).
pub fn estimate_request_tokens(request: &ChatRequest) -> u32 {
    let messages: usize = request
        .messages
        .iter()
        .map(|message| {
            message.content.as_deref().map_or(0, str::len)
                + message
                    .tool_calls
                    .iter()
                    .map(|call| call.name.len() + call.arguments.len())
                    .sum::<usize>()
        })
        .sum();
    let tools: usize = request
        .tools
        .iter()
        .map(|tool| tool.name.len() + tool.description.len() + tool.parameters.to_string().len())
        .sum();
    chars_to_tokens(messages + tools)
}

/// Estimated tokens of a batch of texts to embed.
pub fn estimate_texts_tokens(texts: &[String]) -> u32 {
    chars_to_tokens(texts.iter().map(String::len).sum())
}

fn chars_to_tokens(chars: usize) -> u32 {
    u32::try_from(chars.div_ceil(4)).unwrap_or(u32::MAX).max(1)
}

/// A chat model or embedder that waits on shared [`RateLimits`] before every call.
#[derive(Debug, Clone)]
pub struct RateLimited<M> {
    inner: M,
    limits: Arc<RateLimits>,
}

impl<M> RateLimited<M> {
    /// Limit calls to `inner` by `limits` (share the same `Arc` between all users of an endpoint).
    pub fn new(inner: M, limits: Arc<RateLimits>) -> Self {
        Self { inner, limits }
    }

    /// The wrapped model.
    pub fn inner(&self) -> &M {
        &self.inner
    }

    /// The shared limits.
    pub fn limits(&self) -> &Arc<RateLimits> {
        &self.limits
    }
}

impl<M: ChatModel> ChatModel for RateLimited<M> {
    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, Error> {
        let slot = self.limits.acquire_slot().await;
        self.limits.acquire(estimate_request_tokens(request)).await;
        let result = self.inner.chat(request).await;
        self.limits.observe(&result, slot);
        result
    }
}

impl<E: Embedder> Embedder for RateLimited<E> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn embed(&self, texts: &[String]) -> Result<Embeddings, Error> {
        let slot = self.limits.acquire_slot().await;
        self.limits.acquire(estimate_texts_tokens(texts)).await;
        let result = self.inner.embed(texts).await;
        self.limits.observe(&result, slot);
        result
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::super::ChatMessage;
    use super::*;

    fn per_minute(rate: u32) -> Option<NonZeroU32> {
        NonZeroU32::new(rate)
    }

    #[test]
    fn token_estimate_counts_messages_and_tools() {
        let mut request = ChatRequest::new("m", vec![ChatMessage::user("x".repeat(400))]);
        assert_eq!(estimate_request_tokens(&request), 100);
        request.messages.push(ChatMessage::assistant(""));
        assert_eq!(estimate_request_tokens(&request), 100);
        assert_eq!(estimate_texts_tokens(&["abcde".to_owned()]), 2);
        assert_eq!(estimate_texts_tokens(&[]), 1);
    }

    #[test]
    fn burst_follows_the_window() {
        assert_eq!(
            quota(NonZeroU32::MIN.saturating_add(599), Duration::from_secs(6)).burst_size().get(),
            60
        );
        assert_eq!(quota(NonZeroU32::MIN, Duration::from_millis(1)).burst_size().get(), 1);
    }

    #[tokio::test]
    async fn request_limiter_spaces_requests() {
        // 1200 rpm = one every 50 ms, burst 1: five acquisitions need at least 4 intervals.
        let limits = RateLimits::new(per_minute(1200), None, Duration::from_millis(10));
        let started = Instant::now();
        for _ in 0..5 {
            limits.acquire(1).await;
        }
        assert!(started.elapsed() >= Duration::from_millis(195), "{:?}", started.elapsed());
    }

    #[tokio::test]
    async fn cooldown_delays_the_next_acquire() {
        let limits = RateLimits::unlimited();
        limits.cool_down(Duration::from_millis(150));
        limits.cool_down(Duration::from_millis(10));
        let started = Instant::now();
        limits.acquire(1).await;
        assert!(started.elapsed() >= Duration::from_millis(140), "{:?}", started.elapsed());
    }

    #[tokio::test]
    async fn unlimited_never_waits() {
        let limits = RateLimits::unlimited();
        let started = Instant::now();
        for _ in 0..1000 {
            limits.acquire(1_000_000).await;
        }
        assert!(started.elapsed() < Duration::from_millis(100));
    }
}
