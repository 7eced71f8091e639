//! The LLM client stack end to end: real HTTP from `build_chat_model` / `build_embedder` to the
//! scripted endpoint on 127.0.0.1, covering retries, rate limits, structured output, tool calls,
//! usage accounting, embeddings and key hygiene.

use std::io;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mragent::llm::retry::RetryPolicy;
use mragent::llm::scripted::{
    HASH_EMBEDDING_DIM, SCRIPTED_API_KEY, ScriptedReply, ScriptedServer, hashed_embedding,
};
use mragent::llm::{
    ChatMessage, ChatModel, ChatRequest, Client, Embedder, EmbedderConfig, Error, JsonSchemaSpec,
    LlmConfig, Secret, ToolCall, ToolChoice, ToolSpec, Usage, build_chat_model, build_embedder,
    chat_json,
};
use serde_json::{Value, json};

mod faults;

/// A distinctive fake key, so any leak is unambiguous.
const KEY: &str = "sk-or-v1-LEAKCHECK-7f3a9c2e5b1d4086";

fn config(server: &ScriptedServer) -> LlmConfig {
    let mut config = LlmConfig::new(server.base_url(), Secret::new(KEY), "test/model");
    config.timeout = Duration::from_secs(2);
    config.retry = RetryPolicy {
        max_attempts: 3,
        base_delay: Duration::from_millis(10),
        max_delay: Duration::from_millis(40),
        max_retry_after: Duration::from_secs(5),
    };
    config
}

#[allow(clippy::unwrap_used)] // test helper: a failure here is a test failure
fn client(server: &ScriptedServer) -> Client {
    build_chat_model(&config(server)).unwrap()
}

fn ask(text: &str) -> ChatRequest {
    ChatRequest::new("test/model", vec![ChatMessage::system("be brief"), ChatMessage::user(text)])
}

#[tokio::test]
async fn a_429_storm_is_ridden_out_and_waits_honour_retry_after() {
    let server = ScriptedServer::with_script([
        ScriptedReply::rate_limited(1),
        ScriptedReply::rate_limited(1),
        ScriptedReply::text("finally"),
    ])
    .await
    .unwrap();
    let client = client(&server);
    let started = Instant::now();
    let response = client.chat(&ask("hi")).await.unwrap();
    assert_eq!(response.message.content.as_deref(), Some("finally"));
    assert!(started.elapsed() >= Duration::from_secs(2), "{:?}", started.elapsed());
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    for pair in requests.windows(2) {
        let gap = pair[1].received_at - pair[0].received_at;
        assert!(gap >= Duration::from_secs(1), "retried after {gap:?}, header said 1s");
    }
    let totals = client.usage();
    assert_eq!((totals.requests, totals.failed_requests), (3, 2));
}

