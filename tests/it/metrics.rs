//! `GET /metrics` of a live `serve` on 127.0.0.1: a scripted workload with known counts, then
//! one scrape, parsed by the official Python parser (`prometheus_client.parser`, installed by
//! `scripts/prometheus_parse.sh` into its own venv), whose every sample must equal the
//! workload: requests per route template, method and status (the scrapes not counted),
//! histogram counts, model requests, failures, retries, errors and tokens per step as the
//! scripted endpoint saw and reported them, and the store's rows.
//!
//! Each step gets its own `max_tokens` budget, so the `max_tokens` of a recorded request names
//! its step; the endpoint reports usage computed from the request ([`usage_of`]), so the test
//! knows every token it was told. Two kinds of faults: the first rewrite request fails once
//! (a retry), and embedding a text with [`FAIL`] fails every time (a retry, then an error: the
//! search that asked for it answers 500).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mragent::llm::build_chat_model;
use mragent::llm::scripted::{RecordedRequest, ScriptedReply, ScriptedServer};
use mragent::llm::{Step, TokenBudget};
use mragent::serve::{ServeOptions, serve};
use mragent::service::{MemoryService, OwnEmbedder, ServiceSettings};
use mragent::store::Store;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::own::example_file;
use crate::support::{self, EMBEDDER};

const TOKEN: &str = "metrics-token";

/// Embedding a text with this marker fails with a 503, every time.
const FAIL: &str = "failme";

/// The `max_tokens` of `step`'s requests: unique per step.
fn cap(step: Step) -> u32 {
    2000 + Step::ALL.iter().position(|known| *known == step).unwrap() as u32
}

/// The `step` label a recorded request is counted under.
fn step_of(request: &RecordedRequest) -> &'static str {
    if request.is_embeddings() {
        return "embed";
    }
    let sent = request.body["max_tokens"].as_u64();
    Step::ALL
        .into_iter()
        .find(|step| sent == Some(u64::from(cap(*step))))
        .map_or("other", Step::name)
}

/// The usage the endpoint reports for a request: (prompt, completion).
fn usage_of(request: &RecordedRequest) -> (u64, u64) {
    if request.is_embeddings() {
        (request.embedding_inputs().iter().map(|text| text.len() as u64).sum(), 0)
    } else {
        (request.transcript().len() as u64, request.index as u64 % 7 + 1)
    }
}

/// The scripted endpoint: build stages and agent (`support::build_and_answer`), usage from
/// [`usage_of`], and the faults of the module docs. The indices of the failed requests go to
/// `failed`.
async fn endpoint(failed: Arc<Mutex<Vec<usize>>>) -> ScriptedServer {
    let respond = support::build_and_answer(|_| None);
    ScriptedServer::with_responder(move |request: &RecordedRequest| {
        let mut failed = failed.lock().unwrap();
        let marked =
            request.embedding_inputs().iter().any(|text| text.to_lowercase().contains(FAIL));
        let first_rewrite = step_of(request) == "rewrite" && failed.is_empty();
        if marked || first_rewrite {
            failed.push(request.index);
            return ScriptedReply::server_error(503);
        }
        let (prompt, completion) = usage_of(request);
        respond(request).with_usage(prompt, completion)
    })
    .await
    .unwrap()
}

type Service = MemoryService<mragent::llm::Client, OwnEmbedder>;

/// The service over `endpoint` under `root`, each step with its own budget ([`cap`]).
fn service(endpoint: &ScriptedServer, root: &Path) -> Service {
    let mut config = support::client_config(endpoint);
    config.budget = TokenBudget::default();
    for step in Step::ALL {
        config.budget.set(step, Some(cap(step)));
    }
    let chat = build_chat_model(&config).unwrap();
    let embedder = support::embedder(&config, 64);
    let store = Store::open(Store::default_path(root)).unwrap();
    let settings = ServiceSettings::new(root, EMBEDDER, "test-model", "test-model");
    MemoryService::new(store, settings, chat, OwnEmbedder::Api(Box::new(embedder)))
}

