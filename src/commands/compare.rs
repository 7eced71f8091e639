//! `mragent compare RUN_A RUN_B` (and `eval --paired-with`, which takes this same path): score
//! both runs with the same judge, compare them question by question, print the paired table
//! and, in plain words, which differences are inside the noise.

use std::sync::Arc;

use anyhow::Context as _;

use super::Outcome;
use super::judging::{judge_client, latched, taped};
use super::output::outln;
use crate::eval::EvalSettings;
use crate::eval::paired::BootstrapSettings;
use crate::llm::fatal::FatalLatch;
use crate::llm::fatal::until_fatal;
use crate::recorded::RunFiles;
use crate::recorded::eval_record::CompareRecord;
use crate::recorded::tape::lend_calls;
use crate::settings::{CompareJob, Scoring};

/// Compares the two runs; partial when some judgements failed.
pub async fn execute(job: &CompareJob) -> anyhow::Result<Outcome> {
    compare_runs(&job.scoring, &job.run_b).await
}

/// Score run A (`scoring.settings.file`) and run B with the same judge, print the pairing,
/// the paired table, the noise statements and where the comparison was written.
pub(super) async fn compare_runs(scoring: &Scoring, run_b: &str) -> anyhow::Result<Outcome> {
    let client = judge_client(scoring)?;
    // The judge's calls are recorded as `eval`'s are, on the comparison's own tape
    // (`RunFiles::comparison_judge_calls`); a repeated request is answered from it.
    // A new comparison's tape starts with the judge calls each run's `eval` recorded (only
    // read), so a verdict already paid for is not asked again.
    let files = RunFiles::of_eval(&scoring.settings);
    let tape = files.comparison_judge_calls(run_b);
    if client.is_some() {
        let twin = EvalSettings { file: run_b.to_string(), ..scoring.settings.clone() };
        let sources = [files.judge_calls(), RunFiles::of_eval(&twin).judge_calls()];
        lend_calls(&sources, &tape)?;
    }
    // An earlier comparison's record goes first: until this one is written, export refuses.
    let record_path = files.comparison_record(run_b);
    match std::fs::remove_file(&record_path) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => {
            return Err(error).with_context(|| format!("removing {}", record_path.display()));
        }
    }
    let taped = taped(client.as_ref(), &tape)?;
    let latch = Arc::new(FatalLatch::default());
    let judge = latched(taped.as_ref(), &latch, scoring);
    let bootstrap = BootstrapSettings::default();
    let paired = until_fatal(
        &latch,
        crate::eval::evaluate_paired(&scoring.settings, run_b, bootstrap, judge.as_ref()),
    )
    .await?;
    // How the comparison was made, for `export --vs` and `verify`.
    let record = CompareRecord::of(&scoring.settings, run_b, bootstrap);
    let text =
        serde_json::to_string_pretty(&record).context("serialising the comparison record")?;
    crate::fsutil::write_atomic(&record_path, text + "\n")?;
    outln!("{}\n", paired.paired.pairing_line())?;
    outln!("{}", paired.paired.table())?;
    for line in paired.paired.noise_lines() {
        outln!("{line}")?;
    }
    outln!("\nwritten to {}", paired.markdown_file.display())?;
    let failed = paired.a.judge_failed + paired.b.judge_failed;
    Ok(if failed > 0 { Outcome::Partial } else { Outcome::Success })
}
