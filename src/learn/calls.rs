//! The learning calls (attempt reviews, proposals, consolidations): one user message at
//! temperature 0, a JSON reply of the call's shape. Nothing is cached here: every call goes
//! through the learn run's tape (`data/<dataset>/meta/<name>/calls.sqlite`, opened by the
//! command), which answers a request it holds without sending it, so a resumed run sends only
//! what an earlier one did not finish, a changed input is asked afresh, and a replayed call
//! gives the reply and the tokens it was recorded with.

use anyhow::Context as _;
use serde_json::Value;

use crate::llm::structured::chat_json;
use crate::llm::{ChatMessage, ChatModel, ChatRequest, JsonSchemaSpec, Usage};

/// Re-asks when a reply is not JSON of the expected shape.
const MAX_REASKS: u32 = 2;

/// A learning call's reply.
pub struct CallReply {
    /// The JSON value, valid against the call's schema.
    pub value: Value,
    /// Tokens of the call (as recorded, when the tape answered it).
    pub usage: Usage,
}

/// Asks `model` (id `model_id`) for JSON valid against `schema`, with `prompt` as the one user
/// message at temperature 0; `stage` names the call in errors.
pub async fn ask_json<M: ChatModel>(
    model: &M,
    model_id: &str,
    stage: &str,
    prompt: String,
    schema: &JsonSchemaSpec,
) -> anyhow::Result<CallReply> {
    let mut request = ChatRequest::new(model_id, vec![ChatMessage::user(prompt)]);
    request.temperature = Some(0.0);
    request.seed = Some(0);
    request.for_step(Some(crate::llm::Step::Learn), model);
    let response = chat_json(model, request, schema, MAX_REASKS)
        .await
        .with_context(|| format!("{stage}: the model gave no usable reply"))?;
    Ok(CallReply { value: response.value, usage: response.usage })
}

/// The schema of an attempt review.
pub fn review_schema() -> JsonSchemaSpec {
    let text = serde_json::json!({"type": "string"});
    JsonSchemaSpec {
        name: "attempt_review".into(),
        schema: serde_json::json!({
            "type": "object",
            "properties": {
                "evidence_used": text, "mistake": text, "decision_points": text, "lesson": text
            },
            "required": ["mistake", "lesson"]
        }),
    }
}

/// The schema of a proposal or a consolidation: a list of operations, checked item by item
/// afterwards (see `ops::read_ops`), so one bad item does not cost the others.
pub fn ops_schema() -> JsonSchemaSpec {
    JsonSchemaSpec {
        name: "rule_ops".into(),
        schema: serde_json::json!({
            "type": "object",
            "properties": {"ops": {"type": "array", "items": {"type": "object"}}},
            "required": ["ops"]
        }),
    }
}
