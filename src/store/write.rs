//! Writes: adding messages (one transaction, idempotent by content hash) and recording a
//! session's stage outputs (only if the session still has the content they were made from).

use std::collections::BTreeMap;

use chrono::{SecondsFormat, TimeDelta};
use serde::Serialize;

use super::db::{Conn, params};
use super::read::session_messages;
use super::revision::bump_revision;
use super::vectors::encode_vectors;
use super::{Store, StoreError, check_conversation_id};
use crate::convo::{Message, Placement, SessionSpan, Timestamp, effective_times, place_messages};
use crate::ingest::SessionOutputs;
use crate::retrieval::units::UnitVectors;

/// What an add changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Added {
    /// The conversation did not exist before.
    pub created: bool,
    /// Messages stored now.
    pub new_messages: usize,
    /// Messages already stored (same content hash), skipped.
    pub duplicates: usize,
    /// Sessions created by this add.
    pub new_sessions: Vec<u32>,
    /// Existing sessions that received messages (their outputs are now stale).
    pub changed_sessions: Vec<u32>,
}

impl Store {
    /// Stores `messages` in `conversation` (created with `embedder` if new) in one
    /// transaction. Messages whose content hash is stored already are skipped; the others are
    /// placed into sessions by `place_messages` with `gap`.
    ///
    /// `scope` gives the conversation's user and agent (set when it is created; an add naming
    /// others is refused) and the tags every message of this add carries.
    pub fn add_messages(
        &self,
        conversation: &str,
        embedder: &str,
        scope: &AddScope,
        messages: &[Message],
        gap: TimeDelta,
    ) -> Result<Added, StoreError> {
        check_conversation_id(conversation)?;
        scope.check()?;
        let mut connection = self.connect()?;
        let transaction = connection.write()?;
        let added = add_in(&transaction, conversation, embedder, scope, messages, gap)?;
        transaction.commit()?;
        Ok(added)
    }

    /// Records the outputs of session `number`, made from content `content_hash`. Returns
    /// `false` (and writes nothing) when the session's content changed in the meantime.
    pub fn save_outputs(
        &self,
        conversation: &str,
        number: u32,
        content_hash: &str,
        model: &str,
        outputs: &SessionOutputs,
        units: &UnitVectors,
    ) -> Result<bool, StoreError> {
        check_conversation_id(conversation)?;
        let mut connection = self.connect()?;
        let transaction = connection.write()?;
        let (messages, current) = session_messages(&transaction, conversation, number)?;
        if current != content_hash {
            return Ok(false);
        }
        let corrupt = |error: serde_json::Error| StoreError::Corrupt(error.to_string());
        let rewrite = serde_json::to_string(&outputs.rewrite).map_err(corrupt)?;
        let keywords = serde_json::to_string(&outputs.keywords).map_err(corrupt)?;
        let dims = units.session.len();
        let vectors = encode_vectors(
            outputs.sentence_vectors.iter().chain(&outputs.topic_vectors).map(|(_, v)| v),
            dims,
        )?;
        let unit_vectors =
            encode_vectors(std::iter::once(&units.session).chain(&units.turns), dims)?;
        transaction.execute(
            "INSERT INTO session_outputs
             (conversation_id, session_number, content_hash, model, rewrite, keywords, dims, vectors, units)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
             ON CONFLICT (conversation_id, session_number) DO UPDATE SET
               content_hash = excluded.content_hash, model = excluded.model,
               rewrite = excluded.rewrite, keywords = excluded.keywords, dims = excluded.dims,
               vectors = excluded.vectors, units = excluded.units",
            params![conversation, number, content_hash, model, rewrite, keywords, dims as i64, vectors, unit_vectors],
        )?;
        transaction.execute(
            "DELETE FROM session_failures WHERE conversation_id = ?1 AND session_number = ?2",
            params![conversation, number],
        )?;
        let sources: Vec<(&str, Option<&str>)> = messages
            .iter()
            .map(|message| (message.id.as_str(), message.sort_time.as_deref()))
            .collect();
        // Corrections of this session's facts follow them to the new facts; one that finds no
        // fact of its identity lapses on the record, in this transaction. The add reports the
        // lapses from the audit log.
        let in_session: Vec<&str> = sources.iter().map(|(id, _)| *id).collect();
        let corrections: Vec<_> = super::audit::corrections_in_force(&transaction, conversation)?
            .into_iter()
            .filter(|correction| correction.belongs_to(number, &in_session))
            .collect();
        let lapsed = super::facts::replace_session_facts(
            &transaction,
            conversation,
            number,
            &outputs.rewrite,
            &sources,
            &corrections,
        )?;
        for correction in lapsed {
            let why = "its session was rebuilt and holds no fact of this aspect from its message";
            super::audit::lapse_correction(&transaction, correction, why)?;
        }
        bump_revision(&transaction, conversation)?;
        transaction.commit()?;
        Ok(true)
    }
}

