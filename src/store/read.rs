//! Reads: a whole conversation with its sessions, messages and valid stage outputs, and its
//! conversion into the pipeline's `dataset::Conversation`.

use std::collections::BTreeMap;

use chrono::{DateTime, NaiveDate};
use serde::Serialize;

use super::db::{Conn, params};
use super::facts::StoredFact;
use super::vectors::decode_vectors;
use super::{
    ConversationInfo, INFO_QUERY, Store, StoreError, check_conversation_id, content_id, info_of_row,
};
use crate::dataset::{Conversation, DatasetKind, Session, Turn};
use crate::ingest::keywords::KeywordRecord;
use crate::memory::input::SessionRewrite;
use crate::retrieval::units::{SessionUnits, UnitVectors};

/// Why a session has no outputs: its last build failure, for its current content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SessionFailure {
    /// What went wrong the last time.
    pub error: String,
    /// Failed builds of this content so far (each add retries once).
    pub attempts: u32,
    /// When the last one failed (RFC 3339).
    pub failed_at: String,
}

/// One stored message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StoredMessage {
    /// Its content hash: the stable message id.
    pub id: String,
    /// Speaker.
    pub speaker: String,
    /// Text.
    pub text: String,
    /// The timestamp as given (canonical form), if any.
    pub timestamp: Option<String>,
    /// The time used for ordering (own or inherited; RFC 3339 UTC), if any.
    #[serde(skip)]
    pub sort_time: Option<String>,
    /// The tags given when it was added.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
}

/// What the stages made of a session.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredOutputs {
    /// The model that made them.
    pub model: String,
    /// Stage 1.
    pub rewrite: SessionRewrite,
    /// Stage 2.
    pub keywords: KeywordRecord,
    /// Stage 3: sentence id → vector.
    pub sentence_vectors: Vec<(String, Vec<f32>)>,
    /// Stage 3: topic id → vector.
    pub topic_vectors: Vec<(String, Vec<f32>)>,
    /// MemGAS unit vectors (session and turns).
    pub units: UnitVectors,
}

/// One stored session.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredSession {
    /// `D<number>`.
    pub number: u32,
    /// The caller's session id, if any.
    pub key: Option<String>,
    /// Messages in time order (arrival order for equal or missing times).
    pub messages: Vec<StoredMessage>,
    /// Hash of the session's content; outputs are valid only for this content.
    pub content_hash: String,
    /// Outputs made from exactly this content, if any.
    pub outputs: Option<StoredOutputs>,
    /// Without outputs: the last build failure of exactly this content, if one was recorded.
    pub failure: Option<SessionFailure>,
    /// The facts drawn from it, with their validity (empty until it is built).
    pub facts: Vec<StoredFact>,
}

impl StoredSession {
    /// The session as the pipeline sees it.
    pub fn to_session(&self) -> Session {
        let first = self.messages.first();
        let own = first.and_then(|message| message.timestamp.as_deref());
        let time = own.or(first.and_then(|message| message.sort_time.as_deref()));
        let (date_time, date) = match time {
            Some(text) => describe_time(text),
            None => (None, None),
        };
        let turns = self
            .messages
            .iter()
            .enumerate()
            .map(|(position, message)| Turn {
                dia_id: format!("D{}:{}", self.number, position + 1),
                speaker: message.speaker.clone(),
                text: message.text.clone(),
                blip_caption: None,
                has_answer: false,
            })
            .collect();
        Session { index: self.number, date_time, date, turns }
    }
}

/// `2024-05-03T10:00:00Z` → (`2024-05-03 10:00 UTC`, the date); `2024-05-03` → itself.
fn describe_time(text: &str) -> (Option<String>, Option<NaiveDate>) {
    if let Ok(time) = DateTime::parse_from_rfc3339(text) {
        let utc = time.with_timezone(&chrono::Utc);
        return (Some(utc.format("%Y-%m-%d %H:%M UTC").to_string()), Some(utc.date_naive()));
    }
    match NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        Ok(date) => (Some(text.to_string()), Some(date)),
        Err(_) => (Some(text.to_string()), None),
    }
}

/// A conversation as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredConversation {
    /// Summary.
    pub info: ConversationInfo,
    /// Sessions in time order (by first message; untimed sessions last, by number).
    pub sessions: Vec<StoredSession>,
    /// The conversation's revision when it was read (see [`Store::revision`]).
    pub revision: i64,
    /// The time this view shows the conversation as of (`None`: as stored; see `view`).
    pub as_of: Option<String>,
}

impl StoredConversation {
    /// The conversation as the pipeline sees it (no questions).
    pub fn to_conversation(&self) -> Conversation {
        let sessions: Vec<Session> = self.sessions.iter().map(StoredSession::to_session).collect();
        let mut speakers: Vec<String> = Vec::new();
        for turn in sessions.iter().flat_map(|session| &session.turns) {
            if !speakers.contains(&turn.speaker) {
                speakers.push(turn.speaker.clone());
            }
        }
        Conversation {
            sample_id: self.info.id.clone(),
            dataset: DatasetKind::Own,
            speakers,
            sessions,
            empty_sessions: Vec::new(),
            questions: Vec::new(),
        }
    }

