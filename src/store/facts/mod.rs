//! Personal facts as rows with a validity window (schema migration 6).
//!
//! The build's rewrite extracts facts (person, aspect, value) per session. They are written with
//! the session's outputs (`write::save_outputs` calls [`replace_session_facts`]), valid from the
//! session's first message. The facts of one person and aspect (in the user's conversations)
//! form a chain ordered by the time of the message each came from ([`walk`]). Whether a fact
//! replaces the one before it is the model's call (`service::facts`); this module finds the
//! pairs to decide ([`Store::chain_plan`]), caches the verdicts and places every fact of a
//! chain from the facts' times and the verdicts alone ([`Store::apply_chains`]), so the order
//! adds came in, or builds finished in, never shows. A replaced fact keeps its row and gets
//! `valid_to` (its successor's `valid_from`) and `superseded_by`.
//!
//! Here the rows (written, deleted, read); `chain` the chain itself (a pure function of the
//! facts and the verdicts), `settle` the settling in the store, `correction` the corrections
//! in force and the fact each one follows.

mod chain;
mod correction;
mod settle;

use serde::Serialize;

pub use self::chain::{FactPair, FactVerdict, Walk, walk};
pub(super) use self::correction::Correction;
pub use self::settle::{ChainPlan, ChainsApplied};
use super::db::{Conn, Row, params};
use super::revision::bump_revision;
use super::{Store, StoreError, check_conversation_id};
use crate::memory::input::SessionRewrite;

/// One fact with its validity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StoredFact {
    /// The fact's id (`memory correct --fact ID`).
    pub id: i64,
    /// The conversation it was said in.
    pub conversation: String,
    /// Its session (`D<n>`).
    pub session: String,
    /// Its id in the session's rewrite (`D3:p1`).
    pub key: String,
    /// Who it is about.
    pub person: String,
    /// What about them (`job`, `home`…).
    pub aspect: String,
    /// The fact as memory holds it (a correction replaces the extracted value).
    pub value: String,
    /// The fact as the build extracted it.
    pub extracted: String,
    /// The turns it was drawn from (`D3:2`).
    pub origins: Vec<String>,
    /// When it became known: its session's first message (RFC 3339), if timed.
    pub valid_from: Option<String>,
    /// When a later fact replaced it, if one did.
    pub valid_to: Option<String>,
    /// The fact that replaced it.
    pub superseded_by: Option<i64>,
    /// The message it was drawn from (its id, as `memory show` lists it): with the aspect,
    /// what identifies the fact across rebuilds of its session (a correction follows it).
    pub source: Option<String>,
}

impl StoredFact {
    /// Whether the fact held at `at` (RFC 3339 UTC; `None`: now): known by then and not
    /// replaced by then.
    pub fn current_at(&self, at: Option<&str>) -> bool {
        let known = match (at, self.valid_from.as_deref()) {
            (Some(at), Some(from)) => from <= at,
            _ => true,
        };
        let replaced = match (at, self.valid_to.as_deref()) {
            (_, None) => false,
            (None, Some(_)) => true,
            (Some(at), Some(to)) => to <= at,
        };
        known && !replaced
    }

    /// The session number.
    pub fn session_number(&self) -> u32 {
        self.session.trim_start_matches('D').parse().unwrap_or(0)
    }
}

/// Columns of [`fact_of_row`], on `facts f`.
pub(super) const FACT_COLUMNS: &str = "f.id, f.conversation_id, f.session_number, f.key, f.person,
    f.aspect, f.value, f.extracted, f.origins, f.valid_from, f.valid_to, f.superseded_by,
    f.source";

/// One fact from a row of [`FACT_COLUMNS`].
pub(super) fn fact_of_row(row: &Row) -> Result<StoredFact, StoreError> {
    let origins: String = row.get(8)?;
    Ok(StoredFact {
        id: row.get(0)?,
        conversation: row.get(1)?,
        session: format!("D{}", row.get::<u32>(2)?),
        key: row.get(3)?,
        person: row.get(4)?,
        aspect: row.get(5)?,
        value: row.get(6)?,
        extracted: row.get(7)?,
        origins: serde_json::from_str(&origins).unwrap_or_default(),
        valid_from: row.get(9)?,
        valid_to: row.get(10)?,
        superseded_by: row.get(11)?,
        source: row.get(12)?,
    })
}

/// Deletes the facts of session `number` (every session with `None`) of `conversation`. The
/// facts they replaced go to their successors or become current again (the schema's trigger),
/// and are marked undecided: the next settling places them in their chain again
/// ([`Store::apply_chains`]). Those in other conversations get a new revision, so no cached
/// view keeps them replaced.
pub(super) fn delete_facts(
    transaction: &Conn,
    conversation: &str,
    number: Option<u32>,
) -> Result<(), StoreError> {
    let dependents: Vec<String> = transaction.query(
        "SELECT DISTINCT d.conversation_id FROM facts d JOIN facts f ON d.superseded_by = f.id
         WHERE f.conversation_id = ?1 AND (CAST(?2 AS BIGINT) IS NULL OR f.session_number = ?2)
           AND d.conversation_id != ?1 ORDER BY d.conversation_id",
        params![conversation, number],
        |row| row.get(0),
    )?;
    transaction.execute(
        "UPDATE facts SET checked = 0 WHERE superseded_by IN (SELECT id FROM facts
           WHERE conversation_id = ?1 AND (CAST(?2 AS BIGINT) IS NULL OR session_number = ?2))",
        params![conversation, number],
    )?;
    // One row at a time, by id: the successor hand-off (the `facts_successor_gone` trigger)
    // then sees every earlier deletion, the same on both backends (PostgreSQL runs row
    // triggers at the end of their statement, SQLite right after each row).
    let doomed: Vec<i64> = transaction.query(
        "SELECT id FROM facts WHERE conversation_id = ?1 AND (CAST(?2 AS BIGINT) IS NULL OR session_number = ?2)
         ORDER BY id",
        params![conversation, number],
        |row| row.get(0),
    )?;
    for id in doomed {
        transaction.execute("DELETE FROM facts WHERE id = ?1", params![id])?;
    }
    for dependent in dependents {
        bump_revision(transaction, &dependent)?;
    }
    Ok(())
}

