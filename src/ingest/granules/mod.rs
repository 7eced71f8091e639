//! MemGAS's LLM granularities (memgas.md §3.1–§3.2): for every session, a short summary and a
//! list of search keywords, asked of the model in one structured call per session.
//!
//! They follow the build stages' rules. One cache per sample,
//! `data/<dataset>/memgas_<model>/<sample>_granules.json`, in the stages' [`StageCache`] format:
//! its header records the model and the prompt's version, so an edited prompt or another model
//! discards the file with a message saying what changed; each session's entry records a hash of
//! the exact prompt it was made from and is reused only for that input. The file is rewritten
//! atomically after every finished session, so a killed run keeps what it finished. Answers are
//! schema-checked through `llm::structured::chat_json` and then checked here ([`check`]), with
//! re-asks for either kind of problem (the builder's `ask_checked`); a session that stays invalid
//! or whose calls fail is recorded as failed, listed in the [`GranuleSummary`] and asked again by
//! the next run. Sessions run concurrently, at most [`BuildSettings::workers`] at a time across
//! all conversations.
//!
//! Differences from the reference generator, on purpose: one JSON call yields both granularities
//! (the reference makes two free-text calls with no validation); keywords are a list, split and
//! de-duplicated here (the reference keeps the raw semicolon-separated string;
//! [`SessionGranules::keyword_text`] gives that form for embedding); the model sees the session
//! date, so it can resolve relative dates in the summary.

use std::fmt;
use std::path::PathBuf;
use std::sync::Mutex as StdMutex;
use std::time::Instant;

use anyhow::Context as _;
use futures::stream::{self, StreamExt as _, TryStreamExt as _};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::Mutex;

use super::ask::ask_checked;
use super::cache::{PlannedUnit, StageCache, StageProvenance};
use super::progress::human_count;
use super::summary::{SampleFailures, UnitRunSummary};
use super::unit::{INPUT_HASH_BYTES, Unit, plan_units};
use super::workers::{ConversationTally, Ledger, Pool, run_all, settle};
use super::{BuildSettings, FailedUnit, Stage};
use crate::dataset::{Conversation, DatasetKind};
use crate::fsutil::safe_name;
use crate::llm::{ChatModel, JsonSchemaSpec, Usage};
use crate::prompts::{self, PromptError};
use crate::text::short_hash;

/// Longest summary accepted, in characters; a longer one is re-asked. The reference caps the
/// answer at 500 tokens, about this many characters.
const MAX_SUMMARY_CHARS: usize = 2000;

/// Keywords kept per session (the prompt asks for at most 30); the rest are dropped.
const MAX_KEYWORDS: usize = 40;

/// The LLM granularities of one session: what the granule cache stores per session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionGranules {
    /// Session id `D<N>`.
    pub session_id: String,
    /// One short paragraph, trimmed.
    pub summary: String,
    /// Keywords in the model's order: trimmed, split at `;` and line breaks, de-duplicated
    /// ignoring case (first spelling kept); never empty.
    pub keywords: Vec<String>,
}

impl SessionGranules {
    /// The keywords as one text, `a; b; c`: the form MemGAS embeds as the keyword unit.
    pub fn keyword_text(&self) -> String {
        self.keywords.join("; ")
    }
}

/// One conversation's granules as read back from the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConversationGranules {
    /// Sample id.
    pub sample_id: String,
    /// Sessions with valid granules for their current text, in dialogue order.
    pub sessions: Vec<SessionGranules>,
    /// Session ids (`D<N>`) without valid granules: never built, failed, or built from a
    /// session text that has changed since.
    pub missing: Vec<String>,
}

impl ConversationGranules {
    /// The granules of session `session_id` (`D<N>`), if it has valid ones.
    pub fn get(&self, session_id: &str) -> Option<&SessionGranules> {
        self.sessions.iter().find(|session| session.session_id == session_id)
    }

    /// The LLM units of session `session_id` for an index (its summary and keyword text), if
    /// it has valid granules.
    pub fn units_of(&self, session_id: &str) -> Option<(Option<String>, Option<String>)> {
        let found = self.get(session_id)?;
        Some((Some(found.summary.clone()), Some(found.keyword_text())))
    }

