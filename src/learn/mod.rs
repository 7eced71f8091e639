//! `mragent learn` (MetaMem): short rules on *how to use memory*, distilled from judged
//! attempts and kept only when held-out questions improve.
//!
//! Per fold (see `folds`): step 0 validates the empty rule set; every later step answers one
//! training batch `samples` times at `temperature` with the current rules through the real
//! answer loop, judges every attempt with the run's judge protocol, reviews the attempts of the
//! questions with mixed outcomes from their traces, asks for one proposal of operations per such
//! question, merges the batch's proposals in one consolidation call, applies them through the
//! leakage guard and the cap, and validates the new set at temperature 0 (see `step`). The step
//! with the best validation accuracy is kept (ties: fewer rules, then the earlier step), so a
//! set that does not beat the empty one is never kept. Then the fold's test questions are
//! answered with the kept rules and without them, into the ordinary result files
//! (`meta-<name>` and `meta-<name>-base`), for `mragent eval --paired-with`.
//!
//! Everything is resumable: answers are result lines (resume by question id), every model call
//! (building, answering, judging, reviewing, proposing, consolidating) goes through the learn
//! run's tape (`calls.sqlite` in its folder, opened by the command; each call recorded with its
//! work item: fold, step, pass and question), which answers a request it holds without sending
//! it, and each finished step is written atomically to
//! `data/<dataset>/meta/<name>/fold<k>/step<s>.json`; a rerun after kill -9 redoes only what was
//! not finished, sends no request twice, and ends with the same rules. The spend is checked before every call: past
//! `--max-cost` or `--max-tokens-total` the run stops cleanly ([`Stopped`]) and can be resumed.
//!
//! Layout: `folds` (seeded splits), `guard` (leakage), `ops` (rule operations), `calls` (the
//! learning calls), `trajectory` (an attempt from its trace), `judged` (answer and judge
//! a set of questions), `step`, `estimate` (requests, tokens, cost), `report`.

mod budget;
pub mod calls;
pub mod estimate;
pub mod folds;
pub mod guard;
mod judged;
pub mod ops;
pub mod report;
pub mod step;
pub mod trajectory;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use self::folds::{Fold, FoldPlan};
use self::guard::LeakGuard;
pub use self::judged::{Attempt, Score};
pub use self::step::choose;
use self::step::{StepInput, StepRecord, read_record, write_record};
use crate::agent::AnswerSettings;
use crate::agent::rules::{RuleSet, StepRef};
use crate::dataset::{DatasetKind, Question};
use crate::eval::judge::JudgeSettings;
use crate::llm::tape::within;
use crate::llm::{ChatModel, Embedder, Usage};
use crate::snapshot::Snapshot;

/// The settings of a learning run.
#[derive(Debug, Clone)]
pub struct LearnSettings {
    /// Project root.
    pub root: PathBuf,
    /// Dataset.
    pub dataset: DatasetKind,
    /// Name of the run (`data/<dataset>/meta/<name>/`); a checked name.
    pub name: String,
    /// Folds.
    pub folds: u32,
    /// Only this fold (default: all).
    pub only_fold: Option<u32>,
    /// Passes over each fold's training questions.
    pub epochs: u32,
    /// Most learning steps per fold (default: every batch of every epoch).
    pub steps: Option<u32>,
    /// Attempts per training question.
    pub samples: u32,
    /// Training questions per step.
    pub batch: usize,
    /// Validation questions per fold (0: every question of the validation part).
    pub validation: usize,
    /// Most rules in a set.
    pub max_rules: usize,
    /// Temperature of the attempts.
    pub temperature: f32,
    /// Seed of the folds, the batches and the requests.
    pub seed: u64,
    /// Answer each fold's test questions with and without the kept rules.
    pub test: bool,
    /// A line per finished step on stderr.
    pub progress: bool,
    /// The answer settings every pass starts from (model, workers, limits, retrieval).
    pub answer: AnswerSettings,
    /// The judge.
    pub judge: JudgeSettings,
    /// Stop when the estimated spend of this invocation reaches this many USD.
    pub max_cost_usd: Option<f64>,
    /// Stop when this invocation has spent this many tokens (prompt + completion).
    pub max_tokens_total: Option<u64>,
}

impl LearnSettings {
    /// `data/<dataset>/meta/<name>/` under the root.
    pub fn dir(&self) -> PathBuf {
        self.root.join("data").join(self.dataset.as_str()).join("meta").join(&self.name)
    }

