//! LLM-as-judge: the LoCoMo judge protocols (`mem0`, the published generous CORRECT/WRONG
//! protocol, and `strict`, ours) for categories 1–4, LongMemEval's per-type judging, and a
//! user-supplied prompt; with an on-disk, resumable cache of verdicts.
//!
//! Built-in prompts ask for JSON `{"reason": <one sentence>, "label": "CORRECT"|"WRONG"}`
//! through [`chat_json`], which validates it and re-asks on malformed output; transport faults
//! are retried by the client stack below the [`ChatModel`]. A user prompt (`--judge-prompt`) is
//! sent as written and its reply read leniently (see [`read_custom_reply`]). Each finished
//! judgement is appended to `judgements.jsonl` at once, keyed by question id, judge model,
//! prompt version, run index and a hash of (question, gold, prediction): a rerun, or a resumed
//! interrupted run, judges only what is missing, and a changed prediction or gold is judged
//! afresh.
//!
//! Not done here: turning verdicts into accuracies (`report`).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;

use anyhow::Context as _;
use futures::StreamExt as _;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use super::ItemScore;
use crate::dataset::DatasetKind;
use crate::llm::structured::chat_json;
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
    /// Verdicts taken from the cache.
    pub cached: usize,
    /// Verdicts obtained from the model now.
    pub new: usize,
    /// Judgements that failed (not cached, so a rerun tries again).
    pub failed: usize,
    /// Tokens spent now (judgements that failed after a reply are not included: a failed
    /// structured call does not report its usage).
    pub usage: Usage,
    /// Tokens of every verdict this report uses, cached ones included (what judging the run
    /// cost in total).
    pub usage_total: Usage,
}

/// One line of `judgements.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JudgementRecord {
    /// Question id.
    pub question_id: String,
    /// Judge run index.
    pub run: u32,
    /// Judge model id.
    pub judge_model: String,
    /// Prompt name.
    pub prompt: String,
    /// Prompt version (hash of its text).
    pub prompt_version: String,
    /// First 16 hex digits of SHA-256 over question, gold and prediction.
    pub input_hash: String,
    /// The gold answer judged against (the dataset's, or the audit's correction).
    pub gold: String,
    /// Accepted?
    pub correct: bool,
    /// The judge's reason.
    pub reason: String,
    /// Tokens of this judgement (all attempts).
    pub usage: Usage,
    /// Model calls made (1 when the first reply was valid).
    pub attempts: u32,
}

