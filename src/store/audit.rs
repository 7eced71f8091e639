//! Single edits and their append-only audit log (`edits`, schema migration 6): correcting one
//! fact, forgetting one message (`edit.rs`), and undoing either. Each edit and its log row are
//! one transaction, so a kill -9 leaves the store before or after the edit, never between. The
//! log is never rewritten (triggers refuse it); an undo is a new row naming the edit it undoes.

use serde::Serialize;
use serde_json::{Value, json};

use super::db::{Conn, Row, ToValue, params};
use super::facts::{FACT_COLUMNS, fact_of_row};
use super::revision::bump_revision;
use super::{Store, StoreError};

/// Forgetting one message.
pub const FORGET_MESSAGE: &str = "forget_message";
/// Correcting one fact.
pub const CORRECT_FACT: &str = "correct_fact";
/// Undoing an edit.
pub const UNDO: &str = "undo";

/// One row of the audit log.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Edit {
    /// Its id (`memory undo ID`).
    pub id: i64,
    /// When (RFC 3339).
    pub at: String,
    /// Who: the HTTP token's or key's name, or `cli`.
    pub actor: String,
    /// The id of the store key (`mragent keys`) that made it, if one did.
    pub actor_key: Option<String>,
    /// `forget_message`, `correct_fact` or `undo`.
    pub kind: String,
    /// The conversation it changed.
    pub conversation: String,
    /// What it changed: a message id, a fact id, or the edit undone.
    pub target: String,
    /// The state before (the message, or the fact's value).
    #[schema(value_type = Option<Object>)]
    pub before: Option<Value>,
    /// The state after.
    #[schema(value_type = Option<Object>)]
    pub after: Option<Value>,
    /// The edit this one undoes.
    pub undoes: Option<i64>,
    /// The edit that undid this one, if any.
    pub undone_by: Option<i64>,
}

const EDIT_COLUMNS: &str = "e.id, e.at, e.actor, e.kind, e.conversation_id, e.target, e.before,
    e.after, e.undoes, (SELECT u.id FROM edits u WHERE u.undoes = e.id)";

fn edit_of_row(row: &Row) -> Result<Edit, StoreError> {
    let value = |text: Option<String>| text.and_then(|text| serde_json::from_str(&text).ok());
    // A key's edits are logged as `name#id` (names never hold `#`).
    let logged: String = row.get(2)?;
    let (actor, actor_key) = match logged.split_once('#') {
        Some((name, key)) => (name.to_string(), Some(key.to_string())),
        None => (logged, None),
    };
    Ok(Edit {
        id: row.get(0)?,
        at: row.get(1)?,
        actor,
        actor_key,
        kind: row.get(3)?,
        conversation: row.get(4)?,
        target: row.get(5)?,
        before: value(row.get(6)?),
        after: value(row.get(7)?),
        undoes: row.get(8)?,
        undone_by: row.get(9)?,
    })
}

/// Appends an edit to the log inside `transaction`; returns its id.
pub(super) fn record_edit(
    transaction: &Conn,
    actor: &str,
    kind: &str,
    conversation: &str,
    target: &str,
    (before, after): (Option<&Value>, Option<&Value>),
    undoes: Option<i64>,
) -> Result<i64, StoreError> {
    transaction.query_row(
        "INSERT INTO edits (at, actor, kind, conversation_id, target, before, after, undoes)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) RETURNING id",
        params![
            chrono::Utc::now().to_rfc3339(),
            actor,
            kind,
            conversation,
            target,
            before.map(Value::to_string),
            after.map(Value::to_string),
            undoes
        ],
        |row| row.get(0),
    )
}

fn load_edit(connection: &Conn, id: i64) -> Result<Edit, StoreError> {
    connection
        .query_opt(
            &format!("SELECT {EDIT_COLUMNS} FROM edits e WHERE e.id = ?1"),
            params![id],
            edit_of_row,
        )?
        .ok_or(StoreError::UnknownEdit(id))
}

impl Store {
    /// The audit log, oldest first: a user's conversations, one conversation, or all.
    pub fn history(
        &self,
        user: Option<&str>,
        conversation: Option<&str>,
    ) -> Result<Vec<Edit>, StoreError> {
        if let Some(user) = user {
            crate::names::check_name(crate::names::NameKind::User, user)?;
        }
        if let Some(conversation) = conversation {
            super::check_conversation_id(conversation)?;
        }
        let connection = self.connect()?;
        connection.query(
            &format!(
                "SELECT {EDIT_COLUMNS} FROM edits e
                 WHERE (CAST(?1 AS TEXT) IS NULL OR e.conversation_id IN
                         (SELECT id FROM conversations WHERE user_id = ?1))
                   AND (CAST(?2 AS TEXT) IS NULL OR e.conversation_id = ?2)
                 ORDER BY e.id"
            ),
            params![user, conversation],
            edit_of_row,
        )
    }

    /// One edit.
    pub fn edit(&self, id: i64) -> Result<Edit, StoreError> {
        load_edit(&self.connect()?, id)
    }