    /// Learning steps of each fold, given its training questions.
    pub fn steps_for(&self, train: usize) -> u32 {
        let per_epoch = train.div_ceil(self.batch.max(1)) as u32;
        let all = per_epoch * self.epochs;
        self.steps.map_or(all, |cap| cap.min(all))
    }

    /// What must not change between a run and its resumption.
    pub fn fingerprint(&self) -> serde_json::Value {
        serde_json::json!({
            "folds": self.folds, "epochs": self.epochs, "steps": self.steps,
            "samples": self.samples, "batch": self.batch, "validation": self.validation,
            "max_rules": self.max_rules, "temperature": self.temperature, "seed": self.seed,
            "model": self.answer.model, "judge_model": self.judge.model,
            "judge_protocol": format!("{:?}", self.judge.protocol),
            "answer_prompts": crate::agent::answer_prompts_version(),
        })
    }
}

/// What has been spent so far by this invocation.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Spend {
    /// Tokens of every model.
    pub usage: Usage,
    /// Estimated USD, when every model's price is known.
    pub cost_usd: Option<f64>,
}

/// The run stopped before its end (Ctrl-C, or a budget reached); rerun to resume.
#[derive(Debug, thiserror::Error)]
#[error("{reason}")]
pub struct Stopped {
    /// Why.
    pub reason: String,
}

impl Stopped {
    fn new(reason: String) -> Self {
        Self { reason }
    }
}

/// What one fold gave.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FoldOutcome {
    /// Fold index.
    pub fold: u32,
    /// Every step's record, step 0 first.
    pub steps: Vec<StepRecord>,
    /// The step kept.
    pub chosen: u32,
}

impl FoldOutcome {
    /// The record of the step kept.
    pub fn chosen_record(&self) -> &StepRecord {
        &self.steps[self.chosen as usize]
    }

    /// Validation accuracy gained over the empty rule set, in points.
    pub fn gain(&self) -> f64 {
        self.chosen_record().validation.accuracy - self.steps[0].validation.accuracy
    }
}

/// What a learning run gave.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LearnOutcome {
    /// The folds and their outcomes.
    pub plan: FoldPlan,
    /// Per fold run.
    pub folds: Vec<FoldOutcome>,
    /// The final rules (the kept set of the fold that gained most on validation).
    pub rules: RuleSet,
    /// The final rules file.
    pub rules_file: PathBuf,
    /// The report.
    pub report_file: PathBuf,
}

/// One learning run's state.
pub struct Learner<'a, M, J, E> {
    settings: &'a LearnSettings,
    snapshots: Vec<Arc<Snapshot>>,
    questions: BTreeMap<String, (Question, usize)>,
    model: &'a M,
    judge_model: &'a J,
    embedder: &'a E,
    spend: &'a (dyn Fn() -> Spend + Send + Sync),
    stop: tokio::sync::watch::Receiver<bool>,
}

