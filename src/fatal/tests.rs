use std::sync::atomic::{AtomicU32, Ordering};

use super::*;
use crate::llm::Message;

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
    ChatRequest::new("local/tiny", vec![Message::user("hi")])
}

#[tokio::test]
async fn a_401_trips_the_latch_and_later_calls_never_reach_the_endpoint() {
    let latch = FatalLatch::new("OPENAI_API_KEY");
    let model = Latched::new(
        std::sync::Arc::new(Failing { status: 401, body: "", calls: AtomicU32::new(0) }),
        &latch,
        AfterFatal::Fail,
    );
    assert!(model.chat(&request()).await.is_err());
    let cause = latch.cause().unwrap().to_string();
    assert!(cause.contains("OPENAI_API_KEY") && cause.contains("no details"), "{cause}");
    for _ in 0..5 {
        assert!(model.chat(&request()).await.is_err());
    }
    assert_eq!(model.inner.calls.load(Ordering::SeqCst), 1);
    assert_eq!(latch.tripped().await, cause);
}

#[tokio::test]
async fn a_500_is_not_fatal() {
    let latch = FatalLatch::new("OPENAI_API_KEY");
    let model = Latched::new(
        std::sync::Arc::new(Failing { status: 500, body: "oops", calls: AtomicU32::new(0) }),
        &latch,
        AfterFatal::Wait,
    );
    assert!(model.chat(&request()).await.is_err());
    assert!(model.chat(&request()).await.is_err());
    assert_eq!(latch.cause(), None);
    assert_eq!(model.inner.calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn waiting_mode_never_returns_after_the_latch() {
    let latch = FatalLatch::new("K");
    let model = Latched::new(
        std::sync::Arc::new(Failing {
            status: 403,
            body: "{\"error\":\"bad key\"}",
            calls: AtomicU32::new(0),
        }),
        &latch,
        AfterFatal::Wait,
    );
    let request = request();
    let first = tokio::time::timeout(std::time::Duration::from_millis(50), model.chat(&request));
    assert!(first.await.is_err(), "the call that trips the latch waits too");
    assert!(latch.cause().unwrap().contains("bad key"));
}

#[test]
fn causes_name_the_variable_or_the_model() {
    let api = |status| Error::Api { status, attempts: 1, body: String::new(), retry_after: None };
    assert!(
        fatal_cause(&api(403), "OPENROUTER_API_KEY", "m").unwrap().contains("OPENROUTER_API_KEY")
    );
    assert!(fatal_cause(&api(404), "K", "local/tiny").unwrap().contains("`local/tiny`"));
    assert_eq!(fatal_cause(&api(429), "K", "m"), None);
    assert_eq!(fatal_cause(&api(502), "K", "m"), None);
}
