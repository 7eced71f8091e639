//! Schemathesis against a live `mragent serve` on 127.0.0.1, every check on: the responses it
//! provokes from `/openapi.json`'s own schemas must all conform (no 5xx, every status, content
//! type and body declared, valid input accepted, invalid input refused), and the server must
//! write nothing outside its root.
//!
//! One check is ours, not schemathesis': its `use_after_free` (ST301) counts a conversation
//! as freed for good unless it is re-created on its own path or a parent's, but here
//! `POST /v1/conversations/{id}/messages` creates the conversation it names (as `memory add`
//! does). Its stateful phase does DELETE, then POST …/messages (`"created": true`), then GET, and
//! reports the new conversation as the deleted one (seen in a recorded run: the GET's
//! `created_at` is the re-creation's). So that check is off, and [`no_use_after_delete`] checks
//! the recorded requests instead: after a conversation's DELETE succeeded, no request may
//! succeed on it (nor list it) until an add has created it again.
//!
//! Ignored by the default run (it needs Python and installs schemathesis through
//! `scripts/schemathesis.sh`); CI runs it after the suite:
//! `cargo test --release --locked --test it -- --ignored --nocapture schemathesis`.
//! Budget: `MRAGENT_SCHEMATHESIS_EXAMPLES` cases per operation and phase (default 30),
//! `MRAGENT_SCHEMATHESIS_SECONDS` for the whole run (default 300), seed
//! `MRAGENT_SCHEMATHESIS_SEED` (default 1). `MRAGENT_SCHEMATHESIS_ARGS` adds arguments, split on
//! spaces (say `--report har --report-dir /tmp/st` to keep every request and response).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use mragent::serve::{ServeOptions, serve};

use crate::own::{server, service};
use crate::support;

const TOKEN: &str = "schemathesis-token";

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|value| value.parse().ok()).unwrap_or(default)
}

/// Every path under `dir` except those under `skip`, sorted.
fn listing(dir: &Path, skip: &Path) -> BTreeSet<PathBuf> {
    let mut found = BTreeSet::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(next) = pending.pop() {
        for entry in std::fs::read_dir(&next).unwrap() {
            let path = entry.unwrap().path();
            if path.starts_with(skip) {
                continue;
            }
            if path.is_dir() {
                pending.push(path.clone());
            }
            found.insert(path);
        }
    }
    found
}

