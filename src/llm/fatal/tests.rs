use std::sync::atomic::{AtomicU32, Ordering};

use super::*;
use crate::llm::ChatMessage;

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

/// A model that fails every call with `status` and counts the calls that reach it.
struct Failing {
    status: u16,
    body: &'static str,
    calls: AtomicU32,
}

impl ChatModel for Failing {
    fn chat(
        &self,
        _request: &ChatRequest,
    ) -> impl Future<Output = Result<ChatResponse, Error>> + Send {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let error = Error::Api {
            status: self.status,
            attempts: 1,
            body: self.body.to_string(),
            retry_after: None,
        };
        async move { Err(error) }
    }
}

fn request() -> ChatRequest {
    ChatRequest::new("local/tiny", vec![ChatMessage::user("hi")])
}

#[tokio::test]
async fn a_401_trips_the_latch_and_later_calls_never_reach_the_endpoint() {
    let latch = Arc::new(FatalLatch::default());
    let model = Latched::sharing(
        Arc::new(Failing { status: 401, body: "", calls: AtomicU32::new(0) }),
        &latch,
        "OPENAI_API_KEY",
        AfterFatal::Fail,
    );
    assert!(model.chat(&request()).await.is_err());
    let cause = latch.error().unwrap().to_string();
    assert!(cause.contains("OPENAI_API_KEY") && cause.contains("no details"), "{cause}");
    for _ in 0..5 {
        assert!(model.chat(&request()).await.is_err());
    }
    assert_eq!(model.inner().calls.load(Ordering::SeqCst), 1);
    assert_eq!(latch.tripped().await.to_string(), cause);
}

#[tokio::test]
async fn a_500_is_not_fatal() {
    let latch = Arc::new(FatalLatch::default());
    let model = Latched::sharing(
        Arc::new(Failing { status: 500, body: "oops", calls: AtomicU32::new(0) }),
        &latch,
        "OPENAI_API_KEY",
        AfterFatal::Wait,
    );
    assert!(model.chat(&request()).await.is_err());
    assert!(model.chat(&request()).await.is_err());
    assert!(latch.error().is_none());
    assert_eq!(model.inner().calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn waiting_mode_never_returns_after_the_latch() {
    let latch = Arc::new(FatalLatch::default());
    let model = Latched::sharing(
        Arc::new(Failing {
            status: 403,
            body: "{\"error\":\"bad key\"}",
            calls: AtomicU32::new(0),
        }),
        &latch,
        "K",
        AfterFatal::Wait,
    );
    let request = request();
    let first = tokio::time::timeout(std::time::Duration::from_millis(50), model.chat(&request));
    assert!(first.await.is_err(), "the call that trips the latch waits too");
    assert!(latch.error().unwrap().to_string().contains("bad key"));
}

#[tokio::test]
async fn a_shared_latch_stops_the_other_clients_too() {
    let latch = Arc::new(FatalLatch::default());
    let refused = Latched::sharing(
        Arc::new(Failing { status: 404, body: "", calls: AtomicU32::new(0) }),
        &latch,
        "K",
        AfterFatal::Fail,
    );
    let other = Latched::sharing(
        Arc::new(Failing { status: 500, body: "", calls: AtomicU32::new(0) }),
        &latch,
        "K",
        AfterFatal::Fail,
    );
    let error = refused.chat(&request()).await.unwrap_err();
    assert!(matches!(&error, Error::ModelNotFound { model, .. } if model == "local/tiny"));
    assert!(error.to_string().contains("`local/tiny`"), "{error}");
    // The same model through another client fails at once; the run stops on `error()`.
    assert!(matches!(other.chat(&request()).await, Err(Error::ModelNotFound { .. })));
    assert_eq!(other.inner().calls.load(Ordering::SeqCst), 0);
    assert!(matches!(latch.tripped().await, Error::ModelNotFound { .. }));
}