impl<'a, M: ChatModel, J: ChatModel, E: Embedder> Learner<'a, M, J, E> {
    /// A learner over these memories. `spend` reports what this invocation has spent;
    /// `stop` turns true on Ctrl-C.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        settings: &'a LearnSettings,
        snapshots: Vec<Arc<Snapshot>>,
        model: &'a M,
        judge_model: &'a J,
        embedder: &'a E,
        spend: &'a (dyn Fn() -> Spend + Send + Sync),
        stop: tokio::sync::watch::Receiver<bool>,
    ) -> anyhow::Result<Self> {
        let mut questions = BTreeMap::new();
        for snapshot in &snapshots {
            for (index, question) in snapshot.conversation.questions.iter().enumerate() {
                questions.insert(question.id.clone(), (question.clone(), index));
            }
        }
        Ok(Self { settings, snapshots, questions, model, judge_model, embedder, spend, stop })
    }

    fn dir(&self) -> PathBuf {
        self.settings.dir()
    }

    fn runs_root(&self) -> PathBuf {
        self.dir().join("runs")
    }

    /// Learns over every fold to run (see the module documentation).
    pub async fn learn(&self, plan: &FoldPlan) -> anyhow::Result<LearnOutcome> {
        record_plan(self.settings, plan)?;
        let mut outcomes = Vec::new();
        for fold in &plan.folds {
            if self.settings.only_fold.is_some_and(|only| only != fold.index) {
                // Another invocation's fold: its finished records on disk count too, so the
                // top-level rules and report are those of every fold there is.
                outcomes.extend(self.finished_fold(fold)?);
                continue;
            }
            outcomes.push(self.fold(fold).await?);
        }
        let best = outcomes.iter().max_by(|a, b| {
            a.gain()
                .total_cmp(&b.gain())
                .then(b.chosen_record().rules.rules.len().cmp(&a.chosen_record().rules.rules.len()))
                .then(b.fold.cmp(&a.fold))
        });
        let rules = best.map(|fold| fold.chosen_record().rules.clone()).unwrap_or_default();
        let rules = RuleSet::new(rules.rules);
        let rules_file = self.dir().join("rules.json");
        crate::fsutil::write_atomic(&rules_file, serde_json::to_string_pretty(&rules)?)?;
        let outcome = LearnOutcome {
            plan: plan.clone(),
            folds: outcomes,
            rules,
            rules_file,
            report_file: self.dir().join("report.md"),
        };
        report::write(self.settings, &outcome)?;
        Ok(outcome)
    }

    /// The epochs and batches of a fold's learning steps, in order.
    fn schedule(&self, fold: &Fold) -> Vec<(u32, Vec<String>)> {
        let steps = self.settings.steps_for(fold.train.len());
        (0..self.settings.epochs)
            .flat_map(|epoch| {
                folds::batches(fold, epoch, self.settings.batch, self.settings.seed)
                    .into_iter()
                    .map(move |batch| (epoch, batch))
            })
            .take(steps as usize)
            .collect()
    }

    /// A fold another invocation learned, from its step records on disk: `None` unless every
    /// step of it is there.
    fn finished_fold(&self, fold: &Fold) -> anyhow::Result<Option<FoldOutcome>> {
        let dir = self.dir().join(format!("fold{}", fold.index));
        let schedule = self.schedule(fold);
        let mut records = Vec::new();
        for step in 0..=schedule.len() {
            match read_record(&dir.join(format!("step{step}.json")))? {
                Some(record) if step == 0 || record.batch == schedule[step - 1].1 => {
                    records.push(record);
                }
                _ => return Ok(None),
            }
        }
        let chosen = choose(&records);
        Ok(Some(FoldOutcome { fold: fold.index, steps: records, chosen }))
    }

    /// One fold: step 0, the learning steps (finished ones read back), the choice, the test.
    async fn fold(&self, fold: &Fold) -> anyhow::Result<FoldOutcome> {
        let dir = self.dir().join(format!("fold{}", fold.index));
        let guard = self.guard(fold);
        let step_file = |step: u32| dir.join(format!("step{step}.json"));
        let baseline = match read_record(&step_file(0))? {
            Some(record) => record,
            None => {
                let empty = RuleSet::new(Vec::new());
                let label = format!("learn fold {} step 0", fold.index);
                let validating = self.validate(fold.index, &empty, &fold.validation);
                let score = within(label, validating).await?;
                let record = StepRecord::baseline(fold.index, score);
                write_record(&step_file(0), &record)?;
                record
            }
        };
        let mut records = vec![baseline];
        let schedule = self.schedule(fold);
        for (index, (epoch, batch)) in schedule.iter().enumerate() {
            let step = index as u32 + 1;
            let record = match read_record(&step_file(step))? {
                Some(record) if &record.batch == batch => record,
                Some(_) => anyhow::bail!(
                    "{}: another batch than these settings draw",
                    step_file(step).display()
                ),
                None => {
                    let rules = &records[index].rules;
                    let input = StepInput {
                        at: StepRef { fold: fold.index, step },
                        epoch: *epoch,
                        batch,
                        rules,
                        guard: &guard,
                        validation: &fold.validation,
                    };
                    let label = format!("learn fold {} step {step}", fold.index);
                    let record = within(label, self.step(&input)).await?;
                    write_record(&step_file(step), &record)?;
                    record
                }
            };
            self.announce(&record, schedule.len(), records[0].validation.accuracy);
            records.push(record);
        }
        let chosen = choose(&records);
        let outcome = FoldOutcome { fold: fold.index, steps: records, chosen };
        crate::fsutil::write_atomic(
            &dir.join("rules.json"),
            serde_json::to_string_pretty(&outcome.chosen_record().rules)?,
        )?;
        if self.settings.test {
            self.test(fold, &outcome.chosen_record().rules).await?;
        }
        Ok(outcome)
    }

    /// One line per finished step on stderr (unless `-q`), and in the log.
    fn announce(&self, record: &StepRecord, steps: usize, baseline: f64) {
        let applied = record.ops.iter().filter(|op| op.refused.is_none()).count();
        let line = format!(
            "fold {} step {}/{steps}: {} rules, validation {:.1} (no rules {baseline:.1}), rollouts {:.1}, {} mixed questions, {applied} ops applied, {} refused",
            record.at.fold,
            record.at.step,
            record.rules.rules.len(),
            record.validation.accuracy,
            record.rollouts.map_or(0.0, |r| r.accuracy),
            record.mixed.len(),
            record.ops.len() - applied + record.malformed_ops.len(),
        );
        tracing::info!("{line}");
        if self.settings.progress {
            eprintln!("{line}");
        }
    }

    /// The leakage guard of a fold: its training conversations and training questions.
    fn guard(&self, fold: &Fold) -> LeakGuard {
        let conversations = self
            .snapshots
            .iter()
            .filter(|s| fold.train_samples.contains(&s.conversation.sample_id))
            .map(|s| &s.conversation);
        let questions = fold.train.iter().filter_map(|id| self.questions.get(id)).map(|(q, _)| q);
        LeakGuard::new(conversations, questions)
    }

    /// Answers the fold's test questions with the kept rules and without, into the ordinary
    /// result files, for `mragent eval --paired-with`.
    async fn test(&self, fold: &Fold, rules: &RuleSet) -> anyhow::Result<()> {
        let none = RuleSet::new(Vec::new());
        for (tag, rules) in [(self.test_tag(false), rules), (self.test_tag(true), &none)] {
            let pass = judged::Pass {
                tag: tag.clone(),
                questions: &fold.test,
                rules,
                temperature: self.settings.answer.temperature,
                seed: self.settings.answer.seed,
                attempt: 0,
            };
            let (settings, answering) = self.pass_settings(&pass, self.settings.root.clone(), &tag);
            let label = format!("learn fold {} test {tag}", fold.index);
            within(label, self.answer((&settings, &answering), &fold.test)).await?;
        }
        Ok(())
    }

    /// The run tag of the test answers with the rules (`base`: without).
    pub fn test_tag(&self, base: bool) -> String {
        test_tag(&self.settings.name, base)
    }
}

