//! `mragent retrieve`: evaluate retrieval methods offline with the local embedder, on a
//! blocking thread. The first Ctrl-C stops it after the batch in flight (the tables of the
//! finished conversations are written), a second one exits; `--folds` runs the
//! leave-one-conversation-out tuning instead.

use anyhow::Context as _;

use super::Outcome;
use super::interrupt::watch;
use super::output::outln;
use crate::settings::RetrieveJob;

/// Evaluates, prints the tables and where they were written; partial when stopped early.
pub async fn execute(job: RetrieveJob) -> anyhow::Result<Outcome> {
    let settings = job.settings;
    if job.gate {
        let report =
            tokio::task::spawn_blocking(move || crate::tune::gate::run_gate_eval(&settings))
                .await
                .context("the gate task failed")??;
        outln!("{}", report.markdown)?;
        return Ok(Outcome::Success);
    }
    if job.folds {
        let outcome =
            tokio::task::spawn_blocking(move || crate::tune::run_retrieval_folds(&settings))
                .await
                .context("the retrieval task failed")??;
        outln!("{}", outcome.markdown)?;
        outln!("written to {}", outcome.markdown_path.display())?;
        return Ok(Outcome::Success);
    }
    let (stop, watcher) =
        watch("stopping after the batch in flight (Ctrl-C again to quit at once)", || {});
    let report = tokio::task::spawn_blocking(move || {
        crate::tune::run_retrieval_eval_until(&settings, stop.flag())
    })
    .await
    .context("the retrieval task failed")??;
    watcher.stop_watching();
    outln!("{}", report.markdown)?;
    outln!("written to {}", report.markdown_path.display())?;
    if report.n_conversations < report.n_selected {
        eprintln!("stopped early: run the same command again to finish (embeddings are cached)");
        return Ok(Outcome::Partial);
    }
    Ok(Outcome::Success)
}
