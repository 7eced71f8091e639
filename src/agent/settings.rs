//! The resolved settings of an answer run, and what every question of a run borrows.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use serde::Serialize;

use crate::agent::counts::Counts;
use crate::agent::events::LoopEvents;
use crate::agent::retrieve::{CallSettings, RetrievalSettings};
use crate::agent::rules::RuleSet;
use crate::agent::run::RunLimits;
use crate::agent::trace::trace_path;
use crate::dataset::DatasetKind;
use crate::results::{Provenance, result_path};
use crate::retrieval::gate::ContextSize;
use crate::snapshot::Snapshot;

/// Resolved settings of an answer run (`mragent run`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AnswerSettings {
    /// Project root: results go to `<root>/result/…`, traces to `<root>/log/…`.
    pub root: PathBuf,
    /// Dataset.
    pub dataset: DatasetKind,
    /// Model name used in result file names (`<sample>_result_<model_name>_<file>.jsonl`).
    pub model_name: String,
    /// Model id sent with every answer-time request (retrieval calls and the loop).
    pub model: String,
    /// Run tag (`--file`).
    pub file: String,
    /// Questions in flight at once, across all samples (`--workers`, default 10).
    pub workers: usize,
    /// Loop limits.
    pub limits: RunLimits,
    /// Retrieval knobs.
    pub retrieval: RetrievalSettings,
    /// Sampling temperature of every request (reference: 0).
    pub temperature: Option<f32>,
    /// Seed: provider seed of every request, and the category-5 option coin.
    pub seed: u64,
    /// Draw a progress bar on stderr.
    pub progress: bool,
    /// Write per-question traces under `log/`.
    pub traces: bool,
    /// The environment variable the API key comes from, named when the endpoint refuses it.
    pub key_variable: String,
    /// How questions are answered (`--answer`, `--gate-threshold`; default: the loop).
    pub answer: crate::agent::mode::AnswerGate,
}

/// What one answering pass brings beyond its settings: an argument of
/// [`answer_all`](crate::agent::answer_all), [`answer_stream`](crate::agent::answer_stream) and
/// [`answer_one`](crate::agent::answer_one), never a setting. The default is a plain run: no
/// rules, every question, no listener.
#[derive(Debug, Clone, Default)]
pub struct AnswerPass {
    /// Meta-memory rules appended to the answer prompts (`--meta-rules`, a learning pass's
    /// candidate rules; empty: none). Their hash is in every result line's provenance.
    pub rules: Arc<RuleSet>,
    /// Only these questions (by id) are in scope; `None`: every question of each conversation.
    pub questions: Option<Arc<BTreeSet<String>>>,
    /// Where each question's loop reports its rounds as they happen (an `ask` that streams).
    pub events: Option<LoopEvents>,
}

impl AnswerPass {
    /// A pass with `rules` over every question.
    pub fn with_rules(rules: Arc<RuleSet>) -> Self {
        Self { rules, ..Self::default() }
    }

    /// Whether question `id` is in scope (see [`AnswerPass::questions`]).
    pub fn in_scope(&self, id: &str) -> bool {
        self.questions.as_ref().is_none_or(|only| only.contains(id))
    }
}

impl AnswerSettings {
    /// Settings with the reference defaults (10 workers, 8 rounds, 50 tool calls, seed 66,
    /// temperature 0).
    pub fn new(
        root: impl Into<PathBuf>,
        dataset: DatasetKind,
        model_name: &str,
        model: &str,
        file: &str,
    ) -> Self {
        Self {
            root: root.into(),
            dataset,
            model_name: model_name.to_string(),
            model: model.to_string(),
            file: file.to_string(),
            workers: 10,
            limits: RunLimits::default(),
            retrieval: RetrievalSettings::default(),
            temperature: Some(0.0),
            seed: 66,
            progress: true,
            traces: true,
            key_variable: "OPENAI_API_KEY".to_string(),
            answer: Default::default(),
        }
    }

    /// The result file of a sample.
    pub fn result_path(&self, sample_id: &str) -> PathBuf {
        result_path(&self.root, self.dataset.as_str(), sample_id, &self.model_name, &self.file)
    }

    /// [`AnswerSettings::result_path`] for a writer: the sample id passes the one id rule and the
    /// resolved path stays under the root, whatever the id.
    pub fn checked_result_path(&self, sample_id: &str) -> anyhow::Result<PathBuf> {
        crate::names::check_name(crate::names::NameKind::Sample, sample_id)?;
        let path = self.result_path(sample_id);
        crate::names::check_inside(&self.root, &path)?;
        Ok(path)
    }