/// A server that refuses its first `refusals` requests with a 429 (`Retry-After: 1`).
async fn refusing_first(refusals: usize) -> ScriptedServer {
    let served = AtomicUsize::new(0);
    ScriptedServer::with_responder(move |_| {
        if served.fetch_add(1, Ordering::SeqCst) < refusals {
            ScriptedReply::rate_limited(1)
        } else {
            ScriptedReply::text("ok")
        }
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn confirmed_429s_with_retry_after_pause_every_worker() {
    let server = refusing_first(2).await;
    let client = client(&server);
    // Two requests refused in the same round: the overload is confirmed.
    let refused: Vec<_> = ["first", "second"]
        .into_iter()
        .map(|text| {
            let client = client.clone();
            tokio::spawn(async move { client.chat(&ask(text)).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    client.chat(&ask("third")).await.unwrap();
    for handle in refused {
        handle.await.unwrap().unwrap();
    }
    let requests = server.requests();
    assert_eq!(requests.len(), 5);
    let refusals_end = requests[1].received_at;
    for later in &requests[2..] {
        let gap = later.received_at - refusals_end;
        assert!(gap >= Duration::from_millis(900), "a worker fired {gap:?} into the cooldown");
    }
}

#[tokio::test]
async fn an_isolated_429_pauses_only_its_own_request() {
    let server = refusing_first(1).await;
    let client = client(&server);
    let first = tokio::spawn({
        let client = client.clone();
        async move { client.chat(&ask("first")).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    client.chat(&ask("second")).await.unwrap();
    first.await.unwrap().unwrap();
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    let second = requests.iter().find(|r| r.body.to_string().contains("second")).unwrap();
    let gap = second.received_at - requests[0].received_at;
    assert!(gap < Duration::from_millis(900), "a healthy worker waited {gap:?} for one 429");
    let retried = requests.iter().rfind(|r| r.body.to_string().contains("first")).unwrap();
    let wait = retried.received_at - requests[0].received_at;
    assert!(wait >= Duration::from_secs(1), "the refused request retried after {wait:?}");
}

#[tokio::test]
async fn persistent_429_surfaces_rate_limited_with_attempts() {
    let server =
        ScriptedServer::with_script((0..3).map(|_| ScriptedReply::rate_limited(0))).await.unwrap();
    let error = client(&server).chat(&ask("hi")).await.unwrap_err();
    assert!(
        matches!(&error, Error::RateLimited { attempts: 3, body, .. } if body.contains("429")),
        "{error:?}"
    );
    assert_eq!(server.request_count(), 3);
}

#[tokio::test]
async fn server_errors_are_retried_then_surface_the_typed_error() {
    let server = ScriptedServer::with_script([
        ScriptedReply::server_error(503),
        ScriptedReply::text("recovered"),
        ScriptedReply::server_error(500),
        ScriptedReply::server_error(503),
        ScriptedReply::server_error(502),
    ])
    .await
    .unwrap();
    let client = client(&server);
    assert_eq!(
        client.chat(&ask("one")).await.unwrap().message.content.as_deref(),
        Some("recovered")
    );
    let error = client.chat(&ask("two")).await.unwrap_err();
    assert!(matches!(error, Error::Api { status: 502, attempts: 3, .. }), "{error:?}");
    assert_eq!(server.request_count(), 5);
}

#[tokio::test]
async fn timeouts_are_retried_then_surface_the_typed_error() {
    let slow = || ScriptedReply::text("too late").delayed(Duration::from_secs(3));
    let server =
        ScriptedServer::with_script([slow(), ScriptedReply::text("fast"), slow(), slow(), slow()])
            .await
            .unwrap();
    let mut config = config(&server);
    config.timeout = Duration::from_millis(200);
    let client = build_chat_model(&config).unwrap();
    assert_eq!(client.chat(&ask("one")).await.unwrap().message.content.as_deref(), Some("fast"));
    let started = Instant::now();
    let error = client.chat(&ask("two")).await.unwrap_err();
    assert!(
        matches!(error, Error::Timeout { attempts: 3, timeout } if timeout == Duration::from_millis(200)),
        "{error:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "timeout not enforced: {:?}",
        started.elapsed()
    );
    assert_eq!(server.request_count(), 5);
}

#[tokio::test]
async fn connection_errors_are_retried_then_typed() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let mut config = LlmConfig::new(format!("http://127.0.0.1:{port}/v1"), Secret::new(KEY), "m");
    config.retry = RetryPolicy {
        max_attempts: 2,
        base_delay: Duration::from_millis(5),
        ..RetryPolicy::default()
    };
    let error = build_chat_model(&config).unwrap().chat(&ask("hi")).await.unwrap_err();
    assert!(matches!(error, Error::Connection { attempts: 2, .. }), "{error:?}");
}

#[tokio::test]
async fn context_length_and_other_4xx_are_not_retried() {
    let server = ScriptedServer::with_script([
        ScriptedReply::ContextLengthExceeded,
        ScriptedReply::Status { status: 404, message: "model not found".into() },
    ])
    .await
    .unwrap();
    let client = client(&server);
    let error = client.chat(&ask("a very long prompt")).await.unwrap_err();
    assert!(
        matches!(&error, Error::ContextLength { body } if body.contains("maximum context length")),
        "{error:?}"
    );
    let error = client.chat(&ask("hi")).await.unwrap_err();
    assert!(matches!(error, Error::ModelNotFound { status: 404, .. }), "{error:?}");
    assert_eq!(server.request_count(), 2);
}

#[tokio::test]
async fn bodies_that_stay_undecodable_end_as_decode_errors() {
    let server = ScriptedServer::with_script([
        ScriptedReply::MalformedJson,
        ScriptedReply::NonJson,
        ScriptedReply::MalformedJson,
    ])
    .await
    .unwrap();
    let error = client(&server).chat(&ask("hi")).await.unwrap_err();
    assert!(matches!(error, Error::Decode { .. }), "{error:?}");
    assert_eq!(server.request_count(), 3, "decode errors are retried like a 5xx");
}

#[tokio::test]
async fn request_limiter_holds_the_configured_rate_across_workers() {
    let server = ScriptedServer::with_responder(|_| ScriptedReply::text("ok")).await.unwrap();
    let mut config = config(&server);
    // 600 per minute = one per 100 ms; a 100 ms burst window allows one at a time.
    config.requests_per_minute = NonZeroU32::new(600);
    config.burst_window = Duration::from_millis(100);
    let client = build_chat_model(&config).unwrap();
    let started = Instant::now();
    let workers = (0..8).map(|_| {
        let client = client.clone();
        tokio::spawn(async move { client.chat(&ask("hi")).await })
    });
    for result in futures::future::join_all(workers).await {
        result.unwrap().unwrap();
    }
    assert!(started.elapsed() >= Duration::from_millis(690), "{:?}", started.elapsed());
    let mut arrivals: Vec<Instant> =
        server.requests().iter().map(|request| request.received_at).collect();
    arrivals.sort();
    for pair in arrivals.windows(2) {
        assert!(pair[1] - pair[0] >= Duration::from_millis(80), "gap {:?}", pair[1] - pair[0]);
    }
}

#[tokio::test]
async fn token_limiter_holds_the_configured_rate() {
    let server = ScriptedServer::with_responder(|_| ScriptedReply::text("ok")).await.unwrap();
    let mut config = config(&server);
    // 60k tokens per minute = 100 tokens per 100 ms; each request is estimated at 100 tokens.
    config.tokens_per_minute = NonZeroU32::new(60_000);
    config.burst_window = Duration::from_millis(100);
    let client = build_chat_model(&config).unwrap();
    let request = ChatRequest::new("test/model", vec![ChatMessage::user("x".repeat(400))]);
    let started = Instant::now();
    for _ in 0..5 {
        client.chat(&request).await.unwrap();
    }
    assert!(started.elapsed() >= Duration::from_millis(390), "{:?}", started.elapsed());
}

fn answer_schema() -> JsonSchemaSpec {
    JsonSchemaSpec {
        name: "answer".into(),
        schema: json!({
            "type": "object",
            "additionalProperties": false,
            "required": ["answer", "confidence"],
            "properties": {
                "answer": {"type": "string"},
                "confidence": {"type": "number", "minimum": 0, "maximum": 1}
            }
        }),
    }
}

#[tokio::test]
async fn schema_invalid_output_is_reasked_then_fails_naming_the_path() {
    let server = ScriptedServer::with_script([
        ScriptedReply::text(r#"{"answer": "Paris", "confidence": 2}"#),
        ScriptedReply::text(
            r#"```json
{"answer": "Paris", "confidence": 5}
```"#,
        ),
        ScriptedReply::text(r#"{"answer": "Paris", "confidence": 7}"#),
    ])
    .await
    .unwrap();
    let error = chat_json(&client(&server), ask("capital of France?"), &answer_schema(), 2)
        .await
        .unwrap_err();
    match &error {
        Error::SchemaInvalid { schema, path, message, attempts, .. } => {
            assert_eq!((schema.as_str(), path.as_str(), *attempts), ("answer", "/confidence", 3));
            assert!(message.contains("maximum"), "{message}");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(error.to_string().contains("`/confidence`"));
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    let reask = requests[1].messages();
    assert_eq!(reask.len(), 4);
    assert_eq!(reask[2]["role"], "assistant");
    assert_eq!(reask[2]["content"], r#"{"answer": "Paris", "confidence": 2}"#);
    assert_eq!(reask[3]["role"], "user");
    let reask_text = reask[3]["content"].as_str().unwrap();
    assert!(
        reask_text.contains("/confidence")
            && reask_text.contains("2 is greater than the maximum of 1"),
        "{reask_text}"
    );
    assert_eq!(requests[2].messages().len(), 6);
}

#[tokio::test]
async fn reask_recovers_and_sums_usage() {
    let server = ScriptedServer::with_script([
        ScriptedReply::text("I think the answer is Paris.").with_usage(10, 5),
        ScriptedReply::text(r#"Here: {"answer": "Paris", "confidence": 0.9} done"#)
            .with_usage(20, 7),
    ])
    .await
    .unwrap();
    let client = client(&server);
    #[derive(serde::Deserialize)]
    struct Answer {
        answer: String,
        confidence: f64,
    }
    use serde::Deserialize as _;
    let response = chat_json(&client, ask("capital?"), &answer_schema(), 1).await.unwrap();
    let typed = Answer::deserialize(&response.value).unwrap();
    assert_eq!((typed.answer.as_str(), typed.confidence), ("Paris", 0.9));
    assert_eq!(response.attempts, 2);
    assert_eq!(response.usage, Usage { prompt_tokens: 30, completion_tokens: 12 });
    assert_eq!(client.usage().usage, Usage { prompt_tokens: 30, completion_tokens: 12 });
    let reask_text = server.requests()[1].last_message_text().to_owned();
    assert!(reask_text.contains("no JSON value found"), "{reask_text}");
    assert!(
        server.requests()[0].body.get("response_format").is_none(),
        "structured output is off by default"
    );
}

#[tokio::test]
async fn structured_output_setting_sends_response_format() {
    let server = ScriptedServer::with_script([ScriptedReply::json(
        &json!({"answer": "x", "confidence": 0.5}),
    )])
    .await
    .unwrap();
    let mut config = config(&server);
    config.structured_output = true;
    let response = chat_json(&build_chat_model(&config).unwrap(), ask("q"), &answer_schema(), 0)
        .await
        .unwrap();
    assert_eq!(response.attempts, 1);
    let format = &server.requests()[0].body["response_format"];
    assert_eq!(format["type"], "json_schema");
    assert_eq!(format["json_schema"]["name"], "answer");
    assert_eq!(format["json_schema"]["strict"], true);
    assert_eq!(format["json_schema"]["schema"], answer_schema().schema);
}

#[tokio::test]
async fn tool_calls_round_trip() {
    let server = ScriptedServer::with_script([
        ScriptedReply::ToolCalls {
            content: None,
            calls: vec![
                ToolCall {
                    id: "call_a".into(),
                    name: "search_memory".into(),
                    arguments: r#"{"query": "LGBTQ group"}"#.into(),
                },
                ToolCall {
                    id: "call_b".into(),
                    name: "search_memory".into(),
                    arguments: r#"{"query": oops"#.into(),
                },
            ],
        },
        ScriptedReply::text("She went on 7 May 2023."),
    ])
    .await
    .unwrap();
    let client = client(&server);
    let tool = ToolSpec {
        name: "search_memory".into(),
        description: "Search the conversation memory.".into(),
        parameters: json!({"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}),
    };
    let mut request = ask("When did Caroline go to the LGBTQ support group?");
    request.tools = vec![tool];
    request.tool_choice = Some(ToolChoice::Required);
    request.parallel_tool_calls = Some(true);
    let response = client.chat(&request).await.unwrap();
    assert_eq!(response.finish_reason.as_deref(), Some("tool_calls"));
    let calls = &response.message.tool_calls;
    assert_eq!(calls.len(), 2);
    assert_eq!((calls[0].id.as_str(), calls[0].name.as_str()), ("call_a", "search_memory"));
    assert_eq!(
        serde_json::from_str::<Value>(&calls[0].arguments).unwrap(),
        json!({"query": "LGBTQ group"})
    );
    assert_eq!(calls[1].arguments, r#"{"query": oops"#, "invalid arguments come back verbatim");

    let first = &server.requests()[0].body;
    assert_eq!(first["tools"][0]["type"], "function");
    assert_eq!(first["tools"][0]["function"]["name"], "search_memory");
    assert_eq!(first["tools"][0]["function"]["parameters"]["required"], json!(["query"]));
    assert_eq!(first["tool_choice"], "required");
    assert_eq!(first["parallel_tool_calls"], true);

    request.messages.push(response.message.clone());
    request
        .messages
        .push(ChatMessage::tool("call_a", "7 May 2023: Caroline went to the LGBTQ support group."));
    request.messages.push(ChatMessage::tool("call_b", "error: arguments are not valid JSON"));
    request.tool_choice = Some(ToolChoice::None);
    let answer = client.chat(&request).await.unwrap();
    assert_eq!(answer.message.content.as_deref(), Some("She went on 7 May 2023."));

    let follow_up = server.requests()[1].messages().to_vec();
    assert_eq!(follow_up.len(), 5);
    assert_eq!(follow_up[2]["role"], "assistant");
    assert_eq!(follow_up[2]["tool_calls"][0]["id"], "call_a");
    assert_eq!(follow_up[2]["tool_calls"][0]["type"], "function");
    assert_eq!(follow_up[2]["tool_calls"][1]["function"]["arguments"], r#"{"query": oops"#);
    assert_eq!(
        follow_up[3],
        json!({"role": "tool", "content": "7 May 2023: Caroline went to the LGBTQ support group.", "tool_call_id": "call_a"})
    );
    assert_eq!(follow_up[4]["tool_call_id"], "call_b");
    assert_eq!(server.requests()[1].body["tool_choice"], "none");
}

#[tokio::test]
async fn usage_is_counted_per_call_and_per_run() {
    let server = ScriptedServer::with_script([
        ScriptedReply::text("a").with_usage(100, 10),
        ScriptedReply::server_error(500),
        ScriptedReply::text("b").with_usage(50, 5),
    ])
    .await
    .unwrap();
    let client = client(&server);
    let first = client.chat(&ask("one")).await.unwrap();
    let second = client.chat(&ask("two")).await.unwrap();
    assert_eq!(first.usage, Usage { prompt_tokens: 100, completion_tokens: 10 });
    assert_eq!(first.usage + second.usage, Usage { prompt_tokens: 150, completion_tokens: 15 });
    let totals = client.clone().usage();
    assert_eq!(totals.usage, Usage { prompt_tokens: 150, completion_tokens: 15 });
    assert_eq!((totals.requests, totals.failed_requests), (3, 1));
    assert!(client.estimated_cost_usd().is_none(), "no price for test/model");
    let mut priced = config(&server);
    priced.model = "openai/gpt-4o-mini".into();
    server.push(ScriptedReply::text("c").with_usage(1_000_000, 1_000_000));
    let priced = build_chat_model(&priced).unwrap();
    priced.chat(&priced.request(vec![ChatMessage::user("q")])).await.unwrap();
    let cost = priced.estimated_cost_usd().unwrap();
    assert!((cost - 0.75).abs() < 1e-9, "{cost}");
}

#[tokio::test]
async fn responder_answers_concurrent_requests_by_content() {
    let server = ScriptedServer::with_responder(|request| {
        ScriptedReply::text(format!("echo: {}", request.last_message_text()))
    })
    .await
    .unwrap();
    let client = client(&server);
    let calls = (0..10).map(|index| {
        let client = client.clone();
        async move { (index, client.chat(&ask(&format!("question {index}"))).await.unwrap()) }
    });
    for (index, response) in futures::future::join_all(calls).await {
        assert_eq!(response.message.content.unwrap(), format!("echo: question {index}"));
    }
    assert_eq!(server.request_count(), 10);
}

#[tokio::test]
async fn embeddings_are_sent_in_batches_and_retried() {
    let server = ScriptedServer::start().await.unwrap();
    server.push_embedding(ScriptedReply::rate_limited(0));
    let config = config(&server);
    let embedder = build_embedder(
        &config,
        &EmbedderConfig { model: "openai/text-embedding-3-small".into(), batch_size: 2 },
    )
    .unwrap();
    assert_eq!(embedder.name(), "api-openai-text-embedding-3-small");
    let texts: Vec<String> =
        ["the cat sat", "a cat sat down", "tax deadline", "quarterly taxes", "sunny beach"]
            .map(String::from)
            .to_vec();
    let embeddings = embedder.embed(&texts).await.unwrap();
    assert_eq!(embeddings.vectors.len(), 5);
    for (text, vector) in texts.iter().zip(&embeddings.vectors) {
        assert_eq!(vector, &hashed_embedding(text, HASH_EMBEDDING_DIM));
    }
    let batches: Vec<usize> =
        server.requests().iter().map(|request| request.embedding_inputs().len()).collect();
    assert_eq!(batches, vec![2, 2, 2, 1], "first batch retried after a 429");
    assert!(
        server
            .requests()
            .iter()
            .all(|request| request.body["model"] == "openai/text-embedding-3-small")
    );
    assert_eq!(embedder.usage().requests, 4);
    assert!(embeddings.usage.prompt_tokens > 0);
}

/// A `tracing` writer into a shared buffer.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

#[allow(clippy::unwrap_used)] // test helper: a poisoned buffer is a test failure
impl io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn the_api_key_appears_only_in_the_authorization_header() {
    let logs = Captured::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    // While only one dispatcher exists, tracing-core caches a callsite's interest from the
    // registering thread's subscriber alone, so a callsite first hit by a concurrent test (with
    // no subscriber) would be cached as "never" and vanish from this capture. A second live
    // dispatcher makes registration consult every dispatcher, ours included.
    let _second_dispatcher = tracing::Dispatch::new(tracing::subscriber::NoSubscriber::default());
    let _guard = tracing::subscriber::set_default(subscriber);
    tracing::callsite::rebuild_interest_cache();

    let server = ScriptedServer::with_script([
        ScriptedReply::rate_limited(0),
        ScriptedReply::text("fine"),
        ScriptedReply::Status { status: 500, message: format!("upstream rejected key {KEY}") },
        ScriptedReply::Status { status: 500, message: format!("upstream rejected key {KEY}") },
        ScriptedReply::Status { status: 500, message: format!("upstream rejected key {KEY}") },
        ScriptedReply::Status {
            status: 401,
            message: format!("Incorrect API key provided: {KEY}."),
        },
    ])
    .await
    .unwrap();
    let config = config(&server);
    let client = build_chat_model(&config).unwrap();
    client.chat(&ask("hello")).await.unwrap();
    let server_error = client.chat(&ask("hello")).await.unwrap_err();
    let unauthorized = client.chat(&ask("hello")).await.unwrap_err();
    assert!(matches!(unauthorized, Error::Auth { status: 401, .. }), "{unauthorized:?}");

    let mut rendered = Vec::new();
    for error in [&unauthorized, &server_error] {
        rendered.push(error.to_string());
        rendered.push(format!("{error:?}"));
    }
    rendered.push(format!("{config:?}"));
    rendered.push(format!("{client:?}"));
    for text in &rendered {
        assert!(!text.contains(KEY), "key leaked: {text}");
    }
    assert!(unauthorized.to_string().contains("Incorrect API key provided: ***"), "{unauthorized}");

    let logs = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    assert!(
        logs.contains("retrying after a failed attempt"),
        "the subscriber captured nothing:\n{logs}"
    );
    assert!(!logs.contains(KEY), "key leaked into logs:\n{logs}");

    let requests = server.requests();
    assert_eq!(requests.len(), 6);
    for request in &requests {
        assert_eq!(request.header("authorization"), Some(format!("Bearer {KEY}").as_str()));
        assert!(!request.body.to_string().contains(KEY));
        let other_headers =
            request.headers.iter().filter(|(name, _)| name.as_str() != "authorization");
        assert!(other_headers.into_iter().all(|(_, value)| !value.contains(KEY)));
    }
}

#[tokio::test]
async fn extra_headers_are_sent() {
    let server = ScriptedServer::with_script([ScriptedReply::text("ok")]).await.unwrap();
    let mut config = config(&server);
    config.extra_headers = vec![
        ("X-Title".into(), "mragent".into()),
        ("HTTP-Referer".into(), "https://example.org".into()),
    ];
    build_chat_model(&config).unwrap().chat(&ask("hi")).await.unwrap();
    let request = &server.requests()[0];
    assert_eq!(request.header("x-title"), Some("mragent"));
    assert_eq!(request.header("http-referer"), Some("https://example.org"));
    assert_eq!(request.path, "/v1/chat/completions");
    assert_eq!(request.body["model"], "test/model");
}

#[tokio::test]
async fn dropping_the_server_stops_it() {
    let server = ScriptedServer::with_script([ScriptedReply::text("up")]).await.unwrap();
    let config = server.llm_config("test/model");
    assert_eq!(config.api_key.expose(), SCRIPTED_API_KEY);
    let response = build_chat_model(&config).unwrap().chat(&ask("hi")).await.unwrap();
    assert_eq!(response.message.content.as_deref(), Some("up"));
    drop(server);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let error = build_chat_model(&config).unwrap().chat(&ask("hi")).await.unwrap_err();
    assert!(matches!(error, Error::Connection { attempts: 3, .. }), "{error:?}");
}