/// The summary lines of schemathesis' output (cases, checks, the verdict).
fn summary(output: &str) -> Vec<&str> {
    output
        .lines()
        .filter(|line| {
            let line = line.to_lowercase();
            ["test cases", "generated", "passed", "failed", "errors", "checks", "seed"]
                .iter()
                .any(|word| line.contains(word))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Python 3 and PyPI (scripts/schemathesis.sh); CI runs it after the suite"]
async fn schemathesis_finds_no_failure() {
    let scripted = server(Duration::ZERO).await;
    let parent = tempfile::tempdir().unwrap();
    let root = parent.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let work = tempfile::tempdir().unwrap();
    let har = work.path().join("requests.har");
    let before = listing(parent.path(), &root);

    let options = ServeOptions {
        token: Some(TOKEN.into()),
        named_tokens: Vec::new(),
        // Large enough that a body schemathesis makes invalid by `maxItems` or `maxLength`
        // reaches the handler and gets its 400, not a 413 from the size limit.
        max_body_bytes: 256 * 1024 * 1024,
        max_concurrency: 4,
        ..ServeOptions::default()
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running =
        tokio::spawn(serve(listener, Arc::new(service(&scripted, &root)), options, async {
            let _ = stopped.await;
        }));

    let examples = setting("MRAGENT_SCHEMATHESIS_EXAMPLES", 30);
    let seconds = setting("MRAGENT_SCHEMATHESIS_SECONDS", 300);
    let seed = setting("MRAGENT_SCHEMATHESIS_SEED", 1);
    let output = tokio::process::Command::new(support::repo_path("scripts/schemathesis.sh"))
        .current_dir(work.path())
        .env("NO_COLOR", "1")
        .args(["run", &format!("{base}/openapi.json"), "--checks", "all"])
        .args(["--header", &format!("Authorization: Bearer {TOKEN}")])
        .args(["--max-examples", &examples.to_string(), "--max-time", &seconds.to_string()])
        .args(["--seed", &seed.to_string(), "--workers", "1", "--no-color"])
        .args(["--generation-database", "none", "--request-timeout", "60"])
        // An add answers after its sessions are built: 9,999 messages in one session took 17 s
        // on the 2 loaded cores of 2026-11-25, over the check's 10 s default. The bound is the
        // request timeout's.
        .args(["--max-response-time", "60"])
        .args(["--exclude-checks", "use_after_free", "--report", "har"])
        .arg(format!("--report-har-path={}", har.display()))
        .args(std::env::var("MRAGENT_SCHEMATHESIS_ARGS").unwrap_or_default().split_whitespace())
        .output()
        .await
        .expect("scripts/schemathesis.sh runs (it needs python3 with venv and pip)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let _ = stop.send(());
    running.await.unwrap().unwrap();

    eprintln!(
        "schemathesis ({examples} examples per operation, {seconds} s budget, seed {seed}):\n{}",
        summary(&stdout).join("\n")
    );
    assert!(output.status.success(), "schemathesis failed:\n{stdout}\n{stderr}");
    let recorded: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&har).expect("schemathesis wrote its HAR report"))
            .unwrap();
    let entries = recorded["log"]["entries"].as_array().expect("HAR entries");
    eprintln!("{} requests recorded", entries.len());
    if let Err(violation) = no_use_after_delete(entries) {
        panic!("{violation}");
    }
    assert_eq!(listing(parent.path(), &root), before, "the server wrote outside its root");
}

/// The conversation id a request's path names (`/v1/conversations/{id}[/…]`), percent-decoded,
/// and the rest of the path after it.
fn conversation_of(url: &str) -> Option<(String, String)> {
    let path = url.split_once("://").map_or(url, |(_, rest)| rest);
    let path = path.split_once('/').map_or("", |(_, path)| path);
    let path = path.split(['?', '#']).next().unwrap_or_default();
    let rest = path.strip_prefix("v1/conversations/")?;
    let (id, tail) = rest.split_once('/').unwrap_or((rest, ""));
    let id = percent_encoding::percent_decode_str(id).decode_utf8().ok()?.into_owned();
    Some((id, tail.to_string()))
}

/// Replays the recorded requests in order (schemathesis ran with one worker) and fails at the
/// first success on a conversation deleted earlier and not created again since: the check
/// schemathesis' `use_after_free` makes, knowing that an add creates its conversation.
fn no_use_after_delete(entries: &[serde_json::Value]) -> Result<(), String> {
    let mut deleted = BTreeSet::new();
    for (index, entry) in entries.iter().enumerate() {
        let method = entry["request"]["method"].as_str().unwrap_or_default();
        let url = entry["request"]["url"].as_str().unwrap_or_default();
        let status = entry["response"]["status"].as_u64().unwrap_or_default();
        let text = entry["response"]["content"]["text"].as_str().unwrap_or_default();
        let body: serde_json::Value = serde_json::from_str(text).unwrap_or_default();
        let ok = (200..300).contains(&status);
        let what = format!("request {index}: {method} {url} → {status}");
        let collection =
            url.split(['?', '#']).next().unwrap_or_default().ends_with("/v1/conversations");
        if collection && method == "POST" {
            // A batch add re-creates each conversation it added to (`created` in its report).
            for result in body["results"].as_array().into_iter().flatten() {
                let id = result["conversation"].as_str().unwrap_or_default();
                let report =
                    if result["added"].is_object() { &result["added"] } else { &result["queued"] };
                if report.is_object() && deleted.remove(id) && report["created"] != true {
                    return Err(format!("{what} added to deleted {id:?} without creating it"));
                }
            }
            continue;
        }
        if collection {
            let listed = body["conversations"].as_array().into_iter().flatten();
            if let Some(id) =
                listed.filter_map(|c| c["id"].as_str()).find(|id| deleted.contains(*id))
            {
                return Err(format!("{what} lists {id:?}, deleted before and not added since"));
            }
            continue;
        }
        let Some((id, tail)) = conversation_of(url) else { continue };
        match (method, tail.as_str()) {
            ("DELETE", "") if ok => {
                deleted.insert(id);
            }
            ("POST", "messages") if ok => {
                let was_deleted = deleted.remove(&id);
                let created = body["created"] == serde_json::Value::Bool(true);
                if was_deleted && !created {
                    return Err(format!(
                        "{what} added to a deleted conversation without creating it"
                    ));
                }
            }
            // A repeated DELETE may succeed or not (it is idempotent); forgetting one message of
            // a deleted conversation must not.
            ("DELETE", "") => {}
            _ if ok && deleted.contains(&id) => {
                return Err(format!("{what}: {id:?} was deleted before and not added since"));
            }
            _ => {}
        }
    }
    Ok(())
}

#[test]
fn use_after_delete_is_found_and_re_creation_is_not() {
    let entry = |method: &str, path: &str, status: u64, body: &str| {
        serde_json::json!({
            "request": {"method": method, "url": format!("http://127.0.0.1:1{path}")},
            "response": {"status": status, "content": {"text": body}},
        })
    };
    let created = entry("POST", "/v1/conversations/a%40b/messages", 200, r#"{"created":true}"#);
    let deleted = entry("DELETE", "/v1/conversations/a@b", 200, "{}");
    let shown = entry("GET", "/v1/conversations/a%40b", 200, "{}");
    let listed = entry("GET", "/v1/conversations", 200, r#"{"conversations":[{"id":"a@b"}]}"#);
    let gone = entry("GET", "/v1/conversations/a@b", 404, "{}");
    let fine = [created.clone(), deleted.clone(), gone, created.clone(), shown.clone()];
    assert_eq!(no_use_after_delete(&fine), Ok(()));
    let stale = no_use_after_delete(&[created.clone(), deleted.clone(), shown]).unwrap_err();
    assert!(stale.contains("request 2: GET") && stale.contains("\"a@b\""), "{stale}");
    let stale = no_use_after_delete(&[created, deleted, listed]).unwrap_err();
    assert!(stale.contains("lists \"a@b\""), "{stale}");
}
