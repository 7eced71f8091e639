//! Faults real endpoints produce, end to end over HTTP: unusable 200s retried, hung requests
//! hedged, fatal replies latched, context overflows recognised, lenient JSON accepted without a
//! re-ask, tokens of failed calls counted, and the adaptive concurrency limit under a 429 storm.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use mragent::llm::adaptive::AimdPolicy;
use mragent::llm::hedge::HedgePolicy;
use mragent::llm::retry::RetryPolicy;
use mragent::llm::scripted::{ScriptedReply, ScriptedServer};
use mragent::llm::{
    ChatModel, Error, JsonSchemaSpec, LlmConfig, Step, Usage, build_chat_model, build_embedder,
    chat_json,
};
use serde_json::json;

use super::{KEY, ask, client, config};

fn ok_body(content: &str, finish_reason: &str) -> String {
    json!({
        "choices": [{"message": {"role": "assistant", "content": content}, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 7, "completion_tokens": 3}
    })
    .to_string()
}

fn raw200(body: String) -> ScriptedReply {
    ScriptedReply::Raw { status: 200, headers: Vec::new(), body }
}

#[tokio::test]
async fn unusable_200_replies_are_retried_and_succeed() {
    let none = Usage::default();
    let both = Usage { prompt_tokens: 7, completion_tokens: 3 };
    let cases: [(&str, ScriptedReply, &str, Usage); 5] = [
        ("truncated body", ScriptedReply::MalformedJson, "decode", none),
        ("html body", ScriptedReply::NonJson, "decode", none),
        (
            "empty choices",
            raw200(json!({"choices": [], "usage": {"prompt_tokens": 7}}).to_string()),
            "no choices",
            Usage { prompt_tokens: 7, completion_tokens: 0 },
        ),
        (
            "finish_reason error",
            raw200(ok_body("half an answ", "error")),
            "finish_reason \"error\"",
            both,
        ),
        ("empty answer", raw200(ok_body("", "stop")), "neither text nor tool calls", both),
    ];
    for (name, fault, reason, failed) in cases {
        let server =
            ScriptedServer::with_script([fault, ScriptedReply::text("fine").with_usage(10, 2)])
                .await
                .unwrap();
        let client = client(&server);
        let response =
            client.chat(&ask("hi")).await.unwrap_or_else(|error| panic!("{name}: {error}"));
        assert_eq!(response.message.content.as_deref(), Some("fine"), "{name}");
        assert_eq!(server.request_count(), 2, "{name}");
        assert_eq!(response.calls.attempts, 2, "{name}");
        assert_eq!(response.calls.retries.len(), 1, "{name}");
        let retry = &response.calls.retries[0];
        assert!(retry.reason.contains(reason), "{name}: {retry:?}");
        assert_eq!(retry.attempt, 1);
        // The unusable reply's usage block counts, in the call and in the run totals.
        let expected = Usage { prompt_tokens: 10, completion_tokens: 2 } + failed;
        assert_eq!(response.usage, expected, "{name}");
        let totals = client.usage();
        assert_eq!(totals.usage, expected, "{name}");
        assert_eq!((totals.requests, totals.failed_requests), (2, 1), "{name}");
    }
}

#[tokio::test]
async fn an_unusable_reply_that_persists_is_a_bad_reply_with_all_its_tokens() {
    let server =
        ScriptedServer::with_script((0..3).map(|_| raw200(ok_body(" ", "stop")))).await.unwrap();
    let client = client(&server);
    let error = client.chat(&ask("hi")).await.unwrap_err();
    assert!(
        matches!(&error, Error::BadReply { attempts: 3, usage, .. } if *usage == Usage { prompt_tokens: 21, completion_tokens: 9 }),
        "{error:?}"
    );
    assert_eq!(client.usage().usage, Usage { prompt_tokens: 21, completion_tokens: 9 });
}

fn hedging(server: &ScriptedServer, initial: Duration) -> LlmConfig {
    let mut config = config(server);
    config.timeout = Duration::from_secs(20);
    config.hedge = HedgePolicy {
        initial,
        floor: Duration::from_millis(100),
        min_samples: 4,
        ..HedgePolicy::default()
    };
    config
}

#[tokio::test]
async fn a_hung_first_request_is_hedged_and_the_fast_reply_wins() {
    let hang = Duration::from_secs(15);
    let server = ScriptedServer::with_script([
        ScriptedReply::text("too late").delayed(hang),
        ScriptedReply::text("fast").with_usage(5, 1),
    ])
    .await
    .unwrap();
    let client = build_chat_model(&hedging(&server, Duration::from_millis(300))).unwrap();
    let started = Instant::now();
    let response = client.chat(&ask("hi")).await.unwrap();
    let elapsed = started.elapsed();
    assert_eq!(response.message.content.as_deref(), Some("fast"));
    assert!(elapsed < Duration::from_secs(2), "took {elapsed:?} against a {hang:?} hang");
    assert!(elapsed >= Duration::from_millis(300), "hedged before the deadline: {elapsed:?}");
    assert_eq!((response.calls.hedges, response.calls.hedge_won), (1, true));
    assert_eq!(response.calls.attempts, 1, "a hedge is not a retry");
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let gap = requests[1].received_at - requests[0].received_at;
    assert!(gap >= Duration::from_millis(290) && gap < Duration::from_secs(1), "{gap:?}");
    assert_eq!(client.usage().hedges, 1);
    eprintln!("hedging: initial deadline 300 ms, hang {hang:?}, call returned after {elapsed:?}");
}

#[tokio::test]
async fn the_hedging_deadline_follows_observed_latency() {
    let hung = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&hung);
    let server = ScriptedServer::with_responder(move |request| {
        if request.last_message_text() == "slow one" && counter.fetch_add(1, Ordering::SeqCst) == 0
        {
            ScriptedReply::text("hung").delayed(Duration::from_secs(15))
        } else {
            ScriptedReply::text("quick")
        }
    })
    .await
    .unwrap();
    // 30 s before observations: only the learned deadline (p95 × 3, floor 100 ms) can hedge fast.
    let client = build_chat_model(&hedging(&server, Duration::from_secs(30))).unwrap();
    for _ in 0..6 {
        let response = client.chat(&ask("warm up")).await.unwrap();
        assert_eq!(response.calls.hedges, 0);
    }
    let started = Instant::now();
    let response = client.chat(&ask("slow one")).await.unwrap();
    let elapsed = started.elapsed();
    assert_eq!(response.message.content.as_deref(), Some("quick"));
    assert!(response.calls.hedge_won);
    assert!(elapsed < Duration::from_secs(1), "{elapsed:?}");
    assert_eq!(server.request_count(), 8);
    eprintln!("hedging: learned deadline, call returned after {elapsed:?}");
}