/// Who a conversation belongs to, and the tags of the messages of one add.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct AddScope {
    /// The user the conversation belongs to.
    pub user: Option<String>,
    /// The agent it belongs to.
    pub agent: Option<String>,
    /// Free key/value tags every message of the add carries (search filters on them).
    pub tags: BTreeMap<String, String>,
}

impl AddScope {
    /// Checks the user, the agent and every tag key and value against the one id rule.
    pub fn check(&self) -> Result<(), StoreError> {
        use crate::names::{NameKind, check_name};
        for user in self.user.iter().chain(&self.agent) {
            check_name(NameKind::User, user)?;
        }
        for (key, value) in &self.tags {
            check_name(NameKind::Tag, key)?;
            check_name(NameKind::Tag, value)?;
        }
        Ok(())
    }

    /// The tags as stored (a JSON object), `None` without tags.
    fn tags_json(&self) -> Result<Option<String>, StoreError> {
        if self.tags.is_empty() {
            return Ok(None);
        }
        serde_json::to_string(&self.tags)
            .map(Some)
            .map_err(|error| StoreError::Corrupt(error.to_string()))
    }
}

/// A new message: as given, with the time used for placement, and its content hash.
type Fresh<'a> = (&'a Message, Message, String);

/// Creates the conversation if needed (true when created); errors when it exists with another
/// embedder.
fn ensure_conversation(
    transaction: &Conn,
    conversation: &str,
    embedder: &str,
    scope: &AddScope,
) -> Result<bool, StoreError> {
    type Row = (String, Option<String>, Option<String>);
    let stored: Option<Row> = transaction.query_opt(
        "SELECT embedder, user_id, agent_id FROM conversations WHERE id = ?1",
        params![conversation],
        |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
    )?;
    let Some((stored, user, agent)) = stored else {
        transaction.execute(
            "INSERT INTO conversations (id, embedder, created_at, user_id, agent_id)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            params![
                conversation,
                embedder,
                chrono::Utc::now().to_rfc3339(),
                scope.user,
                scope.agent
            ],
        )?;
        return Ok(true);
    };
    if stored != embedder {
        return Err(StoreError::EmbedderMismatch {
            conversation: conversation.to_string(),
            stored,
            requested: embedder.to_string(),
        });
    }
    // A conversation without a user (one stored before scopes existed) takes the first one an
    // add names; after that, it keeps it.
    let owners =
        [("user", "user_id", user, &scope.user), ("agent", "agent_id", agent, &scope.agent)];
    for (field, column, stored, requested) in owners {
        match (stored, requested) {
            (None, Some(requested)) => {
                transaction.execute(
                    &format!("UPDATE conversations SET {column} = ?1 WHERE id = ?2"),
                    params![requested, conversation],
                )?;
                bump_revision(transaction, conversation)?;
            }
            (Some(stored), Some(requested)) if stored != *requested => {
                return Err(StoreError::ScopeMismatch {
                    conversation: conversation.to_string(),
                    field,
                    stored,
                    requested: requested.clone(),
                });
            }
            _ => {}
        }
    }
    Ok(false)
}

/// The messages not stored yet (content hashes with occurrence counts, effective times over
/// the whole input), and how many were stored already.
fn fresh_messages<'a>(
    transaction: &Conn,
    conversation: &str,
    messages: &'a [Message],
) -> Result<(Vec<Fresh<'a>>, usize), StoreError> {
    let times = effective_times(messages);
    let mut occurrences: BTreeMap<String, u32> = BTreeMap::new();
    let mut fresh = Vec::new();
    let mut duplicates = 0;
    for (message, time) in messages.iter().zip(&times) {
        let occurrence = occurrences.entry(message.content_hash(0)).or_insert(0);
        let hash = message.content_hash(*occurrence);
        *occurrence += 1;
        let known: bool = transaction.query_row(
            "SELECT EXISTS(SELECT 1 FROM messages WHERE conversation_id = ?1 AND hash = ?2)",
            params![conversation, hash],
            |row| row.get(0),
        )?;
        if known {
            duplicates += 1;
            continue;
        }
        let mut placed = message.clone();
        placed.timestamp = message.timestamp.or(time.map(Timestamp::Instant));
        fresh.push((message, placed, hash));
    }
    Ok((fresh, duplicates))
}

