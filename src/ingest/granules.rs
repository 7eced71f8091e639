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
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::stream::{self, FuturesUnordered, StreamExt as _, TryStreamExt as _};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::{Mutex, Semaphore};
use tracing::Instrument as _;

use super::ask::{AskSettings, ask_checked};
use super::cache::{PlannedUnit, Provenance, StageCache};
use super::progress::{Progress, human_count};
use super::unit::{Unit, plan_units, short_hash};
use super::{BuildSettings, FailedUnit, Ledger, Stage, Tally, settle};
use crate::dataset::{Conversation, DatasetKind};
use crate::fsutil::safe_name;
use crate::llm::{ChatModel, JsonSchemaSpec, Usage};
use crate::prompts::{self, PromptError};

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
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GranuleSummary {
    /// Per conversation, in input order.
    pub samples: Vec<GranuleSampleSummary>,
    /// Notices about caches that were discarded (a changed prompt or model), one per file.
    pub notices: Vec<String>,
    /// Tokens spent in this run.
    pub usage: Usage,
    /// Wall time.
    pub elapsed: Duration,
}

impl GranuleSummary {
    /// Every failed session.
    pub fn failed(&self) -> impl Iterator<Item = &FailedUnit> {
        self.samples.iter().flat_map(|sample| sample.failed.iter())
    }

    /// Whether every session of every conversation has granules.
    pub fn is_complete(&self) -> bool {
        self.failed().next().is_none()
    }

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
        for unit in self.failed() {
            writeln!(
                f,
                "failed: {} {} ({}): {}",
                unit.sample_id, unit.unit, unit.stage, unit.error
            )?;
        }
        for notice in &self.notices {
            writeln!(f, "note: {notice}")?;
        }
        Ok(())
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
    let total: usize = conversations
        .iter()
        .map(|c| c.sessions.iter().filter(|s| !s.turns.is_empty()).count())
        .sum();
    let shared = Shared {
        settings,
        chat,
        ask: AskSettings { model: settings.model.clone(), max_reasks: settings.max_reasks },
        permits: Semaphore::new(settings.workers.max(1)),
        progress: Progress::new(total as u64, settings.progress),
        notices: StdMutex::new(Vec::new()),
    };
    tracing::info!(conversations = conversations.len(), model = %settings.model, "granules started");
    let shared_ref = &shared;
    let samples: Vec<GranuleSampleSummary> = stream::iter(conversations)
        .map(|conversation| granules_of(shared_ref, conversation))
        .buffered(settings.workers.max(1))
        .try_collect()
        .await?;
    shared.progress.finish();
    let usage = samples.iter().fold(Usage::default(), |total, sample| total + sample.usage);
    let notices = shared.notices.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
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
struct Shared<'a, M> {
    settings: &'a BuildSettings,
    chat: &'a M,
    ask: AskSettings,
    /// Bounds the sessions in flight across all conversations to `settings.workers`; a
    /// session holds a permit from its first call until its cache entry is written.
    permits: Semaphore,
    progress: Progress,
    notices: StdMutex<Vec<String>>,
}

impl<M> Shared<'_, M> {
    fn notice(&self, notice: String) {
        tracing::warn!("{notice}");
        self.notices.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(notice);
    }
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
                input_hash: short_hash(prompt.as_bytes()),
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
    let provenance = Provenance {
        stage: Stage::Granules.to_string(),
        sample_id: conversation.sample_id.clone(),
        model: settings.model.clone(),
        versions: [(prompt.name.to_string(), prompt.version())].into_iter().collect(),
    };
    StageCache::open(&settings.granules_path(&conversation.sample_id), provenance)
}