    /// Sessions without outputs for their current content, by number.
    pub fn pending(&self) -> Vec<u32> {
        let mut numbers: Vec<u32> = self
            .sessions
            .iter()
            .filter(|session| session.outputs.is_none())
            .map(|session| session.number)
            .collect();
        numbers.sort_unstable();
        numbers
    }

    /// The MemGAS units and vectors of every built session, in time order.
    pub fn memgas_units(&self) -> Vec<(SessionUnits, UnitVectors)> {
        self.sessions
            .iter()
            .filter_map(|session| {
                let outputs = session.outputs.as_ref()?;
                Some((SessionUnits::from_session(&session.to_session()), outputs.units.clone()))
            })
            .collect()
    }

    /// An estimate of the heap bytes it holds ([`crate::heap`]): messages, stage outputs and
    /// their vectors, facts. What a byte-bounded cache weighs it by.
    pub fn heap_bytes(&self) -> usize {
        use crate::heap::{flat, json, named_vectors, optional_text, text, vectors};
        let sessions: usize = self
            .sessions
            .iter()
            .map(|session| {
                let messages: usize = session
                    .messages
                    .iter()
                    .map(|message| {
                        text(&message.id)
                            + text(&message.speaker)
                            + text(&message.text)
                            + optional_text(message.timestamp.as_deref())
                            + optional_text(message.sort_time.as_deref())
                            + json(&message.tags)
                    })
                    .sum();
                let outputs = session.outputs.as_ref().map_or(0, |outputs| {
                    let units = &outputs.units;
                    text(&outputs.model)
                        + json(&outputs.rewrite)
                        + json(&outputs.keywords)
                        + named_vectors(&outputs.sentence_vectors)
                        + named_vectors(&outputs.topic_vectors)
                        + flat(&units.session)
                        + vectors(&units.turns)
                        + [&units.summary, &units.keywords, &units.hybrid]
                            .into_iter()
                            .map(|vector| vector.as_deref().map_or(0, flat))
                            .sum::<usize>()
                });
                optional_text(session.key.as_deref())
                    + flat(&session.messages)
                    + messages
                    + text(&session.content_hash)
                    + outputs
                    + json(&session.failure)
                    + json(&session.facts)
            })
            .sum();
        json(&self.info) + flat(&self.sessions) + sessions
    }

    /// The message behind a dia_id (`D3:2`), with its session.
    pub fn message(&self, dia_id: &str) -> Option<(&StoredSession, &StoredMessage)> {
        let (session, turn) = dia_id.strip_prefix('D')?.split_once(':')?;
        let (number, turn): (u32, usize) = (session.parse().ok()?, turn.parse().ok()?);
        let session = self.sessions.iter().find(|session| session.number == number)?;
        Some((session, session.messages.get(turn.checked_sub(1)?)?))
    }
}

impl Store {
    /// Loads a conversation; [`StoreError::UnknownConversation`] when it does not exist.
    pub fn load(&self, id: &str) -> Result<StoredConversation, StoreError> {
        check_conversation_id(id)?;
        let mut connection = self.connect()?;
        // One read transaction: a consistent snapshot even while an add commits.
        let transaction = connection.read()?;
        let info = transaction
            .query_opt(&format!("{INFO_QUERY} WHERE c.id = ?1"), params![id], info_of_row)?
            .ok_or_else(|| StoreError::UnknownConversation(id.to_string()))?;
        let revision = revision_of(&transaction, id)?;
        let numbers: Vec<(u32, Option<String>)> = transaction.query(
            "SELECT number, key FROM sessions WHERE conversation_id = ?1 ORDER BY number",
            params![id],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )?;
        let mut facts = super::facts::conversation_facts(&transaction, id)?;
        let mut sessions = Vec::with_capacity(numbers.len());
        for (number, key) in numbers {
            let (messages, content_hash) = session_messages(&transaction, id, number)?;
            let outputs = session_outputs(&transaction, id, number, &content_hash, &messages)?;
            let failure = match outputs {
                Some(_) => None,
                None => session_failure(&transaction, id, number, &content_hash)?,
            };
            let (own, rest): (Vec<StoredFact>, Vec<StoredFact>) =
                facts.into_iter().partition(|fact| fact.session_number() == number);
            facts = rest;
            let facts = if outputs.is_some() { own } else { Vec::new() };
            sessions.push(StoredSession {
                number,
                key,
                messages,
                content_hash,
                outputs,
                failure,
                facts,
            });
        }
        sessions.sort_by(|a, b| {
            let start = |session: &StoredSession| {
                session.messages.first().and_then(|message| message.sort_time.clone())
            };
            (start(a).is_none(), start(a), a.number).cmp(&(start(b).is_none(), start(b), b.number))
        });
        transaction.commit()?;
        Ok(StoredConversation { info, sessions, revision, as_of: None })
    }