    /// Whether every session has granules.
    pub fn is_complete(&self) -> bool {
        self.missing.is_empty()
    }
}

/// What a granule run did for one conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GranuleSampleSummary {
    /// Sample id.
    pub sample_id: String,
    /// Sessions with turns.
    pub sessions: usize,
    /// Of those, sessions taken from the cache.
    pub sessions_reused: usize,
    /// Sessions without valid granules after this run (stage [`Stage::Granules`]).
    pub failed: Vec<FailedUnit>,
    /// Tokens spent on this conversation in this run.
    pub usage: Usage,
    /// Model calls made for this conversation in this run, re-asks included.
    pub chat_calls: u32,
}

/// What a granule run did, for the caller's report.
pub type GranuleSummary = UnitRunSummary<GranuleSampleSummary>;

impl SampleFailures for GranuleSampleSummary {
    fn failures(&self) -> &[FailedUnit] {
        &self.failed
    }
}

impl GranuleSummary {
    /// Model calls made in this run, re-asks included.
    pub fn chat_calls(&self) -> u32 {
        self.samples.iter().map(|sample| sample.chat_calls).sum()
    }
}

impl fmt::Display for GranuleSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sessions: usize = self.samples.iter().map(|sample| sample.sessions).sum();
        let reused: usize = self.samples.iter().map(|sample| sample.sessions_reused).sum();
        writeln!(
            f,
            "granules of {} conversations, {sessions} sessions ({reused} from cache), {} failed, {} calls, {} tokens, {:.1}s",
            self.samples.len(),
            self.failed().count(),
            self.chat_calls(),
            human_count(self.usage.total()),
            self.elapsed.as_secs_f64()
        )?;
        self.write_failures_and_notices(f)
    }
}

impl BuildSettings {
    /// `data/<dataset>/memgas_<model>/<sample>_granules.json`.
    pub fn granules_path(&self, sample_id: &str) -> PathBuf {
        self.dataset_dir()
            .join(format!("memgas_{}", safe_name(&self.model_name, '_')))
            .join(format!("{}_granules.json", safe_name(sample_id, '_')))
    }
}

/// Generate (or finish generating) the summary and keywords of every session of every
/// conversation.
///
/// Sessions with valid cached granules are not asked again; the others are asked of `chat`, at
/// most `settings.workers` at a time. Failed sessions are listed in the summary, not returned as
/// errors; only what would fail every session alike (a rejected key, an unknown model, an
/// unwritable cache) is an error.
pub async fn build_granules<M: ChatModel>(
    settings: &BuildSettings,
    chat: &M,
    conversations: &[Conversation],
) -> anyhow::Result<GranuleSummary> {
    let started = Instant::now();
    let shared = GranuleShared { settings, chat, pool: Pool::new(settings, conversations) };
    tracing::info!(conversations = conversations.len(), model = %settings.model, "granules started");
    let shared_ref = &shared;
    let samples: Vec<GranuleSampleSummary> = stream::iter(conversations)
        .map(|conversation| granules_of(shared_ref, conversation))
        .buffered(settings.workers.max(1))
        .try_collect()
        .await?;
    let (notices, usage) = shared.pool.finish(samples.iter().map(|sample| sample.usage));
    let summary = GranuleSummary { samples, notices, usage, elapsed: started.elapsed() };
    tracing::info!(failed = summary.failed().count(), tokens = usage.total(), "granules finished");
    Ok(summary)
}

/// Read one conversation's granules from the cache, without any model call.
///
/// `None` when no session has valid granules: no cache file, a file made with another prompt
/// version or model (logged as a warning), or nothing finished yet. Otherwise the sessions that
/// have them, and the ids of those that do not.
pub fn load_granules(
    settings: &BuildSettings,
    conversation: &Conversation,
) -> anyhow::Result<Option<ConversationGranules>> {
    let path = settings.granules_path(&conversation.sample_id);
    if !path.try_exists().with_context(|| format!("checking {}", path.display()))? {
        return Ok(None);
    }
    let (cache, notices) = open_cache(settings, conversation)?;
    for notice in notices {
        tracing::warn!("ignoring granules: {notice}");
    }
    let mut sessions = Vec::new();
    let mut missing = Vec::new();
    for session in plan_sessions(conversation)? {
        match cache.done(&session.planned) {
            Some(granules) => sessions.push(granules.clone()),
            None => missing.push(session.unit.label()),
        }
    }
    if sessions.is_empty() {
        return Ok(None);
    }
    Ok(Some(ConversationGranules { sample_id: conversation.sample_id.clone(), sessions, missing }))
}