#[tokio::test]
async fn a_401_is_fatal_names_the_variable_and_latches_for_every_clone() {
    for body in [Some("Incorrect API key provided: sk-or-v1-LEAKCHECK-7f3a9c2e5b1d4086."), None] {
        let reply = match body {
            Some(message) => ScriptedReply::Status { status: 401, message: message.to_owned() },
            None => ScriptedReply::Raw { status: 401, headers: Vec::new(), body: String::new() },
        };
        let server =
            ScriptedServer::with_script([reply, ScriptedReply::text("never")]).await.unwrap();
        let mut config = config(&server);
        config.key_variable = "OPENAI_API_KEY".to_owned();
        let client = build_chat_model(&config).unwrap();
        let error = client.chat(&ask("hi")).await.unwrap_err();
        assert!(matches!(error, Error::Auth { status: 401, .. }), "{error:?}");
        assert!(error.is_fatal());
        let text = error.to_string();
        assert!(text.contains("OPENAI_API_KEY") && text.contains("MRAGENT_BASE_URL"), "{text}");
        assert!(!text.contains(KEY), "{text}");
        if body.is_none() {
            assert!(text.contains("no details"), "{text}");
        }
        let clone = client.clone();
        let started = Instant::now();
        let again = clone.chat(&ask("later")).await.unwrap_err();
        assert!(started.elapsed() < Duration::from_millis(50));
        assert_eq!(again.to_string(), text);
        assert_eq!(server.request_count(), 1, "no request after the fatal reply");
        assert!(client.fatal_error().is_some());
    }
}