/// A client of the API at `base`, counting what it asks for by (route, method, status).
struct Client {
    base: String,
    http: reqwest::Client,
    sent: BTreeMap<(String, String, u16), u64>,
}

impl Client {
    /// Sends a request (with the token unless `anonymous`), expects `status`, and counts it
    /// under `route`.
    async fn call(
        &mut self,
        (method, path, route): (&str, &str, &str),
        body: Option<Value>,
        status: StatusCode,
        anonymous: bool,
    ) -> String {
        let mut request =
            self.http.request(method.parse().unwrap(), format!("{}{path}", self.base));
        if !anonymous {
            request = request.bearer_auth(TOKEN);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.timeout(Duration::from_secs(60)).send().await.unwrap();
        assert_eq!(response.status(), status, "{method} {path}");
        let text = response.text().await.unwrap();
        *self.sent.entry((route.into(), method.into(), status.as_u16())).or_default() += 1;
        text
    }

    /// `GET /metrics`: the text and its content type.
    async fn scrape(&self) -> (String, String) {
        let response = self
            .http
            .get(format!("{}/metrics", self.base))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let kind = response.headers()["content-type"].to_str().unwrap().to_string();
        (kind, response.text().await.unwrap())
    }
}

fn messages(file: &Path) -> Value {
    let text = std::fs::read_to_string(file).unwrap();
    Value::Array(text.lines().map(|line| serde_json::from_str(line).unwrap()).collect())
}

/// Two sessions of four messages, a day apart.
fn two_days() -> Value {
    let messages = (1..=2).flat_map(|day| {
        (0..4).map(move |turn| {
            json!({
                "speaker": if turn % 2 == 0 { "Ann" } else { "Bob" },
                "timestamp": format!("2024-01-0{day}T10:0{turn}:00Z"),
                "text": format!("Day {day} note {turn}: Ann talked about Project{day} with Bob"),
            })
        })
    });
    Value::Array(messages.collect())
}

/// The workload, in order: adds to `a` and `b` (one adding nothing new), searches (one whose
/// query cannot be embedded), asks (one streamed), then 404s, a 400, a 405 and a 401.
async fn workload(client: &mut Client) {
    const ADD: &str = "/v1/conversations/{id}/messages";
    const SEARCH: &str = "/v1/conversations/{id}/search";
    const ASK: &str = "/v1/conversations/{id}/ask";
    const ONE: &str = "/v1/conversations/{id}";
    const LIST: &str = "/v1/conversations";
    use StatusCode as S;
    let example = Some(json!({"messages": messages(&example_file())}));
    let search = |query: &str| Some(json!({"query": query, "k": 2}));
    let failing = search(&format!("{FAIL} please"));
    let ask = Some(json!({"question": "Who is Pepper?"}));
    let streamed = Some(json!({"question": "What about Project1?", "stream": true}));
    let calls: Vec<(&str, &str, &str, Option<Value>, StatusCode)> = vec![
        ("POST", "/v1/conversations/a/messages", ADD, example.clone(), S::OK),
        ("POST", "/v1/conversations/b/messages", ADD, Some(json!({"messages": two_days()})), S::OK),
        ("POST", "/v1/conversations/a/messages", ADD, example, S::OK),
        (
            "POST",
            "/v1/conversations/c/messages",
            ADD,
            Some(json!({"wait": false, "messages": two_days()})),
            S::ACCEPTED,
        ),
        ("POST", "/v1/conversations/a/search", SEARCH, search("running club knee"), S::OK),
        ("POST", "/v1/conversations/a/search", SEARCH, search("Pepper"), S::OK),
        ("POST", "/v1/conversations/b/search", SEARCH, search("Project2"), S::OK),
        ("POST", "/v1/conversations/a/search", SEARCH, failing, S::INTERNAL_SERVER_ERROR),
        ("POST", "/v1/conversations/a/ask", ASK, ask, S::OK),
        ("POST", "/v1/conversations/b/ask", ASK, streamed, S::OK),
        ("GET", "/v1/conversations/nobody", ONE, None, S::NOT_FOUND),
        ("GET", "/v1/conversations/nobody", ONE, None, S::NOT_FOUND),
        ("POST", "/v1/conversations/nobody/search", SEARCH, search("x"), S::NOT_FOUND),
        ("GET", "/no/such/route", "unmatched", None, S::NOT_FOUND),
        ("POST", "/v1/conversations/a/search", SEARCH, search(""), S::BAD_REQUEST),
        ("DELETE", "/v1/conversations", LIST, None, S::METHOD_NOT_ALLOWED),
        ("GET", "/v1/conversations", LIST, None, S::OK),
    ];
    let mut background = None;
    for (method, path, route, body, status) in calls {
        let reply = client.call((method, path, route), body, status, false).await;
        if status == S::ACCEPTED {
            background = serde_json::from_str::<Value>(&reply).unwrap()["job"]["id"].as_u64();
        }
    }
    // The background job of `c` (named by its 202 reply, not guessed: waited adds are jobs too)
    // ends before the scrape, so its model calls are counted.
    let path = format!("/v1/jobs/{}", background.expect("the 202 reply names its job"));
    loop {
        let job = client.call(("GET", &path, "/v1/jobs/{job}"), None, S::OK, false).await;
        if serde_json::from_str::<Value>(&job).unwrap()["state"] == "done" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    client.call(("GET", LIST, LIST), None, S::UNAUTHORIZED, true).await;
}

/// The scrape parsed by `scripts/prometheus_parse.sh`: family name → (type, samples).
fn parse(text: &str) -> BTreeMap<String, Value> {
    use std::io::Write as _;
    let script = support::repo_path("scripts/prometheus_parse.sh");
    let mut child = std::process::Command::new("bash")
        .arg(script)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the parser refused the scrape: {stderr}\n{text}");
    serde_json::from_slice(&output.stdout).unwrap()
}

/// The samples of `family` named `sample`, as (label values in `labels` order, value).
fn samples(
    families: &BTreeMap<String, Value>,
    family: &str,
    sample: &str,
    labels: &[&str],
) -> BTreeMap<Vec<String>, f64> {
    let family = families.get(family).unwrap_or_else(|| panic!("no family {family}"));
    family["samples"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|found| found["name"] == sample)
        .map(|found| {
            let values = labels
                .iter()
                .map(|label| found["labels"][label].as_str().unwrap().to_string())
                .collect();
            (values, found["value"].as_f64().unwrap())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_equal_a_scripted_workload_as_the_python_parser_reads_them() {
    let failed = Arc::new(Mutex::new(Vec::new()));
    let endpoint = endpoint(Arc::clone(&failed)).await;
    let dir = tempfile::tempdir().unwrap();
    let service = Arc::new(service(&endpoint, dir.path()));
    let options = ServeOptions { token: Some(TOKEN.into()), ..ServeOptions::default() };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (_stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(serve(listener, Arc::clone(&service), options, async move {
        let _ = stopped.await;
    }));
    let mut client = Client { base, http: reqwest::Client::new(), sent: BTreeMap::new() };

    // Scrapes before the workload, with and without the token: none of them is counted.
    client.scrape().await;
    client.call(("GET", "/metrics", "/metrics"), None, StatusCode::UNAUTHORIZED, true).await;
    client.sent.clear();
    workload(&mut client).await;
    let route = ("GET", "/openapi.json", "/openapi.json");
    let document: Value =
        serde_json::from_str(&client.call(route, None, StatusCode::OK, false).await).unwrap();
    assert!(document["paths"].get("/metrics").is_none(), "the document is the JSON API's only");
    let (kind, text) = client.scrape().await;
    assert_eq!(kind, "text/plain; version=0.0.4; charset=utf-8");
    let families = parse(&text);
    let documented = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/metrics.md"),
    )
    .unwrap();
    for family in families.keys() {
        assert!(documented.contains(&format!("`{family}")), "docs/metrics.md lacks {family}");
    }

    check_http(&families, &client.sent);
    check_model(&families, &endpoint.requests(), &failed.lock().unwrap());
    check_store(&families, service.store());
    check_cache(&families, &service.cache_stats());
}

/// The cache families equal the service's counts (nothing ran between the scrape and the
/// reading), and those the workload: `a` and `b` each built once (two misses), then found
/// current by `a`'s other two searches and both asks (four hits); nothing evicted.
fn check_cache(families: &BTreeMap<String, Value>, stats: &mragent::service::CacheStats) {
    let read = |family: &str, sample: &str| samples(families, family, sample, &["cache"]);
    let caches = [("conversations", stats.conversations), ("query_vectors", stats.query_vectors)];
    let want = |value: fn(&mragent::service::CacheCounts) -> u64| {
        caches
            .iter()
            .map(|(cache, counts)| (vec![cache.to_string()], value(counts) as f64))
            .collect::<BTreeMap<_, _>>()
    };
    assert_eq!(read("mragent_cache_bytes", "mragent_cache_bytes"), want(|c| c.bytes));
    assert_eq!(
        read("mragent_cache_budget_bytes", "mragent_cache_budget_bytes"),
        want(|c| c.budget_bytes)
    );
    assert_eq!(read("mragent_cache_entries", "mragent_cache_entries"), want(|c| c.entries));
    assert_eq!(read("mragent_cache_hits", "mragent_cache_hits_total"), want(|c| c.hits));
    assert_eq!(read("mragent_cache_misses", "mragent_cache_misses_total"), want(|c| c.misses));
    assert_eq!(
        read("mragent_cache_evictions", "mragent_cache_evictions_total"),
        want(|c| c.evictions)
    );
    let conversations = stats.conversations;
    assert_eq!(
        (conversations.entries, conversations.misses, conversations.hits, conversations.evictions),
        (2, 2, 4, 0),
        "{stats:?}"
    );
    assert!(conversations.bytes > 0 && conversations.bytes <= conversations.budget_bytes);
    assert!(stats.query_vectors.entries > 0 && stats.query_vectors.misses > 0, "{stats:?}");
}

/// Requests per (route, method, status) as sent, and each (route, method)'s histogram count
/// and `+Inf` bucket equal to them; the scrapes nowhere.
fn check_http(families: &BTreeMap<String, Value>, sent: &BTreeMap<(String, String, u16), u64>) {
    let expected: BTreeMap<Vec<String>, f64> = sent
        .iter()
        .map(|((route, method, status), count)| {
            (vec![route.clone(), method.clone(), status.to_string()], *count as f64)
        })
        .collect();
    let labels = ["route", "method", "status"];
    let counted =
        samples(families, "mragent_http_requests", "mragent_http_requests_total", &labels);
    assert_eq!(counted, expected);
    let mut per_route: BTreeMap<Vec<String>, f64> = BTreeMap::new();
    for (labels, count) in &expected {
        *per_route.entry(labels[..2].to_vec()).or_default() += count;
    }
    let family = "mragent_http_request_duration_seconds";
    let counts = samples(families, family, &format!("{family}_count"), &["route", "method"]);
    assert_eq!(counts, per_route);
    let buckets =
        samples(families, family, &format!("{family}_bucket"), &["route", "method", "le"]);
    let infinite: BTreeMap<Vec<String>, f64> = buckets
        .iter()
        .filter(|(labels, _)| labels[2] == "+Inf")
        .map(|(labels, count)| (labels[..2].to_vec(), *count))
        .collect();
    assert_eq!(infinite, per_route);
    assert_eq!(buckets.len(), per_route.len() * 16, "15 bounds and +Inf per route and method");
}

/// Per step: requests as the endpoint recorded them, failures as it made them, tokens as it
/// reported them; one error (the embedding that always fails) and every other failure retried.
fn check_model(families: &BTreeMap<String, Value>, requests: &[RecordedRequest], failed: &[usize]) {
    let steps: Vec<&str> =
        Step::ALL.into_iter().map(Step::name).chain(["other", "embed"]).collect();
    let zero = || -> BTreeMap<Vec<String>, f64> {
        steps.iter().map(|step| (vec![step.to_string()], 0.0)).collect()
    };
    let (mut sent, mut failures, mut errors, mut retries) = (zero(), zero(), zero(), zero());
    let mut tokens: BTreeMap<Vec<String>, f64> = BTreeMap::new();
    for step in &steps {
        for kind in ["prompt", "completion"] {
            tokens.insert(vec![step.to_string(), kind.to_string()], 0.0);
        }
    }
    for request in requests {
        let step = vec![step_of(request).to_string()];
        *sent.get_mut(&step).unwrap() += 1.0;
        if failed.contains(&request.index) {
            *failures.get_mut(&step).unwrap() += 1.0;
            continue;
        }
        let (prompt, completion) = usage_of(request);
        *tokens.get_mut(&[step[0].clone(), "prompt".into()][..]).unwrap() += prompt as f64;
        *tokens.get_mut(&[step[0].clone(), "completion".into()][..]).unwrap() += completion as f64;
    }
    *errors.get_mut(&vec!["embed".to_string()]).unwrap() = 1.0;
    for (step, count) in &failures {
        retries.insert(step.clone(), count - errors[step]);
    }
    assert_eq!(failures[&vec!["rewrite".to_string()]], 1.0, "the first rewrite failed once");
    assert_eq!(failures[&vec!["embed".to_string()]], 2.0, "the failing embedding, tried twice");
    for busy in ["rewrite", "keywords", "answer", "embed"] {
        assert!(sent[&vec![busy.to_string()]] > 0.0, "the workload calls {busy}");
    }
    assert_eq!(sent[&vec!["other".to_string()]], 0.0, "every chat request names its step");

    let read = |name: &str| samples(families, name, &format!("{name}_total"), &["step"]);
    assert_eq!(read("mragent_model_requests"), sent);
    assert_eq!(read("mragent_model_failed_requests"), failures);
    assert_eq!(read("mragent_model_retries"), retries);
    assert_eq!(read("mragent_model_errors"), errors);
    assert_eq!(read("mragent_model_hedges"), zero());
    let labels = ["step", "type"];
    assert_eq!(
        samples(families, "mragent_model_tokens", "mragent_model_tokens_total", &labels),
        tokens
    );
}

/// The store gauges equal what the store lists.
fn check_store(families: &BTreeMap<String, Value>, store: &Store) {
    let listed = store.list().unwrap();
    let (mut current, mut superseded) = (0.0, 0.0);
    for conversation in &listed {
        for fact in store.facts(None, Some(&conversation.id)).unwrap() {
            *(if fact.valid_to.is_none() { &mut current } else { &mut superseded }) += 1.0;
        }
    }
    let sum = |count: fn(&mragent::store::ConversationInfo) -> i64| {
        listed.iter().map(count).sum::<i64>() as f64
    };
    let single = |name: &str| samples(families, name, name, &[])[&Vec::new()];
    assert_eq!(single("mragent_store_conversations"), 3.0);
    let jobs = samples(families, "mragent_jobs", "mragent_jobs", &["state"]);
    let state = |name: &str, count: f64| (vec![name.to_string()], count);
    // Every add is a job: the three that waited and the one that did not, all done.
    let want =
        [state("done", 4.0), state("failed", 0.0), state("queued", 0.0), state("running", 0.0)];
    assert_eq!(jobs, BTreeMap::from(want), "four jobs, done");
    assert_eq!(single("mragent_store_messages"), sum(|info| info.messages));
    let by_state = |name: &str| samples(families, name, name, &["state"]);
    let built = sum(|info| info.built_sessions);
    let unbuilt = sum(|info| info.sessions) - built;
    assert!(built >= 5.0, "alpha's 3 sessions and beta's 2");
    assert_eq!(
        by_state("mragent_store_sessions"),
        BTreeMap::from([(vec!["built".into()], built), (vec!["unbuilt".into()], unbuilt)])
    );
    assert_eq!(
        by_state("mragent_store_facts"),
        BTreeMap::from([
            (vec!["current".into()], current),
            (vec!["superseded".into()], superseded)
        ])
    );
}
