//! Personal facts as rows with a validity window (schema migration 6).
//!
//! The build's rewrite extracts facts (person, aspect, value) per session. They are written with
//! the session's outputs (`write::save_outputs` calls [`replace_session_facts`]), valid from the
//! session's first message. Whether a new fact supersedes an older one of the same person and
//! aspect is the model's call (`service::facts`); this module only finds the pairs to decide
//! ([`Store::fact_rivals`]), caches the verdicts and applies them ([`Store::settle_facts`]). An
//! older fact that is superseded keeps its row and gets `valid_to` and `superseded_by`.

use serde::Serialize;

use super::db::{Conn, Row, params};
use super::revision::bump_revision;
use super::{Store, StoreError, check_conversation_id};
use crate::memory::input::SessionRewrite;

/// One fact with its validity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
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
    f.aspect, f.value, f.extracted, f.origins, f.valid_from, f.valid_to, f.superseded_by";

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
    })
}

/// Deletes the facts of session `number` (every session with `None`) of `conversation`. The
/// facts they replaced go to their successors or become current again (the schema's trigger);
/// those in other conversations get a new revision, so no cached view keeps them replaced.
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

/// When a fact became known: the time of the first of its origin turns (`D3:2`: the second of
/// `times`, the times of the session's messages in order), else of the session's first message.
fn known_from<'a>(origins: &[String], times: &[Option<&'a str>]) -> Option<&'a str> {
    let at = |origin: &String| {
        let position: usize = origin.rsplit(':').next()?.parse().ok()?;
        *times.get(position.checked_sub(1)?)?
    };
    origins.iter().filter_map(at).min().or_else(|| times.first().copied().flatten())
}

/// Replaces the facts of session `number` (whose messages were sent at `times`, in order) with
/// those of `rewrite`. A correction of a fact (same key, same extracted value) carries over to its new
/// row.
pub(super) fn replace_session_facts(
    transaction: &Conn,
    conversation: &str,
    number: u32,
    rewrite: &SessionRewrite,
    times: &[Option<&str>],
) -> Result<(), StoreError> {
    let corrections: Vec<(String, String, String)> = transaction.query(
        "SELECT key, extracted, value FROM facts
         WHERE conversation_id = ?1 AND session_number = ?2 AND value != extracted",
        params![conversation, number],
        |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
    )?;
    delete_facts(transaction, conversation, Some(number))?;
    for fact in &rewrite.personal_facts {
        let corrected = corrections
            .iter()
            .find(|(key, extracted, _)| *key == fact.id && *extracted == fact.fact)
            .map(|(_, _, value)| value.as_str());
        let origins = serde_json::to_string(&fact.origins)
            .map_err(|error| StoreError::Corrupt(error.to_string()))?;
        transaction.execute(
            "INSERT INTO facts (conversation_id, session_number, key, person, aspect,
               value, extracted, origins, valid_from)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) ON CONFLICT DO NOTHING",
            params![
                conversation,
                number,
                fact.id,
                fact.person.trim(),
                fact.aspect.trim(),
                corrected.unwrap_or(&fact.fact),
                fact.fact,
                origins,
                known_from(&fact.origins, times)
            ],
        )?;
    }
    Ok(())
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

/// One older/newer pair of facts of the same person and aspect with different values, both
/// current: whether the newer replaces the older is for the model to say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FactPair {
    /// The fact known first.
    pub older: StoredFact,
    /// The fact known later.
    pub newer: StoredFact,
}

impl FactPair {
    /// The cache key of its verdict: the model and what the pair says (not the ids).
    pub fn verdict_key(&self, model: &str) -> String {
        let text = serde_json::json!([
            model,
            self.older.person.to_lowercase(),
            self.older.aspect.to_lowercase(),
            self.older.value,
            self.newer.value
        ]);
        super::content_id(&text.to_string())
    }
}

/// A decided pair: whether the newer fact replaces the older.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FactVerdict {
    /// The pair.
    pub pair: FactPair,
    /// The model's verdict.
    pub replaces: bool,
}

/// `(older, newer)` by when they became known (untimed last), then by id.
fn ordered(a: StoredFact, b: StoredFact) -> FactPair {
    let rank = |fact: &StoredFact| (fact.valid_from.is_none(), fact.valid_from.clone(), fact.id);
    if rank(&a) <= rank(&b) {
        FactPair { older: a, newer: b }
    } else {
        FactPair { older: b, newer: a }
    }
}

