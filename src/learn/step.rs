//! One learning step of a fold: rollouts of a training batch with the current rules, their
//! verdicts, reviews of the attempts of questions with mixed outcomes, one proposal per such
//! question, one consolidation, the guarded application, and the validation of the new set.

use std::collections::BTreeMap;

use futures::StreamExt as _;
use serde::{Deserialize, Serialize};

use super::calls::{ask_json, ops_schema, review_schema};
use super::judged::{Attempt, Pass, Score};
use super::ops::{Limits, OpOutcome, SourcedOp, apply, read_ops};
use super::{Learner, guard::LeakGuard};
use crate::agent::rules::{RuleSet, RuleSource, StepRef};
use crate::llm::tape::within;
use crate::llm::{ChatModel, Embedder, Usage};
use crate::prompts;

/// What one step did; written to `fold<k>/step<s>.json` when it is finished.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    /// Fold and step.
    pub at: StepRef,
    /// Epoch of the batch (step 0 has none).
    pub epoch: Option<u32>,
    /// The training questions of the batch.
    pub batch: Vec<String>,
    /// The rule set after the step.
    pub rules: RuleSet,
    /// Its hash.
    pub rules_hash: String,
    /// Its validation score.
    pub validation: Score,
    /// How the rollouts went (absent for step 0).
    pub rollouts: Option<Score>,
    /// Questions whose attempts were partly right: the ones learned from.
    pub mixed: Vec<String>,
    /// Attempts reviewed.
    pub reviews: usize,
    /// Proposals made.
    pub proposals: usize,
    /// Every operation and what became of it (proposed ones refused before consolidation
    /// included).
    pub ops: Vec<OpOutcome>,
    /// Items of replies that were no valid operation.
    pub malformed_ops: Vec<String>,
    /// The consolidation's reply was unusable and the proposals were applied as they came.
    pub consolidation_fallback: bool,
    /// Tokens of the reviews, proposals and consolidation (as recorded, for calls the tape
    /// answered: a resumed step counts what the step cost).
    pub learning_usage: Usage,
}

impl StepRecord {
    /// The record of step 0: the empty rule set, validated.
    pub fn baseline(fold: u32, validation: Score) -> Self {
        Self {
            at: StepRef { fold, step: 0 },
            epoch: None,
            batch: Vec::new(),
            rules: RuleSet::new(Vec::new()),
            rules_hash: String::new(),
            validation,
            rollouts: None,
            mixed: Vec::new(),
            reviews: 0,
            proposals: 0,
            ops: Vec::new(),
            malformed_ops: Vec::new(),
            consolidation_fallback: false,
            learning_usage: Usage::default(),
        }
    }
}

/// A step to take.
pub(super) struct StepInput<'a> {
    pub at: StepRef,
    pub epoch: u32,
    pub batch: &'a [String],
    pub rules: &'a RuleSet,
    pub guard: &'a LeakGuard,
    pub validation: &'a [String],
}

/// What one proposal call gave: its operations, the reply items that were none, its tokens.
struct ProposalReply {
    ops: Vec<super::ops::Op>,
    malformed: Vec<String>,
    usage: Usage,
}

/// One proposal: the question it came from and its (guarded) operations.
struct Proposal {
    source: RuleSource,
    ops: Vec<SourcedOp>,
}

