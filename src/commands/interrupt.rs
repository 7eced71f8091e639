//! Ctrl-C, one way for every command. [`first_ctrl_c`] is for a command that stops at the first
//! one (`build` drops its work, finished sessions being cached; `serve` shuts down). [`watch`]
//! is for a command that winds down: the first Ctrl-C says what happens and turns a
//! [`StopRequest`] on, the command finishes what is in flight; the second ends the process at
//! once with [`INTERRUPTED_STATUS`], after the command's last words.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// The exit status of a process ended by a second Ctrl-C (128 + SIGINT).
pub const INTERRUPTED_STATUS: u8 = 130;

/// Resolves at the first Ctrl-C; never where Ctrl-C cannot be watched.
pub async fn first_ctrl_c() {
    if tokio::signal::ctrl_c().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Resolves at the first Ctrl-C or SIGTERM (what Kubernetes and systemd send to stop a
/// service): a long-running server then shuts down gracefully either way.
pub async fn stop_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                term.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = first_ctrl_c() => {}
        () = term => {}
    }
}

/// Whether a stop was asked for (the first Ctrl-C): a flag for blocking code to poll, a future
/// for async code to await.
#[derive(Debug, Clone)]
pub struct StopRequest {
    flag: Arc<AtomicBool>,
    changed: tokio::sync::watch::Receiver<bool>,
}

impl StopRequest {
    /// The flag, set at the first Ctrl-C.
    pub fn flag(&self) -> &AtomicBool {
        &self.flag
    }

    /// The request as a watch channel (true once Ctrl-C was pressed).
    pub fn receiver(&self) -> tokio::sync::watch::Receiver<bool> {
        self.changed.clone()
    }

    /// Resolves at the first Ctrl-C; never where Ctrl-C cannot be watched.
    pub fn requested(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut changed = self.changed.clone();
        async move {
            if changed.wait_for(|stopped| *stopped).await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }
}

/// The task watching Ctrl-C for [`watch`].
#[derive(Debug)]
pub struct Watcher(tokio::task::JoinHandle<()>);

impl Watcher {
    /// Stop watching: Ctrl-C no longer stops anything, the process no longer exits on it.
    pub fn stop_watching(self) {
        self.0.abort();
    }
}

/// Watches Ctrl-C until the process ends (or [`Watcher::stop_watching`]): the first prints
/// `notice` and turns the returned request on; the second runs `last_words` and exits with
/// [`INTERRUPTED_STATUS`].
pub fn watch(
    notice: &'static str,
    last_words: impl FnOnce() + Send + 'static,
) -> (StopRequest, Watcher) {
    let flag = Arc::new(AtomicBool::new(false));
    let (sender, changed) = tokio::sync::watch::channel(false);
    let request = StopRequest { flag: Arc::clone(&flag), changed };
    let task = tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_err() {
            // No Ctrl-C support: never stop early (the sender stays alive).
            return std::future::pending::<()>().await;
        }
        eprintln!("{notice}");
        flag.store(true, Ordering::Relaxed);
        let _ = sender.send(true);
        if tokio::signal::ctrl_c().await.is_ok() {
            last_words();
            std::process::exit(i32::from(INTERRUPTED_STATUS));
        }
    });
    (request, Watcher(task))
}
