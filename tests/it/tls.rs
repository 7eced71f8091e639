//! `serve --tls-cert --tls-key`: HTTPS with rustls, checked with real clients (curl and
//! Python's `ssl`), with certificates made by the openssl command line for the test: a client
//! that trusts the test's CA gets answers; one that does not, or that speaks plain HTTP, gets
//! none.

use std::process::Command;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt as _, BufReader};

use crate::jobs::server;
use crate::support::{EMBEDDER, mragent_command};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_speaks_https_to_curl_and_python_with_the_given_certificate() {
    let scripted = server(Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    // A CA and a server certificate it signs for `localhost` and 127.0.0.1.
    crate::support::tls_certificates(dir.path(), &["ca"], "DNS:localhost,IP:127.0.0.1");
    let (cert, key) = (dir.path().join("server.pem"), dir.path().join("server.key"));
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
    ];
    let mut command = mragent_command(dir.path(), &args);
    command.arg("--tls-cert").arg(&cert).arg("--tls-key").arg(&key);
    let mut child =
        command.stderr(std::process::Stdio::piped()).kill_on_drop(true).spawn().unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let url = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(rest) = line.strip_prefix("serving on ") {
                return rest.split_whitespace().next().unwrap().to_string();
            }
        }
        panic!("serve stopped before it listened");
    })
    .await
    .unwrap();
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let port = url.rsplit(':').next().unwrap().to_string();
    assert!(url.starts_with("https://"), "{url}");
    let ready = format!("https://localhost:{port}/ready");
    let ca = dir.path().join("ca.pem");
    let curl = |extra: Vec<String>| {
        let mut command = Command::new("curl");
        command.args(["-sS", "--max-time", "10"]).args(extra);
        async move { tokio::task::spawn_blocking(move || command.output().unwrap()).await.unwrap() }
    };
    let trusted = curl(vec!["--cacert".into(), ca.display().to_string(), ready.clone()]).await;
    assert!(trusted.status.success(), "{}", String::from_utf8_lossy(&trusted.stderr));
    assert_eq!(String::from_utf8_lossy(&trusted.stdout), r#"{"status":"ready"}"#);
    // Not trusting the CA: refused by the client's verification.
    let untrusted = curl(vec![ready.clone()]).await;
    assert!(!untrusted.status.success());
    // Plain HTTP to the TLS port: no answer.
    let plain = curl(vec![format!("http://127.0.0.1:{port}/ready")]).await;
    assert!(!plain.status.success() || !String::from_utf8_lossy(&plain.stdout).contains("ready"));
    // Python's ssl, verifying the host name against the certificate.
    let script = format!(
        "import socket, ssl\n\
         context = ssl.create_default_context(cafile={ca:?})\n\
         with socket.create_connection(('127.0.0.1', {port})) as raw:\n\
         \x20   with context.wrap_socket(raw, server_hostname='localhost') as tls:\n\
         \x20       tls.sendall(b'GET /ready HTTP/1.1\\r\\nHost: localhost\\r\\nConnection: close\\r\\n\\r\\n')\n\
         \x20       data = b''\n\
         \x20       while chunk := tls.recv(4096):\n\
         \x20           data += chunk\n\
         \x20       print(tls.version(), data.split(b'\\r\\n')[0].decode(), data.rsplit(b'\\r\\n', 1)[-1].decode())\n",
        ca = ca.display().to_string()
    );
    let python = tokio::task::spawn_blocking(move || {
        Command::new("python3").args(["-c", &script]).output().unwrap()
    })
    .await
    .unwrap();
    let said = String::from_utf8_lossy(&python.stdout).to_string();
    assert!(python.status.success(), "{}", String::from_utf8_lossy(&python.stderr));
    assert!(said.starts_with("TLSv1."), "{said}");
    assert!(
        said.contains("HTTP/1.1 200 OK") && said.trim_end().ends_with(r#"{"status":"ready"}"#),
        "{said}"
    );
}
