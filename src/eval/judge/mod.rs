//! LLM-as-judge: the LoCoMo judge protocols (`mem0`, the published generous CORRECT/WRONG
//! protocol, and `strict`, ours) for categories 1–4, LongMemEval's per-type judging, and a
//! user-supplied prompt.
//!
//! Built-in prompts ask for JSON `{"reason": <one sentence>, "label": "CORRECT"|"WRONG"}`
//! through [`chat_json`], which validates it and re-asks on malformed output; transport faults
//! are retried by the client stack below the [`ChatModel`]. A user prompt (`--judge-prompt`) is
//! sent as written and its reply read leniently (see [`read_custom_reply`]).
//!
//! Verdicts are kept nowhere here: the judge given is taped (`eval`'s, `compare`'s, a `learn`
//! run's tape), so a rerun, or a resumed interrupted run, is answered from the tape and sends
//! only the judgements not recorded; a changed prediction or gold is a new request, judged
//! afresh. A judgement that failed on the tape (a reply that could not be read) is asked afresh
//! by the next run ([`afresh_on_failure`]).
//!
//! Not done here: turning verdicts into accuracies (`report`).

use futures::StreamExt as _;
use serde::{Deserialize, Serialize};

use super::ItemScore;
use crate::dataset::DatasetKind;
use crate::llm::structured::chat_json;
use crate::llm::tape::afresh_on_failure;
use crate::llm::{ChatMessage, ChatModel, ChatRequest, Usage};
use crate::results::Status;

mod prompt;

pub use self::prompt::{
    CustomPrompt, CustomPromptError, JUDGE_SLOTS, JudgePrompt, JudgeProtocol, ProtocolMismatch,
    builtin_prompt, prompt_for, read_custom_reply, verdict_schema,
};

/// Re-asks allowed when the judge's reply is not valid JSON of the expected shape.
const MAX_REASKS: u32 = 2;

/// One judge verdict on one answer in one judge run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    /// Judge run index (0-based; `--judge-runs N` gives runs 0..N).
    pub run: u32,
    /// Whether the judge accepted the answer.
    pub correct: bool,
    /// The judge's one-line reason.
    pub reason: String,
}

/// How to judge.
#[derive(Debug, Clone)]
pub struct JudgeSettings {
    /// Judge model id sent in requests.
    pub model: String,
    /// Independent runs per question.
    pub runs: u32,
    /// Requests in flight at once.
    pub concurrency: usize,
    /// Dataset, which decides which questions are judged and with which rules.
    pub dataset: DatasetKind,
    /// LoCoMo protocol.
    pub protocol: JudgeProtocol,
    /// A user prompt that replaces the built-in ones.
    pub custom: Option<std::sync::Arc<CustomPrompt>>,
}

/// Counts of one judging pass.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JudgeStats {
    /// Verdicts answered from the judge's tape alone (recorded by an earlier run).
    pub cached: usize,
    /// Verdicts that sent a request to the model now.
    pub new: usize,
    /// Judgements that failed (asked afresh by the next run).
    pub failed: usize,
    /// Tokens spent now (judgements that failed after a reply are not included: a failed
    /// structured call does not report its usage).
    pub usage: Usage,
    /// Tokens of every verdict this report uses, taped ones included (what judging the run
    /// cost in total).
    pub usage_total: Usage,
}

/// One verdict obtained, with what it took.
struct Judgement {
    correct: bool,
    reason: String,
    /// Tokens of this judgement (all attempts, replayed ones included).
    usage: Usage,
}

/// Which gold an item is judged against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GoldKind {
    Raw,
    Audited,
}

/// One judgement to make (or answer from the tape).
struct Task {
    item_index: usize,
    gold_kind: GoldKind,
    run: u32,
    prompt: JudgePrompt,
    question_id: String,
    question: String,
    gold: String,
    prediction: String,
}

