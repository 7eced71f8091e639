//! Schemathesis against a live `mragent serve` on 127.0.0.1, every check on: the responses it
//! provokes from `/openapi.json`'s own schemas must all conform (no 5xx, every status, content
//! type and body declared, valid input accepted, invalid input refused), and the server must
//! write nothing outside its root.
//!
//! Ignored by the default run (it needs Python and installs schemathesis through
//! `scripts/schemathesis.sh`); CI runs it after the suite:
//! `cargo test --release --locked --test it -- --ignored --nocapture schemathesis`.
//! Budget: `MRAGENT_SCHEMATHESIS_EXAMPLES` cases per operation and phase (default 30),
//! `MRAGENT_SCHEMATHESIS_SECONDS` for the whole run (default 300), seed
//! `MRAGENT_SCHEMATHESIS_SEED` (default 1).

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
    let before = listing(parent.path(), &root);

    let options = ServeOptions {
        token: Some(TOKEN.into()),
        // Large enough that a body schemathesis makes invalid by `maxItems` or `maxLength`
        // reaches the handler and gets its 400, not a 413 from the size limit.
        max_body_bytes: 256 * 1024 * 1024,
        max_concurrency: 4,
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
    assert_eq!(listing(parent.path(), &root), before, "the server wrote outside its root");
}