    /// The trace file of a question.
    pub fn trace_path(&self, sample_id: &str, question_id: &str) -> PathBuf {
        trace_path(&self.root, self.dataset.as_str(), &self.file, sample_id, question_id)
    }

    /// What a result line of `sample` answered now with `rules` is made from: the sample's
    /// memory fingerprint, the answering model, the version of every answer-time prompt and
    /// the rules' hash.
    pub fn provenance(&self, sample: &Snapshot, rules: &RuleSet) -> Provenance {
        Provenance {
            memory: sample.memory.fingerprint.clone(),
            model: self.model.clone(),
            prompts: self.prompts_version(),
            rules: rules.hash(),
        }
    }

    /// The version of the prompts this run answers with: [`answer_prompts_version`] under
    /// `--answer loop` (so published loop runs keep theirs), and on top of it the single-path
    /// prompt, the mode and the gate's settings otherwise, so that a rerun in another mode
    /// answers its questions again instead of resuming them.
    pub fn prompts_version(&self) -> String {
        use sha2::Digest as _;
        let base = answer_prompts_version();
        let gate = self.answer;
        if gate.mode == crate::agent::mode::AnswerMode::Loop {
            return base;
        }
        let mut hasher = sha2::Sha256::new();
        hasher.update(base.as_bytes());
        hasher.update([0]);
        hasher.update(crate::prompts::ANSWER_SINGLE.version().as_bytes());
        let ContextSize { k, window } = gate.context;
        hasher.update(format!("\0{}\0{:.4}\0{k}\0{window}", gate.mode.as_str(), gate.threshold));
        let digest = hasher.finalize();
        digest.iter().take(8).map(|byte| format!("{byte:02x}")).collect()
    }

    pub(super) fn provider_seed(&self) -> Option<i64> {
        i64::try_from(self.seed).ok()
    }

    pub(super) fn call_settings(&self) -> CallSettings<'_> {
        CallSettings {
            model: &self.model,
            temperature: self.temperature,
            seed: self.provider_seed(),
            max_reasks: self.retrieval.max_reasks,
        }
    }
}

/// One hash over the versions of every prompt used while answering (all but the build, judge
/// and ping prompts, whose changes the memory fingerprint or `eval` track).
pub fn answer_prompts_version() -> String {
    use sha2::Digest as _;
    // The rules block's template is tracked by the rule-set hash (it hashes the block the model
    // sees), so a run without rules keeps its prompt version when that template changes; the
    // `learn_*` prompts never reach the answer loop.
    const NOT_ANSWERING: &[&str] = &[
        "ping",
        "rewrite",
        "keywords",
        "stage_reask",
        "memgas_granules",
        "answer_meta_rules",
        // The single path's prompt is hashed by `AnswerSettings::prompts_version` when used.
        "answer_single",
    ];
    let mut hasher = sha2::Sha256::new();
    for prompt in crate::prompts::ALL {
        if NOT_ANSWERING.contains(&prompt.name)
            || prompt.name.starts_with("judge")
            || prompt.name.starts_with("learn")
        {
            continue;
        }
        hasher.update(prompt.name.as_bytes());
        hasher.update([0]);
        hasher.update(prompt.version().as_bytes());
        hasher.update([0]);
    }
    let digest = hasher.finalize();
    digest.iter().take(8).map(|byte| format!("{byte:02x}")).collect()
}

/// What every question of a run shares.
pub(super) struct RunShared<'a, M, E> {
    pub settings: &'a AnswerSettings,
    pub pass: &'a AnswerPass,
    pub model: &'a M,
    pub embedder: &'a E,
    /// What the questions of the run counted so far (each adds its own once finished).
    counts: Mutex<Counts>,
}

impl<'a, M, E> RunShared<'a, M, E> {
    pub(super) fn new(
        settings: &'a AnswerSettings,
        pass: &'a AnswerPass,
        model: &'a M,
        embedder: &'a E,
    ) -> Self {
        Self { settings, pass, model, embedder, counts: Mutex::new(Counts::default()) }
    }

    /// Adds a question's counts to the run's.
    pub(super) fn count(&self, question: Counts) {
        *self.counts.lock().unwrap_or_else(PoisonError::into_inner) += question;
    }

    /// The run's counts so far.
    pub(super) fn counts(&self) -> Counts {
        *self.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