/// Judge every judgeable item `settings.runs` times (and, for audited items with a corrected
/// gold, against the correction too) by asking `model`, whose tape answers what an earlier run
/// recorded. Verdicts are attached to `items` in run order.
pub async fn judge_items<M: ChatModel>(
    model: &M,
    settings: &JudgeSettings,
    items: &mut [ItemScore],
) -> anyhow::Result<JudgeStats> {
    let tasks = plan(settings, items);
    let mut outcomes = Outcomes::default();
    judge_pending(model, settings, tasks, &mut outcomes).await;
    attach(items, outcomes.results, outcomes.failures);
    Ok(outcomes.stats)
}

/// What one judging pass found: counts, verdicts and failed runs per (item, gold).
#[derive(Default)]
struct Outcomes {
    stats: JudgeStats,
    results: Vec<(usize, GoldKind, Verdict)>,
    failures: Vec<(usize, GoldKind, u32)>,
}

/// Ask the model for every task; a verdict whose calls were all answered from the tape counts
/// as cached, any other as new.
async fn judge_pending<M: ChatModel>(
    model: &M,
    settings: &JudgeSettings,
    pending: Vec<Task>,
    outcomes: &mut Outcomes,
) {
    // In-flight limit: at most `concurrency` judge requests run at once.
    let mut stream = futures::stream::iter(pending)
        .map(|task| async move {
            // The judge's calls carry their work item on the tape, as the run's do.
            let label = format!(
                "judging question {} ({}, run {})",
                task.question_id,
                task.prompt.name(),
                task.run
            );
            let attempt = || judge_one(model, &settings.model, &task);
            let outcome = crate::llm::tape::within(label, afresh_on_failure(attempt)).await;
            (task, outcome)
        })
        .buffer_unordered(settings.concurrency.max(1));
    while let Some((task, (outcome, calls))) = stream.next().await {
        match outcome {
            Ok(judgement) => {
                if calls.from_tape() {
                    outcomes.stats.cached += 1;
                } else {
                    outcomes.stats.new += 1;
                }
                // An untaped judge spent every token now; a taped one what its tape sent.
                outcomes.stats.usage +=
                    if calls.untaped() { judgement.usage } else { calls.usage_sent };
                outcomes.stats.usage_total += judgement.usage;
                let verdict =
                    Verdict { run: task.run, correct: judgement.correct, reason: judgement.reason };
                outcomes.results.push((task.item_index, task.gold_kind, verdict));
            }
            Err(error) => {
                outcomes.stats.failed += 1;
                outcomes.failures.push((task.item_index, task.gold_kind, task.run));
                tracing::warn!(question_id = %task.question_id, run = task.run, error = %error, "judgement failed");
            }
        }
    }
}

/// Attach verdicts and failed runs to their items (raw or audited gold), in run order.
fn attach(
    items: &mut [ItemScore],
    results: Vec<(usize, GoldKind, Verdict)>,
    failures: Vec<(usize, GoldKind, u32)>,
) {
    for (item_index, gold_kind, verdict) in results {
        let item = &mut items[item_index];
        match gold_kind {
            GoldKind::Raw => item.judge.push(verdict),
            GoldKind::Audited => {
                if let Some(audited) = item.audit.as_mut() {
                    audited.judge.push(verdict);
                }
            }
        }
    }
    for (item_index, gold_kind, run) in failures {
        let item = &mut items[item_index];
        match gold_kind {
            GoldKind::Raw => item.judge_failed.push(run),
            GoldKind::Audited => {
                if let Some(audited) = item.audit.as_mut() {
                    audited.judge_failed.push(run);
                }
            }
        }
    }
    for item in items.iter_mut() {
        item.judge.sort_by_key(|verdict| verdict.run);
        item.judge_failed.sort_unstable();
        if let Some(audited) = item.audit.as_mut() {
            audited.judge_failed.sort_unstable();
        }
        if let Some(audited) = item.audit.as_mut() {
            audited.judge.sort_by_key(|verdict| verdict.run);
        }
    }
}

