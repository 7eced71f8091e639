//! Bounded retries with exponential backoff and jitter: the [`Retrying`] decorator and the
//! rules that turn a raw HTTP failure (status, `Retry-After`, body) into a typed [`Error`].
//!
//! Retried: 429, 408 and 5xx statuses, per-attempt timeouts and connection errors, and a 200
//! whose reply is unusable: an undecodable or truncated body ([`Error::Decode`]), no choices,
//! `finish_reason: "error"` or an empty answer ([`Error::BadReply`]). A 429 or 5xx that names a
//! wait (`Retry-After`, in seconds or as an HTTP date) is retried no sooner than that. Not
//! retried: a context-length error (it becomes [`Error::ContextLength`]), other 4xx, a refused
//! key or unknown model (fatal, see `fatal.rs`) and configuration errors. The final error
//! carries the number of attempts made; a successful chat reply carries every retry with its
//! reason in [`ChatResponse::calls`], and the tokens of failed attempts in its usage.
//!
//! async-openai's own retry layer is bypassed (see `openai.rs`), so this is the only retry
//! loop in the stack.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;

use super::budget::Step;
use super::usage::UsageMeter;
use super::{
    ChatModel, ChatRequest, ChatResponse, Embedder, Embeddings, Error, RetryRecord, Usage,
};

/// Longest failure reason kept in a [`RetryRecord`] (bytes, cut at a character boundary).
const REASON_EXCERPT: usize = 300;

/// How many times to try and how long to wait in between.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Total attempts including the first (at least 1).
    pub max_attempts: u32,
    /// Backoff before the second attempt; doubles each time.
    pub base_delay: Duration,
    /// Cap on the computed backoff.
    pub max_delay: Duration,
    /// Cap on a server-requested `Retry-After` wait (guards against absurd values).
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    /// Six attempts, 1 s doubling up to 60 s: rides out per-minute provider limits.
    fn default() -> Self {
        Self {
            max_attempts: 6,
            base_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(60),
            max_retry_after: Duration::from_secs(300),
        }
    }
}

impl RetryPolicy {
    /// The wait before attempt `attempt + 1`, after attempt number `attempt` (1-based) failed
    /// with `error`: exponential backoff with "equal jitter" (half fixed, half random), raised to
    /// the server's `Retry-After` when that is longer.
    pub fn delay_after(&self, attempt: u32, error: &Error) -> Duration {
        let exponent = attempt.saturating_sub(1).min(30);
        let backoff = self.base_delay.saturating_mul(1u32 << exponent).min(self.max_delay);
        let half = backoff / 2;
        let jitter = if half.is_zero() {
            Duration::ZERO
        } else {
            half.mul_f64(rand::rng().random_range(0.0..=1.0))
        };
        let computed = half + jitter;
        match retry_after(error) {
            Some(requested) => computed.max(requested.min(self.max_retry_after)),
            None => computed,
        }
    }
}

/// Whether an error of this kind is worth another attempt.
pub fn is_retryable(error: &Error) -> bool {
    match error {
        Error::RateLimited { .. }
        | Error::Timeout { .. }
        | Error::Connection { .. }
        | Error::Decode { .. }
        | Error::BadReply { .. } => true,
        Error::Api { status, .. } => *status == 408 || (500..600).contains(status),
        Error::ContextLength { .. }
        | Error::Auth { .. }
        | Error::ModelNotFound { .. }
        | Error::SchemaInvalid { .. }
        | Error::Config(_)
        | Error::Unrecorded { .. }
        | Error::Tape(_) => false,
    }
}

/// The typed error for a non-success HTTP status of a single attempt (`attempts: 1`).
///
/// Any error status other than 429 whose body talks about the context window becomes
/// [`Error::ContextLength`]: most servers send 400, but llama.cpp used 500 before it had its
/// own error type and OpenRouter passes an upstream's overflow on as 502. Providers phrase it
/// differently, so several markers are checked.
pub fn error_for_status(status: u16, retry_after: Option<Duration>, body: String) -> Error {
    if status == 429 {
        return Error::RateLimited { attempts: 1, body, retry_after };
    }
    if status >= 400 && mentions_context_length(&body) {
        return Error::ContextLength { body };
    }
    Error::Api { status, attempts: 1, body, retry_after }
}

