//! Salvaging model answers item by item, so that no turn and no sentence is ever lost to one
//! sloppy reply (issue 11, item 3).
//!
//! A build stage answers for a list of items: the rewrite for the turns of its unit, the
//! keyword stage for the unit's sentences. [`ask_salvaging`] keeps every item of a reply that
//! passes the stage's checks, even when other items of the same reply are missing, merged or
//! broken, and even when the reply is not JSON at all (that reply simply covers nothing). It
//! then re-asks, in the same transcript, for the missing items only, at most
//! `AskSettings::max_reasks` times. Whatever is still missing after that is filled by the
//! stage without the model (verbatim turns, deterministic keywords) and flagged in the stage
//! record's [`Repair`], so the build summary can count it.
//!
//! Transport failures are different: the endpoint, not the model's text, failed, so the unit
//! fails and is reported (its partial answer is not stored).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ingest::ask::{AskFailure, AskSettings, Asked, describe};
use crate::llm::structured::extract_json;
use crate::llm::{ChatMessage, ChatModel, ChatRequest, JsonSchemaSpec, Usage};
use crate::prompts::PromptError;

/// How a unit's stage output was put together when the model's first reply was not complete.
/// Stored in the stage record, so a rerun reports the same counts without a model call.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Repair {
    /// Focused re-asks made for the missing items (0 when the first reply covered them all).
    #[serde(default)]
    pub reasks: u32,
    /// Items (turn dia_ids or sentence ids) the model's replies covered, when the first reply
    /// was incomplete: kept from a partial reply or recovered by a re-ask. Empty when the first
    /// reply was complete.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub salvaged: Vec<String>,
    /// Items no reply covered, filled without the model: turns entered verbatim, sentences
    /// given deterministic keywords.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fallback: Vec<String>,
}

impl Repair {
    /// Whether nothing had to be repaired.
    pub fn is_clean(&self) -> bool {
        self.reasks == 0 && self.salvaged.is_empty() && self.fallback.is_empty()
    }
}

/// A stage's accumulated answer for one unit.
pub(crate) trait Salvage {
    /// Keep what `reply` (the JSON of one reply, or why none was found) holds for the items
    /// still missing; the problems found with the rest, for the re-ask.
    fn absorb(&mut self, reply: Result<Value, String>) -> Vec<String>;

    /// Items no reply has covered yet, in input order.
    fn missing(&self) -> Vec<String>;

    /// The focused re-ask for `missing`, quoting `reason`.
    fn reask(&self, missing: &[String], reason: &str) -> Result<String, PromptError>;
}

/// What [`ask_salvaging`] gathered: the stage state and how it got there.
#[derive(Debug)]
pub(crate) struct Salvaged<S> {
    /// The accumulated answer.
    pub(crate) state: S,
    /// Whether the first reply already covered every item.
    pub(crate) first_complete: bool,
    /// Focused re-asks made.
    pub(crate) reasks: u32,
    /// Tokens of every call.
    pub(crate) usage: Usage,
    /// Model calls made.
    pub(crate) attempts: u32,
}

impl<S: Salvage> Salvaged<S> {
    /// The stage's final value with the counts of this ask.
    pub(crate) fn finish<T>(self, value: impl FnOnce(S, Repair) -> T, all: &[String]) -> Asked<T> {
        let mut repair = Repair { reasks: self.reasks, ..Repair::default() };
        if !self.first_complete {
            let missing = self.state.missing();
            repair.salvaged = all.iter().filter(|item| !missing.contains(item)).cloned().collect();
            repair.fallback = missing;
        }
        Asked { value: value(self.state, repair), usage: self.usage, attempts: self.attempts }
    }
}