/// Items whose answering failed have no prediction to judge: they get a WRONG verdict for every
/// run without a model call (the reference judge sees the literal `ERROR` and rejects it too).
fn plan(settings: &JudgeSettings, items: &mut [ItemScore]) -> Vec<Task> {
    let mut tasks = Vec::new();
    for (item_index, item) in items.iter_mut().enumerate() {
        item.judge.clear();
        item.judge_failed.clear();
        if let Some(audited) = item.audit.as_mut() {
            audited.judge.clear();
            audited.judge_failed.clear();
        }
        let Some(prompt) = prompt_for(settings, &item.question_id, &item.category) else {
            continue;
        };
        let mut golds = vec![(GoldKind::Raw, item.answer.clone().unwrap_or_default())];
        if let Some(corrected) = item.audit.as_ref().and_then(|audited| audited.answer.clone()) {
            golds.push((GoldKind::Audited, corrected));
        }
        if item.status == Status::Error {
            for run in 0..settings.runs {
                let verdict = Verdict {
                    run,
                    correct: false,
                    reason: "answering failed: no prediction to judge".into(),
                };
                item.judge.push(verdict.clone());
                if let Some(audited) =
                    item.audit.as_mut().filter(|audited| audited.answer.is_some())
                {
                    audited.judge.push(verdict);
                }
            }
            continue;
        }
        for (gold_kind, gold) in golds {
            for run in 0..settings.runs {
                tasks.push(Task {
                    item_index,
                    gold_kind,
                    run,
                    prompt: prompt.clone(),
                    question_id: item.question_id.clone(),
                    question: item.question.clone(),
                    gold: gold.clone(),
                    prediction: item.prediction.clone(),
                });
            }
        }
    }
    tasks
}

async fn judge_one<M: ChatModel>(
    model: &M,
    judge_model: &str,
    task: &Task,
) -> anyhow::Result<Judgement> {
    let text = task.prompt.render(&task.question, &task.gold, &task.prediction)?;
    let mut request = ChatRequest::new(judge_model, vec![ChatMessage::user(text)]);
    request.temperature = Some(0.0);
    request.for_step(Some(crate::llm::Step::Judge), model);
    // The run index is the seed, so repeated runs are distinct requests even to a
    // request-level cache.
    request.seed = Some(i64::from(task.run));
    let (correct, reason, usage) = match &task.prompt {
        JudgePrompt::Builtin(_) => {
            let response = chat_json(model, request, &verdict_schema(), MAX_REASKS).await?;
            let label =
                response.value.get("label").and_then(|label| label.as_str()).unwrap_or_default();
            let reason = response
                .value
                .get("reason")
                .and_then(|reason| reason.as_str())
                .unwrap_or_default()
                .to_string();
            (label == "CORRECT", reason, response.usage)
        }
        JudgePrompt::Custom(_) => {
            let response = model.chat(&request).await?;
            let reply = response.message.content.unwrap_or_default();
            let (correct, reason) = read_custom_reply(&reply);
            (correct, reason, response.usage)
        }
    };
    Ok(Judgement { correct, reason, usage })
}

/// The judge the scripted endpoint plays in tests and benchmarks: for a LoCoMo judge request
/// (mem0 or strict prompt), CORRECT when the assistant's answer contains the gold answer
/// (case aside), else WRONG; `None` for any other request.
#[cfg(any(test, feature = "test-support"))]
pub fn scripted_verdict(
    request: &crate::llm::scripted::RecordedRequest,
) -> Option<crate::llm::scripted::ScriptedReply> {
    let text = request.last_message_text();
    if !(text.contains("Gold answer:") && text.contains("Assistant's answer:")) {
        return None;
    }
    let field = |name: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(name))
            .unwrap_or_default()
            .trim()
            .to_lowercase()
    };
    let right = field("Assistant's answer:").contains(&field("Gold answer:"));
    let label = if right { "CORRECT" } else { "WRONG" };
    Some(crate::llm::scripted::ScriptedReply::json(
        &serde_json::json!({"reason": "the answer contains the gold answer, or not", "label": label}),
    ))
}

#[cfg(test)]
mod tests;