/// Why a well-formed 200 reply cannot be used, if it cannot: `finish_reason: "error"` (the
/// provider failed mid-generation), or neither text nor tool calls.
pub fn unusable_reason(response: &ChatResponse) -> Option<String> {
    let finish = response.finish_reason.as_deref().unwrap_or("");
    if finish.eq_ignore_ascii_case("error") {
        return Some("the provider ended the reply with finish_reason \"error\"".to_owned());
    }
    let blank = response.message.content.as_deref().is_none_or(|text| text.trim().is_empty());
    (blank && response.message.tool_calls.is_empty())
        .then(|| format!("the reply has neither text nor tool calls (finish_reason {finish:?})"))
}

/// Whether an error body says the prompt (plus the completion budget) is too long for the
/// model. The markers cover these phrasings (all matched case-insensitively):
/// - OpenAI: code `context_length_exceeded`, "This model's maximum context length is 8192
///   tokens. However, your messages resulted in 9100 tokens."
/// - OpenRouter: "This endpoint's maximum context length is 131072 tokens. However, you
///   requested about 140000 tokens (…)."
/// - vLLM: "This model's maximum context length is 4096 tokens. However, you requested 5000
///   tokens (…)", and in newer versions "… is longer than the model's context length" /
///   "… longer than the maximum model length of …" / "… exceeds the max_model_len".
/// - llama.cpp: "the request exceeds the available context size, try increasing it", type
///   `exceed_context_size_error`.
/// - Anthropic-style and others: "prompt is too long", "input is too long", "context window".
pub fn mentions_context_length(body: &str) -> bool {
    const MARKERS: &[&str] = &[
        "context_length_exceeded",
        "exceed_context_size",
        "context length",
        "context window",
        "context size",
        "maximum context",
        "maximum model length",
        "max_model_len",
        "too many tokens",
        "prompt is too long",
        "input is too long",
        "reduce the length",
    ];
    let lower = body.to_lowercase();
    MARKERS.iter().any(|marker| lower.contains(marker))
}

/// Parse a `Retry-After` header value: delay seconds (integer or decimal) or an HTTP date
/// (RFC 7231 IMF-fixdate, which RFC 2822 parsing accepts), measured from now.
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<f64>() {
        return (seconds.is_finite() && seconds >= 0.0).then(|| Duration::from_secs_f64(seconds));
    }
    let date = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    let wait = date.with_timezone(&chrono::Utc) - chrono::Utc::now();
    Some(wait.to_std().unwrap_or(Duration::ZERO))
}

/// Run `attempt` until it succeeds, fails with a non-retryable error, or `policy.max_attempts`
/// attempts were made; each retry is logged at `warn` with the status and the wait. `what`
/// names the operation in the log.
pub async fn with_retries<T, F, Fut>(
    policy: &RetryPolicy,
    what: &str,
    attempt: F,
) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Error>>,
{
    let mut retries = Vec::new();
    retry_loop(policy, what, &mut retries, attempt).await.map(|outcome| outcome.value)
}

/// What [`retry_loop`] got: the value, the attempts it took and the tokens of the failed ones.
#[derive(Debug)]
pub struct Retried<T> {
    /// The successful attempt's value.
    pub value: T,
    /// Attempts made (1: no retry).
    pub attempts: u32,
    /// Tokens reported for failed attempts (see [`Error::usage`]).
    pub failed_usage: Usage,
}

/// [`with_retries`] that also records every retried attempt in `retries` and sums the tokens
/// of failed attempts; a final [`Error::BadReply`] carries the tokens of all attempts.
pub async fn retry_loop<T, F, Fut>(
    policy: &RetryPolicy,
    what: &str,
    retries: &mut Vec<RetryRecord>,
    mut attempt: F,
) -> Result<Retried<T>, Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Error>>,
{
    let max_attempts = policy.max_attempts.max(1);
    let mut attempt_number = 1;
    let mut failed_usage = Usage::default();
    loop {
        match attempt().await {
            Ok(value) => return Ok(Retried { value, attempts: attempt_number, failed_usage }),
            Err(error) if attempt_number < max_attempts && is_retryable(&error) => {
                failed_usage += error.usage();
                let wait = policy.delay_after(attempt_number, &error);
                tracing::warn!(
                    operation = what,
                    attempt = attempt_number,
                    max_attempts,
                    status = status_of(&error),
                    wait_ms = wait.as_millis() as u64,
                    error = %error,
                    "retrying after a failed attempt"
                );
                retries.push(RetryRecord {
                    attempt: attempt_number,
                    reason: super::structured::excerpt(&error.to_string(), REASON_EXCERPT),
                    wait_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                });
                tokio::time::sleep(wait).await;
                attempt_number += 1;
            }
            Err(error) => {
                let total = failed_usage + error.usage();
                return Err(with_attempts(error, attempt_number, total));
            }
        }
    }
}

