//! Standard output closed early (`mragent memory show --json | head`): the program ends
//! quietly with status 141 (as a program stopped by SIGPIPE), no panic, no backtrace.

use std::process::Stdio;

use mragent::convo::DEFAULT_SESSION_GAP;
use mragent::store::Store;
use tokio::io::AsyncReadExt as _;

use crate::own::long_conversation;
use crate::support::{EMBEDDER, mragent_command};

/// 141 = 128 + SIGPIPE, what a shell reports for `yes | head`.
const BROKEN_PIPE_STATUS: i32 = 141;

fn assert_quiet_stop(status: std::process::ExitStatus, stderr: &[u8]) {
    let stderr = String::from_utf8_lossy(stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(!stderr.contains("backtrace"), "{stderr}");
    assert!(!stderr.contains("error"), "{stderr}");
    assert_eq!(status.code(), Some(BROKEN_PIPE_STATUS), "{stderr}");
}

/// A reader that takes a few bytes of a long `memory show --json` and goes away.
#[tokio::test]
async fn memory_show_into_a_reader_that_stops_early_ends_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(Store::default_path(dir.path())).unwrap();
    // 1600 messages: far more than a pipe buffer (64 KiB) of JSON.
    store
        .add_messages(
            "demo",
            EMBEDDER,
            &Default::default(),
            &long_conversation(400),
            DEFAULT_SESSION_GAP,
        )
        .unwrap();
    let mut command =
        mragent_command(dir.path(), &["memory", "show", "--conversation", "demo", "--json"]);
    let mut child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut head = [0u8; 16];
    stdout.read_exact(&mut head).await.unwrap();
    assert_eq!(head[0], b'{');
    drop(stdout);
    let output = child.wait_with_output().await.unwrap();
    assert_quiet_stop(output.status, &output.stderr);
}

/// A pipe whose reader is gone before the program writes at all: the first line already fails.
#[tokio::test]
async fn memory_list_into_a_closed_pipe_ends_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    // Spawned by hand: `output()` would replace this stdout with a pipe of its own.
    let child = mragent_command(dir.path(), &["memory", "list", "--json"])
        .stdout(writer)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let output = child.wait_with_output().await.unwrap();
    assert_quiet_stop(output.status, &output.stderr);
}
