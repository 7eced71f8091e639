//! `mragent eval`: score a run's result files, with the LLM judge when a judge model is given,
//! then print the table (with several `--judge-protocol`s the judge matrix) and where it was
//! written; with `--paired-with`, compare it with its twin as `mragent compare` does.

use std::future::Future;
use std::sync::Arc;

use anyhow::Context as _;

use super::Outcome;
use super::output::outln;
use crate::llm::Client;
use crate::llm::fatal::{AfterFatal, FatalLatch, Latched};
use crate::settings::{EvalJob, Scoring};

/// Scores, prints the summary table (or the judge matrix, or the paired table) and where it
/// was written; partial when some judgements failed.
pub async fn execute(job: &EvalJob) -> anyhow::Result<Outcome> {
    if let Some(other) = &job.paired_with {
        return super::compare::compare_runs(&job.scoring, other).await;
    }
    let scoring = &job.scoring;
    let client = judge_client(scoring)?;
    let latch = Arc::new(FatalLatch::default());
    let judge = latched(client.as_ref(), &latch, scoring);
    let evaluation = until_fatal(
        &latch,
        crate::eval::evaluate_matrix(&scoring.settings, &scoring.protocols, judge.as_ref()),
    )
    .await?;
    let summary = &evaluation.summary;
    match &evaluation.matrix {
        Some(matrix) if scoring.protocols.len() > 1 => outln!("{}", matrix.table())?,
        _ => outln!("{}", summary.table())?,
    }
    let folder = scoring.settings.root.join("eval").join(&summary.dataset).join(&summary.file);
    outln!("written to {}", folder.display())?;
    Ok(if summary.judge_failed > 0 { Outcome::Partial } else { Outcome::Success })
}

/// The judge client, when a judge model is given.
pub(super) fn judge_client(scoring: &Scoring) -> anyhow::Result<Option<Client>> {
    let models = &scoring.models;
    match &scoring.judge {
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

/// The judge behind `latch`: the first refused key or unknown model stops the whole
/// evaluation with one message; the judgements already made are cached and a rerun keeps them.
pub(super) fn latched<'a>(
    client: Option<&'a Client>,
    latch: &Arc<FatalLatch>,
    scoring: &Scoring,
) -> Option<Latched<&'a Client>> {
    client.map(|client| {
        Latched::sharing(client, latch, scoring.models.key_variable, AfterFatal::Wait)
    })
}

/// `work`, or the latch's cause once it trips.
pub(super) async fn until_fatal<T>(
    latch: &FatalLatch,
    work: impl Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    tokio::select! {
        biased;
        cause = latch.tripped() => Err(anyhow::anyhow!("judging stopped: {cause}")),
        value = work => value,
    }
}
