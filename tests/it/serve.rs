//! `mragent serve` over real HTTP on 127.0.0.1: every endpoint, every error (401 without or
//! with a wrong token, 400 naming the field, 404 unknown conversation, 413 oversized body), and
//! the store unchanged after bad input.

use std::sync::Arc;
use std::time::Duration;

use mragent::serve::{ServeOptions, serve};
use mragent::service::MemoryService;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::own::{example_file, server, service};

pub(crate) const TOKEN: &str = "s3cret-token";

pub(crate) struct Api {
    base: String,
    client: reqwest::Client,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Api {
    pub(crate) async fn start(
        scripted: &mragent::llm::scripted::ScriptedServer,
        root: &std::path::Path,
    ) -> Self {
        Self::start_with(scripted, root, Vec::new()).await
    }

    /// The API over a service of `scripted` under `root`, accepting [`TOKEN`] and
    /// `named_tokens`.
    pub(crate) async fn start_with(
        scripted: &mragent::llm::scripted::ScriptedServer,
        root: &std::path::Path,
        named_tokens: Vec<(String, String)>,
    ) -> Self {
        Self::start_over(service(scripted, root), named_tokens).await
    }

    /// The API over `service`, accepting [`TOKEN`] and `named_tokens`.
    pub(crate) async fn start_over(
        service: MemoryService<mragent::llm::Client, mragent::service::OwnEmbedder>,
        named_tokens: Vec<(String, String)>,
    ) -> Self {
        let service = Arc::new(service);
        let options = ServeOptions {
            token: Some(TOKEN.into()),
            named_tokens,
            max_body_bytes: 16 * 1024,
            max_concurrency: 4,
            ..ServeOptions::default()
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(serve(listener, service, options, async move {
            let _ = stopped.await;
        }));
        Self { base, client: reqwest::Client::new(), _stop: stop }
    }

    pub(crate) async fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
        token: Option<&str>,
    ) -> (StatusCode, Value) {
        let url = format!("{}{path}", self.base);
        let mut request = match method {
            "GET" => self.client.get(url),
            "DELETE" => self.client.delete(url),
            _ => self.client.post(url),
        };
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        if path == "/mcp" {
            request = request.header("accept", "application/json, text/event-stream");
        }
        let response = request.timeout(Duration::from_secs(60)).send().await.unwrap();
        let status = response.status();
        let text = response.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    pub(crate) async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.call("GET", path, None, Some(TOKEN)).await
    }

    pub(crate) async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.call("POST", path, Some(body), Some(TOKEN)).await
    }
}

fn example_messages() -> Value {
    let text = std::fs::read_to_string(example_file()).unwrap();
    Value::Array(text.lines().map(|line| serde_json::from_str(line).unwrap()).collect())
}

fn assert_error(answer: &(StatusCode, Value), status: StatusCode, field: &str) {
    assert_eq!(answer.0, status, "{}", answer.1);
    assert_eq!(answer.1["error"]["field"], field, "{}", answer.1);
    assert!(answer.1["error"]["message"].as_str().is_some_and(|m| !m.is_empty()));
}

/// The `(event, data)` pairs of a server-sent event stream.
fn sse_events(text: &str) -> Vec<(String, Value)> {
    text.split("\n\n")
        .filter(|block| !block.trim().is_empty())
        .map(|block| {
            let field = |name: &str| {
                block.lines().find_map(|line| line.strip_prefix(name)).unwrap_or_default().trim()
            };
            (field("event:").to_string(), serde_json::from_str(field("data:")).unwrap())
        })
        .collect()
}

