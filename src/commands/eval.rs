//! `mragent eval`: score a run's result files, with the LLM judge when a judge model is given,
//! then print the table and where it was written; with `--paired-with`, score the twin run too
//! and print the paired comparison.

use std::sync::Arc;

use anyhow::Context as _;

use super::Outcome;
use super::output::outln;
use crate::eval::paired::BootstrapSettings;
use crate::eval::{EvalSummary, PairedEvaluation};
use crate::llm::Client;
use crate::llm::fatal::{AfterFatal, FatalLatch, Latched};
use crate::settings::EvalJob;

/// Scores, prints the summary table (or the paired table) and where it was written; partial
/// when some judgements failed.
pub async fn execute(job: &EvalJob) -> anyhow::Result<Outcome> {
    if let Some(other) = &job.paired_with {
        let paired = eval_paired(job, other).await?;
        outln!("{}\n", paired.paired.pairing_line())?;
        outln!("{}", paired.paired.table())?;
        outln!("written to {}", paired.markdown_file.display())?;
        let failed = paired.a.judge_failed + paired.b.judge_failed;
        return Ok(if failed > 0 { Outcome::Partial } else { Outcome::Success });
    }
    let summary = eval(job).await?;
    outln!("{}", summary.table())?;
    let folder = job.settings.root.join("eval").join(&summary.dataset).join(&summary.file);
    outln!("written to {}", folder.display())?;
    Ok(if summary.judge_failed > 0 { Outcome::Partial } else { Outcome::Success })
}

/// The judge client, when a judge model is given.
fn judge_client(job: &EvalJob) -> anyhow::Result<Option<Client>> {
    let models = &job.models;
    match &job.judge {
        Some(choice) => {
            models.require_key()?;
            Ok(Some(
                crate::llm::build_chat_model(&models.llm_config(choice))
                    .context("building the judge client")?,
            ))
        }
        None => Ok(None),
    }
}

/// Score a run's result files, with the LLM judge when a judge model is given.
async fn eval(job: &EvalJob) -> anyhow::Result<EvalSummary> {
    let judge = judge_client(job)?;
    // The first refused key or unknown model stops the whole evaluation with one message; the
    // judgements already made are cached and a rerun keeps them.
    let latch = Arc::new(FatalLatch::default());
    let judge = judge
        .as_ref()
        .map(|client| Latched::sharing(client, &latch, job.models.key_variable, AfterFatal::Wait));
    tokio::select! {
        biased;
        cause = latch.tripped() => Err(anyhow::anyhow!("judging stopped: {cause}")),
        summary = crate::eval::evaluate(&job.settings, judge.as_ref()) => summary,
    }
}

/// Score the run and its twin with the same judge, and compare them.
async fn eval_paired(job: &EvalJob, other: &str) -> anyhow::Result<PairedEvaluation> {
    let judge = judge_client(job)?;
    let latch = Arc::new(FatalLatch::default());
    let judge = judge
        .as_ref()
        .map(|client| Latched::sharing(client, &latch, job.models.key_variable, AfterFatal::Wait));
    let bootstrap = BootstrapSettings::default();
    tokio::select! {
        biased;
        cause = latch.tripped() => Err(anyhow::anyhow!("judging stopped: {cause}")),
        paired = crate::eval::evaluate_paired(&job.settings, other, bootstrap, judge.as_ref()) => paired,
    }
}