/// A chat model or embedder whose calls are retried according to a [`RetryPolicy`].
///
/// Wrap it around the rate-limited transport (`Retrying<RateLimited<OpenAiChat>>`) so every
/// retry waits for rate-limit permits again.
#[derive(Debug, Clone)]
pub struct Retrying<M> {
    inner: M,
    policy: RetryPolicy,
    meter: Option<Arc<UsageMeter>>,
}

impl<M> Retrying<M> {
    /// Retry calls to `inner` under `policy`.
    pub fn new(inner: M, policy: RetryPolicy) -> Self {
        Self { inner, policy, meter: None }
    }

    /// The same, counting each retry in `meter` (under the request's step).
    pub fn with_meter(self, meter: Arc<UsageMeter>) -> Self {
        Self { meter: Some(meter), ..self }
    }

    fn count_retries(&self, step: Option<Step>, retries: &[RetryRecord]) {
        if let Some(meter) = &self.meter {
            retries.iter().for_each(|_| meter.record_retry(step));
        }
    }

    /// The wrapped model.
    pub fn inner(&self) -> &M {
        &self.inner
    }
}

impl<M: ChatModel> ChatModel for Retrying<M> {
    /// The reply of the first successful attempt, with the attempts, the retries and their
    /// reasons in `calls` and the tokens of failed attempts added to `usage`.
    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, Error> {
        let mut retries = Vec::new();
        let retried =
            retry_loop(&self.policy, "chat", &mut retries, || self.inner.chat(request)).await;
        self.count_retries(request.step, &retries);
        let retried = retried?;
        let mut response = retried.value;
        response.usage += retried.failed_usage;
        response.calls.attempts = retried.attempts;
        response.calls.retries = retries;
        Ok(response)
    }
}

impl<E: Embedder> Embedder for Retrying<E> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn embed(&self, texts: &[String]) -> Result<Embeddings, Error> {
        let mut retries = Vec::new();
        let retried =
            retry_loop(&self.policy, "embed", &mut retries, || self.inner.embed(texts)).await;
        self.count_retries(None, &retries);
        retried.map(|retried| retried.value)
    }
}

fn retry_after(error: &Error) -> Option<Duration> {
    match error {
        Error::RateLimited { retry_after, .. } | Error::Api { retry_after, .. } => *retry_after,
        _ => None,
    }
}

fn status_of(error: &Error) -> u16 {
    match error {
        Error::RateLimited { .. } => 429,
        Error::Api { status, .. } => *status,
        _ => 0,
    }
}

