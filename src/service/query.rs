//! `search` (MemGAS fusion over stored vectors, no chat model) and `ask` (the `run` answer loop
//! over the conversation's snapshot, made from the stored outputs, through `agent::answer_one`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use serde::Serialize;

use super::cache::{Cached, QueryVectorCache};
use super::scope::{Scope, SearchFilters, View};
use super::{MemoryService, ServiceError, blocking};
use crate::agent::events::LoopEvents;
use crate::agent::tools::{MemgasQueryError, query_memgas_each};
use crate::agent::{AnswerPass, AnswerSettings};
use crate::dataset::{Category, DatasetKind, Question};
use crate::llm::{ChatModel, Embedder, Embeddings, Usage};
use crate::results::Status;
use crate::snapshot::{Snapshot, unit_vectors};
use crate::store::StoredConversation;

/// One memory line found by `search`, or one line supporting an answer.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct SearchHit {
    /// The conversation the line is in.
    pub conversation: String,
    /// The message id (its content hash).
    pub id: String,
    /// The turn id in the pipeline (`D3:2`).
    pub dia_id: String,
    /// The message's timestamp as given, if any.
    pub timestamp: Option<String>,
    /// The session's date (`YYYY-MM-DD`), if known.
    pub date: Option<String>,
    /// Speaker.
    pub speaker: String,
    /// Text.
    pub text: String,
    /// Retrieval score (fusion; higher is better); 0 for supporting lines.
    pub score: f64,
    /// The tags the message was added with.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
}

/// A session `ask` answered without, because it has no outputs for its content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct MissingSession {
    /// The conversation it is in.
    pub conversation: String,
    /// `D<number>` (in that conversation).
    pub session: String,
    /// Its messages (none of them was seen by the answer).
    pub messages: usize,
    /// Its last build failure, if one was recorded (else it was never built: an add was
    /// interrupted).
    pub error: Option<String>,
    /// Failed builds of its current content so far.
    pub attempts: u32,
}

/// What `ask` answered.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct AskReport {
    /// Conversation id, or `user:<id>` for a question over a user's conversations.
    pub conversation: String,
    /// The time the answer was given as of (RFC 3339), when one was asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub as_of: Option<String>,
    /// The question's id (`mragent trace <id>` renders its trace).
    pub question_id: String,
    /// The question.
    pub question: String,
    /// The answer (empty when the loop failed).
    pub answer: String,
    /// Whether the loop produced an answer.
    pub ok: bool,
    /// Why not, when it did not.
    pub error: Option<String>,
    /// The lines the answer rests on.
    pub supporting: Vec<SearchHit>,
    /// The question's trace (`mragent trace <path>` renders it).
    #[schema(value_type = String)]
    pub trace: PathBuf,
    /// Sessions the answer could not see (not built); empty when the memory is complete.
    pub missing_sessions: Vec<MissingSession>,
    /// Model rounds and tool calls.
    pub rounds: u32,
    /// Tool calls.
    pub tool_calls: u32,
    /// Wall time in milliseconds.
    pub latency_ms: u64,
    /// Which path answered: `loop`, `single` (one retrieval pass, one model call) or
    /// `escalated` (the single pass found nothing, then the loop).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<crate::results::AnswerPath>,
    /// Hash of the meta-memory rules the loop was given (`--meta-rules`); absent without rules.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub meta_rules: Option<String>,
}

