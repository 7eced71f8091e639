//! Fatal replies stop a run at once: [`classify`] turns a refused key (401, 403) into
//! [`Error::Auth`] and an unknown or invalid model (404, or a 400 that says so) into
//! [`Error::ModelNotFound`], each naming what to fix; the [`Latched`] decorator records the
//! first fatal error ([`Error::is_fatal`]: those two and [`Error::Config`]) in a [`FatalLatch`]
//! and fails every later call of every clone at once with the same error, so a run with a wrong
//! key or model stops after one request instead of failing item by item.
//!
//! This is the one latch of the crate, used at two levels: inside each client stack
//! (`stack.rs`, [`Latched::new`]: a latch per stack), and run-wide, where the commands hand one
//! shared latch to the build's, the answer phase's or the judge's chat model and embedder
//! ([`Latched::sharing`]) and race [`FatalLatch::tripped`] against the work, or check
//! [`FatalLatch::error`] before starting the next item.
//!
//! A 403 that is about content moderation (OpenRouter flags inputs with a 403) is not about
//! the key and stays an ordinary [`Error::Api`].

use std::future::Future;
use std::sync::{Arc, OnceLock};

use tokio::sync::Notify;

use super::budget::Step;
use super::{ChatModel, ChatRequest, ChatResponse, Embedder, Embeddings, Error};

/// Turn a per-request error into the fatal kind it stands for, if it does. `model` is the
/// model the request asked for, `key_variable` the variable the key comes from.
pub fn classify(error: Error, model: &str, key_variable: &str) -> Error {
    match error {
        Error::Api { status: status @ (401 | 403), body, .. }
            if status == 401 || !is_moderation(&body) =>
        {
            Error::Auth { status, body, key_variable: key_variable.to_owned() }
        }
        Error::Api { status: 404, body, .. } => {
            Error::ModelNotFound { model: model.to_owned(), status: 404, body }
        }
        Error::Api { status: status @ (400 | 422), body, .. } if names_an_invalid_model(&body) => {
            Error::ModelNotFound { model: model.to_owned(), status, body }
        }
        other => other,
    }
}

/// Whether an error body says the model does not exist or is not valid. Phrasings:
/// OpenAI "The model `x` does not exist or you do not have access to it." (`model_not_found`),
/// OpenRouter "x is not a valid model ID" / "No endpoints found for x", vLLM "The model `x`
/// does not exist.", Ollama "model \"x\" not found, try pulling it first".
pub fn names_an_invalid_model(body: &str) -> bool {
    const MARKERS: &[&str] = &[
        "model_not_found",
        "not a valid model",
        "invalid model",
        "unknown model",
        "no endpoints found",
        "model not found",
    ];
    let lower = body.to_lowercase();
    MARKERS.iter().any(|marker| lower.contains(marker))
        || (lower.contains("model")
            && (lower.contains("does not exist") || lower.contains("not found")))
}

fn is_moderation(body: &str) -> bool {
    let lower = body.to_lowercase();
    lower.contains("moderation") || lower.contains("flagged")
}

/// What a [`Latched`] call does once the latch is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterFatal {
    /// Fail at once with the latched error (the caller counts the failure and stops).
    Fail,
    /// Never return, whatever model the call is for (the caller races [`FatalLatch::tripped`]
    /// and drops its work).
    Wait,
}

/// The first fatal error seen by any clone of one client stack, or by every client of a run
/// that shares it.
#[derive(Debug, Default)]
pub struct FatalLatch {
    error: OnceLock<Error>,
    notify: Notify,
}

impl FatalLatch {
    /// The latched error, if any, that applies to a request for `model` (a model that is not
    /// found only fails requests for that model).
    pub fn check(&self, model: &str) -> Result<(), Error> {
        match self.error.get() {
            Some(Error::ModelNotFound { model: missing, .. }) if missing != model => Ok(()),
            Some(error) => Err(error.clone()),
            None => Ok(()),
        }
    }

    /// The latched error, if any.
    pub fn error(&self) -> Option<&Error> {
        self.error.get()
    }

