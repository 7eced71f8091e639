//! One structured, traced model call of the answer stage.

use std::time::Instant;

use serde_json::Value;

use super::input::CallSettings;
use crate::agent::trace::{TraceEvent, TraceWriter};
use crate::llm::structured::chat_json;
use crate::llm::{ChatModel, ChatRequest, JsonSchemaSpec, Message, Usage};

/// One structured call of the answer stage, traced; the usage counts every attempt that
/// returned.
pub(super) async fn ask_json<M: ChatModel>(
    model: &M,
    call: &CallSettings<'_>,
    purpose: &str,
    system: String,
    user: String,
    schema: &JsonSchemaSpec,
    trace: &mut TraceWriter,
) -> (Result<Value, crate::llm::Error>, Usage) {
    let mut request =
        ChatRequest::new(call.model, vec![Message::system(system), Message::user(user)]);
    request.temperature = call.temperature;
    request.seed = call.seed;
    let messages = request.messages.clone();
    let started = Instant::now();
    let result = chat_json(model, request, schema, call.max_reasks).await;
    let ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let (value, error, attempts, usage) = match &result {
        Ok(response) => (Some(response.value.clone()), None, response.attempts, response.usage),
        Err(error) => (None, Some(error.to_string()), attempts_of(error), Usage::default()),
    };
    trace.record(TraceEvent::Llm {
        purpose: purpose.into(),
        messages,
        value,
        error,
        attempts,
        usage,
        ms,
    });
    (result.map(|response| response.value), usage)
}

fn attempts_of(error: &crate::llm::Error) -> u32 {
    match error {
        crate::llm::Error::RateLimited { attempts, .. }
        | crate::llm::Error::Api { attempts, .. }
        | crate::llm::Error::Timeout { attempts, .. }
        | crate::llm::Error::Connection { attempts, .. }
        | crate::llm::Error::SchemaInvalid { attempts, .. } => *attempts,
        _ => 1,
    }
}

/// The payload's `question` wrapped for the retrieval prompts.
pub(super) fn quoted_question(text: &str) -> String {
    format!("QUESTION: <<<{}>>>", Value::String(text.to_string()))
}
