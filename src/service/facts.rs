//! Facts that change. A person's facts of one aspect (in the user's conversations, or the
//! conversation's alone) form one chain, ordered by the time of the message each came from,
//! whatever order they were added in (`store::facts::walk`). After an add builds sessions, the
//! chains holding a new fact are walked: each fact meets the facts still current before it,
//! and whether it replaces one with another value is the model's verdict
//! (`prompts/fact_conflicts.md`), cached by what the pair says, asked in batched calls only
//! for pairs without one. Then every fact of those chains gets its validity from the walk in
//! one write: `valid_to` is its successor's `valid_from`. The same facts and verdicts give the
//! same chains, whatever order adds came in or concurrent builds finished in.
//!
//! A reply that decides only some pairs settles those; the chains with a pair still open are
//! stored as if it did not replace, counted in the report, and asked again by the next add.

use std::collections::BTreeSet;

use serde::Serialize;
use serde_json::{Value, json};

use super::{MemoryService, ServiceError, blocking};
use crate::llm::structured::chat_json;
use crate::llm::{ChatMessage, ChatModel, ChatRequest, Embedder, JsonSchemaSpec, Step, Usage};
use crate::store::{FactPair, FactVerdict, StoredFact};

/// Re-asks when the verdicts are not JSON of the expected shape.
const MAX_REASKS: u32 = 2;

/// What deciding the new facts did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct FactsReport {
    /// New facts set against the current ones.
    pub new_facts: usize,
    /// Older/newer pairs with different values.
    pub pairs: usize,
    /// Pairs whose verdict came from the cache.
    pub cached: usize,
    /// Model calls made (one per 40 pairs without a cached verdict, re-asks included).
    pub model_calls: u32,
    /// Prompt tokens of those calls.
    pub prompt_tokens: u64,
    /// Completion tokens of those calls.
    pub completion_tokens: u64,
    /// Facts replaced by newer ones with another value now.
    pub superseded: usize,
    /// Facts closed now by a later restatement of the same value (the later one is current).
    pub restated: usize,
    /// Pairs still without a verdict (asked again by the next add).
    pub undecided: usize,
    /// Why a session's facts could not be decided (the next add retries).
    pub errors: Vec<String>,
}

/// The schema of the verdicts; each item is read on its own (`read_verdicts`).
fn schema() -> JsonSchemaSpec {
    JsonSchemaSpec {
        name: "facts".into(),
        schema: json!({
            "type": "object",
            "properties": {"verdicts": {"type": "array", "items": {"type": "object"}}},
            "required": ["verdicts"]
        }),
    }
}