impl<M, E> MemoryService<M, E>
where
    E: Embedder + Clone + 'static,
{
    /// The `k` best memory lines of `conversation` for `query`.
    pub async fn search(
        &self,
        conversation: &str,
        query: &str,
        k: usize,
    ) -> Result<Vec<SearchHit>, ServiceError> {
        let scope = Scope::Conversation(conversation.to_string());
        self.search_scoped(&scope, query, k, &SearchFilters::default()).await
    }

    /// The `k` best memory lines for `query` in `scope` that pass `filters`: every
    /// conversation of the scope ranked (at once), merged by score (ties keep the
    /// conversations' id order and each one's ranking).
    pub async fn search_scoped(
        &self,
        scope: &Scope,
        query: &str,
        k: usize,
        filters: &SearchFilters,
    ) -> Result<Vec<SearchHit>, ServiceError> {
        if query.trim().is_empty() {
            return Err(ServiceError::invalid("query", "empty query"));
        }
        let members = self.scope_members(scope, filters.conversation.as_deref()).await?;
        let entries =
            futures::future::try_join_all(members.iter().map(|id| self.cached(id))).await?;
        // Every line of each conversation is ranked, so that filters never leave fewer than
        // `k` lines that pass; the query is embedded once for all of them.
        let indices: Vec<_> = entries
            .iter()
            .map(|entry| {
                let lines = entry.stored.sessions.iter().map(|session| session.messages.len());
                (entry.index.as_ref(), lines.sum::<usize>().max(1))
            })
            .collect();
        let embedder = self.query_embedder();
        let ranked = query_memgas_each(&indices, &embedder, query.trim()).await.map_err(
            |error| match error {
                MemgasQueryError::Embed(error) => {
                    anyhow::anyhow!("embedding the query: {error}")
                }
                MemgasQueryError::Retrieve(error) => anyhow::anyhow!("searching: {error}"),
            },
        )?;
        let mut hits: Vec<SearchHit> = entries
            .iter()
            .zip(&ranked)
            .flat_map(|(entry, ranked)| {
                let stored = &entry.stored;
                ranked
                    .turns
                    .iter()
                    .filter(|turn| admits(stored, &turn.dia_id, filters))
                    .filter_map(|turn| hit(stored, &turn.dia_id, turn.score))
            })
            .collect();
        hits.sort_by(|a, b| b.score.total_cmp(&a.score));
        hits.truncate(k.max(1));
        Ok(hits)
    }
}

impl<M, E> MemoryService<M, E>
where
    E: Embedder + Clone + 'static,
{
    /// Why `scope` has no built session to answer from (as of `as_of`, whose view is
    /// `stored`): nothing was said before that time, a job is still building its sessions, or
    /// sessions failed (the next add retries them).
    async fn why_not_built(
        &self,
        scope: &Scope,
        as_of: Option<&str>,
        stored: &StoredConversation,
    ) -> Result<String, ServiceError> {
        if let Some(at) = as_of
            && stored.sessions.is_empty()
        {
            return Ok(format!("nothing was said before {at}"));
        }
        let members = self.scope_members(scope, None).await?;
        let store = self.store.clone();
        let (jobs, failed) = blocking(move || {
            let mut jobs = Vec::new();
            let mut failed = 0;
            for id in &members {
                jobs.extend(store.jobs(Some(id), true, 1)?.into_iter().map(|job| job.id));
                failed += store.load(id)?.sessions.iter().filter(|s| s.failure.is_some()).count();
            }
            Ok((jobs, failed))
        })
        .await?;
        Ok(match (jobs.first(), failed) {
            (Some(job), _) => format!("its sessions are still being built (job {job})"),
            (None, 0) => "no session is built yet; the next add builds them".to_string(),
            (None, failed) => {
                format!("{failed} sessions failed to build; run the same add again to build them")
            }
        })
    }
}

/// The service's embedder seen through its query vector cache: a text (a search query, a
/// question, a query word the memory lacks) embedded before is not sent again; what is not
/// cached goes in one request, each distinct text once. Every query-side embedding of `search`
/// and `ask` goes through it; the vectors it returns are unit length (what every query-side
/// reader makes of them anyway), and its usage counts only what was sent.
#[derive(Clone)]
pub(super) struct CachedQueries<E> {
    embedder: E,
    cache: Arc<QueryVectorCache>,
}

impl<M, E: Clone> MemoryService<M, E> {
    /// The service's embedder through its query vector cache.
    fn query_embedder(&self) -> CachedQueries<E> {
        CachedQueries { embedder: self.embedder.clone(), cache: Arc::clone(&self.cache.queries) }
    }
}

impl<E: Embedder> Embedder for CachedQueries<E> {
    fn name(&self) -> &str {
        self.embedder.name()
    }