/// Writes `plan.json` in the run's folder, or checks that the one there was made with the same
/// settings: called before any memory is built, so a rerun with other settings is refused
/// before anything is spent.
pub fn record_plan(settings: &LearnSettings, plan: &FoldPlan) -> anyhow::Result<()> {
    let dir = settings.dir();
    let path = dir.join("plan.json");
    let record = serde_json::json!({"settings": settings.fingerprint(), "plan": plan});
    if let Ok(text) = std::fs::read_to_string(&path) {
        let earlier: serde_json::Value = serde_json::from_str(&text)?;
        if earlier != record {
            anyhow::bail!(
                "{} was made with other settings, a changed dataset or other answer prompts; learn under another --name, or delete that directory to start again",
                dir.display()
            );
        }
        return Ok(());
    }
    crate::fsutil::write_atomic(&path, serde_json::to_string_pretty(&record)?)
}

/// The folds of a learning run over `conversations` (seeded; only questions the judge grades
/// train or validate).
pub fn plan(
    settings: &LearnSettings,
    conversations: &[crate::dataset::Conversation],
) -> anyhow::Result<FoldPlan> {
    let judge = &settings.judge;
    Ok(folds::plan(
        settings.dataset,
        conversations,
        settings.folds,
        settings.validation,
        settings.seed,
        |question| {
            crate::eval::judge::prompt_for(judge, &question.id, &question.category).is_some()
        },
    )?)
}

/// The run tag of a learning run's test answers with its rules (`base`: without).
pub fn test_tag(name: &str, base: bool) -> String {
    if base { format!("meta-{name}-base") } else { format!("meta-{name}") }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::rules::Rule;

    fn record(step: u32, accuracy: f64, rules: usize) -> StepRecord {
        let mut record = StepRecord::baseline(0, Score { accuracy, ..Score::default() });
        record.at.step = step;
        record.rules = RuleSet::new(
            (0..rules)
                .map(|n| Rule {
                    id: format!("M{n}"),
                    text: "x".into(),
                    sources: Vec::new(),
                    added: None,
                    changed: None,
                })
                .collect(),
        );
        record
    }

    #[test]
    fn the_best_validation_wins_ties_go_to_fewer_rules_then_the_earlier_step() {
        assert_eq!(choose(&[record(0, 50.0, 0), record(1, 60.0, 2), record(2, 55.0, 1)]), 1);
        assert_eq!(choose(&[record(0, 50.0, 0), record(1, 60.0, 3), record(2, 60.0, 2)]), 2);
        assert_eq!(choose(&[record(0, 50.0, 0), record(1, 60.0, 2), record(2, 60.0, 2)]), 1);
        // A set that only matches the empty one is not kept: the empty set has fewer rules.
        assert_eq!(choose(&[record(0, 50.0, 0), record(1, 50.0, 1), record(2, 40.0, 1)]), 0);
    }
}
