//! Tracing setup: a human-readable layer on stderr and a full log file under `log/`.
//!
//! The stderr level comes from `-v`/`-q` (warn by default, so progress bars stay readable);
//! `RUST_LOG` overrides it. The file layer always records `info` and above for this crate (or
//! what `RUST_LOG` says), so a finished run can be audited after the terminal is gone.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use tracing_appender::non_blocking::WorkerGuard;
use tracing_subscriber::{
    EnvFilter, Layer as _, fmt, layer::SubscriberExt as _, util::SubscriberInitExt as _,
};

/// Keeps the file writer alive; logs are flushed when it is dropped at the end of `main`.
pub struct LogGuard {
    _guard: WorkerGuard,
    /// The log file of this invocation.
    pub path: PathBuf,
}

/// Stderr filter directive for a verbosity level (`-q` → -1).
pub fn stderr_directive(verbosity: i8) -> &'static str {
    match verbosity {
        i8::MIN..=-1 => "error",
        0 => "warn,mragent=info",
        1 => "warn,mragent=debug",
        _ => "info,mragent=trace",
    }
}

/// Install the global subscriber: stderr plus `log/<command>-<timestamp>.log` under `root`.
///
/// `directive` (`RUST_LOG`, read by `settings::log_directive`) overrides both levels.
pub fn init(
    root: &Path,
    command: &str,
    verbosity: i8,
    directive: Option<&str>,
) -> anyhow::Result<LogGuard> {
    let log_dir = root.join("log");
    std::fs::create_dir_all(&log_dir)
        .with_context(|| format!("creating log directory {}", log_dir.display()))?;
    let stamp = chrono::Local::now().format("%Y%m%d-%H%M%S");
    let file_name = format!("{command}-{stamp}-{}.log", std::process::id());
    let path = log_dir.join(&file_name);
    let appender = tracing_appender::rolling::never(&log_dir, &file_name);
    let (writer, guard) = tracing_appender::non_blocking(appender);

    let stderr_filter = match directive {
        Some(directive) => EnvFilter::new(directive),
        None => EnvFilter::new(stderr_directive(verbosity)),
    };
    let file_filter = match directive {
        Some(directive) => EnvFilter::new(directive),
        None => EnvFilter::new(if verbosity >= 1 { "info,mragent=debug" } else { "info" }),
    };
    tracing_subscriber::registry()
        .with(
            fmt::layer().with_writer(std::io::stderr).with_target(false).with_filter(stderr_filter),
        )
        .with(fmt::layer().with_writer(writer).with_ansi(false).with_filter(file_filter))
        .try_init()
        .context("installing the tracing subscriber")?;
    Ok(LogGuard { _guard: guard, path })
}

/// Install a stderr-only subscriber (`verify`: it writes no log file anywhere).
pub fn init_stderr(verbosity: i8, directive: Option<&str>) -> anyhow::Result<()> {
    let filter = match directive {
        Some(directive) => EnvFilter::new(directive),
        None => EnvFilter::new(stderr_directive(verbosity)),
    };
    tracing_subscriber::registry()
        .with(fmt::layer().with_writer(std::io::stderr).with_target(false).with_filter(filter))
        .try_init()
        .context("installing the tracing subscriber")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbosity_maps_to_increasing_detail() {
        assert_eq!(stderr_directive(-1), "error");
        assert_eq!(stderr_directive(0), "warn,mragent=info");
        assert_eq!(stderr_directive(1), "warn,mragent=debug");
        assert_eq!(stderr_directive(5), "info,mragent=trace");
    }
}
