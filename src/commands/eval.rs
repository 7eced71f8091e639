//! `mragent eval`: score a run's result files, with the LLM judge when a judge model is given,
//! then print the table and where it was written.

use std::sync::Arc;

use anyhow::Context as _;

use super::Outcome;
use super::output::outln;
use crate::eval::EvalSummary;
use crate::llm::Client;
use crate::llm::fatal::{AfterFatal, FatalLatch, Latched};
use crate::settings::EvalJob;

/// Scores, prints the summary table and its folder; partial when some judgements failed.
pub async fn execute(job: &EvalJob) -> anyhow::Result<Outcome> {
    let summary = eval(job).await?;
    outln!("{}", summary.table())?;
    let folder = job.settings.root.join("eval").join(&summary.dataset).join(&summary.file);
    outln!("written to {}", folder.display())?;
    Ok(if summary.judge_failed > 0 { Outcome::Partial } else { Outcome::Success })
}

/// Score a run's result files, with the LLM judge when a judge model is given.
async fn eval(job: &EvalJob) -> anyhow::Result<EvalSummary> {
    let models = &job.models;
    let judge: Option<Client> = match &job.judge {
        Some(choice) => {
            models.require_key()?;
            Some(
                crate::llm::build_chat_model(&models.llm_config(choice))
                    .context("building the judge client")?,
            )
        }
        None => None,
    };
    // The first refused key or unknown model stops the whole evaluation with one message; the
    // judgements already made are cached and a rerun keeps them.
    let latch = Arc::new(FatalLatch::default());
    let judge = judge
        .as_ref()
        .map(|client| Latched::sharing(client, &latch, models.key_variable, AfterFatal::Wait));
    tokio::select! {
        biased;
        cause = latch.tripped() => Err(anyhow::anyhow!("judging stopped: {cause}")),
        summary = crate::eval::evaluate(&job.settings, judge.as_ref()) => summary,
    }
}
