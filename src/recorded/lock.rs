//! One run at a time per dataset, model, tag (and shard): a lock file beside the results that
//! names its holder (pid, host, start time). A lock whose process is gone (same host, no such
//! pid) is stale and taken over with a warning; any other held lock stops the second run with
//! a message saying who holds it and how to clear it.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

use crate::settings::host_name;

/// Who holds a lock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockHolder {
    /// Process id.
    pub pid: u32,
    /// Host name.
    pub host: String,
    /// When the run started (RFC 3339).
    pub started_at: String,
}

impl LockHolder {
    /// This process.
    pub fn current() -> Self {
        Self {
            pid: std::process::id(),
            host: host_name(),
            started_at: chrono::Utc::now().to_rfc3339(),
        }
    }

    /// Whether the holder is certainly gone: same host and no such process. On another host,
    /// or where processes cannot be listed, the lock is presumed held.
    fn is_stale(&self) -> bool {
        let proc = Path::new("/proc");
        self.host == host_name()
            && proc.join("self").exists()
            && !proc.join(self.pid.to_string()).exists()
    }
}

/// A held run lock; dropping it (or [`RunLock::release`]) removes the file.
#[derive(Debug)]
pub struct RunLock {
    path: PathBuf,
}

impl RunLock {
    /// Takes the lock at `path`, taking over a stale one.
    pub fn acquire(path: &Path) -> anyhow::Result<Self> {
        if let Some(directory) = path.parent() {
            std::fs::create_dir_all(directory)
                .with_context(|| format!("creating {}", directory.display()))?;
        }
        let me = serde_json::to_string(&LockHolder::current()).context("serialising the lock")?;
        for _ in 0..2 {
            match std::fs::OpenOptions::new().write(true).create_new(true).open(path) {
                Ok(mut file) => {
                    file.write_all(me.as_bytes())
                        .and_then(|()| file.sync_all())
                        .with_context(|| format!("writing {}", path.display()))?;
                    return Ok(Self { path: path.to_path_buf() });
                }
                Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
                    Self::clear_if_stale(path)?;
                }
                Err(error) => {
                    return Err(error).with_context(|| format!("creating {}", path.display()));
                }
            }
        }
        anyhow::bail!("could not take the run lock {} (it keeps reappearing)", path.display())
    }

    /// Removes a stale lock at `path`; fails with the holder's description if it is held.
    fn clear_if_stale(path: &Path) -> anyhow::Result<()> {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        match serde_json::from_str::<LockHolder>(&text) {
            Ok(holder) if holder.is_stale() => {
                tracing::warn!(lock = %path.display(), pid = holder.pid, "taking over a stale run lock (its process is gone)");
                std::fs::remove_file(path)
                    .with_context(|| format!("removing the stale lock {}", path.display()))
            }
            Ok(holder) => anyhow::bail!(
                "another run with the same dataset, model and tag is going (pid {} on {}, started {}); wait for it, use another --file, or delete {} if that process is gone",
                holder.pid,
                holder.host,
                holder.started_at,
                path.display()
            ),
            Err(_) => anyhow::bail!(
                "the run lock {} cannot be read (is another run just starting?); delete it if no run is going",
                path.display()
            ),
        }
    }

    /// Removes the lock file now.
    pub fn release(&self) {
        if let Err(error) = std::fs::remove_file(&self.path)
            && error.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(lock = %self.path.display(), %error, "could not remove the run lock");
        }
    }
}

impl Drop for RunLock {
    fn drop(&mut self) {
        self.release();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_held_lock_stops_a_second_taker_and_a_stale_one_is_taken_over() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("result/locomo/run.lock");
        let first = RunLock::acquire(&path).unwrap();
        let message = RunLock::acquire(&path).unwrap_err().to_string();
        assert!(message.contains(&format!("pid {}", std::process::id())), "{message}");
        drop(first);
        assert!(!path.exists());

        // A lock left by a process that no longer exists on this host.
        let gone = LockHolder { pid: u32::MAX - 7, host: host_name(), started_at: "then".into() };
        std::fs::write(&path, serde_json::to_string(&gone).unwrap()).unwrap();
        let taken = RunLock::acquire(&path).unwrap();
        let holder: LockHolder =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(holder.pid, std::process::id());
        drop(taken);

        // A lock held on another host is never presumed stale.
        let elsewhere = LockHolder { host: "another-host".into(), ..gone };
        std::fs::write(&path, serde_json::to_string(&elsewhere).unwrap()).unwrap();
        assert!(RunLock::acquire(&path).unwrap_err().to_string().contains("another-host"));
    }
}