/// Ask `prompt`, keep what each reply holds, re-ask for what is missing. `Err` only for a
/// transport failure (or a prompt that cannot be rendered).
pub(crate) async fn ask_salvaging<M: ChatModel, S: Salvage>(
    chat: &M,
    settings: &AskSettings,
    prompt: String,
    schema: &JsonSchemaSpec,
    mut state: S,
) -> Result<Salvaged<S>, AskFailure> {
    let mut messages = vec![ChatMessage::user(prompt)];
    let (mut usage, mut attempts, mut reasks) = (Usage::default(), 0, 0);
    let mut first_complete = false;
    loop {
        let mut request = ChatRequest::new(settings.model.clone(), messages.clone());
        request.temperature = Some(0.0);
        request.response_format = Some(schema.clone());
        request.for_step(crate::llm::Step::for_schema(&schema.name), chat);
        attempts += 1;
        let response = chat.chat(&request).await.map_err(|error| AskFailure {
            error: error.to_string(),
            llm_error: Some(error),
            usage,
            attempts,
        })?;
        usage += response.usage;
        let text = response.message.content.unwrap_or_default();
        let problems = state.absorb(extract_json(&text));
        let missing = state.missing();
        if attempts == 1 {
            first_complete = missing.is_empty();
        }
        if !problems.is_empty() {
            tracing::warn!(schema = %schema.name, problems = %describe(&problems), "kept what the reply got right");
        }
        if missing.is_empty() || reasks >= settings.max_reasks {
            return Ok(Salvaged { state, first_complete, reasks, usage, attempts });
        }
        reasks += 1;
        let mut reason = format!("these items have no valid entry: {}", missing.join(", "));
        if !problems.is_empty() {
            reason = format!("{}; {reason}", describe(&problems));
        }
        tracing::info!(schema = %schema.name, round = reasks, missing = missing.len(), "re-asking for the missing items only");
        let reask = state.reask(&missing, &reason).map_err(|error| AskFailure {
            error: error.to_string(),
            llm_error: None,
            usage,
            attempts,
        })?;
        messages.push(ChatMessage::assistant(text));
        messages.push(ChatMessage::user(reask));
    }
}

/// Strings of a JSON value that should be a list of strings: a list (non-strings skipped) or a
/// single string.
pub(crate) fn string_list(value: Option<&Value>) -> Vec<String> {
    match value {
        Some(Value::String(text)) => vec![text.clone()],
        Some(Value::Array(items)) => {
            items.iter().filter_map(|item| item.as_str().map(str::to_string)).collect()
        }
        _ => Vec::new(),
    }
}

/// The items of the list under `field`, or of the reply itself when the model answered with a
/// bare list.
pub(crate) fn items_of(value: &Value, field: &str) -> Vec<Value> {
    match value {
        Value::Array(items) => items.clone(),
        _ => value.get(field).and_then(Value::as_array).cloned().unwrap_or_default(),
    }
}

/// A non-empty trimmed string field of a JSON object.
pub(crate) fn text_field(item: &Value, field: &str) -> Option<String> {
    let text = item.get(field)?.as_str()?.trim();
    (!text.is_empty()).then(|| text.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lists_and_fields_are_read_leniently() {
        assert_eq!(string_list(Some(&json!("a"))), ["a"]);
        assert_eq!(string_list(Some(&json!(["a", 3, "b"]))), ["a", "b"]);
        assert!(string_list(Some(&json!({"a": 1}))).is_empty());
        assert!(string_list(None).is_empty());
        assert_eq!(text_field(&json!({"t": " x "}), "t").as_deref(), Some("x"));
        assert_eq!(text_field(&json!({"t": "  "}), "t"), None);
        assert_eq!(text_field(&json!({"t": 1}), "t"), None);
        assert_eq!(items_of(&json!({"s": [1, 2]}), "s"), [json!(1), json!(2)]);
        assert_eq!(items_of(&json!([3]), "s"), [json!(3)]);
        assert!(items_of(&json!({"s": "x"}), "s").is_empty());
    }

    #[test]
    fn a_clean_repair_says_so() {
        assert!(Repair::default().is_clean());
        assert!(!Repair { reasks: 1, ..Repair::default() }.is_clean());
    }
}