/// Where a fact came from: the first (by time) of its origin turns (`D3:2`: the second of
/// `messages`, the session's messages in order, each as its id and time), else the session's
/// first message. Returns that message's time (when the fact became known) and its id (with
/// the aspect, the fact's identity across rebuilds).
fn known_from<'a>(
    origins: &[String],
    messages: &[(&'a str, Option<&'a str>)],
) -> (Option<&'a str>, Option<&'a str>) {
    let at = |origin: &String| {
        let position: usize = origin.rsplit(':').next()?.parse().ok()?;
        messages.get(position.checked_sub(1)?).copied()
    };
    let mut found: Vec<(&str, Option<&str>)> = origins.iter().filter_map(at).collect();
    // Untimed origins last, then by time, then by id (a stable tie-break).
    found.sort_by_key(|(id, time)| (time.is_none(), *time, *id));
    match found.first().or(messages.first()) {
        Some((id, time)) => (*time, Some(*id)),
        None => (None, None),
    }
}

/// Replaces the facts of session `number` (whose messages are `messages`, in order, each as
/// its id and time) with those of `rewrite`. Each of `corrections` (the corrections in force
/// whose facts came from this session) is carried to the new fact with the same identity
/// (source message and aspect). Returns the corrections that found no such fact; the caller
/// marks them lapsed in the audit log, in the same transaction.
pub(super) fn replace_session_facts<'c>(
    transaction: &Conn,
    conversation: &str,
    number: u32,
    rewrite: &SessionRewrite,
    messages: &[(&str, Option<&str>)],
    corrections: &'c [Correction],
) -> Result<Vec<&'c Correction>, StoreError> {
    let mut carried = vec![false; corrections.len()];
    delete_facts(transaction, conversation, Some(number))?;
    let mut facts: Vec<_> = rewrite.personal_facts.iter().collect();
    // By key, so that of two facts with one identity the same one takes a correction.
    facts.sort_by(|a, b| a.id.cmp(&b.id));
    for fact in facts {
        let (valid_from, source) = known_from(&fact.origins, messages);
        let corrected = corrections.iter().enumerate().find(|(index, correction)| {
            !carried[*index] && correction.identifies(source, &fact.aspect, &fact.id, &fact.fact)
        });
        let value = match corrected {
            Some((index, correction)) => {
                carried[index] = true;
                correction.value.as_str()
            }
            None => fact.fact.as_str(),
        };
        let origins = serde_json::to_string(&fact.origins)
            .map_err(|error| StoreError::Corrupt(error.to_string()))?;
        transaction.execute(
            "INSERT INTO facts (conversation_id, session_number, key, person, aspect,
               value, extracted, origins, valid_from, source)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) ON CONFLICT DO NOTHING",
            params![
                conversation,
                number,
                fact.id,
                fact.person.trim(),
                fact.aspect.trim(),
                value,
                fact.fact,
                origins,
                valid_from,
                source
            ],
        )?;
    }
    Ok(corrections.iter().zip(carried).filter(|(_, carried)| !carried).map(|(c, _)| c).collect())
}

/// The facts of one conversation, by session and key.
pub(super) fn conversation_facts(
    connection: &Conn,
    conversation: &str,
) -> Result<Vec<StoredFact>, StoreError> {
    connection.query(
        &format!(
            "SELECT {FACT_COLUMNS} FROM facts f WHERE f.conversation_id = ?1
             ORDER BY f.session_number, f.key"
        ),
        params![conversation],
        fact_of_row,
    )
}

impl Store {
    /// One fact by id.
    pub fn fact(&self, id: i64) -> Result<StoredFact, StoreError> {
        self.connect()?
            .query_opt(
                &format!("SELECT {FACT_COLUMNS} FROM facts f WHERE f.id = ?1"),
                params![id],
                fact_of_row,
            )?
            .ok_or(StoreError::UnknownFact(id))
    }

    /// The facts of a user's conversations, or of one conversation (`user: None`), in the
    /// order they became known.
    pub fn facts(
        &self,
        user: Option<&str>,
        conversation: Option<&str>,
    ) -> Result<Vec<StoredFact>, StoreError> {
        if let Some(user) = user {
            crate::names::check_name(crate::names::NameKind::User, user)?;
        }
        if let Some(conversation) = conversation {
            check_conversation_id(conversation)?;
        }
        self.connect()?.query(
            &format!(
                "SELECT {FACT_COLUMNS} FROM facts f JOIN conversations c ON c.id = f.conversation_id
                 WHERE (CAST(?1 AS TEXT) IS NULL OR c.user_id = ?1) AND (CAST(?2 AS TEXT) IS NULL OR f.conversation_id = ?2)
                 ORDER BY f.valid_from IS NULL, f.valid_from, f.conversation_id, f.session_number,
                   f.key"
            ),
            params![user, conversation],
            fact_of_row,
        )
    }
}
