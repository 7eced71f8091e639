//! Fatal replies stop a run at once: [`classify`] turns a refused key (401, 403) into
//! [`Error::Auth`] and an unknown or invalid model (404, or a 400 that says so) into
//! [`Error::ModelNotFound`], each naming what to fix; the [`Latched`] decorator remembers the
//! first such error and fails every later call of every clone at once with the same error, so
//! a run with a wrong key or model stops after one request instead of failing item by item.
//!
//! A 403 that is about content moderation (OpenRouter flags inputs with a 403) is not about
//! the key and stays an ordinary [`Error::Api`].

use std::sync::{Arc, OnceLock};

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

/// The first fatal error seen by any clone of one client stack.
#[derive(Debug, Default)]
pub struct FatalLatch {
    error: OnceLock<Error>,
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

    /// Remember `error` if it is an [`Error::Auth`] or [`Error::ModelNotFound`] (the first
    /// one wins).
    pub fn observe(&self, error: &Error) {
        if matches!(error, Error::Auth { .. } | Error::ModelNotFound { .. })
            && self.error.set(error.clone()).is_ok()
        {
            tracing::error!(%error, "fatal reply from the endpoint: failing every later call");
        }
    }
}

/// A chat model or embedder whose fatal errors are classified and latched (see the module
/// docs). Clones share the latch.
#[derive(Debug, Clone)]
pub struct Latched<M> {
    inner: M,
    latch: Arc<FatalLatch>,
    key_variable: Arc<str>,
    /// The model embeddings are asked for (chat requests name their own).
    embed_model: Arc<str>,
}

impl<M> Latched<M> {
    /// Latch fatal errors of `inner`; `key_variable` names the key's variable in messages.
    pub fn new(inner: M, key_variable: &str) -> Self {
        Self {
            inner,
            latch: Arc::default(),
            key_variable: key_variable.into(),
            embed_model: "".into(),
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

    fn settle<T>(&self, result: Result<T, Error>, model: &str) -> Result<T, Error> {
        result.map_err(|error| {
            let error = classify(error, model, &self.key_variable);
            self.latch.observe(&error);
            error
        })
    }
}

impl<M: ChatModel> ChatModel for Latched<M> {
    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, Error> {
        self.latch.check(&request.model)?;
        let result = self.inner.chat(request).await;
        self.settle(result, &request.model)
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
        self.latch.check(&self.embed_model)?;
        let result = self.inner.embed(texts).await;
        self.settle(result, &self.embed_model)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(status: u16, body: &str) -> Error {
        Error::Api { status, attempts: 1, body: body.to_owned(), retry_after: None }
    }

    fn classified(status: u16, body: &str) -> Error {
        classify(api(status, body), "vendor/model-x", "OPENROUTER_API_KEY")
    }

    #[test]
    fn refused_keys_name_the_variable_and_never_echo_the_body_key() {
        let error = classified(401, "");
        assert!(matches!(error, Error::Auth { status: 401, .. }), "{error:?}");
        let text = error.to_string();
        assert!(text.contains("OPENROUTER_API_KEY") && text.contains("no details"), "{text}");
        assert!(text.contains("--base-url"), "{text}");
        let error = classified(403, r#"{"error":{"message":"Key disabled","code":403}}"#);
        assert!(matches!(error, Error::Auth { status: 403, .. }), "{error:?}");
        let flagged = classified(403, "Your input was flagged by moderation");
        assert!(matches!(flagged, Error::Api { status: 403, .. }), "{flagged:?}");
    }

    #[test]
    fn model_not_found_in_provider_phrasings() {
        let bodies = [
            (404, "The model `gpt-9` does not exist or you do not have access to it."),
            (404, r#"{"error":{"message":"No endpoints found for vendor/model-x.","code":404}}"#),
            (400, r#"{"error":{"message":"vendor/model-x is not a valid model ID","code":400}}"#),
            (404, r#"{"object":"error","message":"The model `x` does not exist.","code":404}"#),
            (404, r#"{"error":"model \"x\" not found, try pulling it first"}"#),
            (404, ""),
        ];
        for (status, body) in bodies {
            let error = classified(status, body);
            assert!(
                matches!(&error, Error::ModelNotFound { model, .. } if model == "vendor/model-x"),
                "{status} {body}: {error:?}"
            );
            assert!(error.to_string().contains("--model"), "{error}");
        }
        assert!(matches!(classified(400, "bad field `foo`"), Error::Api { status: 400, .. }));
    }

    #[test]
    fn the_latch_keeps_the_first_fatal_error_per_model() {
        let latch = FatalLatch::default();
        latch.observe(&api(500, "transient"));
        assert!(latch.check("a").is_ok());
        latch.observe(&classified(404, ""));
        assert!(latch.check("other/model").is_ok());
        assert!(matches!(latch.check("vendor/model-x"), Err(Error::ModelNotFound { .. })));
        latch.observe(&classified(401, ""));
        assert!(latch.check("vendor/model-x").is_err());
    }
}