impl<M: ChatModel, J: ChatModel, E: Embedder> Learner<'_, M, J, E> {
    /// Takes one step (see the module documentation).
    pub(super) async fn step(&self, input: &StepInput<'_>) -> anyhow::Result<StepRecord> {
        let attempts = self.rollouts(input).await?;
        let mixed = mixed_questions(&attempts);
        let mut usage = Usage::default();
        let reviews = self.reviews(&attempts, &mixed, &mut usage).await?;
        let mut record_ops = Vec::new();
        let mut malformed = Vec::new();
        // One proposal per mixed question, asked concurrently; taken in question order.
        let replies: Vec<anyhow::Result<ProposalReply>> = futures::stream::iter(&reviews)
            .map(|(question_id, texts)| {
                within(
                    format!("proposal from question {question_id}"),
                    self.propose(input.rules, texts),
                )
            })
            .buffered(self.settings.answer.workers.max(1))
            .collect()
            .await;
        let mut proposals = Vec::new();
        for ((question_id, _), reply) in reviews.iter().zip(replies) {
            let ProposalReply { ops, malformed: bad, usage: spent } = reply?;
            usage += spent;
            malformed.extend(bad);
            let source = RuleSource {
                question_id: question_id.clone(),
                attempts: attempts
                    .iter()
                    .filter(|a| &a.question_id == question_id)
                    .map(|a| a.attempt)
                    .collect(),
            };
            let mut kept = Vec::new();
            for op in ops {
                let sourced = SourcedOp { op, sources: vec![source.clone()] };
                match guard_op(input.guard, &sourced) {
                    Some(refused) => {
                        record_ops.push(OpOutcome { op: sourced, refused: Some(refused) })
                    }
                    None => kept.push(sourced),
                }
            }
            proposals.push(Proposal { source, ops: kept });
        }
        let (merged, fallback) =
            self.consolidate(input.rules, &proposals, &mut malformed, &mut usage).await?;
        let limits =
            Limits { guard: input.guard, max_rules: self.settings.max_rules, step: input.at };
        let (rules, outcomes) = apply(input.rules, &merged, &limits);
        record_ops.extend(outcomes);
        let validation = self.validate(input.at.fold, &rules, input.validation).await?;
        Ok(StepRecord {
            at: input.at,
            epoch: Some(input.epoch),
            batch: input.batch.to_vec(),
            rules_hash: rules.hash(),
            rules,
            validation,
            rollouts: Some(Score::of(&attempts)),
            mixed: mixed.clone(),
            reviews: reviews.values().map(Vec::len).sum(),
            proposals: proposals.len(),
            ops: record_ops,
            malformed_ops: malformed,
            consolidation_fallback: fallback,
            learning_usage: usage,
        })
    }

    /// `samples` attempts at every batch question with the current rules.
    async fn rollouts(&self, input: &StepInput<'_>) -> anyhow::Result<Vec<Attempt>> {
        let mut attempts = Vec::new();
        for sample in 0..self.settings.samples {
            let pass = Pass {
                tag: format!("f{}-s{}-k{sample}", input.at.fold, input.at.step),
                questions: input.batch,
                rules: input.rules,
                temperature: Some(self.settings.temperature),
                seed: self.settings.answer.seed.wrapping_add(u64::from(sample) + 1),
                attempt: sample,
            };
            let label = format!("attempt {sample}");
            attempts.extend(within(label, self.answer_and_judge(&pass)).await?);
        }
        attempts.sort_by(|a, b| (&a.question_id, a.attempt).cmp(&(&b.question_id, b.attempt)));
        Ok(attempts)
    }

    /// The validation score of `rules` (cached by the rules' hash: an unchanged set is not
    /// answered again).
    pub(super) async fn validate(
        &self,
        fold: u32,
        rules: &RuleSet,
        questions: &[String],
    ) -> anyhow::Result<Score> {
        let hash = rules.hash();
        let pass = Pass {
            tag: format!("f{fold}-v{}", if hash.is_empty() { "none" } else { &hash }),
            questions,
            rules,
            temperature: Some(0.0),
            seed: self.settings.answer.seed,
            attempt: 0,
        };
        Ok(Score::of(&within("validation".into(), self.answer_and_judge(&pass)).await?))
    }

    /// A review of every attempt of the mixed questions, by question, in attempt order.
    async fn reviews(
        &self,
        attempts: &[Attempt],
        mixed: &[String],
        usage: &mut Usage,
    ) -> anyhow::Result<BTreeMap<String, Vec<String>>> {
        let chosen: Vec<&Attempt> = attempts
            .iter()
            .filter(|a| mixed.contains(&a.question_id) && a.correct.is_some())
            .collect();
        let results: Vec<anyhow::Result<(String, String, Usage)>> = futures::stream::iter(chosen)
            .map(|attempt| async move {
                let label = format!(
                    "review of question {} attempt {}",
                    attempt.question_id, attempt.attempt
                );
                let (text, spent) = within(label, self.review(attempt)).await?;
                Ok((attempt.question_id.clone(), text, spent))
            })
            .buffered(self.settings.answer.workers.max(1))
            .collect()
            .await;
        let mut reviews: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for result in results {
            let (question_id, text, spent) = result?;
            *usage += spent;
            reviews.entry(question_id).or_default().push(text);
        }
        Ok(reviews)
    }

    /// One attempt's review, as text for the proposer.
    async fn review(&self, attempt: &Attempt) -> anyhow::Result<(String, Usage)> {
        self.check_budget()?;
        let (question, _) = self
            .questions
            .get(&attempt.question_id)
            .ok_or_else(|| anyhow::anyhow!("unknown question {}", attempt.question_id))?;
        let trajectory = super::trajectory::condense_file(&attempt.trace)?;
        let verdict = if attempt.correct == Some(true) { "judged right" } else { "judged wrong" };
        let prompt = prompts::LEARN_SUMMARY.render(&[
            ("question", &question.question),
            ("gold", question.answer.as_deref().unwrap_or("")),
            ("verdict", verdict),
            ("trajectory", &trajectory),
        ])?;
        let reply =
            ask_json(self.model, &self.settings.answer.model, "review", prompt, &review_schema())
                .await?;
        let field = |name: &str| {
            reply.value.get(name).and_then(|v| v.as_str()).unwrap_or("").trim().to_string()
        };
        let text = format!(
            "Attempt {} ({verdict}). Evidence used: {}. Mistake: {}. Decision points: {}. Lesson: {}.",
            attempt.attempt + 1,
            field("evidence_used"),
            field("mistake"),
            field("decision_points"),
            field("lesson")
        );
        Ok((text, reply.usage))
    }

    /// One question's proposal: its operations, the reply items that were none, and the tokens.
    async fn propose(&self, rules: &RuleSet, reviews: &[String]) -> anyhow::Result<ProposalReply> {
        self.check_budget()?;
        let prompt = prompts::LEARN_PROPOSE
            .render(&[("rules", &rules_text(rules)), ("summaries", &reviews.join("\n"))])?;
        let reply =
            ask_json(self.model, &self.settings.answer.model, "propose", prompt, &ops_schema())
                .await?;
        let (ops, malformed) = read_ops(&reply.value);
        Ok(ProposalReply { ops, malformed, usage: reply.usage })
    }

    /// The batch's operations, merged by one consolidation call (none for one proposal or
    /// none). When its reply is unusable, the proposals are applied as they came, and the
    /// step says so.
    async fn consolidate(
        &self,
        rules: &RuleSet,
        proposals: &[Proposal],
        malformed: &mut Vec<String>,
        usage: &mut Usage,
    ) -> anyhow::Result<(Vec<SourcedOp>, bool)> {
        let all: Vec<SourcedOp> = proposals.iter().flat_map(|p| p.ops.iter().cloned()).collect();
        if proposals.iter().filter(|p| !p.ops.is_empty()).count() <= 1 {
            return Ok((all, false));
        }
        self.check_budget()?;
        let prompt = prompts::LEARN_CONSOLIDATE.render(&[
            ("rules", &rules_text(rules)),
            ("proposals", &numbered_proposals(proposals)),
            ("max_rules", &self.settings.max_rules.to_string()),
        ])?;
        let model_id = &self.settings.answer.model;
        let schema = ops_schema();
        let asked = ask_json(self.model, model_id, "consolidate", prompt, &schema);
        let reply = match within("consolidation".into(), asked).await {
            Ok(reply) => reply,
            Err(error) if unusable_reply(&error) => {
                tracing::warn!(error = %format!("{error:#}"), "consolidation failed; the proposals are applied as they came");
                return Ok((all, true));
            }
            Err(error) => return Err(error),
        };
        *usage += reply.usage;
        let merged = consolidated_ops(&reply.value, malformed)
            .into_iter()
            .map(|(op, from)| SourcedOp { op, sources: sources_of(proposals, &from) })
            .collect();
        Ok((merged, false))
    }
}

