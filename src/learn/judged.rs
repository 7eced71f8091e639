//! Answering a set of questions through the real answer loop (resumable result files under the
//! learn directory) and judging every answer with the run's judge protocol (the judge's calls on
//! the learn run's tape).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;

use futures::StreamExt as _;
use serde::{Deserialize, Serialize};

use super::{Learner, Stopped};
use crate::agent::rules::RuleSet;
use crate::agent::{AnswerPass, AnswerSettings, SampleFeed, answer_stream};
use crate::eval::input::{Matched, read_result_lines};
use crate::eval::judge::judge_items;
use crate::llm::{ChatModel, Embedder};
use crate::results::{ResultLine, Status};

/// One judged answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    /// Question id.
    pub question_id: String,
    /// Sample id.
    pub sample: String,
    /// Attempt index (the rollout sample; 0 for validation and test answers).
    pub attempt: u32,
    /// The judge's verdict; `None` when answering failed or the judgement failed.
    pub correct: Option<bool>,
    /// Answering failed (an endpoint error): no prediction.
    pub failed: bool,
    /// The answer.
    pub prediction: String,
    /// Official LoCoMo F1 of the answer (LoCoMo only).
    pub f1: Option<f64>,
    /// Its trace file.
    pub trace: PathBuf,
}

/// How one set of answers went: what a validation curve point is made of.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Score {
    /// Answers graded.
    pub judged: usize,
    /// Of those, judged right.
    pub correct: usize,
    /// Answers that failed or whose judgement failed (counted wrong in `accuracy`).
    pub unjudged: usize,
    /// `correct / (judged + unjudged)`, in percent.
    pub accuracy: f64,
    /// Mean official F1 over the answers, in percent (LoCoMo only).
    pub f1: Option<f64>,
}

impl Score {
    /// The score of these attempts.
    pub fn of(attempts: &[Attempt]) -> Self {
        let judged = attempts.iter().filter(|a| a.correct.is_some()).count();
        let correct = attempts.iter().filter(|a| a.correct == Some(true)).count();
        let total = attempts.len();
        let f1s: Vec<f64> = attempts.iter().filter_map(|a| a.f1).collect();
        Self {
            judged,
            correct,
            unjudged: total - judged,
            accuracy: if total == 0 { 0.0 } else { 100.0 * correct as f64 / total as f64 },
            f1: (!f1s.is_empty()).then(|| 100.0 * f1s.iter().sum::<f64>() / f1s.len() as f64),
        }
    }
}

/// How to answer one set of questions.
pub(super) struct Pass<'a> {
    /// Run tag of the result files (under the learn directory's `runs/`).
    pub tag: String,
    /// The questions.
    pub questions: &'a [String],
    /// The rules in the prompt.
    pub rules: &'a RuleSet,
    /// Sampling temperature.
    pub temperature: Option<f32>,
    /// Seed of the requests.
    pub seed: u64,
    /// Attempt index recorded with each answer.
    pub attempt: u32,
}

