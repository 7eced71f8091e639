//! Edits beside adding: recording why a session could not be built (read back with the
//! session as `read::SessionFailure`), and forgetting one message.

use serde::Serialize;
use serde_json::json;

use super::audit::{FORGET_MESSAGE, record_edit};
use super::db::params;
use super::read::session_messages;
use super::revision::bump_revision;
use super::{Store, StoreError, check_conversation_id};

/// What forgetting one message changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
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
    /// Corrections (their edit ids) that lapsed: their facts came from this message. Each
    /// has a `correction_lapsed` row in the audit log.
    pub lapsed_corrections: Vec<i64>,
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
               attempts = CASE WHEN session_failures.content_hash = excluded.content_hash
                 THEN session_failures.attempts + 1 ELSE 1 END,
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
        let transaction = connection.write()?;
        let row = transaction.query_opt(
            "SELECT m.session_number, s.key, m.seq, m.speaker, m.text, m.timestamp,
                        m.sort_time, m.tags
                 FROM messages m JOIN sessions s
                   ON s.conversation_id = m.conversation_id AND s.number = m.session_number
                 WHERE m.conversation_id = ?1 AND m.hash = ?2",
            params![conversation, message],
            |row| {
                Ok((
                    row.get::<u32>(0)?,
                    json!({
                        "id": message, "session": row.get::<u32>(0)?,
                        "session_key": row.get::<Option<String>>(1)?,
                        "seq": row.get::<i64>(2)?, "speaker": row.get::<String>(3)?,
                        "text": row.get::<String>(4)?,
                        "timestamp": row.get::<Option<String>>(5)?,
                        "sort_time": row.get::<Option<String>>(6)?,
                        "tags": row.get::<Option<String>>(7)?,
                    }),
                ))
            },
        )?;
        let (number, before) = row.ok_or_else(|| StoreError::UnknownMessage {
            conversation: conversation.to_string(),
            message: message.to_string(),
        })?;
        let lapsed_corrections =
            super::audit::lapse_corrections_of_message(&transaction, conversation, message)?;
        transaction.execute(
            "DELETE FROM messages WHERE conversation_id = ?1 AND hash = ?2",
            params![conversation, message],
        )?;
        super::facts::delete_facts(&transaction, conversation, Some(number))?;
        let (left, _) = session_messages(&transaction, conversation, number)?;
        let session_removed = left.is_empty();
        let mut before = before;
        before["session_removed"] = json!(session_removed);
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
            lapsed_corrections,
        })
    }
}