impl JudgementRecord {
    fn key(&self) -> CacheKey {
        CacheKey {
            question_id: self.question_id.clone(),
            run: self.run,
            judge_model: self.judge_model.clone(),
            prompt_version: self.prompt_version.clone(),
            input_hash: self.input_hash.clone(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct CacheKey {
    question_id: String,
    run: u32,
    judge_model: String,
    prompt_version: String,
    input_hash: String,
}

/// Which gold an item is judged against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GoldKind {
    Raw,
    Audited,
}

/// One judgement to make (or find in the cache).
struct Task {
    item_index: usize,
    gold_kind: GoldKind,
    run: u32,
    prompt: JudgePrompt,
    question_id: String,
    question: String,
    gold: String,
    prediction: String,
    input_hash: String,
}

impl Task {
    fn key(&self, judge_model: &str) -> CacheKey {
        CacheKey {
            question_id: self.question_id.clone(),
            run: self.run,
            judge_model: judge_model.to_string(),
            prompt_version: self.prompt.version(),
            input_hash: self.input_hash.clone(),
        }
    }
}

/// Judge every judgeable item `settings.runs` times (and, for audited items with a corrected
/// gold, against the correction too), reusing verdicts cached in `cache_path` and appending new
/// ones to it as they arrive; with no cache file (`learn`, whose judge is on its run's tape,
/// which answers a repeated judgement) every verdict is asked of `model`. Verdicts are attached
/// to `items` in run order.
pub async fn judge_items<M: ChatModel>(
    model: &M,
    settings: &JudgeSettings,
    items: &mut [ItemScore],
    cache_path: Option<&Path>,
) -> anyhow::Result<JudgeStats> {
    let (cache, ends_cleanly) = match cache_path {
        Some(path) => read_cache(path)?,
        None => (BTreeMap::new(), true),
    };
    let tasks = plan(settings, items);
    let mut outcomes = Outcomes::default();
    let mut pending = Vec::new();
    for task in tasks {
        if let Some(record) = cache.get(&task.key(&settings.model)) {
            outcomes.stats.cached += 1;
            outcomes.stats.usage_total += record.usage;
            let verdict =
                Verdict { run: task.run, correct: record.correct, reason: record.reason.clone() };
            outcomes.results.push((task.item_index, task.gold_kind, verdict));
        } else {
            pending.push(task);
        }
    }
    if !pending.is_empty() {
        judge_pending(model, settings, pending, cache_path, ends_cleanly, &mut outcomes).await?;
    }
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

/// Ask the model for every task not in the cache, appending each record to the cache file (if
/// any) as it arrives.
async fn judge_pending<M: ChatModel>(
    model: &M,
    settings: &JudgeSettings,
    pending: Vec<Task>,
    cache_path: Option<&Path>,
    ends_cleanly: bool,
    outcomes: &mut Outcomes,
) -> anyhow::Result<()> {
    let mut file = cache_path.map(|path| open_cache(path, ends_cleanly)).transpose()?;
    // In-flight limit: at most `concurrency` judge requests run at once; the stream is
    // polled by this task alone, so the cache file has a single writer.
    let mut stream = futures::stream::iter(pending)
        .map(|task| async move {
            // The judge's calls carry their work item on the tape, as the run's do.
            let label = format!(
                "judging question {} ({}, run {})",
                task.question_id,
                task.prompt.name(),
                task.run
            );
            let outcome =
                crate::llm::tape::within(label, judge_one(model, &settings.model, &task)).await;
            (task, outcome)
        })
        .buffer_unordered(settings.concurrency.max(1));
    while let Some((task, outcome)) = stream.next().await {
        match outcome {
            Ok(record) => {
                if let (Some(file), Some(path)) = (file.as_mut(), cache_path) {
                    let line = serde_json::to_string(&record).context("serialising a judgement")?;
                    writeln!(file, "{line}")
                        .and_then(|()| file.flush())
                        .with_context(|| format!("writing {}", path.display()))?;
                }
                outcomes.stats.new += 1;
                outcomes.stats.usage += record.usage;
                outcomes.stats.usage_total += record.usage;
                let verdict =
                    Verdict { run: task.run, correct: record.correct, reason: record.reason };
                outcomes.results.push((task.item_index, task.gold_kind, verdict));
            }
            Err(error) => {
                outcomes.stats.failed += 1;
                outcomes.failures.push((task.item_index, task.gold_kind, task.run));
                tracing::warn!(question_id = %task.question_id, run = task.run, error = %error, "judgement failed");
            }
        }
    }
    Ok(())
}

/// Open the cache file for appending (creating it and its directory).
fn open_cache(cache_path: &Path, ends_cleanly: bool) -> anyhow::Result<std::fs::File> {
    if let Some(parent) = cache_path.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    let mut options = std::fs::OpenOptions::new();
    options.create(true).append(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, super::OUTPUT_MODE);
    let mut file =
        options.open(cache_path).with_context(|| format!("opening {}", cache_path.display()))?;
    // An interrupted write can leave a torn last line; start on a fresh line so the next
    // record is not glued to it.
    if !ends_cleanly {
        writeln!(file).with_context(|| format!("writing {}", cache_path.display()))?;
    }
    Ok(file)
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
            let input_hash = input_hash(&item.question, &gold, &item.prediction);
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
                    input_hash: input_hash.clone(),
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
) -> anyhow::Result<JudgementRecord> {
    let text = task.prompt.render(&task.question, &task.gold, &task.prediction)?;
    let mut request = ChatRequest::new(judge_model, vec![ChatMessage::user(text)]);
    request.temperature = Some(0.0);
    request.for_step(Some(crate::llm::Step::Judge), model);
    // The run index is the seed, so repeated runs are distinct requests even to a
    // request-level cache.
    request.seed = Some(i64::from(task.run));
    let (correct, reason, usage, attempts) = match &task.prompt {
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
            (label == "CORRECT", reason, response.usage, response.attempts)
        }
        JudgePrompt::Custom(_) => {
            let response = model.chat(&request).await?;
            let reply = response.message.content.unwrap_or_default();
            let (correct, reason) = read_custom_reply(&reply);
            (correct, reason, response.usage, 1)
        }
    };
    Ok(JudgementRecord {
        question_id: task.question_id.clone(),
        run: task.run,
        judge_model: judge_model.to_string(),
        prompt: task.prompt.name().to_string(),
        prompt_version: task.prompt.version(),
        input_hash: task.input_hash.clone(),
        gold: task.gold.clone(),
        correct,
        reason,
        usage,
        attempts,
    })
}

fn input_hash(question: &str, gold: &str, prediction: &str) -> String {
    let mut hasher = Sha256::new();
    for part in [question, gold, prediction] {
        hasher.update(part.as_bytes());
        hasher.update([0u8]);
    }
    hasher.finalize().iter().take(8).map(|byte| format!("{byte:02x}")).collect()
}

/// Read the cache; a torn last line (an interrupted write) is skipped with a warning. Also
/// says whether the file ends with a complete line (an absent or empty file does).
fn read_cache(path: &Path) -> anyhow::Result<(BTreeMap<CacheKey, JudgementRecord>, bool)> {
    let mut cache = BTreeMap::new();
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok((cache, true)),
        Err(error) => return Err(error).with_context(|| format!("reading {}", path.display())),
    };
    for (number, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<JudgementRecord>(line) {
            Ok(record) => {
                cache.insert(record.key(), record);
            }
            Err(error) => {
                tracing::warn!(path = %path.display(), line = number + 1, error = %error, "skipping unreadable judgement");
            }
        }
    }
    let ends_cleanly = text.is_empty() || text.ends_with('\n');
    Ok((cache, ends_cleanly))
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