/// Generate one conversation's missing granules.
async fn granules_of<M: ChatModel>(
    shared: &Shared<'_, M>,
    conversation: &Conversation,
) -> anyhow::Result<GranuleSampleSummary> {
    let (mut cache, notices) = open_cache(shared.settings, conversation)?;
    for notice in notices {
        shared.notice(notice);
    }
    let sessions = plan_sessions(conversation)?;
    let plan: Vec<PlannedUnit> = sessions.iter().map(|session| session.planned.clone()).collect();
    cache.retain_planned(&plan);
    let pending: Vec<&PlannedSession<'_>> =
        sessions.iter().filter(|session| cache.done(&session.planned).is_none()).collect();
    let sessions_reused = sessions.len() - pending.len();
    shared.progress.reused(sessions_reused);
    tracing::info!(sample = %conversation.sample_id, sessions = sessions.len(), cached = sessions_reused, "granules of conversation");

    let cache = Mutex::new(cache);
    let tally = StdMutex::new(Tally::default());
    let ledger = Ledger { progress: &shared.progress, conversation, tally: &tally };
    let mut in_flight: FuturesUnordered<_> = pending
        .into_iter()
        .map(|session| granules_of_session(shared, ledger, session, &cache))
        .collect();
    while let Some(result) = in_flight.next().await {
        result?;
    }
    drop(in_flight);

    let tally = tally.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
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
    shared: &Shared<'_, M>,
    ledger: Ledger<'_>,
    session: &PlannedSession<'_>,
    cache: &Mutex<StageCache<SessionGranules>>,
) -> anyhow::Result<()> {
    let _permit = shared.permits.acquire().await.context("granule worker pool closed")?;
    let span = tracing::info_span!("granules", sample = %ledger.conversation.sample_id, unit = %session.unit.key);
    let session_id = session.unit.label();
    let result = async {
        let asked =
            ask_checked(shared.chat, &shared.ask, session.prompt.clone(), &schema(), |value| {
                check(value, &session_id)
            })
            .await;
        settle(ledger, &session.unit, Stage::Granules, &session.planned, asked, cache).await
    }
    .instrument(span)
    .await;
    shared.progress.done(1);
    result.map(drop)
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
mod tests {
    use std::path::Path;

    use super::*;
    use crate::ingest::unit::tests::conversation;

    #[test]
    fn the_cache_path_follows_the_stage_layout() {
        let settings =
            BuildSettings::new("/p/data", DatasetKind::Locomo, "openai/gpt-4o-mini", "x/y");
        assert_eq!(
            settings.granules_path("conv-26"),
            Path::new("/p/data/locomo/memgas_openai_gpt-4o-mini/conv-26_granules.json")
        );
    }

    #[test]
    fn answers_are_trimmed_split_and_deduplicated() {
        let answer = json!({
            "summary": "  Ana told Bo about her paintings.\n",
            "keywords": ["Ana", " paintings ; Bo", "ana", "", "  ", "line\nbreak"]
        });
        let granules = check(&answer, "D2").unwrap();
        assert_eq!(granules.session_id, "D2");
        assert_eq!(granules.summary, "Ana told Bo about her paintings.");
        assert_eq!(granules.keywords, ["Ana", "paintings", "Bo", "line", "break"]);
        assert_eq!(granules.keyword_text(), "Ana; paintings; Bo; line; break");
    }

    #[test]
    fn blank_or_overlong_answers_are_problems() {
        let problems = check(&json!({"summary": "  ", "keywords": [" ", ";"]}), "D1").unwrap_err();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("`summary` is blank"));
        assert!(problems[1].contains("`keywords`"));
        let long = "word ".repeat(500);
        let problems = check(&json!({"summary": long, "keywords": ["a"]}), "D1").unwrap_err();
        assert!(problems[0].contains("2499 characters"), "{problems:?}");
    }

    #[test]
    fn keywords_are_capped() {
        let many: Vec<String> = (0..50).map(|n| format!("k{n}")).collect();
        let granules = check(&json!({"summary": "s", "keywords": many}), "D1").unwrap();
        assert_eq!(granules.keywords.len(), MAX_KEYWORDS);
        assert_eq!(granules.keywords[0], "k0");
    }

    #[test]
    fn the_schema_wants_both_fields() {
        let validator = jsonschema::validator_for(&schema().schema).unwrap();
        assert!(validator.is_valid(&json!({"summary": "s", "keywords": ["a"]})));
        assert!(!validator.is_valid(&json!({"summary": "s"})));
        assert!(!validator.is_valid(&json!({"summary": "s", "keywords": []})));
        assert!(!validator.is_valid(&json!({"summary": "", "keywords": ["a"]})));
        assert!(!validator.is_valid(&json!({"summary": "s", "keywords": "a; b"})));
    }

    #[test]
    fn the_prompt_names_the_speakers_and_shows_the_dated_session() {
        let conversation = conversation(2, 2);
        let units = plan_units(&conversation, 1);
        let prompt = render_prompt(&conversation, &units[1]).unwrap();
        assert!(prompt.contains("conversation between Ana and Bo,"), "{prompt}");
        assert!(prompt.contains("Session D2, date: 10:00 am on 2 May, 2023 (2023-05-02)\n[D2:1] Ana: line 1 of session 2"), "{prompt}");
        assert!(prompt.trim_end().ends_with("[D2:2] Bo: line 2 of session 2"), "{prompt}");
        let mut lm = conversation.clone();
        lm.dataset = DatasetKind::LongMemEval;
        assert!(
            render_prompt(&lm, &units[1]).unwrap().contains("between a user and an AI assistant")
        );
    }

    #[test]
    fn the_input_hash_follows_the_session_text() {
        let conversation = conversation(2, 2);
        let mut changed = conversation.clone();
        changed.sessions[1].turns[0].text = "something else".into();
        let (a, b) = (plan_sessions(&conversation).unwrap(), plan_sessions(&changed).unwrap());
        assert_eq!(a[0].planned, b[0].planned);
        assert_ne!(a[1].planned.input_hash, b[1].planned.input_hash);
        assert_eq!(a[1].planned.key, "session_2");
    }
}
