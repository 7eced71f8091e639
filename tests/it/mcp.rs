//! The MCP tools with a real MCP client: the official Python SDK (`scripts/mcp_client.sh`
//! installs it, pinned, into its own venv; python3 with venv and pip is all it needs) runs
//! `scripts/mcp_client.py` against `mragent mcp` over stdio (the client starts the binary) and
//! against `serve`'s `/mcp` over streamable HTTP with a bearer token, the model side being the
//! scripted endpoint. The script prints what it saw as JSON; the assertions are here.
//!
//! Both transports go through the same scenario: the six tools listed with descriptions and
//! input schemas, an add, list, show, search (a conversation and a user), ask, tool errors (each
//! a result flagged `isError` with the HTTP API's error body naming the field) after which the
//! server still answers, forgetting one message then the conversation, and a second client in
//! the handshake-era mode (`initialize`). Over HTTP, a request without the token gets 401.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use mragent::serve::{ServeOptions, serve};
use mragent::store::Store;
use serde_json::{Value, json};

use crate::own::{example_file, server, service};
use crate::support::{self, EMBEDDER};

const TOKEN: &str = "mcp-test-token";

const TOOLS: [&str; 6] = [
    "add_messages",
    "ask_memory",
    "forget",
    "list_conversations",
    "search_memory",
    "show_conversation",
];

/// Runs the client script against `target` and returns its summary.
async fn client(target: Value) -> Value {
    let output = tokio::process::Command::new(support::repo_path("scripts/mcp_client.sh"))
        .arg(target.to_string())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(600), output)
        .await
        .expect("the MCP client finished within 10 minutes (venv set-up included)")
        .expect("scripts/mcp_client.sh runs (it needs python3 with venv and pip)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the MCP client failed:\n{stdout}\n{stderr}");
    let summary: Value = serde_json::from_str(&stdout).unwrap_or_else(|error| {
        panic!("the client printed no JSON ({error}):\n{stdout}\n{stderr}")
    });
    assert!(summary.get("fatal").is_none(), "the client stopped:\n{}\n{stderr}", summary["fatal"]);
    summary
}

/// A tool call's body, after checking the call did not raise and its `isError` is `error`.
fn body<'a>(summary: &'a Value, call: &str, error: bool) -> &'a Value {
    let record = &summary["calls"][call];
    assert!(record.get("exception").is_none(), "{call} raised: {}", record["exception"]);
    assert_eq!(record["is_error"], error, "{call}: {record:#}");
    assert_eq!(record["texts"], 1, "{call}: one text content: {record:#}");
    assert_eq!(record["structured_matches"], true, "{call}: structured = text: {record:#}");
    &record["body"]
}

/// A tool error: flagged, with the error body naming `field` and carrying `code`.
fn tool_error(summary: &Value, call: &str, code: &str, field: &str) {
    let error = &body(summary, call, true)["error"];
    assert_eq!(error["code"], code, "{call}: {error:#}");
    assert_eq!(error["field"], field, "{call}: {error:#}");
    assert!(!error["message"].as_str().unwrap_or_default().is_empty(), "{call}: {error:#}");
}

