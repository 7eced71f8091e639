//! `mragent eval`: score a run's result files, with the LLM judge when a judge model is given,
//! then print the table and where it was written; with `--paired-with`, score the twin run too
//! and print the paired comparison.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;

use super::Outcome;
use super::output::outln;
use crate::eval::paired::BootstrapSettings;
use crate::eval::{EvalSummary, PairedEvaluation};
use crate::llm::Client;
use crate::llm::fatal::{AfterFatal, FatalLatch, Latched};
use crate::llm::tape::{Tape, TapeMode, TapedChat};
use crate::settings::EvalJob;
use serde::{Deserialize, Serialize};

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

/// Score a run's result files, with the LLM judge when a judge model is given; the judge's
/// calls are recorded (`record/<dataset>/<model>_<file>.judge.sqlite`) and so is how it judged
/// ([`EvalRecord`]), for `export` and `verify`.
async fn eval(job: &EvalJob) -> anyhow::Result<EvalSummary> {
    let judge = judge_client(job)?;
    let settings = &job.settings;
    let (dataset, model, file) = (settings.dataset.as_str(), &settings.model, &settings.file);
    let tape = match &judge {
        Some(_) => {
            let path = super::tape::judge_calls_path(&settings.root, dataset, model, file);
            let store = Arc::new(crate::llm::tape::CallStore::open(&path)?);
            Some(Tape::new(store, TapeMode::Record))
        }
        None => None,
    };
    let judge = judge.as_ref().zip(tape).map(|(client, tape)| TapedChat::new(client, tape));
    let summary = judged(settings, judge.as_ref(), job.models.key_variable).await?;
    if judge.is_some() {
        let record = EvalRecord::of(settings)?;
        let path = eval_record_path(&settings.root, dataset, model, file);
        let text = serde_json::to_string_pretty(&record).context("serialising the eval record")?;
        crate::fsutil::write_atomic(&path, text + "\n")?;
    }
    Ok(summary)
}

/// [`crate::eval::evaluate`] with `judge` behind a latch: the first refused key or unknown model
/// stops the whole evaluation with one message (the judgements already made are cached and a
/// rerun keeps them).
pub(super) async fn judged<M: crate::llm::ChatModel>(
    settings: &crate::eval::EvalSettings,
    judge: Option<&M>,
    key_variable: &str,
) -> anyhow::Result<EvalSummary> {
    let latch = Arc::new(FatalLatch::default());
    let judge =
        judge.map(|client| Latched::sharing(client, &latch, key_variable, AfterFatal::Wait));
    tokio::select! {
        biased;
        cause = latch.tripped() => Err(anyhow::anyhow!("judging stopped: {cause}")),
        summary = crate::eval::evaluate(settings, judge.as_ref()) => summary,
    }
}

/// `record/<dataset>/<model>_<file>.eval.json`: how a run was last judged.
pub fn eval_record_path(root: &Path, dataset: &str, model: &str, file: &str) -> PathBuf {
    root.join("record").join(dataset).join(format!("{model}_{file}.eval.json"))
}

/// The settings of a judged evaluation that decide its tables: what `verify` recomputes them
/// with, from the recorded judge calls.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalRecord {
    /// Judge model id.
    pub judge_model: String,
    /// Judge runs.
    pub judge_runs: u32,
    /// LoCoMo protocol.
    pub protocol: crate::eval::judge::JudgeProtocol,
    /// The run's `--sample`.
    pub sample: Option<String>,
    /// The run's `--ca`.
    pub question_type: Option<crate::dataset::LongMemEvalType>,
    /// Scored with missing questions.
    pub partial: bool,
    /// The audit file, relative to the project (`None`: no audit).
    pub audit_file: Option<String>,
    /// The official overall over categories 1–5 too.
    pub overall_with_adversarial: bool,
}

impl EvalRecord {
    fn of(settings: &crate::eval::EvalSettings) -> anyhow::Result<Self> {
        if settings.judge_prompt.is_some() {
            tracing::warn!("a run judged with --judge-prompt cannot be verified from its archive");
        }
        let audit_file = settings
            .audit_file
            .as_ref()
            .map(|path| {
                path.strip_prefix(&settings.root).map(|path| path.display().to_string()).map_err(
                    |_| anyhow::anyhow!("the audit file {} is outside the project", path.display()),
                )
            })
            .transpose()?;
        Ok(Self {
            judge_model: settings.judge_model.clone().unwrap_or_default(),
            judge_runs: settings.judge_runs,
            protocol: settings.protocol,
            sample: settings.sample.clone(),
            question_type: settings.question_type,
            partial: settings.partial,
            audit_file,
            overall_with_adversarial: settings.overall_with_adversarial,
        })
    }

    /// Applies the record to `settings`.
    pub fn apply(&self, settings: &mut crate::eval::EvalSettings) {
        settings.judge_model = Some(self.judge_model.clone());
        settings.judge_runs = self.judge_runs;
        settings.protocol = self.protocol;
        settings.sample.clone_from(&self.sample);
        settings.question_type = self.question_type;
        settings.partial = self.partial;
        settings.audit_file = self.audit_file.as_ref().map(|file| settings.root.join(file));
        settings.overall_with_adversarial = self.overall_with_adversarial;
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
