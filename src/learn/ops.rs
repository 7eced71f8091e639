//! Operations on a rule set (`add`, `update` by id, `delete` by id), read leniently from a
//! model's JSON, checked by the leakage guard and the cap, and applied in a fixed order:
//! updates, then deletes, then adds (so the cap counts the rules left after the deletes).
//! Rules are renumbered `M0…Mn` afterwards. Every op ends as applied or refused with its
//! reason; nothing is dropped unseen.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::guard::{LeakGuard, Refusal};
use crate::agent::rules::{Rule, RuleSet, RuleSource, StepRef};

/// One operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum Op {
    /// A new rule.
    Add {
        /// Its text.
        text: String,
    },
    /// New text for a rule.
    Update {
        /// The rule's id.
        id: String,
        /// Its new text.
        text: String,
    },
    /// Remove a rule.
    Delete {
        /// The rule's id.
        id: String,
    },
}

/// An operation with the training questions (and attempts) it came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourcedOp {
    /// The operation.
    #[serde(flatten)]
    pub op: Op,
    /// Where it came from.
    pub sources: Vec<RuleSource>,
}

/// What became of one operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpOutcome {
    /// The operation.
    #[serde(flatten)]
    pub op: SourcedOp,
    /// `None`: applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<Refusal>,
}

/// Reads the `ops` array of a reply; items that are no valid operation come back as text (for
/// the report) in the second list.
pub fn read_ops(value: &Value) -> (Vec<Op>, Vec<String>) {
    let mut ops = Vec::new();
    let mut malformed = Vec::new();
    for item in op_items(value) {
        match read_op(item) {
            Some(op) => ops.push(op),
            None => malformed.push(item.to_string()),
        }
    }
    (ops, malformed)
}

/// The items of a reply's `ops` array (none when it has no such array).
pub fn op_items(value: &Value) -> &[Value] {
    value.get("ops").and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

/// One item of an `ops` array as an operation, if it is a valid one.
pub fn read_op(item: &Value) -> Option<Op> {
    let field = |name: &str| item.get(name).and_then(Value::as_str).map(str::trim);
    let kind = field("op").unwrap_or_default().to_ascii_lowercase();
    match (kind.as_str(), field("id"), field("text")) {
        ("add", _, Some(text)) if !text.is_empty() => Some(Op::Add { text: text.into() }),
        ("update", Some(id), Some(text)) if !text.is_empty() => {
            Some(Op::Update { id: id.into(), text: text.into() })
        }
        ("delete", Some(id), _) => Some(Op::Delete { id: id.into() }),
        _ => None,
    }
}

/// The limits an application works under.
pub struct Limits<'a> {
    /// The leakage guard of the fold.
    pub guard: &'a LeakGuard,
    /// Most rules in a set.
    pub max_rules: usize,
    /// The step the operations belong to.
    pub step: StepRef,
}

/// Applies `ops` to `rules` (see the module documentation): the new set, renumbered, and what
/// became of each operation, in the order given.
pub fn apply(rules: &RuleSet, ops: &[SourcedOp], limits: &Limits<'_>) -> (RuleSet, Vec<OpOutcome>) {
    let mut slots: Vec<Option<Rule>> = rules.rules.iter().cloned().map(Some).collect();
    let mut outcomes: Vec<Option<OpOutcome>> = vec![None; ops.len()];
    let position = |slots: &[Option<Rule>], id: &str| {
        slots
            .iter()
            .position(|slot| slot.as_ref().is_some_and(|rule| rule.id.eq_ignore_ascii_case(id)))
    };
    let order = |kind: fn(&Op) -> bool| (0..ops.len()).filter(move |&i| kind(&ops[i].op));
    for index in order(|op| matches!(op, Op::Update { .. })) {
        let Op::Update { id, text } = &ops[index].op else { continue };
        let refused = match (position(&slots, id), limits.guard.check(text)) {
            (None, _) => Some(Refusal::UnknownRule(id.clone())),
            (_, Err(refusal)) => Some(refusal),
            (Some(at), Ok(())) => {
                if let Some(rule) = slots[at].as_mut() {
                    rule.text = text.clone();
                    rule.changed = Some(limits.step);
                    merge_sources(&mut rule.sources, &ops[index].sources);
                }
                None
            }
        };
        outcomes[index] = Some(OpOutcome { op: ops[index].clone(), refused });
    }
    for index in order(|op| matches!(op, Op::Delete { .. })) {
        let Op::Delete { id } = &ops[index].op else { continue };
        let refused = match position(&slots, id) {
            None => Some(Refusal::UnknownRule(id.clone())),
            Some(at) => {
                slots[at] = None;
                None
            }
        };
        outcomes[index] = Some(OpOutcome { op: ops[index].clone(), refused });
    }
    let mut kept: Vec<Rule> = slots.into_iter().flatten().collect();
    for index in order(|op| matches!(op, Op::Add { .. })) {
        let Op::Add { text } = &ops[index].op else { continue };
        let duplicate = kept.iter().any(|rule| same_text(&rule.text, text));
        let refused = match limits.guard.check(text) {
            Err(refusal) => Some(refusal),
            Ok(()) if duplicate => {
                Some(Refusal::Malformed("the same rule is already in the set".into()))
            }
            Ok(()) if kept.len() >= limits.max_rules => Some(Refusal::OverCap(limits.max_rules)),
            Ok(()) => {
                kept.push(Rule {
                    id: String::new(),
                    text: text.clone(),
                    sources: sorted_sources(&ops[index].sources),
                    added: Some(limits.step),
                    changed: None,
                });
                None
            }
        };
        outcomes[index] = Some(OpOutcome { op: ops[index].clone(), refused });
    }
    for (number, rule) in kept.iter_mut().enumerate() {
        rule.id = format!("M{number}");
    }
    (RuleSet::new(kept), outcomes.into_iter().flatten().collect())
}