impl<M: ChatModel, J: ChatModel, E: Embedder> Learner<'_, M, J, E> {
    /// Answers `pass.questions` (resuming from the result files) and judges the answers.
    pub(super) async fn answer_and_judge(&self, pass: &Pass<'_>) -> anyhow::Result<Vec<Attempt>> {
        let (settings, answering) = self.pass_settings(pass, self.runs_root(), &pass.tag);
        self.answer((&settings, &answering), pass.questions).await?;
        let lines = self.read_lines(&settings, &answering.rules, pass.questions)?;
        self.judge(lines, &settings, pass.attempt).await
    }

    /// The answer settings of a pass, its results and traces under `root`, and what it answers
    /// with: its rules, over its questions.
    pub(super) fn pass_settings(
        &self,
        pass: &Pass<'_>,
        root: PathBuf,
        tag: &str,
    ) -> (AnswerSettings, AnswerPass) {
        let mut settings = self.settings.answer.clone();
        settings.root = root;
        settings.file = tag.to_string();
        settings.temperature = pass.temperature;
        settings.seed = pass.seed;
        settings.traces = true;
        let answering = AnswerPass {
            questions: Some(Arc::new(pass.questions.iter().cloned().collect())),
            ..AnswerPass::with_rules(Arc::new(pass.rules.clone()))
        };
        (settings, answering)
    }

    /// Answers the questions in scope of `pass` that the result files of `settings` do not
    /// hold yet.
    pub(super) async fn answer(
        &self,
        (settings, pass): (&AnswerSettings, &AnswerPass),
        questions: &[String],
    ) -> anyhow::Result<()> {
        self.check_budget()?;
        let wanted: BTreeSet<&str> = questions.iter().map(String::as_str).collect();
        let samples: Vec<Arc<crate::snapshot::Snapshot>> = self
            .snapshots
            .iter()
            .filter(|s| s.conversation.questions.iter().any(|q| wanted.contains(q.id.as_str())))
            .cloned()
            .collect();
        let feed = SampleFeed {
            samples: futures::stream::iter(samples.into_iter().map(Ok)).boxed(),
            questions: wanted.len(),
            bars: None,
        };
        let summary =
            answer_stream(settings, pass, feed, self.model, self.embedder, self.stop_signal())
                .await?;
        if let Some(fatal) = summary.fatal {
            anyhow::bail!("answering stopped: {fatal}");
        }
        if summary.pending > 0 {
            anyhow::bail!(
                "{} questions wait for an incomplete memory: run `mragent build` for {:?} first",
                summary.pending,
                summary.pending_samples.iter().map(|s| s.sample.as_str()).collect::<Vec<_>>()
            );
        }
        if summary.interrupted || summary.remaining > 0 {
            return Err(Stopped::new(self.stop_reason()).into());
        }
        Ok(())
    }

    /// The last line of each question in scope answered with `rules`, from the pass's result
    /// files.
    fn read_lines(
        &self,
        settings: &AnswerSettings,
        rules: &RuleSet,
        questions: &[String],
    ) -> anyhow::Result<Vec<ResultLine>> {
        let wanted: BTreeSet<&str> = questions.iter().map(String::as_str).collect();
        let mut files: Vec<PathBuf> = self
            .snapshots
            .iter()
            .map(|s| settings.result_path(&s.conversation.sample_id))
            .filter(|path| path.exists())
            .collect();
        files.dedup();
        let hash = rules.hash();
        let mut last: BTreeMap<String, ResultLine> = BTreeMap::new();
        for sourced in read_result_lines(&files)? {
            let line = sourced.result;
            if wanted.contains(line.question_id.as_str()) && line.provenance.rules == hash {
                last.insert(line.question_id.clone(), line);
            }
        }
        Ok(questions.iter().filter_map(|id| last.remove(id)).collect())
    }

    /// Judges `lines` (a verdict judged before is answered by the learn run's tape).
    async fn judge(
        &self,
        lines: Vec<ResultLine>,
        settings: &AnswerSettings,
        attempt: u32,
    ) -> anyhow::Result<Vec<Attempt>> {
        let matched: Vec<Matched> = lines
            .into_iter()
            .filter_map(|line| {
                let (question, qa_index) = self.questions.get(&line.question_id)?.clone();
                Some(Matched { line, question, qa_index })
            })
            .collect();
        let mut items = crate::eval::score_results(&matched, self.settings.dataset, None);
        // The judge is on the learn run's tape, which answers a repeat.
        let stats = judge_items(self.judge_model, &self.settings.judge, &mut items).await?;
        if stats.failed > 0 && stats.new + stats.cached == 0 {
            // Nothing to learn from and nothing to validate with: a refused key, an unknown
            // judge model or a dead endpoint. Stop rather than spend on answers no one grades.
            anyhow::bail!(
                "the judge ({}) failed all {} judgements of this pass (see the log). If it could not be reached, fix it and run the same command again to resume. If it answered with replies that cannot be read, they are on the learn run's tape in {}, which never asks a recorded call again (finished steps rest on its replies): learn under another --name with a working judge",
                self.settings.judge.model,
                stats.failed,
                self.settings.dir().display()
            );
        }
        if stats.failed > 0 {
            tracing::warn!(
                failed = stats.failed,
                "some judgements failed; those answers count as wrong (a reply the judge gave is kept on the tape, so a rerun and a replay count them so too)"
            );
        }
        Ok(matched
            .iter()
            .zip(items)
            .map(|(entry, item)| {
                let failed = entry.line.status == Status::Error;
                Attempt {
                    question_id: item.question_id.clone(),
                    sample: item.sample.clone(),
                    attempt,
                    correct: if failed { None } else { item.judge.first().map(|v| v.correct) },
                    failed,
                    prediction: item.prediction.clone(),
                    f1: item.f1,
                    trace: settings.trace_path(&item.sample, &item.question_id),
                }
            })
            .collect())
    }
}
