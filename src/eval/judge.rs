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
use serde_json::json;
use sha2::{Digest as _, Sha256};

use super::ItemScore;
use crate::dataset::{Category, DatasetKind};
use crate::llm::structured::{chat_json, extract_json};
use crate::llm::{ChatModel, ChatRequest, JsonSchemaSpec, Message, Usage};
use crate::prompts::{self, Prompt};
use crate::results::Status;

/// Re-asks allowed when the judge's reply is not valid JSON of the expected shape.
const MAX_REASKS: u32 = 2;
/// Completion cap for one judgement (one sentence plus the label).
const MAX_TOKENS: u32 = 200;

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

/// Which LoCoMo judge protocol to follow (LongMemEval always uses its per-type rules).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JudgeProtocol {
    /// The published LoCoMo J protocol (Mem0's paper and the systems that compare with it):
    /// categories 1–4, a generous CORRECT/WRONG grade with a one-sentence reason.
    #[default]
    Mem0,
    /// Ours: categories 1–4, CORRECT only when the answer commits to the gold fact at the gold
    /// answer's precision, with nothing wrong added.
    Strict,
}

impl JudgeProtocol {
    /// The name used on the command line and in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            JudgeProtocol::Mem0 => "mem0",
            JudgeProtocol::Strict => "strict",
        }
    }
}

/// A judge prompt read from a file (`--judge-prompt`). Its slots are `{{question}}`,
/// `{{gold}}` and `{{prediction}}`; every one must appear and no other `{{…}}` slot may.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CustomPrompt {
    /// `custom:<file name>`, as recorded in judgements.
    pub name: String,
    /// The template text.
    pub text: String,
}

/// A custom judge prompt that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CustomPromptError {
    /// The file could not be read.
    #[error("reading the judge prompt {}: {source}", path.display())]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// The IO error.
        source: std::io::Error,
    },
    /// A required slot is missing or an unknown one is present.
    #[error("judge prompt {}: {problem} (slots: {{{{question}}}}, {{{{gold}}}}, {{{{prediction}}}})", path.display())]
    Slots {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong.
        problem: String,
    },
}

/// The slots a judge prompt fills.
pub const JUDGE_SLOTS: [&str; 3] = ["question", "gold", "prediction"];

impl CustomPrompt {
    /// Read a prompt file and check its slots.
    pub fn load(path: &Path) -> Result<Self, CustomPromptError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| CustomPromptError::Io { path: path.to_path_buf(), source })?;
        let found = slots_in(&text);
        let missing: Vec<&str> =
            JUDGE_SLOTS.iter().copied().filter(|slot| !found.contains(slot)).collect();
        let unknown: Vec<&str> =
            found.iter().copied().filter(|slot| !JUDGE_SLOTS.contains(slot)).collect();
        let problem = match (missing.is_empty(), unknown.is_empty()) {
            (true, true) => None,
            (false, _) => Some(format!("missing slot(s) {}", braces(&missing))),
            (true, false) => Some(format!("unknown slot(s) {}", braces(&unknown))),
        };
        if let Some(problem) = problem {
            return Err(CustomPromptError::Slots { path: path.to_path_buf(), problem });
        }
        let file = path
            .file_name()
            .map_or_else(|| path.display().to_string(), |name| name.to_string_lossy().into_owned());
        Ok(Self { name: format!("custom:{file}"), text })
    }

    /// First 12 hex digits of the SHA-256 of the text (as for built-in prompts).
    pub fn version(&self) -> String {
        let digest = Sha256::digest(self.text.as_bytes());
        digest.iter().take(6).map(|byte| format!("{byte:02x}")).collect()
    }

    fn render(&self, question: &str, gold: &str, prediction: &str) -> String {
        // Slots were checked at load time; each is replaced by its value.
        let mut out = self.text.clone();
        for (slot, value) in JUDGE_SLOTS.iter().zip([question, gold, prediction]) {
            out = out.replace(&format!("{{{{{slot}}}}}"), value);
        }
        out
    }
}

