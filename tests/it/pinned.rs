//! What people read, pinned before the service's doors are restructured (issue 40, step 1):
//! the OpenAPI document and MCP's `tools/list`, as a client receives them over HTTP. A change
//! to either shows as a snapshot diff (`cargo insta review`), never silently.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;

use crate::serve::Api;

#[tokio::test]
async fn the_openapi_document_is_pinned() {
    let server = crate::own::server(Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    let api = Api::start(&server, dir.path()).await;
    let (status, mut document) = api.get("/openapi.json").await;
    assert_eq!(status, StatusCode::OK, "{document}");
    assert!(document["paths"].as_object().is_some_and(|paths| paths.len() > 10), "{document}");
    // The version is the crate's, which every release changes: checked here, pinned as a
    // placeholder.
    assert_eq!(document["info"]["version"], env!("CARGO_PKG_VERSION"));
    document["info"]["version"] = json!("[crate version]");
    insta::assert_json_snapshot!("openapi", document);
}

#[tokio::test]
async fn the_mcp_tool_list_is_pinned() {
    let server = crate::own::server(Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    let api = Api::start(&server, dir.path()).await;
    let (status, reply) =
        api.post("/mcp", json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})).await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    let tools = &reply["result"]["tools"];
    assert_eq!(tools.as_array().map(Vec::len), Some(6), "{reply}");
    insta::assert_json_snapshot!("mcp_tools_list", tools);
}

/// `value` with what differs from run to run or host to host written as placeholders: times of
/// day (a timestamp written at run time), durations, the temporary project folder, and
/// fractional numbers (scores: no test compares floating-point bits made on another host).
fn steady(value: &mut serde_json::Value, root: &str) {
    use serde_json::Value;
    match value {
        Value::Object(fields) => {
            for (key, field) in fields.iter_mut() {
                let volatile = key.ends_with("_ms")
                    || key == "ms"
                    || key.ends_with("seconds")
                    || key == "at"
                    || key.ends_with("_at")
                    || key == "created" && field.as_str().is_some_and(|text| text.contains('T'));
                if volatile && !field.is_null() {
                    *field = Value::String("<volatile>".into());
                } else {
                    steady(field, root);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|item| steady(item, root)),
        Value::String(text) if text.contains(root) => *text = text.replace(root, "<root>"),
        Value::Number(number) if number.is_f64() => *value = Value::String("<float>".into()),
        _ => {}
    }
}

/// `text` with the project folder and the durations (`in 0.1s`) as placeholders.
fn steady_text(text: &str, root: &str) -> String {
    let durations = regex::Regex::new(r"\bin [0-9]+(\.[0-9]+)?s\b").unwrap();
    durations.replace_all(&text.replace(root, "<root>"), "in <t>s").into_owned()
}

/// Runs `mragent args` in `dir`, which must succeed and print JSON; the JSON, made steady.
async fn json_reply(dir: &std::path::Path, args: &[&str]) -> serde_json::Value {
    let (ok, stdout, stderr) = crate::own::run(dir, args).await;
    assert!(ok, "{args:?}: {stdout}\n{stderr}");
    let mut value: serde_json::Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|error| panic!("{args:?} printed no JSON ({error}): {stdout}"));
    steady(&mut value, dir.to_str().unwrap());
    value
}

#[tokio::test]
async fn every_memory_json_reply_is_pinned() {
    // One scenario through the binary, every `memory` subcommand that prints JSON: Carol's
    // move added, searched, listed, shown, her facts, a correction and its undo, the history,
    // the jobs; then one message forgotten and the conversation (text: `forget` has no
    // `--json`).
    use crate::own::{add_args, run};
    use crate::own_memory::{facts_server, moving_messages};
    let server = facts_server(Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap().to_string();
    let file = dir.path().join("moving.json");
    std::fs::write(&file, moving_messages().to_string()).unwrap();
    let model = crate::own::model_args(server.base_url());
    let mut replies = serde_json::Map::new();
    let mut add = add_args(server.base_url(), "moving", file.to_str().unwrap());
    // One build at a time: fact row ids follow the order session builds finish in (the chains
    // do not), and a snapshot pins ids.
    add.extend(["--user", "carol", "--tag", "channel=chat", "--workers", "1", "--json"]);
    replies.insert("add".into(), json_reply(dir.path(), &add).await);
    let mut search = vec!["memory", "search", "--conversation", "moving", "moved", "--json"];
    search.extend(model);
    replies.insert("search".into(), json_reply(dir.path(), &search).await);
    for (name, args) in [
        ("list", vec!["memory", "list", "--json"]),
        ("show", vec!["memory", "show", "--conversation", "moving", "--json"]),
        ("facts", vec!["memory", "facts", "--user", "carol", "--history", "--json"]),
        ("jobs", vec!["memory", "jobs", "--json"]),
    ] {
        replies.insert(name.into(), json_reply(dir.path(), &args).await);
    }
    let facts = &replies["facts"];
    let fact = facts[0]["id"].as_i64().unwrap_or_else(|| panic!("no fact id: {facts}"));
    let fact = fact.to_string();
    let correct = ["memory", "correct", "--fact", &fact, "Carol lives in Munich", "--json"];
    replies.insert("correct".into(), json_reply(dir.path(), &correct).await);
    let edit = replies["correct"]["id"].to_string();
    replies
        .insert("undo".into(), json_reply(dir.path(), &["memory", "undo", &edit, "--json"]).await);
    let history = ["memory", "history", "--user", "carol", "--json"];
    replies.insert("history".into(), json_reply(dir.path(), &history).await);
    let message = replies["show"]["sessions"][0]["messages"][0]["id"]
        .as_str()
        .expect("a message id")
        .to_string();
    // `memory forget` prints text only (it has no `--json`): pinned as text.
    let mut forget_message =
        vec!["memory", "forget", "--conversation", "moving", "--message", &message];
    forget_message.extend(model);
    let (ok, out, err) = run(dir.path(), &forget_message).await;
    assert!(ok, "{out}\n{err}");
    replies.insert("forget_message (text)".into(), steady_text(&out, &root).into());
    let forget = vec!["memory", "forget", "--conversation", "moving"];
    let (ok, out, err) = run(dir.path(), &forget).await;
    assert!(ok, "{out}\n{err}");
    replies.insert("forget (text)".into(), steady_text(&out, &root).into());
    insta::assert_json_snapshot!("memory_json_replies", serde_json::Value::Object(replies));
}
