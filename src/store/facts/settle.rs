//! Settling the chains in the store: the pairs to ask the model about
//! ([`Store::chain_plan`]), the cached verdicts, and every fact of an open chain placed as the
//! walk says ([`Store::apply_chains`]).

use super::chain::{
    FactPair, FactVerdict, Walk, chain_of, chain_rank, same_value, verdict_key, walk,
};
use super::{FACT_COLUMNS, StoredFact, fact_of_row};
use crate::store::db::{Conn, params};
use crate::store::revision::bump_revision;
use crate::store::{Store, StoreError, check_conversation_id};

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

/// The cached verdict under `key`, if any.
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
}
