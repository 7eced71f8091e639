//! The attacker's suite: scoped API keys against every operation of `serve`, over HTTP and
//! over `/mcp`, on SQLite and on PostgreSQL with two replicas.
//!
//! Two users, alice and bob, each with conversations, facts, a job and edits, made through an
//! operator token. Then every operation is called by every kind of caller (alice's read key,
//! alice's write key, bob's write key, an admin key, a revoked key, an expired key, no key,
//! the operator's token) on alice's ids, bob's ids and ids that do not exist, and:
//! - a caller bound to one user never reads or changes another user's data, and the answer
//!   for another user's id is the answer for a missing id (status, code, field and message,
//!   the id aside): nothing tells that the id exists;
//! - a read key changes nothing (403 whatever the id);
//! - revoked, expired and missing keys are 401, the same body every time;
//! - after every refused call the store is exactly as before (a fingerprint of every row a
//!   client can reach: conversations, messages, facts, jobs, edits, keys);
//! - listings (conversations, edits, jobs, MCP's list) hold only the caller's user's.
//!
//! On PostgreSQL the calls alternate between two replicas of one database, and a key revoked
//! through one replica's store is refused by the other at its next request.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use mragent::llm::build_chat_model;
use mragent::serve::{ServeOptions, serve};
use mragent::service::{MemoryService, OwnEmbedder, ServiceSettings};
use mragent::store::{KeyScope, NewKey, Store};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::own_memory::{facts_server, moving_messages};
use crate::support::{self, EMBEDDER};

/// The operator's token of the servers under attack.
const OPERATOR: &str = "operator-token";

/// A replica: its base URL and its store.
struct Replica {
    base: String,
    store: Store,
    _stop: tokio::sync::oneshot::Sender<()>,
}

async fn replica(
    scripted: &mragent::llm::scripted::ScriptedServer,
    root: &std::path::Path,
    store: Store,
) -> Replica {
    let config = support::client_config(scripted);
    let chat = build_chat_model(&config).unwrap();
    let embedder = support::embedder(&config, 64);
    let settings = ServiceSettings::new(root, EMBEDDER, "test-model", "test-model");
    let service =
        MemoryService::new(store.clone(), settings, chat, OwnEmbedder::Api(Box::new(embedder)));
    let options = ServeOptions { token: Some(OPERATOR.into()), ..ServeOptions::default() };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(serve(listener, Arc::new(service), options, async move {
        let _ = stopped.await;
    }));
    Replica { base, store, _stop: stop }
}

/// One HTTP call: status and JSON body (a string when not JSON).
async fn call(
    base: &str,
    method: &str,
    path: &str,
    body: Option<&Value>,
    token: Option<&str>,
) -> (StatusCode, Value) {
    let client = reqwest::Client::new();
    let url = format!("{base}{path}");
    let mut request = match method {
        "GET" => client.get(url),
        "DELETE" => client.delete(url),
        _ => client.post(url),
    };
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request.json(body);
    }
    if path == "/mcp" {
        request = request.header("accept", "application/json, text/event-stream");
    }
    let response = request.timeout(Duration::from_secs(60)).send().await.unwrap();
    let status = response.status();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

/// The ids of one owner (or of no one: `missing`).
#[derive(Debug, Clone)]
struct Ids {
    user: String,
    conversation: String,
    message: String,
    fact: i64,
    job: i64,
    edit: i64,
}

impl Ids {
    fn missing() -> Self {
        Ids {
            user: "ghost".into(),
            conversation: "ghost-chat".into(),
            message: "0123456789abcdef".into(),
            fact: 987_654,
            job: 987_655,
            edit: 987_656,
        }
    }

    /// `text` with these ids written as placeholders.
    fn neutral(&self, text: &str) -> String {
        text.replace(&format!("fact {}", self.fact), "fact <F>")
            .replace(&format!("job {}", self.job), "job <J>")
            .replace(&format!("edit {}", self.edit), "edit <E>")
            .replace(&format!("{:?}", self.conversation), "<C>")
            .replace(&format!("{:?}", self.message), "<M>")
            .replace(&format!("{:?}", self.user), "<U>")
    }
}

