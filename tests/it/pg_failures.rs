//! PostgreSQL failures that say what they are: a refused password is an authentication error
//! (exit 1 at start-up, `store_authentication` at run time, never a 503 outage), passwords are
//! masked in every form, a replica stopped with SIGTERM hands its jobs' leases back at once,
//! and `store copy` takes its URLs from the environment.

use std::sync::Arc;
use std::time::{Duration, Instant};

use mragent::llm::build_chat_model;
use mragent::serve::{ServeOptions, serve};
use mragent::service::{MemoryService, OwnEmbedder, ServiceSettings};
use mragent::store::Store;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::jobs::{messages, server};
use crate::own_memory::kill::serve_with;
use crate::private_pg;
use crate::support::{self, EMBEDDER, mragent_command};

/// A new database of the shared server owned by a new role that logs in with `password`,
/// checked by the server (scram) for that role alone. Returns (role, database URL without
/// credentials' password: `postgres://ROLE:PASSWORD@…` is made by the caller).
fn password_database(password: &str) -> (String, String, u16) {
    let pg = private_pg::shared();
    let trusted = pg.fresh_database();
    let database = trusted.rsplit('/').next().unwrap().to_string();
    let role = format!("pw_{database}");
    let mut admin = postgres::Client::connect(&pg.url("postgres"), postgres::NoTls).unwrap();
    admin
        .batch_execute(&format!(
            "CREATE ROLE {role} LOGIN PASSWORD '{password}'; ALTER DATABASE {database} OWNER TO {role};"
        ))
        .unwrap();
    let hba = pg.dir().join("data").join("pg_hba.conf");
    let rules = std::fs::read_to_string(&hba).unwrap();
    std::fs::write(&hba, format!("host all {role} 127.0.0.1/32 scram-sha-256\n{rules}")).unwrap();
    admin.batch_execute("SELECT pg_reload_conf()").unwrap();
    (role, database, pg.port())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_password_is_an_authentication_error_at_start_up_and_at_run_time() {
    let (role, database, port) =
        tokio::task::spawn_blocking(|| password_database("right-pass")).await.unwrap();
    let url = |password: &str| format!("postgres://{role}:{password}@127.0.0.1:{port}/{database}");
    let scripted = server(Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();

    // Start-up, the password in the URL's user part and as a parameter: exit 1 within
    // seconds, naming authentication, the password nowhere.
    let as_parameter = format!("postgres://{role}@127.0.0.1:{port}/{database}?password=wrong-pass");
    for wrong in [url("wrong-pass"), as_parameter] {
        let args = [
            "serve",
            "--bind",
            "127.0.0.1:0",
            "--base-url",
            scripted.base_url(),
            "--model",
            "local/tiny",
            "--embedder",
            EMBEDDER,
            "--store",
            &wrong,
        ];
        let started = Instant::now();
        let out = tokio::time::timeout(
            Duration::from_secs(30),
            mragent_command(dir.path(), &args).output(),
        )
        .await
        .unwrap()
        .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains("authentication"), "{stderr}");
        assert!(!stderr.contains("unavailable") && !stderr.contains("wrong-pass"), "{stderr}");
        assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
    }

    // Run time: the password changes under a running server; its next request is a distinct
    // error (not a 503 to retry), within a second, naming nothing of the database.
    let right = url("right-pass");
    let store =
        tokio::task::spawn_blocking(move || Store::open_url(&right).unwrap()).await.unwrap();
    let config = support::client_config(&scripted);
    let service = MemoryService::new(
        store,
        ServiceSettings::new(dir.path(), EMBEDDER, "test-model", "test-model"),
        build_chat_model(&config).unwrap(),
        OwnEmbedder::Api(Box::new(support::embedder(&config, 64))),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (_stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(serve(listener, Arc::new(service), ServeOptions::default(), async move {
        let _ = stopped.await;
    }));
    let client = reqwest::Client::new();
    let list = format!("{base}/v1/conversations");
    assert_eq!(client.get(&list).send().await.unwrap().status(), StatusCode::OK);
    let kick = role.clone();
    tokio::task::spawn_blocking(move || {
        let pg = private_pg::shared();
        let mut admin = postgres::Client::connect(&pg.url("postgres"), postgres::NoTls).unwrap();
        admin
            .batch_execute(&format!(
                "ALTER ROLE {kick} PASSWORD 'changed-pass';
                 SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{kick}';"
            ))
            .unwrap();
        // A terminated backend goes away a moment later (seconds on a loaded machine): wait
        // until none of the role's is left, terminating again now and then (a connection that
        // was opening during the first round), so the next request cannot still find a live
        // pooled connection.
        let gone = format!("SELECT count(*) FROM pg_stat_activity WHERE usename = '{kick}'");
        let terminate = format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{kick}'"
        );
        let mut left = -1;
        for round in 0..1500 {
            left = admin.query_one(&gone, &[]).unwrap().get::<_, i64>(0);
            if left == 0 {
                break;
            }
            if round % 100 == 99 {
                admin.batch_execute(&terminate).unwrap();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(left, 0, "the role's backends did not go away in 15 s");
    })
    .await
    .unwrap();
    for path in ["/v1/conversations", "/ready"] {
        let started = Instant::now();
        let response = client.get(format!("{base}{path}")).send().await.unwrap();
        let elapsed = started.elapsed();
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR, "{path}");
        assert!(!response.headers().contains_key("retry-after"), "{path}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], "store_authentication", "{path}: {body}");
        let text = body.to_string();
        let port = port.to_string();
        let named: [&str; 6] = [&role, &database, &port, "127.0.0.1", "right-pass", "postgres"];
        for secret in named {
            assert!(!text.contains(secret), "{path} names {secret}: {text}");
        }
        assert!(elapsed < Duration::from_secs(1), "{path} took {elapsed:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_hands_the_leases_of_unfinished_jobs_back_at_once() {
    let url = tokio::task::spawn_blocking(|| private_pg::shared().fresh_database()).await.unwrap();
    let scripted = server(Duration::from_millis(300)).await;
    let dir = tempfile::tempdir().unwrap();
    let store_args = ["--store", url.as_str()];
    // A long lease: without the hand-back, the job would stay claimed for a minute.
    let (mut child, address) =
        serve_with(dir.path(), scripted.base_url(), &store_args, &[("MRAGENT_JOB_LEASE", "60")])
            .await;
    let client = reqwest::Client::new();
    let queued: Value = client
        .post(format!("http://{address}/v1/conversations/slow/messages"))
        .bearer_auth("t")
        .json(&json!({"wait": false, "messages": messages("the lock", 6)}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let job = queued["job"]["id"].as_i64().unwrap();
    let store = {
        let url = url.clone();
        tokio::task::spawn_blocking(move || Store::open_url(&url).unwrap()).await.unwrap()
    };
    let lease = |store: Store| async move {
        tokio::task::spawn_blocking(move || store.job_lease(job).unwrap()).await.unwrap()
    };
    for _ in 0..200 {
        if lease(store.clone()).await.0.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(lease(store.clone()).await.0.is_some(), "the job was claimed");
    let pid = child.id().unwrap().to_string();
    std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    let status =
        tokio::time::timeout(Duration::from_secs(30), child.wait()).await.unwrap().unwrap();
    assert!(status.success(), "{status}");
    assert_eq!(lease(store.clone()).await, (None, None), "the lease is handed back");
    let state = tokio::task::spawn_blocking(move || store.job(job).unwrap()).await.unwrap();
    assert!(matches!(state.state.name(), "queued" | "running"), "{state:?}");
}

#[tokio::test]
async fn store_copy_reads_its_urls_from_the_environment_and_masks_every_password() {
    let dir = tempfile::tempdir().unwrap();
    let source = format!("sqlite:{}", dir.path().join("a.sqlite").display());
    Store::open(dir.path().join("a.sqlite")).unwrap();
    let target = format!("sqlite:{}", dir.path().join("b.sqlite").display());
    let out = mragent_command(dir.path(), &["store", "copy", "--json"])
        .env("MRAGENT_COPY_FROM", &source)
        .env("MRAGENT_COPY_TO", &target)
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["verified"], true, "{report}");
    // A server that is not there, the password as a parameter: the error names neither it
    // nor, in the help, the environment's values.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let url = format!("postgres://ann@127.0.0.1:{closed}/m?sslmode=disable&password=hunter2");
    let started = Instant::now();
    let out = mragent_command(dir.path(), &["store", "copy"])
        .env("MRAGENT_COPY_FROM", &url)
        .env("MRAGENT_COPY_TO", &target)
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(!stderr.contains("hunter2") && stderr.contains("password=***"), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    let help = mragent_command(dir.path(), &["store", "copy", "--help"])
        .env("MRAGENT_COPY_FROM", &url)
        .output()
        .await
        .unwrap();
    assert!(!String::from_utf8_lossy(&help.stdout).contains("hunter2"));
}