/// The `{{name}}` slots of a template (names of ASCII letters, digits and `_`), sorted.
fn slots_in(text: &str) -> std::collections::BTreeSet<&str> {
    let mut names = std::collections::BTreeSet::new();
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else { break };
        let name = &after[..end];
        if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            names.insert(name);
        }
        rest = &after[end + 2..];
    }
    names
}

fn braces(slots: &[&str]) -> String {
    slots.iter().map(|slot| format!("{{{{{slot}}}}}")).collect::<Vec<_>>().join(", ")
}

/// The prompt one judgement uses.
#[derive(Debug, Clone)]
pub enum JudgePrompt {
    /// A prompt shipped in `prompts/`; the reply must be the JSON verdict.
    Builtin(Prompt),
    /// The user's prompt; the reply is read by [`read_custom_reply`].
    Custom(std::sync::Arc<CustomPrompt>),
}

impl JudgePrompt {
    /// Prompt name as recorded in judgements.
    pub fn name(&self) -> &str {
        match self {
            JudgePrompt::Builtin(prompt) => prompt.name,
            JudgePrompt::Custom(prompt) => &prompt.name,
        }
    }

    /// Prompt version (hash of the text); part of the cache key.
    pub fn version(&self) -> String {
        match self {
            JudgePrompt::Builtin(prompt) => prompt.version(),
            JudgePrompt::Custom(prompt) => prompt.version(),
        }
    }

