//! `search` (MemGAS fusion over stored vectors, no chat model) and `ask` (the `run` answer loop
//! over the conversation's snapshot, made from the stored outputs, through `agent::answer_one`).

use std::path::PathBuf;
use std::sync::Arc;

use serde::Serialize;

use super::cache::Cached;
use super::{MemoryService, ServiceError};
use crate::agent::AnswerSettings;
use crate::agent::events::LoopEvents;
use crate::agent::tools::{MemgasQueryError, query_memgas};
use crate::dataset::{Category, DatasetKind, Question};
use crate::llm::{ChatModel, Embedder};
use crate::results::Status;
use crate::snapshot::Snapshot;
use crate::store::StoredConversation;

/// One memory line found by `search`, or one line supporting an answer.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct SearchHit {
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
}

/// A session `ask` answered without, because it has no outputs for its content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct MissingSession {
    /// `D<number>`.
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
    /// Conversation id.
    pub conversation: String,
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
        if query.trim().is_empty() {
            return Err(ServiceError::invalid("query", "empty query"));
        }
        let entry = self.cached(conversation).await?;
        let hits = query_memgas(&entry.index, &self.embedder, query.trim(), k.max(1))
            .await
            .map_err(|error| match error {
                MemgasQueryError::Embed(error) => anyhow::anyhow!("embedding the query: {error}"),
                MemgasQueryError::Retrieve(error) => anyhow::anyhow!("searching: {error}"),
            })?;
        let stored = &entry.stored;
        Ok(hits.turns.iter().filter_map(|turn| hit(stored, &turn.dia_id, turn.score)).collect())
    }
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
        let question = question.trim();
        if question.is_empty() {
            return Err(ServiceError::invalid("question", "empty question"));
        }
        let entry = self.cached(conversation).await?;
        let stored = &entry.stored;
        if stored.sessions.iter().all(|session| session.outputs.is_none()) {
            return Err(ServiceError::NotBuilt(conversation.to_string()));
        }
        let now = chrono::Utc::now();
        let question_id = format!(
            "{conversation}:ask-{}-{}",
            now.format("%Y%m%dT%H%M%S%3f"),
            &crate::store::content_id(question)[..8]
        );
        let asked = Question {
            id: question_id.clone(),
            sample_id: conversation.to_string(),
            question: question.to_string(),
            answer: None,
            adversarial_answer: None,
            category: Category::LongMemEval("own".into()),
            evidence: Vec::new(),
            question_date: Some(now.format("%Y-%m-%d %H:%M").to_string()),
        };
        let snapshot = self.snapshot(&entry).await?;
        let settings = &self.settings;
        let mut answer = AnswerSettings::new(
            &settings.root,
            DatasetKind::Own,
            &crate::fsutil::safe_name(&settings.model_name, '_'),
            &settings.answer_model,
            "ask",
        );
        answer.loop_events = events;
        answer.rules = Arc::clone(&settings.rules);
        let trace = answer.trace_path(conversation, &question_id);
        // An endpoint that refuses the question for good (bad key, unknown model) is an error
        // naming the endpoint's reason.
        let line = crate::agent::answer_one(&answer, &snapshot, &asked, &self.chat, &self.embedder)
            .await?;
        let supporting =
            line.prediction_context.iter().filter_map(|id| hit(stored, id, 0.0)).collect();
        Ok(AskReport {
            conversation: conversation.to_string(),
            question_id,
            missing_sessions: missing_sessions(stored),
            question: question.to_string(),
            ok: line.status == Status::Ok,
            answer: line.prediction,
            error: line.error,
            supporting,
            trace,
            rounds: line.rounds,
            tool_calls: line.tool_calls,
            latency_ms: line.latency_ms,
            meta_rules: Some(line.provenance.rules).filter(|hash| !hash.is_empty()),
        })
    }

    /// The conversation ready to answer, from the cache (made on the first ask of this entry).
    async fn snapshot(&self, entry: &Arc<Cached>) -> Result<Arc<Snapshot>, ServiceError> {
        let (shared, embedder) = (Arc::clone(entry), self.embedder.clone());
        let snapshot = tokio::task::spawn_blocking(move || shared.snapshot(&embedder).clone())
            .await
            .map_err(|error| anyhow::anyhow!("graph task failed: {error}"))?;
        Ok(snapshot.map_err(|error| anyhow::anyhow!(error))?)
    }
}

/// The sessions without outputs, with their recorded failures.
fn missing_sessions(stored: &StoredConversation) -> Vec<MissingSession> {
    let mut missing: Vec<MissingSession> = stored
        .sessions
        .iter()
        .filter(|session| session.outputs.is_none())
        .map(|session| MissingSession {
            session: format!("D{}", session.number),
            messages: session.messages.len(),
            error: session.failure.as_ref().map(|failure| failure.error.clone()),
            attempts: session.failure.as_ref().map_or(0, |failure| failure.attempts),
        })
        .collect();
    missing.sort_by_key(|session| session.session.trim_start_matches('D').parse::<u32>().ok());
    missing
}

/// The hit for a dia_id, if it names a stored message.
fn hit(stored: &StoredConversation, dia_id: &str, score: f64) -> Option<SearchHit> {
    let (session, message) = stored.message(dia_id)?;
    Some(SearchHit {
        id: message.id.clone(),
        dia_id: dia_id.to_string(),
        timestamp: message.timestamp.clone(),
        date: session.to_session().date.map(|date| date.to_string()),
        speaker: message.speaker.clone(),
        text: message.text.clone(),
        score,
    })
}
