//! Facts that change: after an add builds sessions, each session's new facts are set against
//! the current facts of the same person and aspect (in the user's conversations, or the
//! conversation's alone) that hold another value. Whether the newer replaces the older is one
//! batched model call per session (`prompts/fact_conflicts.md`), asked only for pairs without
//! a cached verdict. A replaced fact keeps its row with `valid_to` and the fact that replaced
//! it (`store::facts`).
//!
//! A reply that decides only some pairs settles those; the others stay undecided, are counted
//! in the report, and are asked again by the next add. Sessions are settled in the order their
//! facts became known, so a chain (Paris, then Berlin, then Rome) ends with one current fact.

use serde::Serialize;
use serde_json::{Value, json};

use super::{MemoryService, ServiceError, blocking};
use crate::llm::structured::chat_json;
use crate::llm::{ChatModel, ChatRequest, Embedder, JsonSchemaSpec, Message, Step};
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
    /// Model calls made (one per session with undecided pairs, re-asks included).
    pub model_calls: u32,
    /// Facts replaced by newer ones now.
    pub superseded: usize,
    /// Pairs the model's reply left undecided (asked again by the next add).
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

impl<M, E> MemoryService<M, E>
where
    M: ChatModel,
    E: Embedder + Clone + 'static,
{
    /// Decides the undecided facts of `conversation` (the caller holds its lock).
    pub(super) async fn settle_facts(
        &self,
        conversation: &str,
    ) -> Result<FactsReport, ServiceError> {
        let (store, id) = (self.store.clone(), conversation.to_string());
        let sessions = blocking(move || store.unchecked_facts(&id)).await?;
        let mut report = FactsReport::default();
        for (number, facts) in sessions {
            report.new_facts += facts.len();
            if let Err(error) = self.settle_session(&facts, &mut report).await {
                report.errors.push(format!("D{number}: {error}"));
            }
        }
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

    /// One session's facts: cached verdicts, one call for the rest, then one write.
    async fn settle_session(
        &self,
        facts: &[StoredFact],
        report: &mut FactsReport,
    ) -> Result<(), ServiceError> {
        let (store, owned) = (self.store.clone(), facts.to_vec());
        let pairs = blocking(move || store.fact_rivals(&owned)).await?;
        report.pairs += pairs.len();
        // Verdicts are the model's under this prompt: a new prompt asks again.
        let model = format!("{}@{}", self.settings.model, crate::prompts::FACT_CONFLICTS.version());
        let mut verdicts = Vec::new();
        let mut open = Vec::new();
        for pair in pairs {
            let (store, key) = (self.store.clone(), pair.verdict_key(&model));
            match blocking(move || store.cached_verdict(&key)).await? {
                Some(replaces) => verdicts.push(FactVerdict { pair, replaces }),
                None => open.push(pair),
            }
        }
        report.cached += verdicts.len();
        let mut undecided = 0;
        if !open.is_empty() {
            let decided = self.ask_verdicts(&open, report).await?;
            undecided = open.len() - decided.len();
            for (index, replaces) in decided {
                verdicts.push(FactVerdict { pair: open[index].clone(), replaces });
            }
        }
        report.undecided += undecided;
        // Facts stay undecided while any of their pairs is: the next add asks for those again.
        let checked: Vec<i64> =
            if undecided == 0 { facts.iter().map(|fact| fact.id).collect() } else { Vec::new() };
        let store = self.store.clone();
        report.superseded +=
            blocking(move || store.settle_facts(&model, &verdicts, &checked)).await?;
        Ok(())
    }

    /// One model call for `pairs`: the verdicts it gave, by pair index.
    async fn ask_verdicts(
        &self,
        pairs: &[FactPair],
        report: &mut FactsReport,
    ) -> Result<Vec<(usize, bool)>, ServiceError> {
        let prompt = crate::prompts::FACT_CONFLICTS
            .render(&[("pairs", &render_pairs(pairs))])
            .map_err(|error| anyhow::anyhow!(error))?;
        let mut request = ChatRequest::new(&self.settings.model, vec![Message::user(prompt)]);
        request.temperature = Some(0.0);
        request.seed = Some(0);
        request.for_step(Some(Step::Facts), &self.chat);
        let reply = chat_json(&self.chat, request, &schema(), MAX_REASKS)
            .await
            .map_err(|error| anyhow::anyhow!("deciding {} fact pairs: {error}", pairs.len()))?;
        report.model_calls += reply.attempts;
        Ok(read_verdicts(&reply.value, pairs.len()))
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