/// The final error of a retried call, reporting how many attempts were made (and, for an
/// unusable reply, the tokens of all attempts).
fn with_attempts(error: Error, made: u32, usage: Usage) -> Error {
    match error {
        Error::RateLimited { body, retry_after, .. } => {
            Error::RateLimited { attempts: made, body, retry_after }
        }
        Error::Api { status, body, retry_after, .. } => {
            Error::Api { status, attempts: made, body, retry_after }
        }
        Error::Timeout { timeout, .. } => Error::Timeout { attempts: made, timeout },
        Error::Connection { message, .. } => Error::Connection { attempts: made, message },
        Error::BadReply { reason, .. } => Error::BadReply { reason, attempts: made, usage },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    fn api(status: u16) -> Error {
        error_for_status(status, None, String::new())
    }

    #[test]
    fn classification_by_status_and_kind() {
        assert!(is_retryable(&api(429)));
        assert!(is_retryable(&api(500)));
        assert!(is_retryable(&api(503)));
        assert!(is_retryable(&api(408)));
        assert!(!is_retryable(&api(400)));
        assert!(!is_retryable(&api(401)));
        assert!(!is_retryable(&api(404)));
        assert!(is_retryable(&Error::Timeout { attempts: 1, timeout: Duration::from_secs(1) }));
        assert!(is_retryable(&Error::Connection { attempts: 1, message: String::new() }));
        assert!(is_retryable(&Error::Decode { message: String::new() }));
        let bad = Error::BadReply { reason: "empty".into(), attempts: 1, usage: Usage::default() };
        assert!(is_retryable(&bad));
        let auth = Error::Auth { status: 401, body: String::new(), key_variable: "K".into() };
        assert!(!is_retryable(&auth));
    }

    #[test]
    fn context_length_400_gets_its_own_kind() {
        let check = |body: &str| {
            assert!(
                matches!(error_for_status(400, None, body.into()), Error::ContextLength { .. }),
                "{body}"
            );
        };
        check(r#"{"error":{"code":"context_length_exceeded","message":"too long"}}"#);
        check("This model's maximum context length is 8192 tokens");
        check("Too many tokens in the request");
        // OpenAI.
        check(
            r#"{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 204308 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
        );
        // OpenRouter.
        check(
            r#"{"error":{"message":"This endpoint's maximum context length is 131072 tokens. However, you requested about 138956 tokens (7884 of text input, 131072 in the output). Please reduce the length of either one, or use the \"middle-out\" transform to compress your prompt automatically.","code":400}}"#,
        );
        // vLLM, old and new wordings.
        check(
            r#"{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}"#,
        );
        check(
            "The prompt (total length 25938) is too long to fit into the model (context length 4096). Make sure that `max_model_len` is no smaller than the number of text tokens.",
        );
        check("The decoder prompt (length 9000) is longer than the maximum model length of 8192.");
        check(
            "Input prompt (9000 tokens) is longer than the model's context length (8192 tokens).",
        );
        // llama.cpp, before and after its own error type.
        check(
            r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":14429,"n_ctx":8192}}"#,
        );
        assert!(matches!(
            error_for_status(500, None, r#"{"error":{"code":500,"message":"the request exceeds the available context size. try increasing the context size or enable context shift","type":"exceed_context_size_error"}}"#.into()),
            Error::ContextLength { .. }
        ));
        // OpenRouter passing an upstream overflow on as a 502.
        assert!(matches!(
            error_for_status(
                502,
                None,
                "This model's maximum context length is 16000 tokens.".into()
            ),
            Error::ContextLength { .. }
        ));
        assert!(matches!(
            error_for_status(400, None, "bad field".into()),
            Error::Api { status: 400, .. }
        ));
    }

    #[test]
    fn retry_after_seconds_and_dates() {
        assert_eq!(parse_retry_after("2"), Some(Duration::from_secs(2)));
        assert_eq!(parse_retry_after(" 1.5 "), Some(Duration::from_millis(1500)));
        assert_eq!(parse_retry_after("-1"), None);
        assert_eq!(parse_retry_after("soon"), None);
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), Some(Duration::ZERO));
        let future = (chrono::Utc::now() + chrono::Duration::seconds(30)).to_rfc2822();
        let wait = parse_retry_after(&future).unwrap();
        assert!(wait > Duration::from_secs(25) && wait <= Duration::from_secs(30), "{wait:?}");
    }

    #[test]
    fn backoff_grows_is_capped_and_honours_retry_after() {
        let policy = RetryPolicy {
            max_attempts: 10,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(800),
            max_retry_after: Duration::from_secs(5),
        };
        let plain = api(500);
        for attempt in 1..=8 {
            let full =
                Duration::from_millis(100 * (1 << (attempt - 1))).min(Duration::from_millis(800));
            let wait = policy.delay_after(attempt, &plain);
            assert!(wait >= full / 2 && wait <= full, "attempt {attempt}: {wait:?}");
        }
        let asked = error_for_status(429, Some(Duration::from_secs(2)), String::new());
        assert!(policy.delay_after(1, &asked) >= Duration::from_secs(2));
        let absurd = error_for_status(429, Some(Duration::from_secs(3600)), String::new());
        assert!(policy.delay_after(1, &absurd) <= Duration::from_secs(5));
    }

    fn quick(max_attempts: u32) -> RetryPolicy {
        RetryPolicy { max_attempts, base_delay: Duration::from_millis(1), ..RetryPolicy::default() }
    }

    #[tokio::test]
    async fn gives_up_after_max_attempts_with_the_count() {
        let policy = quick(3);
        let calls = AtomicU32::new(0);
        let result: Result<(), Error> = with_retries(&policy, "test", || {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Err(api(503)) }
        })
        .await;
        assert_eq!(calls.load(Ordering::SeqCst), 3);
        assert!(matches!(result, Err(Error::Api { status: 503, attempts: 3, .. })), "{result:?}");
    }

    #[tokio::test]
    async fn stops_at_once_on_a_fatal_error() {
        let calls = AtomicU32::new(0);
        let result: Result<(), Error> = with_retries(&quick(5), "test", || {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Err(api(401)) }
        })
        .await;
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert!(matches!(result, Err(Error::Api { status: 401, attempts: 1, .. })));
    }
}