/// The proposals with operations, one line each under its number (from 1): `2. {op} {op}`.
fn numbered_proposals(proposals: &[Proposal]) -> String {
    let numbered: Vec<String> = proposals
        .iter()
        .enumerate()
        .filter(|(_, p)| !p.ops.is_empty())
        .map(|(n, p)| {
            let ops: Vec<String> =
                p.ops.iter().map(|op| serde_json::to_string(&op.op).unwrap_or_default()).collect();
            format!("{}. {}", n + 1, ops.join(" "))
        })
        .collect();
    numbered.join("\n")
}

/// The consolidation reply's valid operations, each with the proposal numbers it says it
/// comes from; the other items go to `malformed`.
fn consolidated_ops(
    reply: &serde_json::Value,
    malformed: &mut Vec<String>,
) -> Vec<(super::ops::Op, Vec<usize>)> {
    let mut ops = Vec::new();
    for item in super::ops::op_items(reply) {
        match super::ops::read_op(item) {
            Some(op) => {
                let from = item
                    .get("from")
                    .and_then(|f| f.as_array())
                    .map(|list| {
                        list.iter().filter_map(|n| n.as_u64()).map(|n| n as usize).collect()
                    })
                    .unwrap_or_default();
                ops.push((op, from));
            }
            None => malformed.push(item.to_string()),
        }
    }
    ops
}