#[tokio::test]
async fn a_403_and_an_unknown_model_are_fatal_too() {
    let server = ScriptedServer::with_script([ScriptedReply::Raw {
        status: 403,
        headers: Vec::new(),
        body: String::new(),
    }])
    .await
    .unwrap();
    let error = client(&server).chat(&ask("hi")).await.unwrap_err();
    assert!(matches!(error, Error::Auth { status: 403, .. }), "{error:?}");

    let server = ScriptedServer::with_script([ScriptedReply::Status {
        status: 400,
        message: "test/model is not a valid model ID".into(),
    }])
    .await
    .unwrap();
    let client = client(&server);
    let error = client.chat(&ask("hi")).await.unwrap_err();
    assert!(
        matches!(&error, Error::ModelNotFound { model, status: 400, .. } if model == "test/model"),
        "{error:?}"
    );
    assert!(error.to_string().contains("--model"), "{error}");
    assert!(matches!(client.chat(&ask("again")).await, Err(Error::ModelNotFound { .. })));
    assert_eq!(server.request_count(), 1);

    let server = ScriptedServer::start().await.unwrap();
    server.push_embedding(ScriptedReply::Status {
        status: 404,
        message: "The model `e` does not exist.".into(),
    });
    let embedder = build_embedder(
        &config(&server),
        &mragent::llm::EmbedderConfig { model: "e".into(), batch_size: 4 },
    )
    .unwrap();
    use mragent::llm::Embedder as _;
    let error = embedder.embed(&["x".to_owned()]).await.unwrap_err();
    assert!(matches!(&error, Error::ModelNotFound { model, .. } if model == "e"), "{error:?}");
    assert!(embedder.embed(&["y".to_owned()]).await.is_err());
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn context_overflow_in_every_servers_phrasing_is_recognised() {
    let bodies = [
        // llama.cpp (since 2025-09: its own error type, status 400).
        (400, json!({"error": {"code": 400, "message": "the request exceeds the available context size, try increasing it", "type": "exceed_context_size_error", "n_prompt_tokens": 14429, "n_ctx": 8192}}).to_string()),
        // vLLM.
        (400, json!({"object": "error", "message": "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.", "type": "BadRequestError", "param": null, "code": 400}).to_string()),
        // OpenRouter.
        (400, json!({"error": {"message": "This endpoint's maximum context length is 131072 tokens. However, you requested about 138956 tokens (7884 of text input, 131072 in the output). Please reduce the length of either one, or use the \"middle-out\" transform to compress your prompt automatically.", "code": 400}}).to_string()),
    ];
    let server = ScriptedServer::with_script(bodies.iter().map(|(status, body)| {
        ScriptedReply::Raw { status: *status, headers: Vec::new(), body: body.clone() }
    }))
    .await
    .unwrap();
    let client = client(&server);
    for (_, body) in &bodies {
        let error = client.chat(&ask("long")).await.unwrap_err();
        assert!(matches!(error, Error::ContextLength { .. }), "{body}: {error:?}");
    }
    assert_eq!(server.request_count(), 3, "not retried");
}

fn relaxed_answer_schema() -> JsonSchemaSpec {
    JsonSchemaSpec {
        name: "answer".into(),
        schema: json!({
            "type": "object", "additionalProperties": false, "required": ["answer"],
            "properties": {
                "answer": {"type": "string"},
                "confidence": {"type": "number", "minimum": 0, "maximum": 1},
                "supports": {"type": "array", "items": {"type": "string"}}
            }
        }),
    }
}

#[tokio::test]
async fn lenient_replies_are_accepted_without_a_reask() {
    let shapes = [
        (
            "```json\n{\"answer\": \"Paris\", \"supports\": [\"D1:3\",],}\n```",
            json!({"answer": "Paris", "supports": ["D1:3"]}),
        ),
        (
            "Sure: {'answer': 'Paris', 'confidence': '0.8'} hope that helps",
            json!({"answer": "Paris", "confidence": 0.8}),
        ),
        (
            "{answer: 1987, supports: \"D2:1\", // cited\n note: \"extra\"}",
            json!({"answer": "1987", "supports": ["D2:1"]}),
        ),
        ("{\"answer\": \"Paris\", \"confidence\": null}", json!({"answer": "Paris"})),
    ];
    let server =
        ScriptedServer::with_script(shapes.iter().map(|(text, _)| ScriptedReply::text(*text)))
            .await
            .unwrap();
    let client = client(&server);
    for (text, expected) in &shapes {
        let response =
            chat_json(&client, ask("capital?"), &relaxed_answer_schema(), 2).await.unwrap();
        assert_eq!((&response.value, response.attempts), (expected, 1), "{text}");
    }
    assert_eq!(server.request_count(), shapes.len(), "no re-ask");
}

#[tokio::test]
async fn a_failed_structured_call_carries_its_tokens_and_last_reply() {
    let server = ScriptedServer::with_script([
        ScriptedReply::text("I do not know.").with_usage(40, 4),
        ScriptedReply::text("Still no idea.").with_usage(60, 5),
    ])
    .await
    .unwrap();
    let client = client(&server);
    let error = chat_json(&client, ask("capital?"), &relaxed_answer_schema(), 1).await.unwrap_err();
    match &error {
        Error::SchemaInvalid { attempts: 2, usage, reply, .. } => {
            assert_eq!(*usage, Usage { prompt_tokens: 100, completion_tokens: 9 });
            assert_eq!(reply, "Still no idea.");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(error.usage(), Usage { prompt_tokens: 100, completion_tokens: 9 });
    assert_eq!(client.usage().usage, Usage { prompt_tokens: 100, completion_tokens: 9 });
}

#[tokio::test]
async fn every_request_can_carry_its_steps_budget() {
    let server = ScriptedServer::with_script([ScriptedReply::text("ok")]).await.unwrap();
    let mut config = config(&server);
    config.budget = "rerank=77".parse().unwrap();
    let client = build_chat_model(&config).unwrap();
    assert_eq!(client.max_tokens(Step::Rerank), Some(77));
    assert_eq!(client.max_tokens(Step::Answer), Some(Step::Answer.default_budget()));
    let mut request = ask("rank these");
    request.max_tokens = client.max_tokens(Step::Rerank);
    client.chat(&request).await.unwrap();
    assert_eq!(server.requests()[0].body["max_tokens"], 77);
}

#[tokio::test]
async fn a_429_storm_shrinks_the_limit_waits_only_as_asked_and_recovers() {
    const STORM: usize = 12;
    let served = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&served);
    let server = ScriptedServer::with_responder(move |_| {
        if counter.fetch_add(1, Ordering::SeqCst) < STORM {
            ScriptedReply::rate_limited(1)
        } else {
            ScriptedReply::text("ok").delayed(Duration::from_millis(20))
        }
    })
    .await
    .unwrap();
    let mut config = config(&server);
    config.retry = RetryPolicy { max_attempts: 8, ..config.retry };
    config.concurrency = Some(AimdPolicy { initial: 8, min: 1, max: 8, ..AimdPolicy::default() });
    let client = build_chat_model(&config).unwrap();
    assert_eq!(client.concurrency_limit(), Some(8));
    let workers = (0..8).map(|worker| {
        let client = client.clone();
        tokio::spawn(async move {
            for call in 0..3 {
                client.chat(&ask(&format!("w{worker} c{call}"))).await.unwrap();
            }
        })
    });
    let sampler = {
        let client = client.clone();
        tokio::spawn(async move {
            let mut lowest = usize::MAX;
            for _ in 0..200 {
                lowest = lowest.min(client.concurrency_limit().unwrap_or(usize::MAX));
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            lowest
        })
    };
    for worker in futures::future::join_all(workers).await {
        worker.unwrap();
    }
    let lowest = sampler.await.unwrap();
    assert!(lowest < 8, "the limit never shrank (lowest {lowest})");
    let mut arrivals: Vec<Instant> =
        server.requests().iter().map(|request| request.received_at).collect();
    arrivals.sort();
    let longest_pause = arrivals.windows(2).map(|pair| pair[1] - pair[0]).max().unwrap();
    assert!(
        longest_pause <= Duration::from_millis(1400),
        "workers paused {longest_pause:?} while the server asked for 1 s"
    );
    for index in 0..50 {
        client.chat(&ask(&format!("after {index}"))).await.unwrap();
    }
    assert_eq!(client.concurrency_limit(), Some(8), "the limit recovers once the 429s stop");
    eprintln!(
        "429 storm: lowest limit {lowest}, longest pause {longest_pause:?}, {} requests",
        server.request_count()
    );
}

#[tokio::test]
async fn a_hung_request_whose_hedge_fails_is_retried_at_once() {
    let hang = Duration::from_secs(15);
    let server = ScriptedServer::with_script([
        ScriptedReply::text("too late").delayed(hang),
        ScriptedReply::server_error(500),
        ScriptedReply::text("retried"),
    ])
    .await
    .unwrap();
    let client = build_chat_model(&hedging(&server, Duration::from_millis(300))).unwrap();
    let started = Instant::now();
    let response = client.chat(&ask("hi")).await.unwrap();
    let elapsed = started.elapsed();
    assert_eq!(response.message.content.as_deref(), Some("retried"));
    assert!(elapsed < Duration::from_secs(2), "waited {elapsed:?} for the hung request");
    assert_eq!(response.calls.attempts, 2);
    assert!(response.calls.retries[0].reason.contains("500"), "{:?}", response.calls);
    assert_eq!(server.request_count(), 3);
}