/// What both transports must show.
fn check_scenario(summary: &Value) {
    let version = summary["protocol_version"].as_str().unwrap_or_default();
    assert!(!version.is_empty(), "{summary:#}");
    assert_eq!(summary["server_name"], "mragent");
    assert!(summary["instructions"].as_str().unwrap_or_default().contains("search_memory"));

    let tools = summary["tools"].as_array().unwrap();
    let mut names: Vec<&str> = tools.iter().map(|tool| tool["name"].as_str().unwrap()).collect();
    names.sort_unstable();
    assert_eq!(names, TOOLS);
    for tool in tools {
        let name = &tool["name"];
        let description = tool["description"].as_str().unwrap();
        assert!(description.len() > 100, "{name}: a description a model can choose by");
        assert_eq!(tool["schema_type"], "object", "{name}");
        assert_eq!(tool["has_ref"], false, "{name}: every part inlined");
        if name != "list_conversations" {
            assert!(!tool["required"].as_array().unwrap().is_empty(), "{name}: {tool}");
        }
    }
    let tool = |name: &str| tools.iter().find(|tool| tool["name"] == name).unwrap();
    assert_eq!(
        tool("add_messages")["properties"],
        json!(["agent", "conversation", "messages", "tags", "user", "wait"])
    );
    assert_eq!(
        tool("search_memory")["properties"],
        json!(["conversation", "from", "k", "query", "speaker", "tags", "to", "user"])
    );
    assert_eq!(
        tool("ask_memory")["properties"],
        json!(["as_of", "conversation", "question", "user"])
    );
    assert_eq!(tool("forget")["properties"], json!(["conversation", "message"]));
    assert_eq!(tool("forget")["destructive"], true);
    assert_eq!(tool("search_memory")["read_only"], true);
    assert!(tool("search_memory")["description"].as_str().unwrap().contains("ask_memory"));
    assert!(tool("add_messages")["description"].as_str().unwrap().contains("a while"));

    let added = body(summary, "add", false);
    assert_eq!(added["conversation"], "demo");
    assert_eq!((&added["created"], &added["new_messages"]), (&json!(true), &json!(11)));
    assert_eq!(added["built_sessions"], json!(["D1", "D2", "D3"]), "{added:#}");
    let again = body(summary, "add_again", false);
    assert_eq!((&again["new_messages"], &again["duplicates"]), (&json!(0), &json!(11)));
    // `wait: false` answers at once with the job that builds in the background.
    let queued = body(summary, "add_no_wait", false);
    assert_eq!((&queued["duplicates"], &queued["job"]["state"]), (&json!(11), &json!("queued")));
    assert!(queued["job"]["id"].as_i64().is_some_and(|id| id >= 1), "{queued}");

    let listed = body(summary, "list", false)["conversations"].as_array().unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!((&listed[0]["id"], &listed[0]["user"]), (&json!("demo"), &json!("maya")));
    assert_eq!(body(summary, "list_user", false)["conversations"], json!(listed));
    assert_eq!(body(summary, "list_other_user", false)["conversations"], json!([]));
    let shown = body(summary, "show", false);
    assert_eq!(
        (&shown["id"], &shown["messages"], &shown["built_sessions"]),
        (&json!("demo"), &json!(11), &json!(3))
    );

    let found = body(summary, "search", false);
    assert_eq!(
        (&found["conversation"], &found["query"]),
        (&json!("demo"), &json!("greyhound dog Pepper"))
    );
    let hits = found["hits"].as_array().unwrap();
    assert_eq!(hits.len(), 3, "{found:#}");
    assert!(hits[0]["text"].as_str().unwrap().contains("Pepper"), "{found:#}");
    assert_eq!(hits[0]["id"].as_str().unwrap().len(), 32);
    let found = body(summary, "search_user", false);
    assert_eq!(found["user"], "maya");
    let hits = found["hits"].as_array().unwrap();
    assert_eq!(hits.len(), 2, "{found:#}");
    assert!(hits.iter().all(|hit| hit["conversation"] == "demo" && hit["tags"]["source"] == "mcp"));

    let asked = body(summary, "ask", false);
    assert_eq!(asked["ok"], true, "{asked:#}");
    assert!(!asked["answer"].as_str().unwrap().is_empty(), "{asked:#}");
    assert_eq!(asked["conversation"], "demo");

    tool_error(summary, "error_unknown_conversation", "unknown_conversation", "conversation");
    tool_error(summary, "error_bad_id", "invalid", "conversation");
    tool_error(summary, "error_missing_id", "invalid", "conversation");
    tool_error(summary, "error_both_scopes", "invalid", "user");
    tool_error(summary, "error_no_messages", "invalid", "messages");
    tool_error(summary, "error_bad_message", "invalid", "text");
    tool_error(summary, "error_k", "invalid", "k");
    tool_error(summary, "error_wrong_type", "invalid", "conversation");
    assert_eq!(body(summary, "after_errors", false)["id"], "demo", "alive after the errors");

    let forgotten = body(summary, "forget_message", false);
    assert_eq!(forgotten["forgotten"]["conversation"], "demo", "{forgotten:#}");
    assert_eq!(forgotten["rebuilt"]["failed_sessions"], json!([]), "{forgotten:#}");
    tool_error(summary, "forget_message_again", "unknown_message", "message");
    let deleted = body(summary, "forget", false);
    assert_eq!(
        (&deleted["deleted"]["id"], &deleted["deleted"]["messages"]),
        (&json!("demo"), &json!(10))
    );
    tool_error(summary, "show_forgotten", "unknown_conversation", "conversation");
    assert_eq!(body(summary, "list_after", false)["conversations"], json!([]));

    let legacy = &summary["legacy"];
    let handshake = legacy["protocol_version"].as_str().unwrap_or_default();
    assert!(handshake < "2026", "{legacy:#}");
    assert_eq!(legacy["tools"], json!(TOOLS));
    assert_eq!(legacy["list"]["is_error"], false, "{legacy:#}");
    eprintln!(
        "MCP over {}: protocol {version}, and {handshake} by initialize",
        summary["transport"]
    );
}