/// The sources of a consolidated operation: those of the proposals numbered `from` (from 1),
/// or of every proposal when it names none.
fn sources_of(proposals: &[Proposal], from: &[usize]) -> Vec<RuleSource> {
    let chosen: Vec<&Proposal> = if from.is_empty() {
        proposals.iter().collect()
    } else {
        from.iter().filter_map(|n| n.checked_sub(1).and_then(|i| proposals.get(i))).collect()
    };
    let mut sources = Vec::new();
    super::ops::merge_sources(
        &mut sources,
        &chosen.iter().map(|p| p.source.clone()).collect::<Vec<_>>(),
    );
    sources
}

/// Whether `error` is a reply that stayed unusable after the re-asks (not a transport error,
/// which fails the step so that a rerun asks again).
fn unusable_reply(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        matches!(
            cause.downcast_ref::<crate::llm::Error>(),
            Some(crate::llm::Error::SchemaInvalid { .. })
        )
    })
}

/// The guard's refusal of a proposed operation's text, if any.
fn guard_op(guard: &LeakGuard, op: &SourcedOp) -> Option<super::guard::Refusal> {
    match &op.op {
        super::ops::Op::Add { text } | super::ops::Op::Update { text, .. } => {
            guard.check(text).err()
        }
        super::ops::Op::Delete { .. } => None,
    }
}

/// Questions with at least one attempt judged right and one judged wrong.
pub fn mixed_questions(attempts: &[Attempt]) -> Vec<String> {
    let mut outcomes: BTreeMap<&str, (bool, bool)> = BTreeMap::new();
    for attempt in attempts {
        let entry = outcomes.entry(&attempt.question_id).or_default();
        match attempt.correct {
            Some(true) => entry.0 = true,
            Some(false) => entry.1 = true,
            None => {}
        }
    }
    outcomes
        .into_iter()
        .filter(|(_, (right, wrong))| *right && *wrong)
        .map(|(id, _)| id.to_string())
        .collect()
}

/// The rules as the learning prompts show them.
fn rules_text(rules: &RuleSet) -> String {
    if rules.is_empty() {
        return "(none yet)".into();
    }
    rules
        .rules
        .iter()
        .map(|rule| format!("{}: {}", rule.id, rule.text))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The step kept: the best validation accuracy; ties to fewer rules, then to the earlier step.
pub fn choose(records: &[StepRecord]) -> u32 {
    let mut best = 0;
    for (index, record) in records.iter().enumerate() {
        let kept = &records[best];
        let better = record.validation.accuracy > kept.validation.accuracy
            || (record.validation.accuracy == kept.validation.accuracy
                && record.rules.rules.len() < kept.rules.rules.len());
        if better {
            best = index;
        }
    }
    best as u32
}

/// A step's record, if it was written (a damaged one is an error naming it).
pub(super) fn read_record(path: &std::path::Path) -> anyhow::Result<Option<StepRecord>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(serde_json::from_str(&text).map_err(|error| {
            anyhow::anyhow!("{} is damaged ({error}); delete it to redo that step", path.display())
        })?)),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(anyhow::anyhow!("reading {}: {error}", path.display())),
    }
}

/// Writes a step's record (temporary file and rename).
pub(super) fn write_record(path: &std::path::Path, record: &StepRecord) -> anyhow::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    crate::fsutil::write_atomic(path, serde_json::to_string_pretty(record)?)
}
