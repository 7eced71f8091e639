//! A fact's chain, pure: which chain a fact is in, its place there, and the walk in time order
//! that says which fact replaces which, from the facts and the verdicts alone.

use super::StoredFact;

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

/// The cache key of the verdict on `older` and `newer` ([`FactPair::verdict_key`]).
pub(super) fn verdict_key(model: &str, older: &StoredFact, newer: &StoredFact) -> String {
    let text = serde_json::json!([
        model,
        older.person.to_lowercase(),
        older.aspect.to_lowercase(),
        older.extracted,
        newer.extracted
    ]);
    crate::store::content_id(&text.to_string())
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
pub(super) fn chain_of(fact: &StoredFact) -> (String, String) {
    (fact.person.trim().to_lowercase(), fact.aspect.trim().to_lowercase())
}

/// A fact's place in its chain: when it became known (untimed last), then where it was said
/// (conversation, session, key). Row ids play no part: they follow the order builds finished.
pub(super) fn chain_rank(fact: &StoredFact) -> (bool, Option<&str>, &str, u32, &str) {
    (
        fact.valid_from.is_none(),
        fact.valid_from.as_deref(),
        fact.conversation.as_str(),
        fact.session_number(),
        fact.key.as_str(),
    )
}

/// Whether two facts say the same (letter case and outer spaces aside), as extracted.
pub(super) fn same_value(a: &StoredFact, b: &StoredFact) -> bool {
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