/// Makes one user's data through the operator: a conversation with facts (Carol's move),
/// a built job, a fact correction (an edit). Returns its ids.
async fn populate(base: &str, user: &str) -> Ids {
    let conversation = format!("{user}-home");
    let body = json!({"user": user, "messages": moving_messages()});
    let (status, added) = call(
        base,
        "POST",
        &format!("/v1/conversations/{conversation}/messages"),
        Some(&body),
        Some(OPERATOR),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{added}");
    let notes = json!({"user": user, "wait": false, "messages": [
        {"speaker": "Ann", "timestamp": "2024-04-01T10:00:00Z", "text": format!("{user} keeps notes about the garden")},
    ]});
    let (status, queued) = call(
        base,
        "POST",
        &format!("/v1/conversations/{user}-notes/messages"),
        Some(&notes),
        Some(OPERATOR),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{queued}");
    let job = queued["job"]["id"].as_i64().unwrap();
    for _ in 0..400 {
        let (_, shown) = call(base, "GET", &format!("/v1/jobs/{job}"), None, Some(OPERATOR)).await;
        if shown["state"] == "done" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (_, facts) = call(
        base,
        "GET",
        &format!("/v1/conversations/{conversation}/facts?history=true"),
        None,
        Some(OPERATOR),
    )
    .await;
    let fact = facts["facts"][0]["id"].as_i64().unwrap_or_else(|| panic!("{facts}"));
    let value = json!({"value": format!("{user} lives in Rome")});
    let (status, edit) =
        call(base, "POST", &format!("/v1/facts/{fact}/correct"), Some(&value), Some(OPERATOR))
            .await;
    assert_eq!(status, StatusCode::OK, "{edit}");
    let (_, found) = call(
        base,
        "POST",
        &format!("/v1/conversations/{conversation}/search"),
        Some(&json!({"query": "Berlin"})),
        Some(OPERATOR),
    )
    .await;
    let message = found["hits"][0]["id"].as_str().unwrap_or_else(|| panic!("{found}")).to_string();
    Ids { user: user.into(), conversation, message, fact, job, edit: edit["id"].as_i64().unwrap() }
}

/// Every row a client can reach, as text: a refused call must leave it as it was.
fn fingerprint(store: &Store) -> String {
    let conversations = store.list().unwrap();
    let mut text = format!("{conversations:?}\n");
    for conversation in &conversations {
        let loaded = store.load(&conversation.id).unwrap();
        let messages: Vec<_> = loaded
            .sessions
            .iter()
            .flat_map(|session| session.messages.iter().map(|m| (&m.id, &m.text)))
            .collect();
        text.push_str(&format!(
            "{messages:?}\n{:?}\n",
            store.facts(None, Some(&conversation.id)).unwrap()
        ));
    }
    text.push_str(&format!("{:?}\n", store.history(None, None).unwrap()));
    text.push_str(&format!("{:?}\n", store.jobs(None, false, 10_000).unwrap()));
    text.push_str(&format!("{:?}\n", store.keys().unwrap()));
    text
}

async fn fingerprint_of(store: &Store) -> String {
    let store = store.clone();
    tokio::task::spawn_blocking(move || fingerprint(&store)).await.unwrap()
}

/// Who calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Caller {
    AliceRead,
    AliceWrite,
    BobWrite,
    Admin,
    Revoked,
    Expired,
    Nobody,
    Operator,
}

const CALLERS: [Caller; 8] = [
    Caller::AliceRead,
    Caller::AliceWrite,
    Caller::BobWrite,
    Caller::Admin,
    Caller::Revoked,
    Caller::Expired,
    Caller::Nobody,
    Caller::Operator,
];

impl Caller {
    /// The user it is bound to.
    fn user(self) -> Option<&'static str> {
        match self {
            Caller::AliceRead | Caller::AliceWrite | Caller::Revoked | Caller::Expired => {
                Some("alice")
            }
            Caller::BobWrite => Some("bob"),
            Caller::Admin | Caller::Nobody | Caller::Operator => None,
        }
    }

    fn refused(self) -> bool {
        matches!(self, Caller::Revoked | Caller::Expired | Caller::Nobody)
    }
}

/// Makes the keys; returns each caller's bearer token.
fn make_keys(store: &Store) -> BTreeMap<Caller, Option<String>> {
    let key = |name: &str, user: Option<&str>, scope, expires_at| {
        let new = NewKey {
            name: name.into(),
            user: user.map(str::to_string),
            agent: None,
            scope,
            expires_at,
        };
        store.create_key(&new).unwrap().secret
    };
    let past = Some(chrono::Utc::now() - chrono::TimeDelta::seconds(1));
    let revoked = key("alice-old", Some("alice"), KeyScope::Write, None);
    store.revoke_key("alice-old").unwrap();
    BTreeMap::from([
        (Caller::AliceRead, Some(key("alice-reader", Some("alice"), KeyScope::Read, None))),
        (Caller::AliceWrite, Some(key("alice-writer", Some("alice"), KeyScope::Write, None))),
        (Caller::BobWrite, Some(key("bob-writer", Some("bob"), KeyScope::Write, None))),
        (Caller::Admin, Some(key("root", None, KeyScope::Admin, None))),
        (Caller::Revoked, Some(revoked)),
        (Caller::Expired, Some(key("alice-expired", Some("alice"), KeyScope::Write, past))),
        (Caller::Nobody, None),
        (Caller::Operator, Some(OPERATOR.to_string())),
    ])
}

/// One operation: how to call it on some ids.
struct Operation {
    name: &'static str,
    /// Changes memory (a read key gets 403).
    writes: bool,
    /// Creates what it names when missing (an add): never called on missing ids.
    creates: bool,
    /// Slow or changing when allowed (an ask runs the model, a write changes the store):
    /// called only where refused.
    only_refused: bool,
    request: fn(&Ids) -> (&'static str, String, Option<Value>),
}

fn tool(name: &str, arguments: Value) -> Option<Value> {
    Some(
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": arguments}}),
    )
}

fn operations() -> Vec<Operation> {
    vec![
        Operation {
            name: "GET conversation",
            writes: false,
            creates: false,
            only_refused: false,
            request: |ids| ("GET", format!("/v1/conversations/{}", ids.conversation), None),
        },
        Operation {
            name: "DELETE conversation",
            writes: true,
            creates: false,
            only_refused: true,
            request: |ids| ("DELETE", format!("/v1/conversations/{}", ids.conversation), None),
        },
        Operation {
            name: "DELETE message",
            writes: true,
            creates: false,
            only_refused: true,
            request: |ids| {
                (
                    "DELETE",
                    format!("/v1/conversations/{}/messages/{}", ids.conversation, ids.message),
                    None,
                )
            },
        },
        Operation {
            name: "POST messages",
            writes: true,
            creates: true,
            only_refused: true,
            request: |ids| {
                (
                    "POST",
                    format!("/v1/conversations/{}/messages", ids.conversation),
                    Some(json!({"messages": planted()})),
                )
            },
        },
        Operation {
            name: "POST messages naming the user",
            writes: true,
            creates: true,
            only_refused: true,
            request: |ids| {
                (
                    "POST",
                    "/v1/conversations/eve-new/messages".into(),
                    Some(json!({"user": ids.user, "messages": planted()})),
                )
            },
        },
        Operation {
            name: "POST batch",
            writes: true,
            creates: true,
            only_refused: true,
            request: |ids| {
                (
                    "POST",
                    "/v1/conversations".into(),
                    Some(
                        json!({"conversations": [{"conversation": ids.conversation, "messages": planted()}]}),
                    ),
                )
            },
        },
        Operation {
            name: "POST batch naming the user",
            writes: true,
            creates: true,
            only_refused: true,
            request: |ids| {
                (
                    "POST",
                    "/v1/conversations".into(),
                    Some(
                        json!({"conversations": [{"conversation": "eve-new", "user": ids.user, "messages": planted()}]}),
                    ),
                )
            },
        },
        Operation {
            name: "POST search",
            writes: false,
            creates: false,
            only_refused: false,
            request: |ids| {
                (
                    "POST",
                    format!("/v1/conversations/{}/search", ids.conversation),
                    Some(json!({"query": "Berlin"})),
                )
            },
        },
        Operation {
            name: "POST ask",
            writes: false,
            creates: false,
            only_refused: true,
            request: |ids| {
                (
                    "POST",
                    format!("/v1/conversations/{}/ask", ids.conversation),
                    Some(json!({"question": "Where does Carol live?"})),
                )
            },
        },
        Operation {
            name: "POST ask streamed",
            writes: false,
            creates: false,
            only_refused: true,
            request: |ids| {
                (
                    "POST",
                    format!("/v1/conversations/{}/ask", ids.conversation),
                    Some(json!({"question": "Where?", "stream": true})),
                )
            },
        },
        Operation {
            name: "GET conversation facts",
            writes: false,
            creates: false,
            only_refused: false,
            request: |ids| {
                ("GET", format!("/v1/conversations/{}/facts?history=true", ids.conversation), None)
            },
        },
        Operation {
            name: "POST user search",
            writes: false,
            creates: false,
            only_refused: false,
            request: |ids| {
                ("POST", format!("/v1/users/{}/search", ids.user), Some(json!({"query": "Berlin"})))
            },
        },
        Operation {
            name: "POST user ask",
            writes: false,
            creates: false,
            only_refused: true,
            request: |ids| {
                (
                    "POST",
                    format!("/v1/users/{}/ask", ids.user),
                    Some(json!({"question": "Where does Carol live?"})),
                )
            },
        },
        Operation {
            name: "GET user facts",
            writes: false,
            creates: false,
            only_refused: false,
            request: |ids| ("GET", format!("/v1/users/{}/facts?history=true", ids.user), None),
        },
        Operation {
            name: "POST correct",
            writes: true,
            creates: false,
            only_refused: true,
            request: |ids| {
                (
                    "POST",
                    format!("/v1/facts/{}/correct", ids.fact),
                    Some(json!({"value": "Eve was here"})),
                )
            },
        },
        Operation {
            name: "POST undo",
            writes: true,
            creates: false,
            only_refused: true,
            request: |ids| ("POST", format!("/v1/edits/{}/undo", ids.edit), None),
        },
        Operation {
            name: "GET job",
            writes: false,
            creates: false,
            only_refused: false,
            request: |ids| ("GET", format!("/v1/jobs/{}", ids.job), None),
        },
        Operation {
            name: "MCP add_messages",
            writes: true,
            creates: true,
            only_refused: true,
            request: |ids| {
                (
                    "POST",
                    "/mcp".into(),
                    tool(
                        "add_messages",
                        json!({"conversation": ids.conversation, "messages": planted()}),
                    ),
                )
            },
        },
        Operation {
            name: "MCP add_messages naming the user",
            writes: true,
            creates: true,
            only_refused: true,
            request: |ids| {
                (
                    "POST",
                    "/mcp".into(),
                    tool(
                        "add_messages",
                        json!({"conversation": "eve-new", "user": ids.user, "messages": planted()}),
                    ),
                )
            },
        },
        Operation {
            name: "MCP search_memory",
            writes: false,
            creates: false,
            only_refused: false,
            request: |ids| {
                (
                    "POST",
                    "/mcp".into(),
                    tool(
                        "search_memory",
                        json!({"conversation": ids.conversation, "query": "Berlin"}),
                    ),
                )
            },
        },
        Operation {
            name: "MCP search_memory user",
            writes: false,
            creates: false,
            only_refused: false,
            request: |ids| {
                (
                    "POST",
                    "/mcp".into(),
                    tool("search_memory", json!({"user": ids.user, "query": "Berlin"})),
                )
            },
        },
        Operation {
            name: "MCP ask_memory",
            writes: false,
            creates: false,
            only_refused: true,
            request: |ids| {
                (
                    "POST",
                    "/mcp".into(),
                    tool(
                        "ask_memory",
                        json!({"conversation": ids.conversation, "question": "Where?"}),
                    ),
                )
            },
        },
        Operation {
            name: "MCP ask_memory user",
            writes: false,
            creates: false,
            only_refused: true,
            request: |ids| {
                (
                    "POST",
                    "/mcp".into(),
                    tool("ask_memory", json!({"user": ids.user, "question": "Where?"})),
                )
            },
        },
        Operation {
            name: "MCP show_conversation",
            writes: false,
            creates: false,
            only_refused: false,
            request: |ids| {
                (
                    "POST",
                    "/mcp".into(),
                    tool("show_conversation", json!({"conversation": ids.conversation})),
                )
            },
        },
        Operation {
            name: "MCP forget",
            writes: true,
            creates: false,
            only_refused: true,
            request: |ids| {
                ("POST", "/mcp".into(), tool("forget", json!({"conversation": ids.conversation})))
            },
        },
        Operation {
            name: "MCP forget message",
            writes: true,
            creates: false,
            only_refused: true,
            request: |ids| {
                (
                    "POST",
                    "/mcp".into(),
                    tool(
                        "forget",
                        json!({"conversation": ids.conversation, "message": ids.message}),
                    ),
                )
            },
        },
    ]
}

fn planted() -> Value {
    json!([{"speaker": "Eve", "timestamp": "2024-05-01T10:00:00Z", "text": "Eve planted this line"}])
}

/// What a call answered, comparable across ids: HTTP status, and the error's code, field and
/// message with the ids written as placeholders (for MCP: the tool result's error; for a
/// batch: its entry's), or [`ALLOWED`].
fn outcome(answer: &(StatusCode, Value), ids: &Ids) -> String {
    let (status, body) = answer;
    let body = if body.get("jsonrpc").is_some() {
        let result = &body["result"];
        if result["isError"] == true {
            result["structuredContent"].clone()
        } else if body.get("error").is_some() {
            json!({"error": {"code": "jsonrpc", "field": "", "message": body["error"]["message"]}})
        } else {
            return format!("{status} {ALLOWED}");
        }
    } else if let Some(entry) = body["results"].get(0).filter(|entry| entry.get("error").is_some())
    {
        entry.clone()
    } else {
        body.clone()
    };
    match body.get("error") {
        Some(error) => format!(
            "{status} {} {} {}",
            error["code"],
            error["field"],
            ids.neutral(error["message"].as_str().unwrap_or_default())
        ),
        None => format!("{status} {ALLOWED}"),
    }
}

/// What [`outcome`] says of an answer that is no error.
const ALLOWED: &str = "ALLOWED";

/// The ids in a successful answer's text that belong to `other` (none may show up).
fn leaks(body: &Value, other: &Ids) -> Vec<String> {
    let text = body.to_string();
    [&other.conversation, &format!("{}-notes", other.user)]
        .into_iter()
        .filter(|id| text.contains(&format!("\"{id}\"")))
        .cloned()
        .collect()
}

/// Runs the whole matrix against `replicas` (calls alternate between them); returns the
/// number of calls made.
async fn attack(
    replicas: &[Replica],
    tokens: &BTreeMap<Caller, Option<String>>,
    alice: &Ids,
    bob: &Ids,
) -> usize {
    let missing = Ids::missing();
    let store = &replicas[0].store;
    let mut calls = 0;
    let mut unauthorized = None;
    for (number, caller) in CALLERS.iter().enumerate() {
        let token = tokens[caller].as_deref();
        for operation in operations() {
            let mut answers = BTreeMap::new();
            for (target, ids) in [("alice", alice), ("bob", bob), ("missing", &missing)] {
                let owner = (target != "missing").then_some(target);
                let foreign = caller.user().is_some() && owner.is_some() && caller.user() != owner;
                let refused_by_scope = operation.writes && *caller == Caller::AliceRead;
                let refused = caller.refused() || foreign || refused_by_scope;
                // An operation that would change memory or call the model when allowed is
                // called only where it is refused, or on missing ids (never found, so it
                // changes nothing): their answer is what another user's ids must get.
                if (!refused && operation.only_refused && target != "missing")
                    || (operation.creates && target == "missing")
                {
                    continue;
                }
                let replica = &replicas[(number + calls) % replicas.len()];
                let before = fingerprint_of(store).await;
                let (method, path, body) = (operation.request)(ids);
                let answer = call(&replica.base, method, &path, body.as_ref(), token).await;
                calls += 1;
                let seen = outcome(&answer, ids);
                let context =
                    format!("{caller:?} {} on {target}'s ids: {}", operation.name, answer.1);
                if refused {
                    assert!(!seen.contains(ALLOWED), "refused, yet answered: {context}");
                    assert_eq!(before, fingerprint_of(store).await, "the store changed: {context}");
                }
                if caller.refused() {
                    assert_eq!(answer.0, StatusCode::UNAUTHORIZED, "{context}");
                    let first = unauthorized.get_or_insert_with(|| answer.1.clone());
                    assert_eq!(first, &answer.1, "every 401 is the same: {context}");
                } else if refused_by_scope {
                    // Over HTTP a 403; an MCP tool answers its JSON-RPC call (200) with the
                    // same error code in its result.
                    assert!(seen.contains("\"forbidden\""), "{context}");
                    if !operation.name.starts_with("MCP") {
                        assert_eq!(answer.0, StatusCode::FORBIDDEN, "{context}");
                    }
                } else if !refused {
                    assert!(
                        seen.contains(ALLOWED) || target == "missing",
                        "allowed, yet refused: {context}"
                    );
                    let other = if owner == Some("alice") { bob } else { alice };
                    if caller.user().is_some() {
                        assert!(
                            leaks(&answer.1, other).is_empty(),
                            "another user's ids: {context}"
                        );
                    }
                }
                answers.insert(target, (seen, foreign, answer));
            }
            // Another user's ids are answered as missing ones.
            if let Some((missing_seen, _, _)) = answers.get("missing") {
                for (target, (seen, foreign, answer)) in &answers {
                    if *foreign {
                        assert_eq!(
                            seen, missing_seen,
                            "{caller:?} {} on {target}'s ids answers unlike a missing id: {}",
                            operation.name, answer.1
                        );
                    }
                }
            } else {
                // An add (never called on a missing id): another user's conversation is 404 as
                // a missing one, or the add is refused for naming another user. (A revoked,
                // expired or missing key was answered 401 above, whatever the ids.)
                for (target, (seen, foreign, answer)) in &answers {
                    if *foreign && !caller.refused() {
                        let ok =
                            seen.contains("unknown_conversation") || seen.contains("forbidden");
                        assert!(
                            ok,
                            "{caller:?} {} on {target}'s ids: {}",
                            operation.name, answer.1
                        );
                    }
                }
            }
        }
    }
    calls
}

/// Listings hold only the caller's user's: conversations, edits, jobs, MCP's list, a user
/// search filtered to another's conversation; another user named in a filter is as missing.
async fn listings(
    replicas: &[Replica],
    tokens: &BTreeMap<Caller, Option<String>>,
    alice: &Ids,
    bob: &Ids,
) -> usize {
    let mut calls = 0;
    for caller in [Caller::AliceRead, Caller::AliceWrite, Caller::BobWrite] {
        let token = tokens[&caller].as_deref();
        let (own, other) = if caller == Caller::BobWrite { (bob, alice) } else { (alice, bob) };
        for (index, replica) in replicas.iter().enumerate() {
            let base = &replica.base;
            let list = [
                ("GET", "/v1/conversations".to_string(), None),
                ("GET", "/v1/edits".to_string(), None),
                ("GET", format!("/v1/edits?user={}", other.user), None),
                ("GET", format!("/v1/edits?conversation={}", other.conversation), None),
                ("GET", "/v1/jobs".to_string(), None),
                ("GET", format!("/v1/jobs?conversation={}-notes", other.user), None),
                (
                    "POST",
                    format!("/v1/users/{}/search", own.user),
                    Some(json!({"query": "Berlin", "conversation": other.conversation})),
                ),
                ("POST", "/mcp".to_string(), tool("list_conversations", json!({}))),
                (
                    "POST",
                    "/mcp".to_string(),
                    tool("list_conversations", json!({"user": other.user})),
                ),
            ];
            for (method, path, body) in list {
                let (status, answer) = call(base, method, &path, body.as_ref(), token).await;
                calls += 1;
                if path.ends_with("/search") {
                    // Filtered to another user's conversation: answered as a missing one.
                    let missing =
                        json!({"query": "Berlin", "conversation": "no-such-conversation"});
                    let (missing_status, missing_answer) =
                        call(base, method, &path, Some(&missing), token).await;
                    calls += 1;
                    assert_eq!(
                        (status, &answer["error"]["code"]),
                        (missing_status, &missing_answer["error"]["code"]),
                        "{caller:?} {path} on replica {index}: {answer}"
                    );
                    assert_eq!(status, StatusCode::NOT_FOUND, "{answer}");
                    continue;
                }
                assert_eq!(
                    status,
                    StatusCode::OK,
                    "{caller:?} {path} on replica {index}: {answer}"
                );
                assert!(leaks(&answer, other).is_empty(), "{caller:?} {path}: {answer}");
                if path == "/v1/conversations" {
                    assert!(answer.to_string().contains(&own.conversation), "{answer}");
                }
            }
        }
        // The edit log shows the caller's own user's edits, with the operator's name.
        let (_, edits) = call(&replicas[0].base, "GET", "/v1/edits", None, token).await;
        let edits = edits["edits"].as_array().unwrap();
        assert!(
            !edits.is_empty() && edits.iter().all(|edit| edit["conversation"] == own.conversation),
            "{edits:?}"
        );
    }
    calls
}

/// The whole suite on `replicas` (of one store): data, keys, the matrix, the listings, a key's
/// edit logged with its name and id, revocation seen by every replica at the next request.
async fn suite(replicas: &[Replica]) {
    let started = std::time::Instant::now();
    let alice = populate(&replicas[0].base, "alice").await;
    let bob = populate(&replicas[replicas.len() - 1].base, "bob").await;
    let store = replicas[0].store.clone();
    let tokens = tokio::task::spawn_blocking(move || make_keys(&store)).await.unwrap();
    let calls = attack(replicas, &tokens, &alice, &bob).await;
    let listed = listings(replicas, &tokens, &alice, &bob).await;

    // A key's own edit: allowed, and logged with the key's name and id.
    let writer = tokens[&Caller::AliceWrite].as_deref();
    let (status, edit) = call(
        &replicas[0].base,
        "POST",
        &format!("/v1/facts/{}/correct", alice.fact),
        Some(&json!({"value": "alice lives in Oslo"})),
        writer,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{edit}");
    let key_id = writer.unwrap().split('_').nth(1).unwrap();
    assert_eq!(
        (edit["actor"].as_str(), edit["actor_key"].as_str()),
        (Some("alice-writer"), Some(key_id)),
        "{edit}"
    );
    // An add without a user through alice's key is alice's conversation.
    let (status, added) = call(
        &replicas[replicas.len() - 1].base,
        "POST",
        "/v1/conversations/alice-new/messages",
        Some(&json!({"messages": planted()})),
        writer,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{added}");
    let (_, shown) =
        call(&replicas[0].base, "GET", "/v1/conversations/alice-new", None, Some(OPERATOR)).await;
    assert_eq!(shown["user"], "alice", "{shown}");

    // Revoked through one replica's store: refused by every replica at the next request.
    for replica in replicas {
        let (status, _) = call(&replica.base, "GET", "/v1/conversations", None, writer).await;
        assert_eq!(status, StatusCode::OK);
    }
    let store = replicas[0].store.clone();
    tokio::task::spawn_blocking(move || store.revoke_key("alice-writer").unwrap()).await.unwrap();
    for replica in replicas.iter().rev() {
        let (status, body) = call(&replica.base, "GET", "/v1/conversations", None, writer).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    }
    eprintln!(
        "attacker suite: {} operations x {} callers x 3 targets: {calls} calls, {listed} listing calls, {} replica(s), {:.1} s",
        operations().len(),
        CALLERS.len(),
        replicas.len(),
        started.elapsed().as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_key_reaches_another_users_memory_on_sqlite() {
    let scripted = facts_server(Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(Store::default_path(dir.path())).unwrap();
    let one = replica(&scripted, dir.path(), store).await;
    suite(&[one]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_key_reaches_another_users_memory_on_postgres_with_two_replicas() {
    let url =
        tokio::task::spawn_blocking(|| crate::private_pg::shared().fresh_database()).await.unwrap();
    let scripted = facts_server(Duration::ZERO).await;
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let open = |url: String| tokio::task::spawn_blocking(move || Store::open_url(&url).unwrap());
    let (store_a, store_b) = (open(url.clone()).await.unwrap(), open(url).await.unwrap());
    let a = replica(&scripted, dir_a.path(), store_a).await;
    let b = replica(&scripted, dir_b.path(), store_b).await;
    suite(&[a, b]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_past_its_rate_gets_429_with_retry_after_counted_by_key_name() {
    let scripted = crate::own::server(Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(Store::default_path(dir.path())).unwrap();
    let key = store
        .create_key(&NewKey {
            name: "chatty".into(),
            user: Some("ann".into()),
            agent: None,
            scope: KeyScope::Read,
            expires_at: None,
        })
        .unwrap()
        .secret;
    let config = support::client_config(&scripted);
    let service = MemoryService::new(
        store,
        ServiceSettings::new(dir.path(), EMBEDDER, "test-model", "test-model"),
        build_chat_model(&config).unwrap(),
        OwnEmbedder::Api(Box::new(support::embedder(&config, 64))),
    );
    let options = ServeOptions {
        token: Some(OPERATOR.into()),
        key_rate_per_minute: std::num::NonZeroU32::new(3),
        ..ServeOptions::default()
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (_stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(serve(listener, Arc::new(service), options, async move {
        let _ = stopped.await;
    }));
    for _ in 0..3 {
        assert_eq!(
            call(&base, "GET", "/v1/conversations", None, Some(&key)).await.0,
            StatusCode::OK
        );
    }
    let response = reqwest::Client::new()
        .get(format!("{base}/v1/conversations"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    let wait: u64 = response.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=20).contains(&wait), "{wait}");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "rate_limited", "{body}");
    // Another key's budget is its own; the count is in the metrics under the key's name, and
    // a non-admin key may not read them.
    let (status, metrics) = call(&base, "GET", "/metrics", None, Some(OPERATOR)).await;
    assert_eq!(status, StatusCode::OK);
    let text = metrics.as_str().unwrap();
    assert!(text.contains("mragent_rate_limited_requests_total{key=\"chatty\"} 1"), "{text}");
    let (status, _) = call(&base, "GET", "/metrics", None, Some(&key)).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "still over its rate");
}

#[tokio::test]
async fn keys_are_made_listed_and_revoked_from_the_command_line_and_shown_once() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let mut command = support::mragent_command(dir.path(), args);
        async move { command.output().await.unwrap() }
    };
    let out = run(&[
        "keys",
        "create",
        "--name",
        "ann-bot",
        "--user",
        "ann",
        "--scope",
        "read",
        "--expires",
        "30d",
    ])
    .await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let printed = String::from_utf8_lossy(&out.stdout).to_string();
    let secret = printed.lines().next().unwrap().trim().to_string();
    assert!(secret.starts_with("mrk_"), "{printed}");
    let store = Store::open(Store::default_path(dir.path())).unwrap();
    let key = store.verify_key(&secret).unwrap().unwrap();
    assert_eq!((key.user.as_deref(), key.scope), (Some("ann"), KeyScope::Read));
    let expires = chrono::DateTime::parse_from_rfc3339(key.expires_at.as_deref().unwrap()).unwrap();
    let days = (expires.with_timezone(&chrono::Utc) - chrono::Utc::now()).num_hours();
    assert!((29 * 24..=30 * 24).contains(&days), "{days}");
    let listed = run(&["keys", "list", "--json"]).await;
    let text = String::from_utf8_lossy(&listed.stdout).to_string();
    assert!(
        text.contains("ann-bot") && !text.contains(secret.rsplit('_').next().unwrap()),
        "{text}"
    );
    assert!(run(&["keys", "revoke", "ann-bot"]).await.status.success());
    assert!(store.verify_key(&secret).unwrap().is_none());
    let refused =
        run(&["keys", "create", "--name", "boss", "--user", "ann", "--scope", "admin"]).await;
    assert_eq!(refused.status.code(), Some(1));
}
