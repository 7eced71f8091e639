//! kill -9 of `mragent serve` while it forgets a message (the edit, its log row, then the
//! rebuild of the session): the store is always before the edit or after it, never between,
//! and the next add finishes what the kill interrupted.

use std::process::Stdio;
use std::time::Duration;

use mragent::store::Store;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, BufReader};

use super::facts_server;
use crate::support::{EMBEDDER, mragent_command};

/// Carol's homes over four sessions of two messages.
fn many_moves() -> Value {
    let cities = ["Paris", "Berlin", "Rome", "Oslo"];
    let messages: Vec<Value> = cities
        .iter()
        .enumerate()
        .flat_map(|(month, city)| {
            let day = format!("2024-{:02}-05", month + 1);
            [
                json!({"speaker": "Carol", "timestamp": format!("{day}T10:00:00Z"), "text": format!("I moved to {city} this month")}),
                json!({"speaker": "Dan", "timestamp": format!("{day}T10:01:00Z"), "text": format!("{city} must be nice")}),
            ]
        })
        .collect();
    Value::Array(messages)
}

/// `mragent serve` on a port the system picks; its address once it listens.
pub(crate) async fn serve(
    dir: &std::path::Path,
    base_url: &str,
) -> (tokio::process::Child, String) {
    serve_with(dir, base_url, &[], &[]).await
}

/// [`serve`] with more arguments (`--store URL`, say) and environment variables; job leases of
/// 2 s, so that a job whose server was killed on another host is taken over 2 s later.
pub(crate) async fn serve_with(
    dir: &std::path::Path,
    base_url: &str,
    more: &[&str],
    env: &[(&str, &str)],
) -> (tokio::process::Child, String) {
    let args = ["serve", "--bind", "127.0.0.1:0", "--base-url", base_url, "--model", "local/tiny"];
    let mut command = mragent_command(dir, &args);
    command.args(["--embedder", EMBEDDER, "--workers", "1"]).args(more);
    command.env("MRAGENT_SERVE_TOKEN", "t").env("MRAGENT_JOB_LEASE", "2").envs(env.iter().copied());
    let mut child = command.stderr(Stdio::piped()).kill_on_drop(true).spawn().unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let listening = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(rest) = line.strip_prefix("serving on ") {
                let url = rest.split_whitespace().next().unwrap();
                return url.trim_start_matches("http://").to_string();
            }
        }
        panic!("serve stopped before it listened");
    });
    let address = listening.await.expect("serve listens within a minute");
    // Keep draining stderr so the server never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, address)
}

/// A forget of message `?1` that no undo reverted.
const OPEN_FORGET: &str = "e.kind = 'forget_message' AND e.target = ?1
    AND NOT EXISTS (SELECT 1 FROM edits u WHERE u.undoes = e.id)";

/// (Is `message` stored, is its forget in the log), and the database's integrity check.
fn state(dir: &std::path::Path, message: &str) -> (bool, bool, String) {
    let connection = rusqlite::Connection::open(Store::default_path(dir)).unwrap();
    let count =
        |sql: &str| -> i64 { connection.query_row(sql, [message], |row| row.get(0)).unwrap() };
    let stored = count("SELECT COUNT(*) FROM messages WHERE hash = ?1") == 1;
    // A message forgotten in an earlier round was put back by an undo: count the forget not
    // undone yet.
    let logged = count(&format!("SELECT COUNT(*) FROM edits e WHERE {OPEN_FORGET}")) == 1;
    let integrity: String =
        connection.query_row("PRAGMA integrity_check", [], |row| row.get(0)).unwrap();
    (stored, logged, integrity)
}

#[tokio::test]
async fn kill_during_an_edit_leaves_the_store_before_or_after_it() {
    let scripted = facts_server(Duration::from_millis(60)).await;
    let dir = tempfile::tempdir().unwrap();
    let client = reqwest::Client::new();
    let add = json!({"user": "carol", "messages": many_moves()});
    let mut outcomes = Vec::new();
    for delay_ms in [0u64, 30, 90, 250, 700] {
        let (mut child, address) = serve(dir.path(), scripted.base_url()).await;
        let url = |path: &str| format!("http://{address}{path}");
        let added = client.post(url("/v1/conversations/moving/messages")).bearer_auth("t");
        let reply: Value = added.json(&add).send().await.unwrap().json().await.unwrap();
        assert!(reply["failed_sessions"].as_array().is_some_and(Vec::is_empty), "{reply}");
        let stored = Store::open(Store::default_path(dir.path())).unwrap().load("moving").unwrap();
        let victim =
            stored.sessions.iter().flat_map(|s| &s.messages).find(|m| m.speaker == "Carol");
        let victim = victim.expect("Carol's messages are back after each add").id.clone();
        let forget = client.delete(url(&format!("/v1/conversations/moving/messages/{victim}")));
        let request = tokio::spawn(forget.bearer_auth("t").send());
        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        child.start_kill().unwrap(); // SIGKILL
        child.wait().await.unwrap();
        let _ = request.await;
        let (stored, logged, integrity) = state(dir.path(), &victim);
        assert_eq!(integrity, "ok", "after a kill {delay_ms} ms in");
        assert_ne!(
            stored, logged,
            "after a kill {delay_ms} ms in: stored {stored}, logged {logged}"
        );
        outcomes.push(logged);
        // Put the message back (a new add), so that every round forgets one.
        if logged {
            let connection = rusqlite::Connection::open(Store::default_path(dir.path())).unwrap();
            let id: i64 = connection
                .query_row(
                    &format!("SELECT id FROM edits e WHERE {OPEN_FORGET}"),
                    [&victim],
                    |row| row.get(0),
                )
                .unwrap();
            let (mut child, address) = serve(dir.path(), scripted.base_url()).await;
            let undo = client.post(format!("http://{address}/v1/edits/{id}/undo")).bearer_auth("t");
            let reply: Value = undo.send().await.unwrap().json().await.unwrap();
            assert_eq!(reply["undo"]["undoes"], id, "{reply}");
            child.start_kill().unwrap();
            child.wait().await.unwrap();
        }
    }
    eprintln!("edit committed before the kill, per round: {outcomes:?}");
    assert!(outcomes.contains(&true), "some kill came after the edit: {outcomes:?}");
    // A last add finishes every session the kills interrupted; facts are settled again.
    let (_child, address) = serve(dir.path(), scripted.base_url()).await;
    let added =
        client.post(format!("http://{address}/v1/conversations/moving/messages")).bearer_auth("t");
    let reply: Value = added.json(&add).send().await.unwrap().json().await.unwrap();
    assert!(reply["failed_sessions"].as_array().is_some_and(Vec::is_empty), "{reply}");
    let facts =
        client.get(format!("http://{address}/v1/users/carol/facts?aspect=home")).bearer_auth("t");
    let facts: Value = facts.send().await.unwrap().json().await.unwrap();
    assert_eq!(facts["facts"].as_array().unwrap().len(), 1, "one current home: {facts}");
    assert_eq!(facts["facts"][0]["value"], "Carol lives in Oslo", "{facts}");
}