    /// Sets fact `id`'s value to `value` (what memory holds from now on; the extracted value
    /// stays beside it), logged as `actor`'s edit.
    pub fn correct_fact(&self, id: i64, value: &str, actor: &str) -> Result<Edit, StoreError> {
        let mut connection = self.connect()?;
        let transaction = connection.write()?;
        let fact = transaction
            .query_opt(
                &format!("SELECT {FACT_COLUMNS} FROM facts f WHERE f.id = ?1"),
                params![id],
                fact_of_row,
            )?
            .ok_or(StoreError::UnknownFact(id))?;
        transaction.execute("UPDATE facts SET value = ?1 WHERE id = ?2", params![value, id])?;
        let where_ = json!({"session": fact.session, "key": fact.key, "extracted": fact.extracted});
        let before = json!({"value": fact.value, "fact": where_});
        let after = json!({"value": value, "fact": where_});
        let edit = record_edit(
            &transaction,
            actor,
            CORRECT_FACT,
            &fact.conversation,
            &id.to_string(),
            (Some(&before), Some(&after)),
            None,
        )?;
        bump_revision(&transaction, &fact.conversation)?;
        transaction.commit()?;
        self.edit(edit)
    }

    /// Reverts edit `id` as `actor`'s edit, in one transaction; returns the undo's log row.
    /// An undone forget puts the message back into its session (whose outputs then need a
    /// rebuild, as after an add); an undone correction restores the fact's value.
    pub fn undo(&self, id: i64, actor: &str) -> Result<Edit, StoreError> {
        let mut connection = self.connect()?;
        let transaction = connection.write()?;
        let edit = load_edit(&transaction, id)?;
        let refuse = |why: &str| StoreError::NotUndoable { edit: id, why: why.to_string() };
        if let Some(undo) = edit.undone_by {
            return Err(refuse(&format!("edit {undo} undid it already")));
        }
        let after = match edit.kind.as_str() {
            FORGET_MESSAGE => restore_message(&transaction, &edit).map_err(|why| match why {
                StoreError::Corrupt(why) => refuse(&why),
                other => other,
            })?,
            CORRECT_FACT => restore_value(&transaction, &edit).map_err(|why| match why {
                StoreError::Corrupt(why) => refuse(&why),
                other => other,
            })?,
            _ => return Err(refuse("an undo is not undone; make the edit again")),
        };
        let undo = record_edit(
            &transaction,
            actor,
            UNDO,
            &edit.conversation,
            &id.to_string(),
            (edit.after.as_ref(), Some(&after)),
            Some(id),
        )?;
        bump_revision(&transaction, &edit.conversation)?;
        transaction.commit()?;
        self.edit(undo)
    }
}

/// Puts back the value a correction replaced: on the fact it corrected, or (its session was
/// rebuilt since) on the fact with the same session, key and extracted value.
fn restore_value(transaction: &Conn, edit: &Edit) -> Result<Value, StoreError> {
    let gone = || StoreError::Corrupt("the fact it corrected is no longer in memory".into());
    let before = edit.before.as_ref().ok_or_else(gone)?;
    let value = before["value"].as_str().ok_or_else(gone)?;
    let corrected = edit.after.as_ref().and_then(|after| after["value"].as_str());
    let fact = &before["fact"];
    let number: u32 = fact["session"]
        .as_str()
        .and_then(|session| session.trim_start_matches('D').parse().ok())
        .ok_or_else(gone)?;
    let matching = "(id = ?1 OR (conversation_id = ?2 AND session_number = ?3 AND key = ?4
                     AND extracted = ?5))";
    let target = edit.target.parse::<i64>().unwrap_or(-1);
    let (key, extracted) =
        (fact["key"].as_str().unwrap_or_default(), fact["extracted"].as_str().unwrap_or_default());
    let current: Option<String> = transaction.query_opt(
        &format!("SELECT value FROM facts WHERE {matching} ORDER BY id DESC LIMIT 1"),
        params![target, edit.conversation, number, key, extracted],
        |row| row.get(0),
    )?;
    match current {
        None => return Err(gone()),
        Some(current) if Some(current.as_str()) != corrected => {
            return Err(StoreError::Corrupt(format!(
                "the fact holds {current:?} now, not the corrected value; correct it again"
            )));
        }
        Some(_) => {}
    }
    transaction.execute(
        &format!("UPDATE facts SET value = ?6 WHERE {matching}"),
        params![target, edit.conversation, number, key, extracted, value],
    )?;
    Ok(json!({"value": value, "fact": fact}))
}

/// Puts a forgotten message (an edit's `before`) back into its session, re-creating the
/// session when the forget removed it. `StoreError::Corrupt` says why it cannot.
fn restore_message(transaction: &Conn, edit: &Edit) -> Result<Value, StoreError> {
    let refuse = |why: &str| StoreError::Corrupt(why.to_string());
    let message = edit.before.as_ref().ok_or_else(|| refuse("the log holds no message"))?;
    let number = message["session"].as_i64().ok_or_else(|| refuse("the log holds no session"))?;
    let exists = |sql: &str, key: &dyn ToValue| -> Result<bool, StoreError> {
        transaction.query_row(sql, params![edit.conversation, key], |row| row.get(0))
    };
    let conversation_exists: bool = transaction.query_row(
        "SELECT EXISTS(SELECT 1 FROM conversations WHERE id = ?1)",
        params![edit.conversation],
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
        // The forget removed the session, so a session with its number now is a later one.
        if key.as_deref() != session_key || message["session_removed"] == json!(true) {
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
    super::facts::delete_facts(transaction, &edit.conversation, u32::try_from(number).ok())?;
    Ok(json!({"restored": edit.target, "session": format!("D{number}")}))
}