/// `started`, then per round the model's tool calls and their results (same ids, in order),
/// the final reply, then the answer, whose round and tool-call counts the events add up to.
fn assert_stream_reports_every_round(text: &str) {
    let events = sse_events(text);
    let names: Vec<&str> = events.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names.first(), Some(&"started"), "{text}");
    assert_eq!(names.last(), Some(&"answer"), "{text}");
    let rounds: Vec<&Value> =
        events.iter().filter(|(name, _)| name == "round").map(|(_, data)| data).collect();
    assert_eq!(rounds.len(), names.len() - 2, "only rounds between started and answer: {text}");
    let models: Vec<&&Value> = rounds.iter().filter(|event| event["kind"] == "model").collect();
    let answer = &events.last().unwrap().1;
    assert_eq!(models.len() as u64, answer["rounds"].as_u64().unwrap(), "{text}");
    assert_eq!(models.last().unwrap()["final_reply"], true, "{text}");
    let mut calls = 0;
    for (number, pair) in rounds.windows(2).enumerate() {
        let (model, tools) = (pair[0], pair[1]);
        if tools["kind"] != "tools" {
            continue;
        }
        assert_eq!(model["kind"], "model", "round {number}: {text}");
        assert_eq!(model["round"], tools["round"]);
        let asked: Vec<&Value> =
            model["tool_calls"].as_array().unwrap().iter().map(|call| &call["call_id"]).collect();
        let results = tools["results"].as_array().unwrap();
        let answered: Vec<&Value> = results.iter().map(|result| &result["call_id"]).collect();
        assert!(!asked.is_empty() && asked == answered, "{text}");
        assert!(results.iter().all(|result| result["chars"].as_u64() > Some(0)), "{text}");
        calls += asked.len() as u64;
    }
    assert!(calls > 0, "the scripted agent calls tools in its first round: {text}");
    assert_eq!(calls, answer["tool_calls"].as_u64().unwrap(), "{text}");
}

#[tokio::test]
async fn every_endpoint_over_loopback() {
    let scripted = server(Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    let api = Api::start(&scripted, dir.path()).await;

    let (status, document) = api.get("/openapi.json").await;
    assert_eq!(status, StatusCode::OK);
    let paths = document["paths"].as_object().unwrap();
    for path in [
        "/v1/conversations",
        "/v1/conversations/{id}",
        "/v1/conversations/{id}/messages",
        "/v1/conversations/{id}/search",
        "/v1/conversations/{id}/ask",
    ] {
        assert!(paths.contains_key(path), "{path} documented");
    }

    let (status, report) =
        api.post("/v1/conversations/demo/messages", json!({"messages": example_messages()})).await;
    assert_eq!(status, StatusCode::OK, "{report}");
    assert_eq!(
        (report["new_messages"].as_u64(), report["built_sessions"].as_array().map(Vec::len)),
        (Some(11), Some(3))
    );
    let (_, again) =
        api.post("/v1/conversations/demo/messages", json!({"messages": example_messages()})).await;
    assert_eq!((again["new_messages"].as_u64(), again["duplicates"].as_u64()), (Some(0), Some(11)));

    let (status, found) = api
        .post("/v1/conversations/demo/search", json!({"query": "running club knee", "k": 2}))
        .await;
    assert_eq!(status, StatusCode::OK, "{found}");
    let hits = found["hits"].as_array().unwrap();
    assert_eq!(hits.len(), 2);
    assert!(
        hits[0]["id"].is_string() && hits[0]["date"].is_string() && hits[0]["dia_id"].is_string()
    );

    let (status, answer) = api
        .post("/v1/conversations/demo/ask", json!({"question": "Where is the half marathon?"}))
        .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["ok"], true, "{answer}");
    assert!(answer["trace"].as_str().is_some_and(|path| std::path::Path::new(path).is_file()));

    let (status, stream) = api
        .post("/v1/conversations/demo/ask", json!({"question": "Who is Pepper?", "stream": true}))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_stream_reports_every_round(stream.as_str().unwrap());

    let (status, listed) = api.get("/v1/conversations").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(listed["conversations"][0]["id"], "demo");
    let (status, one) = api.get("/v1/conversations/demo").await;
    assert_eq!((status, one["messages"].as_i64()), (StatusCode::OK, Some(11)));

    let (status, deleted) = api.call("DELETE", "/v1/conversations/demo", None, Some(TOKEN)).await;
    assert_eq!(status, StatusCode::OK, "{deleted}");
    assert_eq!(deleted["deleted"]["id"], "demo");
    assert_error(
        &api.call("DELETE", "/v1/conversations/demo", None, Some(TOKEN)).await,
        StatusCode::NOT_FOUND,
        "conversation",
    );
    assert_eq!(api.get("/v1/conversations").await.1["conversations"], json!([]));
}