/// The pairs as the prompt lists them.
fn render_pairs(pairs: &[FactPair]) -> String {
    let when = |fact: &StoredFact| {
        fact.valid_from
            .as_deref()
            .map_or("date unknown".to_string(), |time| time.chars().take(10).collect())
    };
    pairs
        .iter()
        .enumerate()
        .map(|(index, pair)| {
            format!(
                "{}. person: {}; aspect: {}\n   older ({}): {}\n   newer ({}): {}",
                index + 1,
                pair.newer.person,
                pair.newer.aspect,
                when(&pair.older),
                pair.older.value,
                when(&pair.newer),
                pair.newer.value
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The verdicts a reply gives: items with a pair number in range and a yes/no (strings and
/// numbers accepted where unambiguous); the first verdict for a pair counts.
fn read_verdicts(reply: &Value, pairs: usize) -> Vec<(usize, bool)> {
    let mut verdicts: Vec<(usize, bool)> = Vec::new();
    let items = reply["verdicts"].as_array().map(Vec::as_slice).unwrap_or_default();
    for (position, item) in items.iter().enumerate() {
        let number = match item.get("pair") {
            Some(value) => crate::llm::coerce::to_f64(value).map(|number| number as usize),
            // Without numbers, a full list in order is unambiguous.
            None if items.len() == pairs => Some(position + 1),
            None => None,
        };
        let replaces = item.get("replaces").and_then(crate::llm::coerce::to_bool);
        if let (Some(number), Some(replaces)) = (number, replaces)
            && (1..=pairs).contains(&number)
            && !verdicts.iter().any(|(known, _)| *known == number - 1)
        {
            verdicts.push((number - 1, replaces));
        }
    }
    verdicts
}

/// Pairs asked in one model call.
const PAIRS_PER_CALL: usize = 40;

/// Rounds of asking in one settling: a verdict that a fact does not replace another keeps the
/// older current, so the walk may meet new pairs; those are asked in the next round.
const MAX_ROUNDS: usize = 4;

impl<M, E> MemoryService<M, E>
where
    M: ChatModel,
    E: Embedder + Clone + 'static,
{
    /// Places the facts of `conversation`'s scope that are not in their chain yet (the caller
    /// holds its lock): asks the model about the pairs without a cached verdict, round by
    /// round, then stores every chain as its facts' times and the verdicts make it.
    pub(super) async fn settle_facts(
        &self,
        conversation: &str,
    ) -> Result<FactsReport, ServiceError> {
        // Verdicts are the model's under this prompt: a new prompt asks again.
        let model = format!("{}@{}", self.settings.model, crate::prompts::FACT_CONFLICTS.version());
        // One settling per scope at a time (the scope's facts lock, after the conversation's).
        let (store, id) = (self.store.clone(), conversation.to_string());
        let _scope_lock = blocking(move || store.lock_facts(&id)).await?;
        let mut report = FactsReport::default();
        let mut asked: BTreeSet<String> = BTreeSet::new();
        let mut answered = 0;
        for round in 0..MAX_ROUNDS {
            let (store, id, key, skip) =
                (self.store.clone(), conversation.to_string(), model.clone(), asked.clone());
            let plan = blocking(move || store.chain_plan(&id, &key, &skip)).await?;
            if round == 0 {
                report.new_facts = plan.new_facts;
            }
            if plan.open.is_empty() {
                break;
            }
            asked.extend(plan.open.iter().map(|pair| pair.verdict_key(&model)));
            // The calls of one round are independent: they run at once, and are read in order.
            let chunks: Vec<&[FactPair]> = plan.open.chunks(PAIRS_PER_CALL).collect();
            let replies =
                futures::future::join_all(chunks.iter().map(|pairs| self.ask_verdicts(pairs)))
                    .await;
            let mut decided = Vec::new();
            for (pairs, (reply, spent)) in chunks.iter().zip(replies) {
                report.model_calls += spent.0;
                report.prompt_tokens += spent.1.prompt_tokens;
                report.completion_tokens += spent.1.completion_tokens;
                match reply {
                    Ok(verdicts) => {
                        for (index, replaces) in verdicts {
                            decided.push(FactVerdict { pair: pairs[index].clone(), replaces });
                        }
                    }
                    Err(error) => report.errors.push(error),
                }
            }
            answered += decided.len();
            let (store, key) = (self.store.clone(), model.clone());
            blocking(move || store.save_verdicts(&key, &decided)).await?;
        }
        let (store, id) = (self.store.clone(), conversation.to_string());
        let applied = blocking(move || store.apply_chains(&id, &model)).await?;
        report.pairs = applied.pairs;
        report.cached = applied.pairs.saturating_sub(answered);
        report.superseded = applied.superseded;
        report.restated = applied.restated;
        report.undecided = applied.undecided;
        if report.undecided > 0 || !report.errors.is_empty() {
            tracing::warn!(
                conversation,
                undecided = report.undecided,
                errors = report.errors.len(),
                "facts left undecided"
            );
        }
        Ok(report)
    }

    /// One model call for `pairs`: the verdicts it gave, by pair index (or why it gave none),
    /// and the calls and tokens it took, re-asks included, also when it failed.
    async fn ask_verdicts(
        &self,
        pairs: &[FactPair],
    ) -> (Result<Vec<(usize, bool)>, String>, (u32, Usage)) {
        let prompt = match crate::prompts::FACT_CONFLICTS.render(&[("pairs", &render_pairs(pairs))])
        {
            Ok(prompt) => prompt,
            Err(error) => return (Err(error.to_string()), (0, Usage::default())),
        };
        let mut request = ChatRequest::new(&self.settings.model, vec![ChatMessage::user(prompt)]);
        request.temperature = Some(0.0);
        request.seed = Some(0);
        request.for_step(Some(Step::Facts), &self.chat);
        match chat_json(&self.chat, request, &schema(), MAX_REASKS).await {
            Ok(reply) => {
                (Ok(read_verdicts(&reply.value, pairs.len())), (reply.attempts, reply.usage))
            }
            Err(error) => {
                let spent = match &error {
                    crate::llm::Error::SchemaInvalid { attempts, usage, .. } => (*attempts, *usage),
                    // The request reached the endpoint (or may have): it counts as one call.
                    _ => (1, Usage::default()),
                };
                (Err(format!("deciding {} fact pairs: {error}", pairs.len())), spent)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::read_verdicts;
    use serde_json::json;

    #[test]
    fn verdicts_are_read_item_by_item() {
        let reply = json!({"verdicts": [
            {"pair": 2, "replaces": "True"}, {"pair": "1", "replaces": false},
            {"pair": 2, "replaces": false}, {"pair": 9, "replaces": true}, {"replaces": true}
        ]});
        assert_eq!(read_verdicts(&reply, 3), vec![(1, true), (0, false)]);
        let unnumbered = json!({"verdicts": [{"replaces": true}, {"replaces": false}]});
        assert_eq!(read_verdicts(&unnumbered, 2), vec![(0, true), (1, false)]);
        assert!(read_verdicts(&json!({"verdicts": "none"}), 2).is_empty());
    }
}
