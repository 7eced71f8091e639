//! `mragent eval`: score a run's result files, with the LLM judge when a judge model is given,
//! then print the table (with several `--judge-protocol`s the judge matrix) and where it was
//! written; with `--paired-with`, compare it with its twin as `mragent compare` does.

use super::Outcome;
use super::judging::{judge_client, taped};
use super::output::outln;
use crate::recorded::RunFiles;
use crate::recorded::eval_record::EvalRecord;
use crate::settings::EvalJob;
use anyhow::Context as _;

/// Scores, prints the summary table (or the judge matrix, or the paired table) and where it
/// was written; partial when some judgements failed.
pub async fn execute(job: &EvalJob) -> anyhow::Result<Outcome> {
    if let Some(other) = &job.paired_with {
        return super::compare::compare_runs(&job.scoring, other).await;
    }
    let scoring = &job.scoring;
    let settings = &scoring.settings;
    let client = judge_client(scoring)?;
    let files = RunFiles::of_eval(settings);
    // The judge's calls are recorded (`record/<dataset>/<model>_<file>.judge.sqlite`), and so
    // is how it judged ([`EvalRecord`]), for `export` and `verify`.
    let taped = taped(client.as_ref(), &files.judge_calls())?;
    let evaluation = crate::eval::evaluate_latched(
        settings,
        &scoring.protocols,
        taped.as_ref(),
        scoring.models.key_variable,
    )
    .await?;
    if taped.is_some() {
        let record = EvalRecord::of(settings, &scoring.protocols);
        let path = files.eval_record();
        let text = serde_json::to_string_pretty(&record).context("serialising the eval record")?;
        crate::fsutil::write_atomic(&path, text + "\n")?;
    }
    let summary = &evaluation.summary;
    match &evaluation.matrix {
        Some(matrix) if scoring.protocols.len() > 1 => outln!("{}", matrix.table())?,
        _ => outln!("{}", summary.table())?,
    }
    let folder = files.eval_folder();
    outln!("written to {}", folder.display())?;
    Ok(if summary.judge_failed > 0 { Outcome::Partial } else { Outcome::Success })
}