#[tokio::test]
async fn every_error_is_a_4xx_naming_the_field_and_leaves_the_store_unchanged() {
    let scripted = server(Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    let api = Api::start(&scripted, dir.path()).await;
    let (status, _) =
        api.post("/v1/conversations/demo/messages", json!({"messages": example_messages()})).await;
    assert_eq!(status, StatusCode::OK);
    let before = api.get("/v1/conversations").await;
    let requests_before = scripted.request_count();

    // Authentication.
    assert_error(
        &api.call("GET", "/v1/conversations", None, None).await,
        StatusCode::UNAUTHORIZED,
        "authorization",
    );
    assert_error(
        &api.call("GET", "/v1/conversations", None, Some("wrong")).await,
        StatusCode::UNAUTHORIZED,
        "authorization",
    );
    let unauthorised_add = api
        .call(
            "POST",
            "/v1/conversations/demo/messages",
            Some(json!({"messages": [{"speaker": "A", "text": "sneaky"}]})),
            Some("s3cret-tokeN"),
        )
        .await;
    assert_error(&unauthorised_add, StatusCode::UNAUTHORIZED, "authorization");

    // Bad messages.
    let messages = |message: Value| json!({"messages": [{"speaker": "A", "text": "fine", "timestamp": "2024-05-01"}, message]});
    let malformed = api
        .post(
            "/v1/conversations/demo/messages",
            messages(json!({"speaker": "A", "text": "x", "timestamp": "last week"})),
        )
        .await;
    assert_error(&malformed, StatusCode::BAD_REQUEST, "timestamp");
    assert!(malformed.1["error"]["message"].as_str().unwrap().contains("messages[1]"));
    let empty = api
        .post("/v1/conversations/demo/messages", messages(json!({"speaker": "A", "text": "   "})))
        .await;
    assert_error(&empty, StatusCode::BAD_REQUEST, "text");
    assert_error(
        &api.post("/v1/conversations/demo/messages", messages(json!({"text": "who?"}))).await,
        StatusCode::BAD_REQUEST,
        "speaker",
    );
    assert_error(
        &api.post("/v1/conversations/demo/messages", json!({"messages": []})).await,
        StatusCode::BAD_REQUEST,
        "messages",
    );
    assert_error(
        &api.post("/v1/conversations/demo/messages", json!({"message": []})).await,
        StatusCode::BAD_REQUEST,
        "messages",
    );
    let bad_json = api
        .client
        .post(format!("{}/v1/conversations/demo/messages", api.base))
        .bearer_auth(TOKEN)
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(bad_json.status(), StatusCode::BAD_REQUEST);
    let bad_id = api
        .post(
            "/v1/conversations/%20padded/messages",
            messages(json!({"speaker": "A", "text": "x"})),
        )
        .await;
    assert_error(&bad_id, StatusCode::BAD_REQUEST, "conversation");

    // Oversized body.
    let huge = json!({"messages": [{"speaker": "A", "text": "x".repeat(20 * 1024)}]});
    assert_error(
        &api.post("/v1/conversations/demo/messages", huge).await,
        StatusCode::PAYLOAD_TOO_LARGE,
        "body",
    );

    // Unknown conversation, bad search and ask fields.
    assert_error(
        &api.post("/v1/conversations/nobody/search", json!({"query": "x"})).await,
        StatusCode::NOT_FOUND,
        "conversation",
    );
    assert_error(
        &api.post("/v1/conversations/nobody/ask", json!({"question": "x"})).await,
        StatusCode::NOT_FOUND,
        "conversation",
    );
    assert_error(
        &api.post("/v1/conversations/nobody/ask", json!({"question": "x", "stream": true})).await,
        StatusCode::NOT_FOUND,
        "conversation",
    );
    assert_error(&api.get("/v1/conversations/nobody").await, StatusCode::NOT_FOUND, "conversation");
    assert_error(
        &api.post("/v1/conversations/demo/search", json!({})).await,
        StatusCode::BAD_REQUEST,
        "query",
    );
    assert_error(
        &api.post("/v1/conversations/demo/search", json!({"query": "x", "k": 0})).await,
        StatusCode::BAD_REQUEST,
        "k",
    );
    assert_error(
        &api.post("/v1/conversations/demo/ask", json!({"question": ""})).await,
        StatusCode::BAD_REQUEST,
        "question",
    );
    assert_error(
        &api.post("/v1/conversations/demo/ask", json!({"question": "x", "stream": "yes"})).await,
        StatusCode::BAD_REQUEST,
        "stream",
    );
    assert_error(&api.get("/v1/nothing-here").await, StatusCode::NOT_FOUND, "path");

    assert_eq!(api.get("/v1/conversations").await, before, "the store is unchanged");
    assert_eq!(scripted.request_count(), requests_before, "bad input reached no model");
}

/// The OpenAPI document says what the service does: every route with its methods, the SSE reply
/// of ask, the constraints from `names`, and the JSON error body for every error.
#[tokio::test]
async fn the_document_declares_every_route_constraint_and_error() {
    use mragent::names::{MAX_MESSAGE_CHARS, MAX_MESSAGES_PER_ADD, MAX_NAME_CHARS, NAME_PATTERN};
    let scripted = server(Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    let api = Api::start(&scripted, dir.path()).await;
    let (status, document) = api.get("/openapi.json").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(document, mragent::serve::document(), "served as generated");
    assert_eq!(document["openapi"].as_str().map(|v| v.starts_with("3.1")), Some(true));

    let routes: Vec<(String, Vec<String>)> = document["paths"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(path, item)| (path.clone(), item.as_object().unwrap().keys().cloned().collect()))
        .collect();
    let expected = [
        ("/openapi.json", vec!["get"]),
        ("/v1/conversations", vec!["get", "post"]),
        ("/v1/conversations/{id}", vec!["delete", "get"]),
        ("/v1/conversations/{id}/messages", vec!["post"]),
        ("/v1/conversations/{id}/messages/{message}", vec!["delete"]),
        ("/v1/conversations/{id}/search", vec!["post"]),
        ("/v1/conversations/{id}/ask", vec!["post"]),
        ("/v1/conversations/{id}/facts", vec!["get"]),
        ("/v1/users/{user}/search", vec!["post"]),
        ("/v1/users/{user}/ask", vec!["post"]),
        ("/v1/users/{user}/facts", vec!["get"]),
        ("/v1/facts/{fact}/correct", vec!["post"]),
        ("/v1/edits", vec!["get"]),
        ("/v1/edits/{edit}/undo", vec!["post"]),
        ("/v1/jobs", vec!["get"]),
        ("/v1/jobs/{job}", vec!["get"]),
    ];
    let mut sorted: Vec<(String, Vec<String>)> = routes
        .into_iter()
        .map(|(path, mut methods)| {
            methods.sort();
            (path, methods)
        })
        .collect();
    sorted.sort();
    let mut want: Vec<(String, Vec<String>)> = expected
        .iter()
        .map(|(path, methods)| (path.to_string(), methods.iter().map(|m| m.to_string()).collect()))
        .collect();
    want.sort();
    assert_eq!(sorted, want, "every route of the router is documented, and only those");
    // Every documented operation is served (neither the 404 fallback nor 405).
    for (path, methods) in &want {
        for method in methods {
            let concrete = path
                .replace("{id}", "nobody")
                .replace("{message}", "m1")
                .replace("{user}", "nobody")
                .replace("{fact}", "7")
                .replace("{edit}", "7")
                .replace("{job}", "7");
            let body = (method == "post").then(|| json!({}));
            let (status, reply) =
                api.call(&method.to_uppercase(), &concrete, body, Some(TOKEN)).await;
            assert!(reply["error"]["code"] != "not_found", "{method} {path}: {reply}");
            assert_ne!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
        }
    }

    for path in ["/v1/conversations/{id}/ask", "/v1/users/{user}/ask"] {
        let ask = &document["paths"][path]["post"];
        let content = ask["responses"]["200"]["content"].as_object().unwrap();
        let events = &content["text/event-stream"]["itemSchema"];
        assert_eq!(
            events["required"],
            json!(["event", "data"]),
            "the SSE reply is declared: {ask}"
        );
        assert_eq!(events["properties"]["event"]["enum"][3], "error", "{ask}");
        assert!(content.contains_key("application/json"), "{ask}");
    }
    for (path, item) in document["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let responses = operation["responses"].as_object().unwrap();
            assert!(responses.contains_key("401"), "{method} {path}");
            // 200 and 202 (an add that does not wait) answer the operation's own body.
            let errors = responses.iter().filter(|(status, _)| !status.starts_with("20"));
            for (status, response) in errors {
                assert_eq!(
                    response["content"]["application/json"]["schema"]["$ref"],
                    "#/components/schemas/ErrorBody",
                    "{method} {path} {status}"
                );
            }
        }
    }
    let id = &document["paths"]["/v1/conversations/{id}"]["get"]["parameters"][0]["schema"];
    assert_eq!(
        (id["pattern"].as_str(), id["maxLength"].as_u64()),
        (Some(NAME_PATTERN), Some(MAX_NAME_CHARS as u64))
    );
    let schemas = &document["components"]["schemas"];
    let messages = &schemas["AddRequest"]["properties"]["messages"];
    assert_eq!(
        (messages["minItems"].as_u64(), messages["maxItems"].as_u64()),
        (Some(1), Some(MAX_MESSAGES_PER_ADD as u64))
    );
    let text = &messages["items"]["allOf"][0]["properties"]["text"]["anyOf"][0];
    assert_eq!(text["maxLength"].as_u64(), Some(MAX_MESSAGE_CHARS as u64), "{text}");
    for (schema, field) in [("SearchRequest", "query"), ("AskRequest", "question")] {
        let property = &schemas[schema]["properties"][field];
        assert_eq!(property["minLength"], 1, "{schema}.{field}");
        assert!(property["pattern"].is_string(), "{schema}.{field}: whitespace is refused");
        assert_eq!(schemas[schema]["required"], json!([field]));
    }
    for report in ["AddReport", "AskReport", "SearchHit", "ConversationInfo", "ErrorBody"] {
        assert!(schemas[report]["properties"].is_object(), "{report} has its full schema");
    }
    // The fields of scopes, filters, facts and edits.
    for (schema, fields) in [
        ("AddRequest", &["user", "agent", "tags"][..]),
        ("SearchRequest", &["speaker", "from", "to", "conversation", "tags"]),
        ("AskRequest", &["as_of"]),
        ("CorrectRequest", &["value"]),
        ("ConversationInfo", &["user", "agent"]),
        ("SearchHit", &["conversation", "tags"]),
        ("Edit", &["actor", "kind", "before", "after", "undoes", "undone_by"]),
        ("AddReport", &["facts"]),
    ] {
        for field in fields {
            assert!(schemas[schema]["properties"][field].is_object(), "{schema}.{field}");
        }
    }
    for field in ["valid_from", "valid_to", "superseded_by", "value", "extracted"] {
        assert!(schemas["StoredFact"]["properties"][field].is_object(), "StoredFact.{field}");
    }
    let listed = serde_json::to_string(&schemas["ListedFact"]).unwrap();
    assert!(listed.contains("StoredFact") && listed.contains("current"), "{listed}");
    let facts = &document["paths"]["/v1/users/{user}/facts"]["get"]["parameters"];
    let names: Vec<&str> =
        facts.as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["user", "person", "aspect", "history", "as_of"]);
}

