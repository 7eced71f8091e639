//! `mragent verify ARCHIVE`: unpacks the archive into `--keep` or a temporary folder, has
//! `recorded::verify` check it (the run's and the learning's replays are the commands'), and
//! prints VERIFIED with what was carried, or the first mismatch, naming paths inside the
//! archive.

use anyhow::Context as _;

use super::Outcome;
use super::output::outln;
use crate::recorded::verify::{Replayer, verify};
use crate::settings::{LearnJob, RunJob, VerifyJob};

/// Checks the archive; prints VERIFIED, or the first mismatch and fails.
pub async fn execute(job: &VerifyJob) -> anyhow::Result<Outcome> {
    let temporary;
    let folder = match &job.keep {
        Some(folder) => {
            std::fs::create_dir_all(folder)
                .with_context(|| format!("creating {}", folder.display()))?;
            if std::fs::read_dir(folder)?.next().is_some() {
                anyhow::bail!("--keep {}: the folder is not empty", folder.display());
            }
            folder.clone()
        }
        None => {
            temporary = tempfile::tempdir().context("creating a temporary folder")?;
            temporary.path().to_path_buf()
        }
    };
    // Messages name paths inside the archive, never the folder it was unpacked into.
    let inside = |text: String| text.replace(&format!("{}/", folder.display()), "");
    match verify(&job.archive, &folder, &Commands)
        .await
        .map_err(|error| anyhow::anyhow!(inside(format!("{error:#}"))))?
    {
        Ok(report) => {
            outln!("VERIFIED {}: {}", job.archive.display(), inside(report.summary()))?;
            for path in report.carried() {
                outln!("  carried, not verified: {path}")?;
            }
            Ok(Outcome::Success)
        }
        Err(mismatch) => {
            outln!("MISMATCH {}: {}", job.archive.display(), inside(mismatch))?;
            anyhow::bail!("{} is not verified", job.archive.display())
        }
    }
}

/// The replays `verify` asks for, by the commands that own them.
struct Commands;

impl Replayer for Commands {
    async fn run(&self, job: &RunJob) -> anyhow::Result<Result<String, String>> {
        super::run::replay_silently(job).await
    }

    async fn learn(&self, job: &LearnJob) -> anyhow::Result<Result<(), String>> {
        super::learn::replay_silently(job).await
    }
}
