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

/// One older/newer pair of facts of the same person and aspect with different values, next
/// to each other in their chain: whether the newer replaces the older is for the model to say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FactPair {
    /// The fact known first.
    pub older: StoredFact,
    /// The fact known later.
    pub newer: StoredFact,
}

impl FactPair {
    /// The cache key of its verdict: the model and what the pair says as extracted (not the
    /// ids, and not a correction: a correction changes what memory holds, not the chain).
    pub fn verdict_key(&self, model: &str) -> String {
        verdict_key(model, &self.older, &self.newer)
    }
}

fn verdict_key(model: &str, older: &StoredFact, newer: &StoredFact) -> String {
    let text = serde_json::json!([
        model,
        older.person.to_lowercase(),
        older.aspect.to_lowercase(),
        older.extracted,
        newer.extracted
    ]);
    super::content_id(&text.to_string())
}

/// A decided pair: whether the newer fact replaces the older.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FactVerdict {
    /// The pair.
    pub pair: FactPair,
    /// The model's verdict.
    pub replaces: bool,
}

/// The chain a fact belongs to: its person and aspect, letter case and outer spaces aside.
fn chain_of(fact: &StoredFact) -> (String, String) {
    (fact.person.trim().to_lowercase(), fact.aspect.trim().to_lowercase())
}

/// A fact's place in its chain: when it became known (untimed last), then where it was said
/// (conversation, session, key). Row ids play no part: they follow the order builds finished.
fn chain_rank(fact: &StoredFact) -> (bool, Option<&str>, &str, u32, &str) {
    (
        fact.valid_from.is_none(),
        fact.valid_from.as_deref(),
        fact.conversation.as_str(),
        fact.session_number(),
        fact.key.as_str(),
    )
}

/// Whether two facts say the same (letter case and outer spaces aside), as extracted.
fn same_value(a: &StoredFact, b: &StoredFact) -> bool {
    a.extracted.trim().to_lowercase() == b.extracted.trim().to_lowercase()
}

/// What walking one chain found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Walk {
    /// `(older, newer)` indices: the newer replaces the older.
    pub links: Vec<(usize, usize)>,
    /// Pairs the walk met with different values (each asked of the model or cached).
    pub pairs: usize,
    /// `(older, newer)` indices of the pairs it met without a verdict.
    pub unknown: Vec<(usize, usize)>,
}

/// Walks the facts of one chain in time order (`facts` sorted by [`chain_rank`]). Each fact
/// meets every fact still current before it: one with the same value is restated (replaced
/// without asking), one with another value is replaced when `verdict` says so. A pair without
/// a verdict counts as replacing when `unknown_replaces` (to plan which pairs to ask), else as
/// not (what is stored while a pair is undecided). A pure function of the facts' times and
/// contents and the verdicts: the order rows were written in plays no part.
pub fn walk(
    facts: &[StoredFact],
    mut verdict: impl FnMut(&StoredFact, &StoredFact) -> Option<bool>,
    unknown_replaces: bool,
) -> Walk {
    let mut found = Walk::default();
    let mut current: Vec<usize> = Vec::new();
    for (newer, fact) in facts.iter().enumerate() {
        let mut kept = Vec::with_capacity(current.len() + 1);
        for older in current {
            let replaces = if same_value(&facts[older], fact) {
                true
            } else {
                found.pairs += 1;
                match verdict(&facts[older], fact) {
                    Some(replaces) => replaces,
                    None => {
                        found.unknown.push((older, newer));
                        unknown_replaces
                    }
                }
            };
            if replaces {
                found.links.push((older, newer));
            } else {
                kept.push(older);
            }
        }
        kept.push(newer);
        current = kept;
    }
    found
}

/// Which pairs a settling has to ask the model about.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ChainPlan {
    /// Facts not placed in their chain yet.
    pub new_facts: usize,
    /// Pairs without a verdict, not among those already asked (one per verdict key), in chain
    /// order.
    pub open: Vec<FactPair>,
}

/// What placing the facts in their chains changed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ChainsApplied {
    /// Pairs with different values the chains hold (decided or not).
    pub pairs: usize,
    /// Facts replaced now by another value, that were current before.
    pub superseded: usize,
    /// Facts closed now by a later fact saying the same (a restatement: one stays current).
    pub restated: usize,
    /// Pairs still without a verdict (their chains stay undecided: the next add asks again).
    pub undecided: usize,
}

