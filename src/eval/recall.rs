//! Evidence recall of a run: how much of a question's gold evidence the answer cited in its
//! `prediction_context`, as in the LoCoMo scorer's retrieval recall.
//!
//! Per question: the fraction of gold evidence ids present in the context; "all" when every
//! one is, "any" when at least one is. When the context lists session summaries (ids starting
//! with `S`), a gold dia_id `D<s>:<t>` counts as found when session `<s>` is listed, as the
//! official scorer does. Questions without gold evidence have no recall.
//!
//! LoCoMo's evidence field has a few malformed entries (`D8:6; D9:17`, `D9:1 D4:4`, `D:11:26`,
//! `D`); [`clean_evidence`] splits and repairs them so they still count.

use serde::{Deserialize, Serialize};

/// Recall of one question's gold evidence.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct EvidenceRecall {
    /// Gold ids found / gold ids.
    pub fraction: f64,
    /// Every gold id was found.
    pub all: bool,
    /// At least one gold id was found.
    pub any: bool,
}

/// Recall of `gold` evidence ids in `context`; `None` when there is no usable gold id.
pub fn evidence_recall(gold: &[String], context: &[String]) -> Option<EvidenceRecall> {
    let gold = clean_evidence(gold);
    if gold.is_empty() {
        return None;
    }
    let session_level = context.first().is_some_and(|id| id.starts_with('S'));
    let found = gold
        .iter()
        .filter(|gold_id| {
            if session_level {
                let session = gold_id.split(':').next().unwrap_or(gold_id).trim_start_matches('D');
                context.iter().any(|id| without_first_char(id) == session)
            } else {
                context.iter().any(|id| id == *gold_id)
            }
        })
        .count();
    Some(EvidenceRecall {
        fraction: found as f64 / gold.len() as f64,
        all: found == gold.len(),
        any: found > 0,
    })
}

/// The official scorer drops the first character of each session id (`S2` → `2`).
fn without_first_char(id: &str) -> &str {
    id.char_indices().nth(1).map_or("", |(index, _)| &id[index..])
}

/// Split entries holding several ids (separated by `;` or whitespace), repair `D:<s>:<t>` to
/// `D<s>:<t>`, and drop pieces that name no turn (a bare `D`). Other ids pass unchanged.
pub fn clean_evidence(evidence: &[String]) -> Vec<String> {
    let mut cleaned: Vec<String> = Vec::with_capacity(evidence.len());
    for piece in
        evidence.iter().flat_map(|entry| entry.split(|c: char| c == ';' || c.is_whitespace()))
    {
        let piece = match piece.strip_prefix("D:") {
            Some(rest) => format!("D{rest}"),
            None => piece.to_string(),
        };
        if piece.is_empty() || piece == "D" || cleaned.contains(&piece) {
            continue;
        }
        cleaned.push(piece);
    }
    cleaned
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(list: &[&str]) -> Vec<String> {
        list.iter().map(|id| id.to_string()).collect()
    }

    fn check(gold: &[&str], context: &[&str], expected: Option<(f64, bool, bool)>) {
        let recall = evidence_recall(&ids(gold), &ids(context)).map(|r| (r.fraction, r.all, r.any));
        assert_eq!(recall, expected, "gold {gold:?} context {context:?}");
    }

    #[test]
    fn fraction_all_and_any() {
        check(&["D1:3", "D2:4"], &["D1:3", "D5:1"], Some((0.5, false, true)));
        check(&["D1:3"], &["D1:3"], Some((1.0, true, true)));
        check(&["D1:3"], &[], Some((0.0, false, false)));
        check(&[], &["D1:3"], None);
    }

    #[test]
    fn session_summaries_match_at_session_level() {
        check(&["D1:3", "D2:4"], &["S2"], Some((0.5, false, true)));
    }

    #[test]
    fn malformed_locomo_evidence_is_repaired() {
        assert_eq!(clean_evidence(&ids(&["D8:6; D9:17"])), ids(&["D8:6", "D9:17"]));
        assert_eq!(clean_evidence(&ids(&["D9:1 D4:4 D4:6"])), ids(&["D9:1", "D4:4", "D4:6"]));
        assert_eq!(clean_evidence(&ids(&["D:11:26", "D"])), ids(&["D11:26"]));
        check(&["D"], &["D1:1"], None);
    }
}