    /// The conversation's revision: it changes with every write that changes the conversation
    /// (new messages, new session outputs) and is never reused, so equal revisions mean equal
    /// content. [`StoreError::UnknownConversation`] when it does not exist.
    pub fn revision(&self, id: &str) -> Result<i64, StoreError> {
        check_conversation_id(id)?;
        revision_of(&self.connect()?, id)
    }
}

fn revision_of(connection: &Conn, id: &str) -> Result<i64, StoreError> {
    connection
        .query_opt("SELECT revision FROM conversations WHERE id = ?1", params![id], |row| {
            row.get(0)
        })?
        .ok_or_else(|| StoreError::UnknownConversation(id.to_string()))
}

/// A session's messages in order, and the hash of its content.
pub(super) fn session_messages(
    connection: &Conn,
    conversation: &str,
    number: u32,
) -> Result<(Vec<StoredMessage>, String), StoreError> {
    let sql = "SELECT hash, speaker, text, timestamp, sort_time, tags FROM messages
         WHERE conversation_id = ?1 AND session_number = ?2
         ORDER BY sort_time IS NULL, sort_time, seq";
    let messages: Vec<StoredMessage> =
        connection.query(sql, params![conversation, number], |row| {
            Ok(StoredMessage {
                id: row.get(0)?,
                speaker: row.get(1)?,
                text: row.get(2)?,
                timestamp: row.get(3)?,
                sort_time: row.get(4)?,
                tags: row
                    .get::<Option<String>>(5)?
                    .and_then(|tags| serde_json::from_str(&tags).ok())
                    .unwrap_or_default(),
            })
        })?;
    let content: Vec<(&str, &str, Option<&str>)> = messages
        .iter()
        .map(|message| {
            (message.speaker.as_str(), message.text.as_str(), message.sort_time.as_deref())
        })
        .collect();
    let hash = content_id(&serde_json::json!(content).to_string());
    Ok((messages, hash))
}

fn session_outputs(
    connection: &Conn,
    conversation: &str,
    number: u32,
    content_hash: &str,
    messages: &[StoredMessage],
) -> Result<Option<StoredOutputs>, StoreError> {
    let row = connection.query_opt(
        "SELECT model, rewrite, keywords, dims, vectors, units FROM session_outputs
         WHERE conversation_id = ?1 AND session_number = ?2 AND content_hash = ?3",
        params![conversation, number, content_hash],
        |row| {
            Ok((
                row.get::<String>(0)?,
                row.get::<String>(1)?,
                row.get::<String>(2)?,
                row.get::<i64>(3)?,
                row.get::<Vec<u8>>(4)?,
                row.get::<Vec<u8>>(5)?,
            ))
        },
    )?;
    let Some((model, rewrite, keywords, dims, vectors, units)) = row else { return Ok(None) };
    let corrupt = |what: &str| StoreError::Corrupt(format!("session D{number}: {what}"));
    let rewrite: SessionRewrite = serde_json::from_str(&rewrite).map_err(|_| corrupt("rewrite"))?;
    let keywords: KeywordRecord =
        serde_json::from_str(&keywords).map_err(|_| corrupt("keywords"))?;
    let dims = usize::try_from(dims).map_err(|_| corrupt("dims"))?;
    let mut vectors = decode_vectors(&vectors, dims).ok_or_else(|| corrupt("vectors"))?.into_iter();
    let sentence_vectors: Vec<(String, Vec<f32>)> =
        rewrite.sentences.iter().map(|s| s.id.clone()).zip(vectors.by_ref()).collect();
    let topic_vectors: Vec<(String, Vec<f32>)> =
        rewrite.topics.iter().map(|t| t.id.clone()).zip(vectors.by_ref()).collect();
    let mut units = decode_vectors(&units, dims).ok_or_else(|| corrupt("units"))?.into_iter();
    let session = units.next().ok_or_else(|| corrupt("units"))?;
    let turns: Vec<Vec<f32>> = units.collect();
    if turns.len() != messages.len() || sentence_vectors.len() != rewrite.sentences.len() {
        return Err(corrupt("vector count"));
    }
    let units = UnitVectors { session, turns, summary: None, keywords: None, hybrid: None };
    Ok(Some(StoredOutputs { model, rewrite, keywords, sentence_vectors, topic_vectors, units }))
}

/// The failure recorded for session `number`, if it is for `content_hash`.
fn session_failure(
    connection: &Conn,
    conversation: &str,
    number: u32,
    content_hash: &str,
) -> Result<Option<SessionFailure>, StoreError> {
    connection.query_opt(
        "SELECT error, attempts, failed_at FROM session_failures
         WHERE conversation_id = ?1 AND session_number = ?2 AND content_hash = ?3",
        params![conversation, number, content_hash],
        |row| {
            Ok(SessionFailure { error: row.get(0)?, attempts: row.get(1)?, failed_at: row.get(2)? })
        },
    )
}