/// Places the fresh messages into sessions (creating new ones) and inserts them.
fn insert_messages(
    transaction: &Conn,
    conversation: &str,
    fresh: &[Fresh<'_>],
    gap: TimeDelta,
    tags: Option<&str>,
    added: &mut Added,
) -> Result<(), StoreError> {
    let spans = session_spans(transaction, conversation)?;
    let to_place: Vec<Message> = fresh.iter().map(|(_, placed, _)| placed.clone()).collect();
    let (placements, new_sessions) = place_messages(&spans, &to_place, gap);
    let first_number = spans.iter().map(|span| span.number).max().unwrap_or(0) + 1;
    for (number, key) in (first_number..).zip(&new_sessions) {
        transaction.execute(
            "INSERT INTO sessions (conversation_id, number, key) VALUES (?1, ?2, ?3)",
            params![conversation, number, key],
        )?;
        added.new_sessions.push(number);
    }
    let mut seq: i64 = transaction.query_row(
        "SELECT COALESCE(MAX(seq), 0) FROM messages WHERE conversation_id = ?1",
        params![conversation],
        |row| row.get(0),
    )?;
    for ((original, placed, hash), placement) in fresh.iter().zip(&placements) {
        let number = match placement {
            Placement::Existing(number) => {
                if !added.changed_sessions.contains(number) {
                    added.changed_sessions.push(*number);
                }
                *number
            }
            Placement::New(index) => added.new_sessions[*index],
        };
        seq += 1;
        let sort_time = placed
            .timestamp
            .map(|stamp| stamp.instant().to_rfc3339_opts(SecondsFormat::Secs, true));
        transaction.execute(
            "INSERT INTO messages (conversation_id, hash, session_number, seq, speaker, text, timestamp, sort_time, tags)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            params![
                conversation,
                hash,
                number,
                seq,
                original.speaker,
                original.text,
                original.timestamp.map(Timestamp::canonical),
                sort_time,
                tags
            ],
        )?;
    }
    added.changed_sessions.sort_unstable();
    // A changed session's facts were drawn from content it no longer has; its rebuild
    // extracts them again.
    for number in &added.changed_sessions {
        super::facts::delete_facts(transaction, conversation, Some(*number))?;
    }
    Ok(())
}

/// The spans of a conversation's sessions, by number.
fn session_spans(transaction: &Conn, conversation: &str) -> Result<Vec<SessionSpan>, StoreError> {
    let rows = transaction.query(
        "SELECT s.number, s.key, MIN(m.sort_time), MAX(m.sort_time)
         FROM sessions s LEFT JOIN messages m
           ON m.conversation_id = s.conversation_id AND m.session_number = s.number
         WHERE s.conversation_id = ?1 GROUP BY s.number, s.key ORDER BY s.number",
        params![conversation],
        |row| {
            Ok((
                row.get::<u32>(0)?,
                row.get::<Option<String>>(1)?,
                row.get::<Option<String>>(2)?,
                row.get::<Option<String>>(3)?,
            ))
        },
    )?;
    let mut spans = Vec::new();
    for (number, key, first, last) in rows {
        let parse = |text: Option<String>| {
            text.and_then(|text| chrono::DateTime::parse_from_rfc3339(&text).ok())
                .map(|time| time.with_timezone(&chrono::Utc))
        };
        let range = parse(first).zip(parse(last));
        spans.push(SessionSpan { number, key, range });
    }
    Ok(spans)
}

/// The body of [`Store::add_messages`] inside the caller's transaction (ids and scope checked).
pub(super) fn add_in(
    transaction: &Conn,
    conversation: &str,
    embedder: &str,
    scope: &AddScope,
    messages: &[Message],
    gap: TimeDelta,
) -> Result<Added, StoreError> {
    let created = ensure_conversation(transaction, conversation, embedder, scope)?;
    let (fresh, duplicates) = fresh_messages(transaction, conversation, messages)?;
    let mut added = Added {
        created,
        new_messages: fresh.len(),
        duplicates,
        new_sessions: Vec::new(),
        changed_sessions: Vec::new(),
    };
    if !fresh.is_empty() {
        let tags = scope.tags_json()?;
        insert_messages(transaction, conversation, &fresh, gap, tags.as_deref(), &mut added)?;
        bump_revision(transaction, conversation)?;
    }
    Ok(added)
}