/// The chains of the scope of `conversation` (its user's conversations, or itself when it has
/// no user) that hold a fact not placed yet, each sorted by [`chain_rank`].
fn open_chains(
    connection: &Conn,
    conversation: &str,
) -> Result<(usize, Vec<Vec<StoredFact>>), StoreError> {
    let rows: Vec<(StoredFact, bool)> = connection.query(
        &format!(
            "SELECT {FACT_COLUMNS}, f.checked FROM facts f
               JOIN conversations c ON c.id = f.conversation_id
             WHERE CASE WHEN (SELECT user_id FROM conversations WHERE id = ?1) IS NULL
                        THEN f.conversation_id = ?1
                        ELSE c.user_id = (SELECT user_id FROM conversations WHERE id = ?1) END
             ORDER BY f.id"
        ),
        params![conversation],
        |row| Ok((fact_of_row(row)?, row.get::<i64>(13)? != 0)),
    )?;
    let mut chains: std::collections::BTreeMap<(String, String), (bool, Vec<StoredFact>)> =
        std::collections::BTreeMap::new();
    let mut new_facts = 0;
    for (fact, checked) in rows {
        new_facts += usize::from(!checked);
        let chain = chains.entry(chain_of(&fact)).or_default();
        chain.0 |= !checked;
        chain.1.push(fact);
    }
    let mut open = Vec::new();
    for (_, (unsettled, mut facts)) in chains {
        if unsettled {
            facts.sort_by(|a, b| chain_rank(a).cmp(&chain_rank(b)));
            open.push(facts);
        }
    }
    Ok((new_facts, open))
}

/// [`walk`] over `facts` with the verdicts cached for `model`; the first failed lookup ends it.
fn walk_stored(
    connection: &Conn,
    facts: &[StoredFact],
    model: &str,
    unknown_replaces: bool,
) -> Result<Walk, StoreError> {
    let mut failed = None;
    let walked = walk(
        facts,
        |older, newer| match lookup_verdict(connection, &verdict_key(model, older, newer)) {
            Ok(found) => found,
            Err(error) => {
                failed.get_or_insert(error);
                None
            }
        },
        unknown_replaces,
    );
    match failed {
        Some(error) => Err(error),
        None => Ok(walked),
    }
}

fn lookup_verdict(connection: &Conn, key: &str) -> Result<Option<bool>, StoreError> {
    connection.query_opt("SELECT replaces FROM fact_verdicts WHERE key = ?1", params![key], |row| {
        row.get(0)
    })
}

impl Store {
    /// The pairs to ask about before `conversation`'s facts can be placed in their chains:
    /// each open chain is walked with the cached verdicts (`model`'s), an unknown pair counted
    /// as replacing; the unknown pairs met, less those whose key is in `asked`, are the plan.
    pub fn chain_plan(
        &self,
        conversation: &str,
        model: &str,
        asked: &std::collections::BTreeSet<String>,
    ) -> Result<ChainPlan, StoreError> {
        check_conversation_id(conversation)?;
        let connection = self.connect()?;
        let (new_facts, chains) = open_chains(&connection, conversation)?;
        let mut plan = ChainPlan { new_facts, open: Vec::new() };
        let mut keys = std::collections::BTreeSet::new();
        for facts in chains {
            let walked = walk_stored(&connection, &facts, model, true)?;
            for (older, newer) in walked.unknown {
                let pair = FactPair { older: facts[older].clone(), newer: facts[newer].clone() };
                let key = pair.verdict_key(model);
                if !asked.contains(&key) && keys.insert(key) {
                    plan.open.push(pair);
                }
            }
        }
        Ok(plan)
    }

    /// Caches `verdicts` (the first verdict for a key stays).
    pub fn save_verdicts(&self, model: &str, verdicts: &[FactVerdict]) -> Result<(), StoreError> {
        if verdicts.is_empty() {
            return Ok(());
        }
        let mut connection = self.connect()?;
        let transaction = connection.write()?;
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        for verdict in verdicts {
            transaction.execute(
                "INSERT INTO fact_verdicts (key, replaces, model, decided_at)
                 VALUES (?1, ?2, ?3, ?4) ON CONFLICT DO NOTHING",
                params![verdict.pair.verdict_key(model), verdict.replaces, model, now],
            )?;
        }
        transaction.commit()
    }