fn same_text(a: &str, b: &str) -> bool {
    let norm = |text: &str| text.split_whitespace().collect::<Vec<_>>().join(" ").to_lowercase();
    norm(a) == norm(b)
}

fn sorted_sources(sources: &[RuleSource]) -> Vec<RuleSource> {
    let mut merged = Vec::new();
    merge_sources(&mut merged, sources);
    merged
}

/// Adds `more` to `sources`, one entry per question with its attempts merged, sorted.
pub fn merge_sources(sources: &mut Vec<RuleSource>, more: &[RuleSource]) {
    for source in more {
        match sources.iter_mut().find(|known| known.question_id == source.question_id) {
            Some(known) => {
                known.attempts.extend(&source.attempts);
                known.attempts.sort_unstable();
                known.attempts.dedup();
            }
            None => {
                let mut attempts = source.attempts.clone();
                attempts.sort_unstable();
                attempts.dedup();
                sources.push(RuleSource { question_id: source.question_id.clone(), attempts });
            }
        }
    }
    sources.sort();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sourced(op: Op, question: &str) -> SourcedOp {
        SourcedOp {
            op,
            sources: vec![RuleSource { question_id: question.into(), attempts: vec![0, 2] }],
        }
    }

    fn set(texts: &[&str]) -> RuleSet {
        RuleSet::new(
            texts
                .iter()
                .enumerate()
                .map(|(n, text)| Rule {
                    id: format!("M{n}"),
                    text: (*text).into(),
                    sources: Vec::new(),
                    added: None,
                    changed: None,
                })
                .collect(),
        )
    }

    #[test]
    fn ops_apply_in_order_renumber_and_say_what_was_refused() {
        let guard = LeakGuard::default();
        let limits = Limits { guard: &guard, max_rules: 3, step: StepRef { fold: 0, step: 2 } };
        let rules = set(&["Check the timeline.", "Read every session.", "Prefer recent values."]);
        let ops = vec![
            sourced(Op::Add { text: "Look up persons before events.".into() }, "q1"),
            sourced(Op::Delete { id: "M1".into() }, "q2"),
            sourced(Op::Update { id: "M2".into(), text: "Prefer the latest value.".into() }, "q3"),
            sourced(Op::Add { text: "One rule too many.".into() }, "q4"),
            sourced(Op::Delete { id: "M9".into() }, "q5"),
            sourced(Op::Add { text: "The 3rd session matters.".into() }, "q6"),
        ];
        let (next, outcomes) = apply(&rules, &ops, &limits);
        let texts: Vec<(&str, &str)> =
            next.rules.iter().map(|rule| (rule.id.as_str(), rule.text.as_str())).collect();
        assert_eq!(
            texts,
            vec![
                ("M0", "Check the timeline."),
                ("M1", "Prefer the latest value."),
                ("M2", "Look up persons before events."),
            ]
        );
        assert_eq!(next.rules[1].changed, Some(StepRef { fold: 0, step: 2 }));
        assert_eq!(next.rules[2].added, Some(StepRef { fold: 0, step: 2 }));
        assert_eq!(next.rules[2].sources[0].question_id, "q1");
        let refused: Vec<Option<Refusal>> = outcomes.iter().map(|o| o.refused.clone()).collect();
        assert_eq!(outcomes.len(), ops.len(), "every op has an outcome");
        assert!(refused.contains(&Some(Refusal::OverCap(3))));
        assert!(refused.contains(&Some(Refusal::UnknownRule("M9".into()))));
        assert!(refused.contains(&Some(Refusal::Number("3rd".into()))));
        assert_eq!(refused.iter().filter(|r| r.is_none()).count(), 3);
    }

    #[test]
    fn replies_are_read_leniently_and_bad_items_are_kept_for_the_report() {
        let value = serde_json::json!({"ops": [
            {"op": "ADD", "text": " Check dates. "},
            {"op": "update", "id": "M0", "text": "New."},
            {"op": "delete", "id": "M1", "reason": "extra keys are fine"},
            {"op": "update", "text": "no id"},
            {"op": "rename", "id": "M0"}
        ]});
        let (ops, malformed) = read_ops(&value);
        assert_eq!(ops.len(), 3);
        assert_eq!(ops[0], Op::Add { text: "Check dates.".into() });
        assert_eq!(malformed.len(), 2);
    }
}