/// State shared by every session of a run.
struct GranuleShared<'a, M> {
    settings: &'a BuildSettings,
    chat: &'a M,
    /// A session holds a worker permit from its first call until its cache entry is written.
    pool: Pool,
}

/// One session to summarise: its unit (for keys and reports), what its cache entry must
/// match, and the prompt.
struct PlannedSession<'c> {
    unit: Unit<'c>,
    planned: PlannedUnit,
    prompt: String,
}

/// One entry per session with turns, in dialogue order. The input hash is that of the whole
/// prompt, so a changed session text or participant list is asked again.
fn plan_sessions(conversation: &Conversation) -> Result<Vec<PlannedSession<'_>>, PromptError> {
    plan_units(conversation, 1)
        .into_iter()
        .map(|unit| {
            let prompt = render_prompt(conversation, &unit)?;
            let planned = PlannedUnit {
                key: unit.key.clone(),
                first_session: unit.first_session,
                input_hash: short_hash(prompt.as_bytes(), INPUT_HASH_BYTES),
            };
            Ok(PlannedSession { unit, planned, prompt })
        })
        .collect()
}

/// Open (or start) a conversation's granule cache, checked against the model and the prompt
/// version.
fn open_cache(
    settings: &BuildSettings,
    conversation: &Conversation,
) -> anyhow::Result<(StageCache<SessionGranules>, Vec<String>)> {
    let prompt = prompts::MEMGAS_GRANULES;
    let provenance = StageProvenance {
        stage: Stage::Granules.to_string(),
        sample_id: conversation.sample_id.clone(),
        model: settings.model.clone(),
        versions: [(prompt.name.to_string(), prompt.version())].into_iter().collect(),
    };
    StageCache::open(&settings.granules_path(&conversation.sample_id), provenance)
}

/// Generate one conversation's missing granules.
async fn granules_of<M: ChatModel>(
    shared: &GranuleShared<'_, M>,
    conversation: &Conversation,
) -> anyhow::Result<GranuleSampleSummary> {
    let (mut cache, notices) = open_cache(shared.settings, conversation)?;
    for notice in notices {
        shared.pool.notice(notice);
    }
    let sessions = plan_sessions(conversation)?;
    let plan: Vec<PlannedUnit> = sessions.iter().map(|session| session.planned.clone()).collect();
    cache.retain_planned(&plan);
    let pending: Vec<&PlannedSession<'_>> =
        sessions.iter().filter(|session| cache.done(&session.planned).is_none()).collect();
    let sessions_reused = sessions.len() - pending.len();
    shared.pool.progress.reused(sessions_reused);
    tracing::info!(sample = %conversation.sample_id, sessions = sessions.len(), cached = sessions_reused, "granules of conversation");

    let cache = Mutex::new(cache);
    let tally = StdMutex::new(ConversationTally::default());
    let ledger = Ledger { progress: &shared.pool.progress, conversation, tally: &tally };
    run_all(
        pending.into_iter().map(|session| granules_of_session(shared, ledger, session, &cache)),
    )
    .await?;

    let tally = ConversationTally::take(tally);
    let mut failed = tally.failed;
    failed.sort_by_key(|unit| unit.sessions.first().copied());
    Ok(GranuleSampleSummary {
        sample_id: conversation.sample_id.clone(),
        sessions: sessions.len(),
        sessions_reused,
        failed,
        usage: tally.usage,
        chat_calls: tally.chat_calls,
    })
}

