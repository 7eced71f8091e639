//! Stopping a whole run on the first reply that no retry can fix (a refused key, an unknown
//! model): [`FatalLatch`] remembers the first such error, and [`Latched`] wraps a model or an
//! embedder so that every call after it fails at once (or waits forever, for drivers that race
//! the latch) instead of paying one failed request per question.
//!
//! Which errors are fatal is decided by [`fatal_cause`], the one place to adapt when the `llm`
//! layer grows typed fatal kinds.

use std::future::Future;
use std::ops::Deref;
use std::sync::{Arc, OnceLock};

use tokio::sync::Notify;

use crate::llm::{ChatModel, ChatRequest, ChatResponse, Embedder, Embeddings, Error};

/// The user-facing cause of a fatal error: what went wrong and which variable or flag to fix.
/// `None` for errors a later call (or a rerun) may get past.
pub fn fatal_cause(error: &Error, key_variable: &str, model: &str) -> Option<String> {
    let details = |body: &str| {
        let body = body.trim();
        if body.is_empty() { "no details in the reply".to_string() } else { body.to_string() }
    };
    match error {
        Error::Api { status: status @ (401 | 403), body, .. } => Some(format!(
            "the endpoint refused the API key (status {status}: {}); set a valid key in {key_variable} (environment or .env), or check that --base-url / MRAGENT_BASE_URL points at the right server",
            details(body)
        )),
        Error::Api { status: 404, body, .. } => Some(format!(
            "the endpoint does not serve model `{model}` (status 404: {}); choose another with --model / --re-model (MRAGENT_MODEL), or check --base-url / MRAGENT_BASE_URL",
            details(body)
        )),
        Error::Config(message) => Some(message.clone()),
        // The LLM layer's own fatal kinds (rejected key, unknown model) already name the
        // variable to fix.
        error if error.is_fatal() => Some(error.to_string()),
        _ => None,
    }
}

/// What a [`Latched`] call does once the latch is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterFatal {
    /// Fail at once with the fatal error (the caller counts the failure and stops).
    Fail,
    /// Never return (the caller races [`FatalLatch::tripped`] and drops its work).
    Wait,
}

/// The first fatal error of a run, shared by every wrapped client. Cheap to clone.
#[derive(Debug, Clone)]
pub struct FatalLatch {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    key_variable: String,
    cause: OnceLock<String>,
    notify: Notify,
}

impl FatalLatch {
    /// A latch whose messages name `key_variable` as the key to fix.
    pub fn new(key_variable: &str) -> Self {
        Self {
            inner: Arc::new(Inner {
                key_variable: key_variable.to_string(),
                cause: OnceLock::new(),
                notify: Notify::new(),
            }),
        }
    }

    /// The cause, once a fatal error has been seen.
    pub fn cause(&self) -> Option<&str> {
        self.inner.cause.get().map(String::as_str)
    }

    /// Resolves with the cause once a fatal error has been seen (at once if it already was).
    pub async fn tripped(&self) -> String {
        loop {
            let notified = self.inner.notify.notified();
            if let Some(cause) = self.cause() {
                return cause.to_string();
            }
            notified.await;
        }
    }

    /// Records `error` if it is fatal; true if the latch is set afterwards.
    fn observe(&self, error: &Error, model: &str) -> bool {
        if let Some(cause) = fatal_cause(error, &self.inner.key_variable, model)
            && self.inner.cause.set(cause).is_ok()
        {
            tracing::error!(error = %error, "fatal endpoint error: stopping the run");
            self.inner.notify.notify_waiters();
        }
        self.cause().is_some()
    }

    fn latched_error(&self) -> Option<Error> {
        self.cause().map(|cause| Error::Config(cause.to_string()))
    }
}

/// A model or embedder (behind a reference or an `Arc`) behind a [`FatalLatch`].
#[derive(Debug, Clone)]
pub struct Latched<T> {
    inner: T,
    latch: FatalLatch,
    after: AfterFatal,
}

impl<T> Latched<T> {
    /// Wraps `inner`; calls after the latch is set behave as `after` says.
    pub fn new(inner: T, latch: &FatalLatch, after: AfterFatal) -> Self {
        Self { inner, latch: latch.clone(), after }
    }

    /// Makes the call (`call()` is not even invoked once the latch has tripped).
    async fn guard<R, F>(&self, model: &str, call: impl FnOnce() -> F) -> Result<R, Error>
    where
        F: Future<Output = Result<R, Error>>,
    {
        if let Some(error) = self.latched_error_or_wait().await {
            return Err(error);
        }
        let outcome = call().await;
        if let Err(error) = &outcome
            && self.latch.observe(error, model)
            && self.after == AfterFatal::Wait
        {
            std::future::pending::<()>().await;
        }
        outcome
    }

    async fn latched_error_or_wait(&self) -> Option<Error> {
        let error = self.latch.latched_error()?;
        if self.after == AfterFatal::Wait {
            std::future::pending::<()>().await;
        }
        Some(error)
    }
}

impl<T> ChatModel for Latched<T>
where
    T: Deref + Send + Sync,
    T::Target: ChatModel,
{
    fn chat(
        &self,
        request: &ChatRequest,
    ) -> impl Future<Output = Result<ChatResponse, Error>> + Send {
        self.guard(&request.model, || self.inner.chat(request))
    }
}

impl<T> Embedder for Latched<T>
where
    T: Deref + Send + Sync,
    T::Target: Embedder,
{
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn embed(&self, texts: &[String]) -> impl Future<Output = Result<Embeddings, Error>> + Send {
        self.guard(self.inner.name(), || self.inner.embed(texts))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
