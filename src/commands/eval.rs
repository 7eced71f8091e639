//! `mragent eval`: score a run's result files, with the LLM judge when a judge model is given,
//! then print the table (with several `--judge-protocol`s the judge matrix) and where it was
//! written; with `--paired-with`, compare it with its twin as `mragent compare` does.

use std::sync::Arc;

use super::Outcome;
use super::judging::{judge_client, latched, until_fatal};
use super::output::outln;
use crate::llm::fatal::FatalLatch;
use crate::settings::EvalJob;

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