/// Ask for one session's granules and record the outcome in the cache. `Err` only for what
/// must abort the run.
async fn granules_of_session<M: ChatModel>(
    shared: &GranuleShared<'_, M>,
    ledger: Ledger<'_>,
    session: &PlannedSession<'_>,
    cache: &Mutex<StageCache<SessionGranules>>,
) -> anyhow::Result<()> {
    let span = tracing::info_span!("granules", sample = %ledger.conversation.sample_id, unit = %session.unit.key);
    let session_id = session.unit.label();
    let work = async {
        let asked = ask_checked(
            shared.chat,
            &shared.pool.ask,
            session.prompt.clone(),
            &schema(),
            |value| check(value, &session_id),
        )
        .await;
        settle(ledger, &session.unit, Stage::Granules, &session.planned, asked, cache)
            .await
            .map(drop)
    };
    shared.pool.run_unit("granule worker pool closed", span, 1, work).await
}

/// Who is talking, for the prompt: the speakers by name (LoCoMo), or a user and an assistant
/// (LongMemEval).
fn participants(conversation: &Conversation) -> String {
    match (conversation.dataset, conversation.speakers.as_slice()) {
        (DatasetKind::LongMemEval, _) => "a user and an AI assistant".to_string(),
        (DatasetKind::Locomo | DatasetKind::Own, []) => "two people".to_string(),
        (DatasetKind::Locomo | DatasetKind::Own, [one]) => one.clone(),
        (DatasetKind::Locomo | DatasetKind::Own, [init @ .., last]) => {
            format!("{} and {last}", init.join(", "))
        }
    }
}

/// The granule prompt for one session.
pub(crate) fn render_prompt(
    conversation: &Conversation,
    unit: &Unit<'_>,
) -> Result<String, PromptError> {
    prompts::MEMGAS_GRANULES.render(&[
        ("participants", &participants(conversation)),
        ("session", unit.dialogue.trim_end()),
    ])
}

/// JSON Schema of the model's answer.
pub(crate) fn schema() -> JsonSchemaSpec {
    JsonSchemaSpec {
        name: "memgas_granules".into(),
        schema: json!({
            "type": "object",
            "required": ["summary", "keywords"],
            "properties": {
                "summary": {"type": "string", "minLength": 1},
                "keywords": {
                    "type": "array",
                    "minItems": 1,
                    "items": {"type": "string", "minLength": 1}
                }
            }
        }),
    }
}

#[derive(Debug, Deserialize)]
struct RawGranules {
    summary: String,
    keywords: Vec<String>,
}

/// Turn a schema-valid answer into the session's granules, or say what is wrong with it: a
/// blank or overlong summary, no keyword left after trimming.
pub(crate) fn check(value: &Value, session_id: &str) -> Result<SessionGranules, Vec<String>> {
    let raw: RawGranules = serde_json::from_value(value.clone())
        .map_err(|error| vec![format!("the JSON does not have the expected shape: {error}")])?;
    let mut problems = Vec::new();
    let summary = raw.summary.trim().to_string();
    let length = summary.chars().count();
    if summary.is_empty() {
        problems.push("`summary` is blank".to_string());
    } else if length > MAX_SUMMARY_CHARS {
        problems.push(format!(
            "`summary` has {length} characters; keep it to one short paragraph of at most {MAX_SUMMARY_CHARS}"
        ));
    }
    let keywords = normalise_keywords(&raw.keywords);
    if keywords.is_empty() {
        problems.push("`keywords` has no keyword once blanks are removed".to_string());
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(SessionGranules { session_id: session_id.to_string(), summary, keywords })
}

/// Split items at `;` and line breaks (one keyword per item, and `;` is the separator of the
/// keyword text), trim, drop blanks, keep the first spelling of each keyword ignoring case, and
/// at most [`MAX_KEYWORDS`].
fn normalise_keywords(raw: &[String]) -> Vec<String> {
    let mut keywords: Vec<String> = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for piece in raw.iter().flat_map(|item| item.split([';', '\n', '\r'])) {
        let keyword = piece.trim();
        if !keyword.is_empty() && seen.insert(keyword.to_lowercase()) {
            keywords.push(keyword.to_string());
        }
    }
    keywords.truncate(MAX_KEYWORDS);
    keywords
}

#[cfg(test)]
mod tests;
