//! Single edits and their append-only audit log (`edits`, schema migration 6): correcting one
//! fact, forgetting one message (`edit.rs`), and undoing either. Each edit and its log row are
//! one transaction, so a kill -9 leaves the store before or after the edit, never between. The
//! log is never rewritten (triggers refuse it); an undo is a new row naming the edit it undoes.

use serde::Serialize;
use serde_json::{Value, json};

use super::db::{Conn, Row, ToValue, params};
use super::facts::{Correction, FACT_COLUMNS, StoredFact, fact_of_row};
use super::revision::bump_revision;
use super::{Store, StoreError};

/// Forgetting one message.
pub const FORGET_MESSAGE: &str = "forget_message";
/// Correcting one fact.
pub const CORRECT_FACT: &str = "correct_fact";
/// Undoing an edit.
pub const UNDO: &str = "undo";
/// A correction that could not follow its fact (the fact's message was forgotten, or its
/// rebuilt session holds no fact of that aspect from that message). Its target is the
/// correction's edit id; it is written by the edit or build that made it lapse.
pub const CORRECTION_LAPSED: &str = "correction_lapsed";

/// One row of the audit log.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Edit {
    /// Its id (`memory undo ID`).
    pub id: i64,
    /// When (RFC 3339).
    pub at: String,
    /// Who: the HTTP token's or key's name, or `cli`.
    pub actor: String,
    /// The id of the store key (`mragent keys`) that made it, if one did.
    pub actor_key: Option<String>,
    /// `forget_message`, `correct_fact`, `undo` or `correction_lapsed`.
    pub kind: String,
    /// The conversation it changed.
    pub conversation: String,
    /// What it changed: a message id, a fact id, or the edit undone.
    pub target: String,
    /// The state before (the message, or the fact's value).
    pub before: Option<Value>,
    /// The state after.
    pub after: Option<Value>,
    /// The edit this one undoes.
    pub undoes: Option<i64>,
    /// The edit that undid this one, if any.
    pub undone_by: Option<i64>,
    /// For a correction: the `correction_lapsed` row saying it no longer holds, if any.
    pub lapsed_by: Option<i64>,
}

const EDIT_COLUMNS: &str = "e.id, e.at, e.actor, e.kind, e.conversation_id, e.target, e.before,
    e.after, e.undoes, (SELECT u.id FROM edits u WHERE u.undoes = e.id),
    (SELECT l.id FROM edits l WHERE l.kind = 'correction_lapsed'
       AND l.conversation_id = e.conversation_id AND l.target = CAST(e.id AS TEXT))";

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
        lapsed_by: row.get(10)?,
    })
}

/// The correction an edit of kind [`CORRECT_FACT`] makes, when its row says what it needs.
fn correction_of_edit(edit: &Edit) -> Option<Correction> {
    let after = edit.after.as_ref()?;
    let fact = &after["fact"];
    let text = |field: &str| fact[field].as_str().map(str::to_string);
    Some(Correction {
        edit: edit.id,
        conversation: edit.conversation.clone(),
        value: after["value"].as_str()?.to_string(),
        source: text("source"),
        aspect: text("aspect"),
        session: text("session")?.trim_start_matches('D').parse().ok()?,
        key: text("key").unwrap_or_default(),
        extracted: text("extracted").unwrap_or_default(),
        fact: fact.clone(),
    })
}

/// The corrections in force in `conversation`, oldest first.
pub(super) fn corrections_in_force(
    connection: &Conn,
    conversation: &str,
) -> Result<Vec<Correction>, StoreError> {
    let edits = connection.query(
        &format!(
            "SELECT {EDIT_COLUMNS} FROM edits e WHERE e.conversation_id = ?1 AND e.kind = ?2
             ORDER BY e.id"
        ),
        params![conversation, CORRECT_FACT],
        edit_of_row,
    )?;
    let mut in_force: Vec<Correction> = Vec::new();
    for edit in edits {
        if edit.undone_by.is_some() {
            continue;
        }
        let Some(correction) = correction_of_edit(&edit) else { continue };
        // The latest correction of a fact decides: an earlier one is replaced by it, and does
        // not come back when the latest lapses.
        in_force.retain(|earlier| earlier.identity() != correction.identity());
        if edit.lapsed_by.is_none() {
            in_force.push(correction);
        }
    }
    Ok(in_force)
}