/// Errors that axum itself would answer in plain text are the JSON error body too.
#[tokio::test]
async fn path_and_method_errors_are_the_json_error_body() {
    let scripted = server(Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    let api = Api::start(&scripted, dir.path()).await;
    let not_utf8 = api.post("/v1/conversations/%FF/search", json!({"query": "x"})).await;
    assert_error(&not_utf8, StatusCode::BAD_REQUEST, "conversation");
    assert_eq!(not_utf8.1["error"]["code"], "invalid");
    assert_error(&api.get("/v1/conversations/%FF").await, StatusCode::BAD_REQUEST, "conversation");
    assert_error(
        &api.get(&format!("/v1/conversations/{}", "a".repeat(mragent::names::MAX_NAME_CHARS + 1)))
            .await,
        StatusCode::BAD_REQUEST,
        "conversation",
    );
    for (method, path) in [
        (reqwest::Method::PUT, "/v1/conversations"),
        (reqwest::Method::PATCH, "/v1/conversations/demo"),
        (reqwest::Method::GET, "/v1/conversations/demo/ask"),
        (reqwest::Method::DELETE, "/openapi.json"),
    ] {
        let response = api
            .client
            .request(method.clone(), format!("{}{path}", api.base))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
        assert!(response.headers().contains_key("allow"), "{method} {path}");
        let content_type = response.headers()["content-type"].to_str().unwrap().to_string();
        assert_eq!(content_type, "application/json", "{method} {path}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], "method_not_allowed", "{body}");
        assert_eq!(body["error"]["field"], "method", "{body}");
    }
    // Bad JSON and a body over the limit: JSON bodies as well.
    let bad_json = api
        .client
        .post(format!("{}/v1/conversations/demo/ask", api.base))
        .bearer_auth(TOKEN)
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(bad_json.status(), StatusCode::BAD_REQUEST);
    let body: Value = bad_json.json().await.unwrap();
    assert_eq!(body["error"]["field"], "body", "{body}");
    // Schema-only rules: a whitespace-only question by Unicode's rule, k as 5.0, an impossible date.
    assert_error(
        &api.post("/v1/conversations/demo/ask", json!({"question": "\u{3000}\u{2003}"})).await,
        StatusCode::BAD_REQUEST,
        "question",
    );
    assert_error(
        &api.post("/v1/conversations/nobody/search", json!({"query": "x", "k": 5.0})).await,
        StatusCode::NOT_FOUND,
        "conversation",
    );
    let impossible =
        json!({"messages": [{"speaker": "A", "text": "x", "timestamp": "2023-02-29"}]});
    assert_error(
        &api.post("/v1/conversations/demo/messages", impossible).await,
        StatusCode::BAD_REQUEST,
        "timestamp",
    );
    let long = json!({"messages": [{"speaker": "A", "text": "x".repeat(mragent::names::MAX_MESSAGE_CHARS + 1)}]});
    let long_text = api.post("/v1/conversations/demo/messages", long).await;
    assert_eq!(long_text.0, StatusCode::BAD_REQUEST, "{}", long_text.1);
    assert_eq!(api.get("/v1/conversations").await.1["conversations"], json!([]));
}

#[tokio::test]
async fn forgetting_one_message_rebuilds_its_session_and_names_the_message_on_error() {
    let scripted = server(Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    let api = Api::start(&scripted, dir.path()).await;
    let (status, _) = api
        .post("/v1/conversations/forgetting/messages", json!({"messages": example_messages()}))
        .await;
    assert_eq!(status, StatusCode::OK);
    let store =
        mragent::store::Store::open(mragent::store::Store::default_path(dir.path())).unwrap();
    let before = store.load("forgetting").unwrap();
    let session = &before.sessions[0];
    let message = session.messages[0].id.clone();
    let path = format!("/v1/conversations/forgetting/messages/{message}");

    let (status, reply) = api.call("DELETE", &path, None, Some(TOKEN)).await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    assert_eq!(reply["forgotten"]["message"], message.as_str(), "{reply}");
    assert_eq!(reply["forgotten"]["session"], format!("D{}", session.number), "{reply}");
    assert_eq!(reply["rebuilt"]["conversation"], "forgetting", "{reply}");
    assert!(reply["rebuilt"]["failed_sessions"].as_array().unwrap().is_empty(), "{reply}");
    let after = store.load("forgetting").unwrap();
    let left: usize = after.sessions.iter().map(|session| session.messages.len()).sum();
    let had: usize = before.sessions.iter().map(|session| session.messages.len()).sum();
    assert_eq!(left, had - 1);
    assert!(after.sessions.iter().flat_map(|s| &s.messages).all(|m| m.id != message));

    let again = api.call("DELETE", &path, None, Some(TOKEN)).await;
    assert_error(&again, StatusCode::NOT_FOUND, "message");
    assert_eq!(again.1["error"]["code"], "unknown_message");
    let bad =
        api.call("DELETE", "/v1/conversations/forgetting/messages/..x", None, Some(TOKEN)).await;
    assert_error(&bad, StatusCode::BAD_REQUEST, "message");
    let bad = api
        .call("DELETE", &format!("/v1/conversations/..x/messages/{message}"), None, Some(TOKEN))
        .await;
    assert_error(&bad, StatusCode::BAD_REQUEST, "conversation");
    let unauthorized = api.call("DELETE", &path, None, None).await;
    assert_error(&unauthorized, StatusCode::UNAUTHORIZED, "authorization");
    let (_, document) = api.get("/openapi.json").await;
    let operation = &document["paths"]["/v1/conversations/{id}/messages/{message}"]["delete"];
    assert!(operation["responses"]["404"].is_object(), "{document}");
    assert_eq!(store.load("forgetting").unwrap().sessions.len(), after.sessions.len());
}
