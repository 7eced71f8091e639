//! `search` (MemGAS fusion over stored vectors, no chat model) and `ask` (the `run` answer loop
//! over the memory rebuilt from the stored outputs).

use std::path::PathBuf;

use indexmap::IndexMap;
use serde::Serialize;

use super::{MemoryService, ServiceError};
use crate::agent::{AnswerSettings, MemgasMemory, QueryEmbedder as _, SampleMemory};
use crate::dataset::{Category, DatasetKind, Question};
use crate::ingest::SampleEmbeddings;
use crate::llm::{ChatModel, Embedder};
use crate::results::{ResultLine, Status};
use crate::retrieval::{IndexOptions, MemoryIndex};
use crate::store::{StoredConversation, StoredOutputs};

/// Vectors by id, in order.
type IdVectors = Vec<(String, Vec<f32>)>;

/// One memory line found by `search`, or one line supporting an answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
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

/// What `ask` answered.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AskReport {
    /// Conversation id.
    pub conversation: String,
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
    pub trace: PathBuf,
    /// Model rounds and tool calls.
    pub rounds: u32,
    /// Tool calls.
    pub tool_calls: u32,
    /// Wall time in milliseconds.
    pub latency_ms: u64,
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
        let stored = self.load_checked(conversation).await?;
        let index = index_of(&stored).await?;
        let vector = self
            .embedder
            .embed_query(query.trim())
            .await
            .map_err(|error| anyhow::anyhow!("embedding the query: {error}"))?;
        let hits = index
            .query(query.trim(), &vector, k.max(1))
            .map_err(|error| anyhow::anyhow!("searching: {error}"))?;
        Ok(hits.turns.iter().filter_map(|turn| hit(&stored, &turn.dia_id, turn.score)).collect())
    }
}

impl<M, E> MemoryService<M, E>
where
    M: ChatModel,
    E: Embedder + Clone + 'static,
{
    /// Answers `question` about `conversation` with the answer loop.
    pub async fn ask(&self, conversation: &str, question: &str) -> Result<AskReport, ServiceError> {
        let question = question.trim();
        if question.is_empty() {
            return Err(ServiceError::invalid("question", "empty question"));
        }
        let stored = self.load_checked(conversation).await?;
        if stored.sessions.iter().all(|session| session.outputs.is_none()) {
            return Err(ServiceError::NotBuilt(conversation.to_string()));
        }
        let index = index_of(&stored).await?;
        let now = chrono::Utc::now();
        let question_id = format!(
            "{conversation}:ask-{}-{}",
            now.format("%Y%m%dT%H%M%S%3f"),
            &crate::store::content_id(question)[..8]
        );
        let mut dialogue = stored.to_conversation();
        dialogue.questions = vec![Question {
            id: question_id.clone(),
            sample_id: conversation.to_string(),
            question: question.to_string(),
            answer: None,
            adversarial_answer: None,
            category: Category::LongMemEval("own".into()),
            evidence: Vec::new(),
            question_date: Some(now.format("%Y-%m-%d %H:%M").to_string()),
        }];
        let sample = self.sample_memory(&stored, dialogue, index)?;
        let settings = &self.settings;
        let mut answer = AnswerSettings::new(
            &settings.root,
            DatasetKind::Own,
            &crate::fsutil::safe_name(&settings.model_name, '_'),
            &settings.answer_model,
            "ask",
        );
        answer.workers = 1;
        answer.progress = false;
        let trace = answer.trace_path(conversation, &question_id);
        let result_path = answer.result_path(conversation);
        crate::agent::answer_all(
            &answer,
            std::slice::from_ref(&sample),
            &self.chat,
            &self.embedder,
            std::future::pending::<()>(),
        )
        .await?;
        let line = read_line(&result_path, &question_id)?;
        let supporting =
            line.prediction_context.iter().filter_map(|id| hit(&stored, id, 0.0)).collect();
        Ok(AskReport {
            conversation: conversation.to_string(),
            question: question.to_string(),
            ok: line.status == Status::Ok,
            answer: line.prediction,
            error: line.error,
            supporting,
            trace,
            rounds: line.rounds,
            tool_calls: line.tool_calls,
            latency_ms: line.latency_ms,
        })
    }

    /// The conversation's memory graph, stage-3 vectors and MemGAS index, from the store.
    fn sample_memory(
        &self,
        stored: &StoredConversation,
        dialogue: crate::dataset::Conversation,
        index: MemoryIndex,
    ) -> Result<SampleMemory, ServiceError> {
        let built: Vec<&StoredOutputs> =
            stored.sessions.iter().filter_map(|session| session.outputs.as_ref()).collect();
        let rewrites: Vec<_> = built.iter().map(|outputs| outputs.rewrite.clone()).collect();
        let keywords: Vec<_> =
            built.iter().map(|outputs| outputs.keywords.keywords.clone()).collect();
        let graph = crate::memory::build_graph(&dialogue, &rewrites, &keywords)
            .map_err(|error| anyhow::anyhow!("building the memory graph: {error}"))?;
        let vectors = |pick: fn(&StoredOutputs) -> &IdVectors| {
            built
                .iter()
                .flat_map(|outputs| pick(outputs).iter().cloned())
                .collect::<IndexMap<_, _>>()
        };
        let sentences = vectors(|outputs| &outputs.sentence_vectors);
        let embeddings = SampleEmbeddings {
            embedder: self.embedder.name().to_string(),
            dims: sentences.values().next().map_or(0, Vec::len),
            sentences,
            topics: vectors(|outputs| &outputs.topic_vectors),
            questions: IndexMap::new(),
        };
        Ok(SampleMemory {
            conversation: dialogue,
            graph,
            embeddings,
            memgas: Some(MemgasMemory::new(index, self.embedder.clone())),
            // Sessions without stored outputs (their build failed) keep every question of the
            // conversation pending, as in `run`.
            memory: crate::agent::MemoryStatus {
                missing_sessions: stored
                    .sessions
                    .iter()
                    .filter(|session| session.outputs.is_none())
                    .map(|session| session.number)
                    .collect(),
                fingerprint: String::new(),
            },
        })
    }
}

/// The MemGAS index of the built sessions, from their stored vectors (in time order).
async fn index_of(stored: &StoredConversation) -> Result<MemoryIndex, ServiceError> {
    let units = stored.memgas_units();
    let built = tokio::task::spawn_blocking(move || {
        let mut index = MemoryIndex::new(IndexOptions::default());
        for (session, vectors) in units {
            index.add_session(session, vectors)?;
        }
        Ok::<_, crate::retrieval::IndexError>(index)
    })
    .await
    .map_err(|error| anyhow::anyhow!("index task failed: {error}"))?;
    built.map_err(|error| anyhow::anyhow!("indexing the stored vectors: {error}").into())
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

/// The result line of `question_id` in `path`.
fn read_line(path: &std::path::Path, question_id: &str) -> Result<ResultLine, ServiceError> {
    let text = std::fs::read_to_string(path)
        .map_err(|error| anyhow::anyhow!("reading {}: {error}", path.display()))?;
    text.lines()
        .rev()
        .filter_map(|line| serde_json::from_str::<ResultLine>(line).ok())
        .find(|line| line.question_id == question_id)
        .ok_or_else(|| anyhow::anyhow!("no result line for {question_id}").into())
}
