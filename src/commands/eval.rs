//! `mragent eval`: score a run's result files, with the LLM judge when a judge model is given,
//! then print the table (with several `--judge-protocol`s the judge matrix) and where it was
//! written; with `--paired-with`, compare it with its twin as `mragent compare` does.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::Outcome;
use super::judging::{judge_client, until_fatal};
use super::output::outln;
use crate::llm::fatal::FatalLatch;
use crate::llm::tape::{Tape, TapeMode, TapedChat};
use crate::settings::EvalJob;
use anyhow::Context as _;
use serde::{Deserialize, Serialize};

/// Scores, prints the summary table (or the judge matrix, or the paired table) and where it
/// was written; partial when some judgements failed.
pub async fn execute(job: &EvalJob) -> anyhow::Result<Outcome> {
    if let Some(other) = &job.paired_with {
        return super::compare::compare_runs(&job.scoring, other).await;
    }
    let scoring = &job.scoring;
    let settings = &scoring.settings;
    let client = judge_client(scoring)?;
    // The judge's calls are recorded (`record/<dataset>/<model>_<file>.judge.sqlite`), and so
    // is how it judged ([`EvalRecord`]), for `export` and `verify`.
    let tape = client.as_ref().map(|_| judge_tape(settings)).transpose()?;
    let taped = client.as_ref().zip(tape).map(|(client, tape)| TapedChat::new(client, tape));
    let evaluation =
        judged(settings, &scoring.protocols, taped.as_ref(), scoring.models.key_variable).await?;
    if taped.is_some() {
        let record = EvalRecord::of(settings, &scoring.protocols);
        let (dataset, model, file) = (settings.dataset.as_str(), &settings.model, &settings.file);
        let path = eval_record_path(&settings.root, dataset, model, file);
        let text = serde_json::to_string_pretty(&record).context("serialising the eval record")?;
        crate::fsutil::write_atomic(&path, text + "\n")?;
    }
    let summary = &evaluation.summary;
    match &evaluation.matrix {
        Some(matrix) if scoring.protocols.len() > 1 => outln!("{}", matrix.table())?,
        _ => outln!("{}", summary.table())?,
    }
    let folder = scoring.settings.root.join("eval").join(&summary.dataset).join(&summary.file);
    outln!("written to {}", folder.display())?;
    Ok(if summary.judge_failed > 0 { Outcome::Partial } else { Outcome::Success })
}

/// The judge tape of the run `settings` scores, recording.
fn judge_tape(settings: &crate::eval::EvalSettings) -> anyhow::Result<Arc<Tape>> {
    let (dataset, model, file) = (settings.dataset.as_str(), &settings.model, &settings.file);
    let path = super::tape::judge_calls_path(&settings.root, dataset, model, file);
    let store = Arc::new(crate::llm::tape::CallStore::open(&path)?);
    Ok(Tape::new(store, TapeMode::Record))
}

/// [`crate::eval::evaluate_matrix`] with `judge` behind a latch: the first refused key or
/// unknown model stops the whole evaluation with one message (the judgements already made are
/// cached and a rerun keeps them).
pub(super) async fn judged<M: crate::llm::ChatModel>(
    settings: &crate::eval::EvalSettings,
    protocols: &[crate::eval::judge::JudgeProtocol],
    judge: Option<&M>,
    key_variable: &str,
) -> anyhow::Result<crate::eval::MatrixEvaluation> {
    let latch = Arc::new(FatalLatch::default());
    let judge = judge.map(|client| {
        crate::llm::fatal::Latched::sharing(
            client,
            &latch,
            key_variable,
            crate::llm::fatal::AfterFatal::Wait,
        )
    });
    until_fatal(&latch, crate::eval::evaluate_matrix(settings, protocols, judge.as_ref())).await
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
    /// The judge protocols, in order (the first is `summary.json`'s).
    pub protocols: Vec<crate::eval::judge::JudgeProtocol>,
    /// The run's `--sample`.
    pub sample: Option<String>,
    /// The run's `--ca`.
    pub question_type: Option<crate::dataset::LongMemEvalType>,
    /// Scored with missing questions.
    pub partial: bool,
    /// The audit file, relative to the project when inside it (`None`: no audit).
    pub audit_file: Option<String>,
    /// The official overall over categories 1–5 too.
    pub overall_with_adversarial: bool,
}

impl EvalRecord {
    fn of(
        settings: &crate::eval::EvalSettings,
        protocols: &[crate::eval::judge::JudgeProtocol],
    ) -> Self {
        if settings.judge_prompt.is_some() {
            tracing::warn!("a run judged with --judge-prompt cannot be verified from its archive");
        }
        // Relative to the project when inside it, else as it is: `export` archives the file.
        let audit_file = settings
            .audit_file
            .as_ref()
            .map(|path| path.strip_prefix(&settings.root).unwrap_or(path).display().to_string());
        Self {
            judge_model: settings.judge_model.clone().unwrap_or_default(),
            judge_runs: settings.judge_runs,
            protocols: protocols.to_vec(),
            sample: settings.sample.clone(),
            question_type: settings.question_type,
            partial: settings.partial,
            audit_file,
            overall_with_adversarial: settings.overall_with_adversarial,
        }
    }

    /// Applies the record to `settings`.
    pub fn apply(&self, settings: &mut crate::eval::EvalSettings) {
        settings.judge_model = Some(self.judge_model.clone());
        settings.judge_runs = self.judge_runs;
        if let Some(first) = self.protocols.first() {
            settings.protocol = *first;
        }
        settings.sample.clone_from(&self.sample);
        settings.question_type = self.question_type;
        settings.partial = self.partial;
        settings.audit_file = self.audit_file.as_ref().map(|file| settings.root.join(file));
        settings.overall_with_adversarial = self.overall_with_adversarial;
    }
}