    /// Resolves with the latched error once there is one (at once if there already is).
    pub async fn tripped(&self) -> Error {
        loop {
            let notified = self.notify.notified();
            if let Some(error) = self.error() {
                return error.clone();
            }
            notified.await;
        }
    }

    /// Remember `error` if it is fatal ([`Error::is_fatal`]; the first one wins). True if the
    /// latch is set afterwards.
    pub fn observe(&self, error: &Error) -> bool {
        if error.is_fatal() && self.error.set(error.clone()).is_ok() {
            tracing::error!(%error, "fatal reply from the endpoint: failing every later call");
            self.notify.notify_waiters();
        }
        self.error().is_some()
    }
}

/// A chat model or embedder whose fatal errors are classified and latched (see the module
/// docs). Clones share the latch.
#[derive(Debug, Clone)]
pub struct Latched<M> {
    inner: M,
    latch: Arc<FatalLatch>,
    key_variable: Arc<str>,
    /// The model embeddings are asked for (chat requests name their own); empty: the
    /// embedder's name.
    embed_model: Arc<str>,
    after: AfterFatal,
}

impl<M> Latched<M> {
    /// Latch fatal errors of `inner` in a latch of its own (calls after it fail at once);
    /// `key_variable` names the key's variable in messages.
    pub fn new(inner: M, key_variable: &str) -> Self {
        Self::sharing(inner, &Arc::default(), key_variable, AfterFatal::Fail)
    }

    /// Latch fatal errors of `inner` in `latch`, shared with other clients; calls after it
    /// behave as `after` says.
    pub fn sharing(
        inner: M,
        latch: &Arc<FatalLatch>,
        key_variable: &str,
        after: AfterFatal,
    ) -> Self {
        Self {
            inner,
            latch: Arc::clone(latch),
            key_variable: key_variable.into(),
            embed_model: "".into(),
            after,
        }
    }

    /// Name the embedding model in a model-not-found error.
    pub fn with_embed_model(mut self, model: &str) -> Self {
        self.embed_model = model.into();
        self
    }

    /// The shared latch.
    pub fn latch(&self) -> &Arc<FatalLatch> {
        &self.latch
    }

    /// The wrapped model.
    pub fn inner(&self) -> &M {
        &self.inner
    }

    /// Makes the call (`call()` is not even invoked once the latch applies to `model`); in
    /// [`AfterFatal::Wait`] mode, never returns once the latch is set.
    async fn call<T, F>(&self, model: &str, call: impl FnOnce() -> F) -> Result<T, Error>
    where
        F: Future<Output = Result<T, Error>>,
    {
        let waits = || self.after == AfterFatal::Wait && self.latch.error().is_some();
        if waits() {
            std::future::pending::<()>().await;
        }
        let outcome = match self.latch.check(model) {
            Ok(()) => call().await.map_err(|error| {
                let error = classify(error, model, &self.key_variable);
                self.latch.observe(&error);
                error
            }),
            Err(error) => Err(error),
        };
        if outcome.is_err() && waits() {
            std::future::pending::<()>().await;
        }
        outcome
    }
}

impl<M: ChatModel> ChatModel for Latched<M> {
    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, Error> {
        self.call(&request.model, || self.inner.chat(request)).await
    }

    fn max_tokens(&self, step: Step) -> Option<u32> {
        self.inner.max_tokens(step)
    }
}

impl<E: Embedder> Embedder for Latched<E> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn embed(&self, texts: &[String]) -> Result<Embeddings, Error> {
        let model = if self.embed_model.is_empty() { self.inner.name() } else { &self.embed_model };
        self.call(model, || self.inner.embed(texts)).await
    }
}

/// `work`, or the latch's cause once it trips (the judgements already made are kept where
/// `work` keeps them).
pub async fn until_fatal<T>(
    latch: &FatalLatch,
    work: impl Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    tokio::select! {
        biased;
        cause = latch.tripped() => Err(anyhow::anyhow!("judging stopped: {cause}")),
        value = work => value,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