    async fn embed(&self, texts: &[String]) -> Result<Embeddings, crate::llm::Error> {
        let name = self.embedder.name();
        let mut found: Vec<Option<Vec<f32>>> = texts
            .iter()
            .map(|text| self.cache.get(name, text).map(|vector| vector.to_vec()))
            .collect();
        let mut missing: Vec<String> = Vec::new();
        for (text, vector) in texts.iter().zip(&found) {
            if vector.is_none() && !missing.contains(text) {
                missing.push(text.clone());
            }
        }
        let mut usage = Usage::default();
        if !missing.is_empty() {
            let vectors;
            (vectors, usage) = unit_vectors(&self.embedder, &missing, "texts").await?;
            for (text, vector) in missing.iter().zip(&vectors) {
                self.cache.put(name, text, vector);
            }
            for (text, slot) in texts.iter().zip(&mut found) {
                if slot.is_none() {
                    let position = missing.iter().position(|known| known == text);
                    *slot = position.and_then(|position| vectors.get(position).cloned());
                }
            }
        }
        let vectors = found.into_iter().collect::<Option<Vec<_>>>().ok_or_else(|| {
            crate::llm::Error::Decode { message: "a query text was left without a vector".into() }
        })?;
        Ok(Embeddings { vectors, usage })
    }
}

/// Whether the line behind `dia_id` passes every filter given.
fn admits(stored: &StoredConversation, dia_id: &str, filters: &SearchFilters) -> bool {
    let Some((_, message)) = stored.message(dia_id) else { return false };
    let time = message.sort_time.as_deref();
    let speaker = filters.speaker.as_ref();
    speaker.is_none_or(|speaker| speaker.trim().eq_ignore_ascii_case(message.speaker.trim()))
        && filters.from.as_deref().is_none_or(|from| time.is_some_and(|time| time >= from))
        && filters.to.as_deref().is_none_or(|to| time.is_some_and(|time| time <= to))
        && filters.tags.iter().all(|(key, value)| message.tags.get(key) == Some(value))
}

impl<M, E> MemoryService<M, E>
where
    M: ChatModel,
    E: Embedder + Clone + 'static,
{
    /// Answers `question` about `conversation` with the answer loop.
    pub async fn ask(&self, conversation: &str, question: &str) -> Result<AskReport, ServiceError> {
        self.ask_with_events(conversation, question, None).await
    }

    /// [`MemoryService::ask`], reporting each round of the loop to `events` as it happens; the
    /// events' stream ends when this returns.
    pub async fn ask_with_events(
        &self,
        conversation: &str,
        question: &str,
        events: Option<LoopEvents>,
    ) -> Result<AskReport, ServiceError> {
        let scope = Scope::Conversation(conversation.to_string());
        self.ask_scoped(&scope, question, None, events).await
    }

    /// Answers `question` over `scope` as known at `as_of` (RFC 3339 UTC; `None`: now),
    /// reporting each round of the loop to `events`.
    pub async fn ask_scoped(
        &self,
        scope: &Scope,
        question: &str,
        as_of: Option<&str>,
        events: Option<LoopEvents>,
    ) -> Result<AskReport, ServiceError> {
        let question = question.trim();
        if question.is_empty() {
            return Err(ServiceError::invalid("question", "empty question"));
        }
        let label = scope.label();
        let view = self.view(scope, as_of).await?;
        let entry = &view.entry;
        let stored = &entry.stored;
        if stored.sessions.iter().all(|session| session.outputs.is_none()) {
            let reason = self.why_not_built(scope, as_of, stored).await?;
            return Err(ServiceError::NotBuilt(label, reason));
        }
        let asked = asked_question(&label, question, as_of);
        let question_id = asked.id.clone();
        let snapshot = self.snapshot(entry).await?;
        let (answer, pass) = self.ask_settings(events);
        let trace = answer.trace_path(&label, &question_id);
        // An endpoint that refuses the question for good (bad key, unknown model) is an error
        // naming the endpoint's reason.
        let embedder = self.query_embedder();
        let line =
            crate::agent::answer_one(&answer, &pass, &snapshot, &asked, &self.chat, &embedder)
                .await?;
        let supporting = supporting_hits(&view, scope, &line.prediction_context);
        Ok(AskReport {
            conversation: label,
            as_of: as_of.map(str::to_string),
            question_id,
            missing_sessions: missing_sessions(&view),
            question: question.to_string(),
            ok: line.status == Status::Ok,
            answer: line.prediction,
            error: line.error,
            supporting,
            trace,
            rounds: line.rounds,
            tool_calls: line.tool_calls,
            latency_ms: line.latency_ms,
            path: line.path,
            meta_rules: Some(line.provenance.rules).filter(|hash| !hash.is_empty()),
        })
    }

    /// The answer settings of an ask (the service's answer model and gate), and what it answers
    /// with: the service's rules, each round reported to `events`.
    fn ask_settings(&self, events: Option<LoopEvents>) -> (AnswerSettings, AnswerPass) {
        let settings = &self.settings;
        let mut answer = AnswerSettings::new(
            &settings.root,
            DatasetKind::Own,
            &crate::fsutil::safe_name(&settings.model_name, '_'),
            &settings.answer_model,
            "ask",
        );
        answer.answer = settings.answer;
        let pass = AnswerPass { events, ..AnswerPass::with_rules(Arc::clone(&settings.rules)) };
        (answer, pass)
    }

    /// The conversation ready to answer, from the cache (made on the first ask of this entry).
    async fn snapshot(&self, entry: &Arc<Cached>) -> Result<Arc<Snapshot>, ServiceError> {
        let made = entry.has_snapshot();
        // Its query-side embeddings (the gate's, `query_memgas`'s) go through the cache too.
        let (shared, embedder) = (Arc::clone(entry), self.query_embedder());
        let snapshot = tokio::task::spawn_blocking(move || shared.snapshot(&embedder).clone())
            .await
            .map_err(|error| anyhow::anyhow!("graph task failed: {error}"))?;
        if !made {
            // The entry holds more now: weigh it again, so the budget counts its snapshot.
            self.cache.reweigh(&entry.stored.info.id, entry);
        }
        Ok(snapshot.map_err(|error| anyhow::anyhow!(error))?)
    }
}