    /// In one transaction, places every fact of `conversation`'s open chains: each chain is
    /// walked in time order with the cached verdicts (an unknown pair does not replace), and
    /// every fact gets the validity the walk gives it: `valid_to` the `valid_from` of the fact
    /// that replaced it, `superseded_by` that fact. A chain with no unknown pair is settled
    /// (`checked`); the others wait for the next add. What is stored is a function of the
    /// facts and the verdicts alone, whatever order adds came in or builds finished in.
    pub fn apply_chains(
        &self,
        conversation: &str,
        model: &str,
    ) -> Result<ChainsApplied, StoreError> {
        check_conversation_id(conversation)?;
        let mut connection = self.connect()?;
        let transaction = connection.write()?;
        let (_, chains) = open_chains(&transaction, conversation)?;
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let mut applied = ChainsApplied::default();
        let mut touched: Vec<String> = Vec::new();
        for facts in chains {
            let walked = walk_stored(&transaction, &facts, model, false)?;
            applied.pairs += walked.pairs;
            applied.undecided += walked.unknown.len();
            let mut successor: Vec<Option<usize>> = vec![None; facts.len()];
            for (older, newer) in &walked.links {
                successor[*older] = Some(*newer);
            }
            for (index, fact) in facts.iter().enumerate() {
                let (valid_to, superseded_by) = match successor[index] {
                    None => (None, None),
                    Some(next) => {
                        let next = &facts[next];
                        // An untimed successor: when it became known is when it was placed.
                        let until = next.valid_from.clone().or_else(|| {
                            (fact.superseded_by == Some(next.id))
                                .then(|| fact.valid_to.clone())
                                .flatten()
                        });
                        (Some(until.unwrap_or_else(|| now.clone())), Some(next.id))
                    }
                };
                if let (None, Some(next)) = (fact.superseded_by, successor[index]) {
                    if same_value(fact, &facts[next]) {
                        applied.restated += 1;
                    } else {
                        applied.superseded += 1;
                    }
                }
                if (fact.valid_to.as_ref(), fact.superseded_by)
                    != (valid_to.as_ref(), superseded_by)
                {
                    transaction.execute(
                        "UPDATE facts SET valid_to = ?1, superseded_by = ?2 WHERE id = ?3",
                        params![valid_to, superseded_by, fact.id],
                    )?;
                    touched.push(fact.conversation.clone());
                }
                if walked.unknown.is_empty() {
                    transaction
                        .execute("UPDATE facts SET checked = 1 WHERE id = ?1", params![fact.id])?;
                }
            }
        }
        touched.sort_unstable();
        touched.dedup();
        for conversation in &touched {
            bump_revision(&transaction, conversation)?;
        }
        transaction.commit()?;
        Ok(applied)
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

/// A correction in force: the latest correction of one fact identity that is not undone,
/// when it has not lapsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Correction {
    /// Its edit.
    pub(super) edit: i64,
    /// The conversation.
    pub(super) conversation: String,
    /// The value it sets.
    pub(super) value: String,
    /// The identity of the fact: its source message and aspect (absent in corrections made
    /// before facts kept their source: then session, key and extracted value).
    pub(super) source: Option<String>,
    pub(super) aspect: Option<String>,
    pub(super) session: u32,
    pub(super) key: String,
    pub(super) extracted: String,
    /// What the log says about the fact (kept in the lapse row).
    pub(super) fact: serde_json::Value,
}

impl Correction {
    /// The identity, as one comparable value.
    pub(super) fn identity(&self) -> Identity {
        match (&self.source, &self.aspect) {
            (Some(source), Some(aspect)) => {
                (Some(source.clone()), Some(aspect.trim().to_lowercase()), None)
            }
            _ => (None, None, Some((self.session, self.key.clone(), self.extracted.clone()))),
        }
    }

    /// Whether its fact was drawn from session `number`, whose messages are `messages`.
    pub(super) fn belongs_to(&self, number: u32, messages: &[&str]) -> bool {
        match &self.source {
            Some(source) => messages.contains(&source.as_str()),
            None => self.session == number,
        }
    }

    /// Whether a fact drawn from `source` about `aspect` (key and extracted value for a
    /// correction without a source) is the fact it corrects.
    pub(super) fn identifies(
        &self,
        source: Option<&str>,
        aspect: &str,
        key: &str,
        extracted: &str,
    ) -> bool {
        match (&self.source, &self.aspect) {
            (Some(mine), Some(my_aspect)) => {
                source == Some(mine.as_str())
                    && my_aspect.trim().to_lowercase() == aspect.trim().to_lowercase()
            }
            _ => self.key == key && self.extracted == extracted,
        }
    }
}

/// What identifies a corrected fact: its source message and aspect, or (a correction made
/// before facts kept their source) its session, key and extracted value.
pub(super) type Identity = (Option<String>, Option<String>, Option<(u32, String, String)>);