impl Store {
    /// The sessions of `conversation` holding facts whose conflicts are not decided yet, in
    /// the order they became known, each with those facts.
    pub fn unchecked_facts(
        &self,
        conversation: &str,
    ) -> Result<Vec<(u32, Vec<StoredFact>)>, StoreError> {
        check_conversation_id(conversation)?;
        let rows = self.connect()?.query(
            &format!(
                "SELECT {FACT_COLUMNS} FROM facts f WHERE f.conversation_id = ?1 AND f.checked = 0
                 ORDER BY f.valid_from IS NULL, f.valid_from, f.session_number, f.key"
            ),
            params![conversation],
            fact_of_row,
        )?;
        let mut sessions: Vec<(u32, Vec<StoredFact>)> = Vec::new();
        for fact in rows {
            let number = fact.session_number();
            match sessions.iter_mut().find(|(session, _)| *session == number) {
                Some((_, facts)) => facts.push(fact),
                None => sessions.push((number, vec![fact])),
            }
        }
        Ok(sessions)
    }

    /// The pairs `facts` form with the current facts of the same person and aspect (letter
    /// case and spaces aside) and another value, within the scope: the conversation's user's
    /// conversations, or the conversation alone when it has no user.
    pub fn fact_rivals(&self, facts: &[StoredFact]) -> Result<Vec<FactPair>, StoreError> {
        let connection = self.connect()?;
        let sql = format!(
            "SELECT {FACT_COLUMNS} FROM facts f JOIN conversations c ON c.id = f.conversation_id
             WHERE f.valid_to IS NULL AND f.id != ?1
               AND lower(trim(f.person)) = lower(trim(?2)) AND lower(trim(f.aspect)) = lower(trim(?3))
               AND lower(trim(f.value)) != lower(trim(?4))
               AND (CASE WHEN (SELECT user_id FROM conversations WHERE id = ?5) IS NULL
                         THEN f.conversation_id = ?5
                         ELSE c.user_id = (SELECT user_id FROM conversations WHERE id = ?5) END)
             ORDER BY f.id"
        );
        let mut pairs: Vec<FactPair> = Vec::new();
        for fact in facts {
            let rows = connection.query(
                &sql,
                params![fact.id, fact.person, fact.aspect, fact.value, fact.conversation],
                fact_of_row,
            )?;
            for rival in rows {
                let pair = ordered(rival, fact.clone());
                let seen = pairs.iter().any(|known| {
                    known.older.id == pair.older.id && known.newer.id == pair.newer.id
                });
                if !seen {
                    pairs.push(pair);
                }
            }
        }
        Ok(pairs)
    }

    /// The cached verdict for a pair's key, if any.
    pub fn cached_verdict(&self, key: &str) -> Result<Option<bool>, StoreError> {
        self.connect()?.query_opt(
            "SELECT replaces FROM fact_verdicts WHERE key = ?1",
            params![key],
            |row| row.get(0),
        )
    }

    /// In one transaction: caches the verdicts new to the cache (by `model`), applies every
    /// verdict that says the newer fact replaces the older (when the older is still current),
    /// and marks `checked` as decided. Returns how many facts were superseded now.
    pub fn settle_facts(
        &self,
        model: &str,
        verdicts: &[FactVerdict],
        checked: &[i64],
    ) -> Result<usize, StoreError> {
        let mut connection = self.connect()?;
        let transaction = connection.write()?;
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let mut superseded = 0;
        let mut touched: Vec<&str> = Vec::new();
        for verdict in verdicts {
            transaction.execute(
                "INSERT INTO fact_verdicts (key, replaces, model, decided_at)
                 VALUES (?1, ?2, ?3, ?4) ON CONFLICT DO NOTHING",
                params![verdict.pair.verdict_key(model), verdict.replaces, model, now],
            )?;
            if !verdict.replaces {
                continue;
            }
            let (older, newer) = (&verdict.pair.older, &verdict.pair.newer);
            let until = newer.valid_from.clone().unwrap_or_else(|| now.clone());
            superseded += transaction.execute(
                "UPDATE facts SET valid_to = ?1, superseded_by = ?2
                 WHERE id = ?3 AND valid_to IS NULL
                   AND EXISTS (SELECT 1 FROM facts WHERE id = ?2)",
                params![until, newer.id, older.id],
            )?;
            touched.push(&older.conversation);
        }
        for id in checked {
            transaction.execute("UPDATE facts SET checked = 1 WHERE id = ?1", params![id])?;
        }
        touched.sort_unstable();
        touched.dedup();
        for conversation in touched {
            bump_revision(&transaction, conversation)?;
        }
        transaction.commit()?;
        Ok(superseded as usize)
    }

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