/// The actor the forgotten message's edit was logged under.
fn forget_actor(root: &Path) -> Vec<String> {
    let store = Store::open(Store::default_path(root)).unwrap();
    store.history(None, None).unwrap().into_iter().map(|edit| edit.actor).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_client_uses_every_tool_over_stdio() {
    let scripted = server(Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    let summary = client(json!({
        "transport": "stdio",
        "command": env!("CARGO_BIN_EXE_mragent"),
        "args": [
            "mcp", "--base-url", scripted.base_url(), "--model", "local/tiny",
            "--embedder", EMBEDDER, "-q",
        ],
        "cwd": dir.path(),
        // The SDK gives the server only a safe default environment plus this.
        "env": {"NO_COLOR": "1"},
        "messages": example_file(),
    }))
    .await;
    check_scenario(&summary);
    assert_eq!(forget_actor(dir.path()), ["mcp"], "edits over stdio are logged as `mcp`");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_client_uses_every_tool_over_http_with_the_token() {
    let scripted = server(Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    let options = ServeOptions { token: Some(TOKEN.into()), ..ServeOptions::default() };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running =
        tokio::spawn(serve(listener, Arc::new(service(&scripted, dir.path())), options, async {
            let _ = stopped.await;
        }));

    let summary = client(json!({
        "transport": "http",
        "url": url,
        "token": TOKEN,
        "messages": example_file(),
    }))
    .await;
    check_scenario(&summary);
    assert_eq!(forget_actor(dir.path()), ["token"], "logged under the token's name");

    let unauthorized = &summary["unauthorized"];
    assert_eq!(unauthorized["status"], 401, "{unauthorized:#}");
    assert_eq!(unauthorized["body"]["error"]["code"], "unauthorized", "{unauthorized:#}");
    assert_eq!(unauthorized["body"]["error"]["field"], "authorization", "{unauthorized:#}");
    let refused = unauthorized["client_error"].as_str();
    assert!(refused.is_some(), "the SDK client fails without the token: {unauthorized:#}");
    eprintln!("without the token, the SDK client says: {}", refused.unwrap_or_default());

    // The graceful shutdown is not held up by an MCP stream (stateless: none stays open).
    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(10), running).await.unwrap().unwrap().unwrap();
}

#[tokio::test]
async fn mcp_is_not_in_the_openapi_document() {
    let document = mragent::serve::document();
    let paths = document["paths"].as_object().unwrap();
    assert!(paths.keys().all(|path| !path.contains("mcp")), "{:?}", paths.keys());
}