/// Writes the row saying that `correction` lapsed, and why.
pub(super) fn lapse_correction(
    transaction: &Conn,
    correction: &Correction,
    why: &str,
) -> Result<i64, StoreError> {
    let before = json!({"value": correction.value, "fact": correction.fact});
    let after = json!({"lapsed": why});
    record_edit(
        transaction,
        "mragent",
        CORRECTION_LAPSED,
        &correction.conversation,
        &correction.edit.to_string(),
        (Some(&before), Some(&after)),
        None,
    )
}

/// Marks lapsed every correction in force in `conversation` whose fact came from `message`
/// (it is being forgotten); returns their edit ids.
pub(super) fn lapse_corrections_of_message(
    transaction: &Conn,
    conversation: &str,
    message: &str,
) -> Result<Vec<i64>, StoreError> {
    let mut lapsed = Vec::new();
    for correction in corrections_in_force(transaction, conversation)? {
        if correction.source.as_deref() == Some(message) {
            lapse_correction(
                transaction,
                &correction,
                "the message its fact came from was forgotten",
            )?;
            lapsed.push(correction.edit);
        }
    }
    Ok(lapsed)
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

    /// The id of the newest edit (0 when the log is empty).
    pub fn last_edit(&self) -> Result<i64, StoreError> {
        self.connect()?
            .query_row("SELECT COALESCE(MAX(id), 0) FROM edits", params![], |row| row.get(0))
    }

    /// The corrections of `conversation` (their edit ids) that lapsed after edit `after`.
    pub fn lapses_since(&self, conversation: &str, after: i64) -> Result<Vec<i64>, StoreError> {
        let targets: Vec<String> = self.connect()?.query(
            "SELECT target FROM edits WHERE conversation_id = ?1 AND kind = ?2 AND id > ?3
             ORDER BY id",
            params![conversation, CORRECTION_LAPSED, after],
            |row| row.get(0),
        )?;
        Ok(targets.iter().filter_map(|target| target.parse().ok()).collect())
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
        let where_ = json!({"session": fact.session, "key": fact.key, "extracted": fact.extracted,
            "source": fact.source, "aspect": fact.aspect});
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
        if let Some(lapse) = edit.lapsed_by {
            return Err(refuse(&format!(
                "it lapsed (edit {lapse}): its fact is no longer in memory"
            )));
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

/// Puts back the value a correction replaced, on the fact it corrected: the fact with the
/// same identity (source message and aspect; for an older correction, the same session, key
/// and extracted value), wherever rebuilds have put it.
fn restore_value(transaction: &Conn, edit: &Edit) -> Result<Value, StoreError> {
    let gone = || StoreError::Corrupt("the fact it corrected is no longer in memory".into());
    let before = edit.before.as_ref().ok_or_else(gone)?;
    let value = before["value"].as_str().ok_or_else(gone)?;
    let correction = correction_of_edit(edit).ok_or_else(gone)?;
    let candidates: Vec<StoredFact> = transaction.query(
        &format!(
            "SELECT {FACT_COLUMNS} FROM facts f WHERE f.conversation_id = ?1
             ORDER BY f.session_number, f.key"
        ),
        params![edit.conversation],
        fact_of_row,
    )?;
    let fact = candidates
        .iter()
        .find(|fact| {
            correction.identifies(fact.source.as_deref(), &fact.aspect, &fact.key, &fact.extracted)
                && (correction.source.is_some() || fact.session_number() == correction.session)
        })
        .ok_or_else(gone)?;
    if fact.value != correction.value {
        return Err(StoreError::Corrupt(format!(
            "the fact holds {:?} now, not the corrected value; correct it again",
            fact.value
        )));
    }
    transaction.execute("UPDATE facts SET value = ?1 WHERE id = ?2", params![value, fact.id])?;
    Ok(json!({"value": value, "fact": before["fact"]}))
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
