//! Edits beside adding: recording why a session could not be built (read back with the
//! session as `read::SessionFailure`), and forgetting one message.

use rusqlite::{OptionalExtension as _, TransactionBehavior, params};
use serde::Serialize;
use serde_json::{Value, json};

use super::audit::{Edit, FORGET_MESSAGE, record_edit};
use super::read::session_messages;
use super::write::bump_revision;
use super::{Store, StoreError, check_conversation_id};

/// What forgetting one message changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct ForgottenMessage {
    /// Conversation id.
    pub conversation: String,
    /// The message id (its content hash).
    pub message: String,
    /// The session it was in (`D<n>`).
    pub session: String,
    /// The session held no other message and is gone too.
    pub session_removed: bool,
    /// The edit's id in the audit log (`memory undo` reverts it).
    pub edit: i64,
}

impl Store {
    /// Records that session `number` failed to build from content `content_hash`: the
    /// attempts count up while the content stays the same and restart at 1 when it changed.
    pub fn record_failure(
        &self,
        conversation: &str,
        number: u32,
        content_hash: &str,
        error: &str,
    ) -> Result<(), StoreError> {
        check_conversation_id(conversation)?;
        let connection = self.connect()?;
        connection.execute(
            "INSERT INTO session_failures
               (conversation_id, session_number, content_hash, error, attempts, failed_at)
             VALUES (?1, ?2, ?3, ?4, 1, ?5)
             ON CONFLICT (conversation_id, session_number) DO UPDATE SET
               attempts = CASE WHEN content_hash = excluded.content_hash THEN attempts + 1 ELSE 1 END,
               content_hash = excluded.content_hash,
               error = excluded.error,
               failed_at = excluded.failed_at",
            params![conversation, number, content_hash, error, chrono::Utc::now().to_rfc3339()],
        )?;
        Ok(())
    }

    /// Deletes message `message` (its id, the content hash) of `conversation`; the session it
    /// was in loses its outputs (they were made with the message) and is deleted when it holds
    /// nothing else. Errors when the conversation or the message does not exist.
    /// The edit is logged as `actor`'s (see `audit`), in the same transaction. The session's
    /// facts go with its outputs; the rebuild extracts them again from the messages left.
    pub fn forget_message(
        &self,
        conversation: &str,
        message: &str,
        actor: &str,
    ) -> Result<ForgottenMessage, StoreError> {
        check_conversation_id(conversation)?;
        crate::names::check_name(crate::names::NameKind::Message, message)?;
        let mut connection = self.connect()?;
        let transaction = connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let row = transaction
            .query_row(
                "SELECT m.session_number, s.key, m.seq, m.speaker, m.text, m.timestamp,
                        m.sort_time, m.tags
                 FROM messages m JOIN sessions s
                   ON s.conversation_id = m.conversation_id AND s.number = m.session_number
                 WHERE m.conversation_id = ?1 AND m.hash = ?2",
                params![conversation, message],
                |row| {
                    Ok((
                        row.get::<_, u32>(0)?,
                        json!({
                            "id": message, "session": row.get::<_, u32>(0)?,
                            "session_key": row.get::<_, Option<String>>(1)?,
                            "seq": row.get::<_, i64>(2)?, "speaker": row.get::<_, String>(3)?,
                            "text": row.get::<_, String>(4)?,
                            "timestamp": row.get::<_, Option<String>>(5)?,
                            "sort_time": row.get::<_, Option<String>>(6)?,
                            "tags": row.get::<_, Option<String>>(7)?,
                        }),
                    ))
                },
            )
            .optional()?;
        let (number, before) = row.ok_or_else(|| StoreError::UnknownMessage {
            conversation: conversation.to_string(),
            message: message.to_string(),
        })?;
        transaction.execute(
            "DELETE FROM messages WHERE conversation_id = ?1 AND hash = ?2",
            params![conversation, message],
        )?;
        transaction.execute(
            "DELETE FROM facts WHERE conversation_id = ?1 AND session_number = ?2",
            params![conversation, number],
        )?;
        let (left, _) = session_messages(&transaction, conversation, number)?;
        let session_removed = left.is_empty();
        if session_removed {
            transaction.execute(
                "DELETE FROM sessions WHERE conversation_id = ?1 AND number = ?2",
                params![conversation, number],
            )?;
        }
        let edit = record_edit(
            &transaction,
            actor,
            FORGET_MESSAGE,
            conversation,
            message,
            (Some(&before), None),
            None,
        )?;
        bump_revision(&transaction, conversation)?;
        transaction.commit()?;
        Ok(ForgottenMessage {
            conversation: conversation.to_string(),
            message: message.to_string(),
            session: format!("D{number}"),
            session_removed,
            edit,
        })
    }
}

/// Puts a forgotten message (an edit's `before`) back into its session, re-creating the
/// session when the forget removed it. `StoreError::Corrupt` says why it cannot.
pub(super) fn restore_message(
    transaction: &rusqlite::Transaction<'_>,
    edit: &Edit,
) -> Result<Value, StoreError> {
    let refuse = |why: &str| StoreError::Corrupt(why.to_string());
    let message = edit.before.as_ref().ok_or_else(|| refuse("the log holds no message"))?;
    let number = message["session"].as_i64().ok_or_else(|| refuse("the log holds no session"))?;
    let exists = |sql: &str, key: &dyn rusqlite::ToSql| -> Result<bool, StoreError> {
        Ok(transaction.query_row(sql, params![edit.conversation, key], |row| row.get(0))?)
    };
    let conversation_exists: bool = transaction.query_row(
        "SELECT EXISTS(SELECT 1 FROM conversations WHERE id = ?1)",
        [&edit.conversation],
        |row| row.get(0),
    )?;
    if !conversation_exists {
        return Err(refuse("its conversation was forgotten"));
    }
    if exists(
        "SELECT EXISTS(SELECT 1 FROM messages WHERE conversation_id = ?1 AND hash = ?2)",
        &edit.target,
    )? {
        return Err(refuse("the message is stored again already"));
    }
    let session_key = message["session_key"].as_str();
    if exists(
        "SELECT EXISTS(SELECT 1 FROM sessions WHERE conversation_id = ?1 AND number = ?2)",
        &number,
    )? {
        let key: Option<String> = transaction.query_row(
            "SELECT key FROM sessions WHERE conversation_id = ?1 AND number = ?2",
            params![edit.conversation, number],
            |row| row.get(0),
        )?;
        if key.as_deref() != session_key {
            return Err(refuse("its session number now holds another session"));
        }
    } else {
        transaction.execute(
            "INSERT INTO sessions (conversation_id, number, key) VALUES (?1, ?2, ?3)",
            params![edit.conversation, number, session_key],
        )?;
    }
    transaction.execute(
        "INSERT INTO messages (conversation_id, hash, session_number, seq, speaker, text,
           timestamp, sort_time, tags)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        params![
            edit.conversation,
            edit.target,
            number,
            message["seq"].as_i64(),
            message["speaker"].as_str(),
            message["text"].as_str(),
            message["timestamp"].as_str(),
            message["sort_time"].as_str(),
            message["tags"].as_str()
        ],
    )?;
    transaction.execute(
        "DELETE FROM facts WHERE conversation_id = ?1 AND session_number = ?2",
        params![edit.conversation, number],
    )?;
    Ok(json!({"restored": edit.target, "session": format!("D{number}")}))
}