    fn render(&self, question: &str, gold: &str, prediction: &str) -> anyhow::Result<String> {
        Ok(match self {
            JudgePrompt::Builtin(prompt) => prompt.render(&[
                ("question", question),
                ("gold", gold),
                ("prediction", prediction),
            ])?,
            JudgePrompt::Custom(prompt) => prompt.render(question, gold, prediction),
        })
    }
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

/// The prompt for an item, or `None` when the protocol does not judge it. LoCoMo: categories
/// 1–4 only (both protocols; category 5 is scored by the refusal rule), with the protocol's
/// prompt. LongMemEval: every question, abstention (`_abs`) questions with the abstention
/// rule, the others with their question type's rule. A custom prompt replaces whichever
/// built-in prompt would have been used.
pub fn prompt_for(
    settings: &JudgeSettings,
    question_id: &str,
    category: &Category,
) -> Option<JudgePrompt> {
    let builtin = builtin_prompt(settings.dataset, settings.protocol, question_id, category)?;
    Some(match &settings.custom {
        Some(custom) => JudgePrompt::Custom(std::sync::Arc::clone(custom)),
        None => JudgePrompt::Builtin(builtin),
    })
}

/// The built-in prompt for an item (see [`prompt_for`]).
pub fn builtin_prompt(
    dataset: DatasetKind,
    protocol: JudgeProtocol,
    question_id: &str,
    category: &Category,
) -> Option<Prompt> {
    match (dataset, category) {
        (DatasetKind::Locomo, Category::Locomo(1..=4)) => Some(match protocol {
            JudgeProtocol::Mem0 => prompts::JUDGE_LOCOMO,
            JudgeProtocol::Strict => prompts::JUDGE_LOCOMO_STRICT,
        }),
        (DatasetKind::Locomo, _) => None,
        (DatasetKind::LongMemEval, _) if question_id.ends_with("_abs") => {
            Some(prompts::JUDGE_LONGMEMEVAL_ABSTENTION)
        }
        (DatasetKind::LongMemEval, category) => Some(match category.name() {
            "temporal-reasoning" => prompts::JUDGE_LONGMEMEVAL_TEMPORAL,
            "knowledge-update" => prompts::JUDGE_LONGMEMEVAL_KNOWLEDGE_UPDATE,
            "single-session-preference" => prompts::JUDGE_LONGMEMEVAL_PREFERENCE,
            _ => prompts::JUDGE_LONGMEMEVAL,
        }),
    }
}

/// Read a reply to a custom prompt: when it holds a JSON object with a string `label`, the
/// verdict is CORRECT exactly when the label is `CORRECT` (any case; the Mem0 format), and the
/// reason is its `reason` field if any; otherwise the verdict is CORRECT when the lowercased
/// reply contains `yes` (LongMemEval's rule) and the reason is the reply itself.
pub fn read_custom_reply(reply: &str) -> (bool, String) {
    if let Ok(value) = extract_json(reply)
        && let Some(label) = value.get("label").and_then(|label| label.as_str())
    {
        let reason = value.get("reason").and_then(|reason| reason.as_str()).unwrap_or_default();
        return (label.trim().eq_ignore_ascii_case("correct"), reason.to_string());
    }
    (reply.to_lowercase().contains("yes"), reply.trim().to_string())
}

/// The JSON Schema every judge reply must satisfy.
pub fn verdict_schema() -> JsonSchemaSpec {
    JsonSchemaSpec {
        name: "judge_verdict".into(),
        schema: json!({
            "type": "object",
            "properties": {
                "reason": {"type": "string"},
                "label": {"type": "string", "enum": ["CORRECT", "WRONG"]}
            },
            "required": ["reason", "label"],
            "additionalProperties": false
        }),
    }
}

/// Judge every judgeable item `settings.runs` times (and, for audited items with a corrected
/// gold, against the correction too), reusing verdicts cached in `cache_path` and appending new
/// ones to it as they arrive. Verdicts are attached to `items` in run order.
pub async fn judge_items<M: ChatModel>(
    model: &M,
    settings: &JudgeSettings,
    items: &mut [ItemScore],
    cache_path: &Path,
) -> anyhow::Result<JudgeStats> {
    let (cache, ends_cleanly) = read_cache(cache_path)?;
    let tasks = plan(settings, items);
    let mut stats = JudgeStats::default();
    let mut results: Vec<(usize, GoldKind, Verdict)> = Vec::new();
    let mut failures: Vec<(usize, GoldKind, u32)> = Vec::new();
    let mut pending = Vec::new();
    for task in tasks {
        if let Some(record) = cache.get(&task.key(&settings.model)) {
            stats.cached += 1;
            stats.usage_total += record.usage;
            let verdict =
                Verdict { run: task.run, correct: record.correct, reason: record.reason.clone() };
            results.push((task.item_index, task.gold_kind, verdict));
        } else {
            pending.push(task);
        }
    }

    if !pending.is_empty() {
        if let Some(parent) = cache_path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        let mut options = std::fs::OpenOptions::new();
        options.create(true).append(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, super::OUTPUT_MODE);
        let mut file = options
            .open(cache_path)
            .with_context(|| format!("opening {}", cache_path.display()))?;
        // An interrupted write can leave a torn last line; start on a fresh line so the next
        // record is not glued to it.
        if !ends_cleanly {
            writeln!(file).with_context(|| format!("writing {}", cache_path.display()))?;
        }
        // In-flight limit: at most `concurrency` judge requests run at once; the stream is
        // polled by this task alone, so the cache file has a single writer.
        let mut stream = futures::stream::iter(pending)
            .map(|task| async move {
                let outcome = judge_one(model, &settings.model, &task).await;
                (task, outcome)
            })
            .buffer_unordered(settings.concurrency.max(1));
        while let Some((task, outcome)) = stream.next().await {
            match outcome {
                Ok(record) => {
                    let line = serde_json::to_string(&record).context("serialising a judgement")?;
                    writeln!(file, "{line}")
                        .and_then(|()| file.flush())
                        .with_context(|| format!("writing {}", cache_path.display()))?;
                    stats.new += 1;
                    stats.usage += record.usage;
                    stats.usage_total += record.usage;
                    let verdict =
                        Verdict { run: task.run, correct: record.correct, reason: record.reason };
                    results.push((task.item_index, task.gold_kind, verdict));
                }
                Err(error) => {
                    stats.failed += 1;
                    failures.push((task.item_index, task.gold_kind, task.run));
                    tracing::warn!(question_id = %task.question_id, run = task.run, error = %error, "judgement failed");
                }
            }
        }
    }

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
    Ok(stats)
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
    let mut request = ChatRequest::new(judge_model, vec![Message::user(text)]);
    request.temperature = Some(0.0);
    request.max_tokens = Some(MAX_TOKENS);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocol_picks_the_prompt_by_dataset_type_and_abstention() {
        let locomo = |protocol, n| {
            builtin_prompt(DatasetKind::Locomo, protocol, "conv-26:q1", &Category::Locomo(n))
                .map(|p| p.name)
        };
        assert_eq!(locomo(JudgeProtocol::Mem0, 1), Some("judge_locomo"));
        assert_eq!(locomo(JudgeProtocol::Mem0, 4), Some("judge_locomo"));
        assert_eq!(locomo(JudgeProtocol::Strict, 2), Some("judge_locomo_strict"));
        assert_eq!(locomo(JudgeProtocol::Mem0, 5), None);
        assert_eq!(locomo(JudgeProtocol::Strict, 5), None);
        let lm = |id: &str, kind: &str| {
            builtin_prompt(
                DatasetKind::LongMemEval,
                JudgeProtocol::Strict,
                id,
                &Category::LongMemEval(kind.into()),
            )
            .map(|p| p.name)
        };
        assert_eq!(lm("e47becba", "single-session-user"), Some("judge_longmemeval"));
        assert_eq!(lm("gpt4_1", "multi-session"), Some("judge_longmemeval"));
        assert_eq!(lm("x", "temporal-reasoning"), Some("judge_longmemeval_temporal"));
        assert_eq!(lm("x", "knowledge-update"), Some("judge_longmemeval_knowledge_update"));
        assert_eq!(lm("x", "single-session-preference"), Some("judge_longmemeval_preference"));
        assert_eq!(lm("031748ae_abs", "multi-session"), Some("judge_longmemeval_abstention"));
    }

    #[test]
    fn custom_replies_read_json_labels_or_yes() {
        assert_eq!(
            read_custom_reply(r#"{"reason": "same", "label": "CORRECT"}"#),
            (true, "same".into())
        );
        assert_eq!(read_custom_reply(r#"Sure: {"label": "WRONG"}"#), (false, String::new()));
        assert_eq!(read_custom_reply(" Yes."), (true, "Yes.".into()));
        assert_eq!(read_custom_reply("no"), (false, "no".into()));
    }

    #[test]
    fn custom_prompt_slots_are_checked() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("mine.txt");
        std::fs::write(&path, "Q {{question}} G {{gold}} R {{prediction}}").unwrap();
        let prompt = CustomPrompt::load(&path).unwrap();
        assert_eq!(prompt.name, "custom:mine.txt");
        assert_eq!(prompt.render("q?", "g", "r"), "Q q? G g R r");
        std::fs::write(&path, "Q {{question}} R {{prediction}}").unwrap();
        let error = CustomPrompt::load(&path).unwrap_err().to_string();
        assert!(error.contains("missing slot(s) {{gold}}"), "{error}");
        std::fs::write(&path, "{{question}} {{gold}} {{prediction}} {{answer}}").unwrap();
        let error = CustomPrompt::load(&path).unwrap_err().to_string();
        assert!(error.contains("unknown slot(s) {{answer}}"), "{error}");
    }

    #[test]
    fn every_judge_prompt_takes_question_gold_and_prediction() {
        for prompt in [
            prompts::JUDGE_LOCOMO,
            prompts::JUDGE_LOCOMO_STRICT,
            prompts::JUDGE_LONGMEMEVAL,
            prompts::JUDGE_LONGMEMEVAL_TEMPORAL,
            prompts::JUDGE_LONGMEMEVAL_KNOWLEDGE_UPDATE,
            prompts::JUDGE_LONGMEMEVAL_PREFERENCE,
            prompts::JUDGE_LONGMEMEVAL_ABSTENTION,
        ] {
            let text =
                prompt.render(&[("question", "Q?"), ("gold", "G"), ("prediction", "P")]).unwrap();
            assert!(
                text.contains("Q?") && text.contains("G") && text.contains("P"),
                "{}",
                prompt.name
            );
        }
    }

    #[test]
    fn input_hash_separates_fields() {
        assert_ne!(input_hash("ab", "c", "d"), input_hash("a", "bc", "d"));
        assert_eq!(input_hash("a", "b", "c"), input_hash("a", "b", "c"));
        assert_eq!(input_hash("a", "b", "c").len(), 16);
    }
}