/// `question` asked over `label` as known at `as_of`: a fresh id (the time and the question's
/// hash), dated `as_of` or now.
fn asked_question(label: &str, question: &str, as_of: Option<&str>) -> Question {
    let now = chrono::Utc::now();
    let question_id = format!(
        "{label}:ask-{}-{}",
        now.format("%Y%m%dT%H%M%S%3f"),
        &crate::store::content_id(question)[..8]
    );
    let asked_at = as_of.unwrap_or_default().replace('T', " ");
    Question {
        id: question_id,
        sample_id: label.to_string(),
        question: question.to_string(),
        answer: None,
        adversarial_answer: None,
        category: Category::LongMemEval("own".into()),
        evidence: Vec::new(),
        question_date: Some(match as_of {
            Some(_) => asked_at.chars().take(16).collect(),
            None => now.format("%Y-%m-%d %H:%M").to_string(),
        }),
    }
}

/// The lines an answer drew on (`ids`, the view's turn ids), each named by the conversation
/// and turn it stands for.
fn supporting_hits(view: &View, scope: &Scope, ids: &[String]) -> Vec<SearchHit> {
    ids.iter()
        .filter_map(|id| {
            let mut found = hit(&view.entry.stored, id, 0.0)?;
            (found.conversation, found.dia_id) = view.origin(id, scope);
            Some(found)
        })
        .collect()
}

/// The sessions of a view without outputs, with their recorded failures.
fn missing_sessions(view: &View) -> Vec<MissingSession> {
    let stored = &view.entry.stored;
    let mut missing: Vec<MissingSession> = stored
        .sessions
        .iter()
        .filter(|session| session.outputs.is_none())
        .map(|session| {
            let (conversation, dia_id) = view.origin(
                &format!("D{}:1", session.number),
                &Scope::Conversation(stored.info.id.clone()),
            );
            (conversation, dia_id.split(':').next().unwrap_or_default().to_string(), session)
        })
        .map(|(conversation, label, session)| MissingSession {
            conversation,
            session: label,
            messages: session.messages.len(),
            error: session.failure.as_ref().map(|failure| failure.error.clone()),
            attempts: session.failure.as_ref().map_or(0, |failure| failure.attempts),
        })
        .collect();
    missing.sort_by_key(|session| {
        (session.conversation.clone(), session.session.trim_start_matches('D').parse::<u32>().ok())
    });
    missing
}

/// The hit for a dia_id, if it names a stored message.
fn hit(stored: &StoredConversation, dia_id: &str, score: f64) -> Option<SearchHit> {
    let (session, message) = stored.message(dia_id)?;
    Some(SearchHit {
        conversation: stored.info.id.clone(),
        id: message.id.clone(),
        dia_id: dia_id.to_string(),
        timestamp: message.timestamp.clone(),
        date: session.to_session().date.map(|date| date.to_string()),
        speaker: message.speaker.clone(),
        text: message.text.clone(),
        score,
        tags: message.tags.clone(),
    })
}
