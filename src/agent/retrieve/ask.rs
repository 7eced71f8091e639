//! One structured, traced model call of the answer stage.
//!
//! Every reply that `chat_json` rejects (and re-asks for, or gives up on) is kept in the trace
//! as a [`TraceEvent::Rejected`] with its reason, so the user can see what the model said.

use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use serde_json::Value;

use super::input::CallSettings;
use crate::agent::trace::{TraceEvent, TraceWriter, failed_call, is_plain_call, rejected_excerpt};
use crate::llm::structured::chat_json;
use crate::llm::{
    CallLog, ChatMessage, ChatModel, ChatRequest, ChatResponse, JsonSchemaSpec, Usage,
};

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
        ChatRequest::new(call.model, vec![ChatMessage::system(system), ChatMessage::user(user)]);
    request.temperature = call.temperature;
    request.seed = call.seed;
    request.for_step(crate::llm::Step::for_schema(&schema.name), model);
    let messages = request.messages.clone();
    let started = Instant::now();
    let recording = Recording { inner: model, replies: Mutex::default(), calls: Mutex::default() };
    let result = chat_json(&recording, request, schema, call.max_reasks).await;
    let ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let replies = recording.replies.into_inner().unwrap_or_else(PoisonError::into_inner);
    let mut calls = recording.calls.into_inner().unwrap_or_else(PoisonError::into_inner);
    if calls.iter().all(is_plain_call) {
        calls.clear();
    }
    let (value, error, attempts) = match &result {
        Ok(response) => (Some(response.value.clone()), None, response.attempts),
        Err(error) => (None, Some(error.to_string()), attempts_of(error)),
    };
    // Every reply but an accepted last one was rejected: the re-ask that followed it quotes
    // the reason; the last one's reason is the error.
    let rejected = replies.len().saturating_sub(usize::from(result.is_ok()));
    for index in 0..rejected {
        let reason = replies
            .get(index + 1)
            .map(|next| next.reask.clone())
            .or_else(|| error.clone())
            .unwrap_or_default();
        trace.record(TraceEvent::Rejected {
            step: purpose.into(),
            reason,
            reply: rejected_excerpt(&replies[index].reply),
        });
    }
    let usage = replies.iter().fold(Usage::default(), |total, reply| total + reply.usage);
    trace.record(TraceEvent::Llm {
        purpose: purpose.into(),
        messages,
        value,
        error,
        attempts,
        calls,
        usage,
        ms,
    });
    (result.map(|response| response.value), usage)
}

/// One reply `chat_json` received, with the last user message of its request (the re-ask
/// quoting why the previous reply was rejected).
struct ReceivedReply {
    reask: String,
    reply: String,
    usage: Usage,
}

/// Passes requests through and keeps every reply's text, and how every request went (the
/// retry layer's [`CallLog`] of a reply, the attempts of a failed call).
struct Recording<'a, M> {
    inner: &'a M,
    replies: Mutex<Vec<ReceivedReply>>,
    calls: Mutex<Vec<CallLog>>,
}

impl<M: ChatModel> ChatModel for Recording<'_, M> {
    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, crate::llm::Error> {
        let response = self.inner.chat(request).await;
        let call = match &response {
            Ok(response) => response.calls.clone(),
            Err(error) => failed_call(error),
        };
        self.calls.lock().unwrap_or_else(PoisonError::into_inner).push(call);
        if let Ok(response) = &response {
            let reask = request
                .messages
                .last()
                .and_then(|message| message.content.clone())
                .unwrap_or_default();
            let reply = response.message.content.clone().unwrap_or_default();
            let usage = response.usage;
            let mut replies = self.replies.lock().unwrap_or_else(PoisonError::into_inner);
            replies.push(ReceivedReply { reask, reply, usage });
        }
        response
    }
}

fn attempts_of(error: &crate::llm::Error) -> u32 {
    match error {
        crate::llm::Error::RateLimited { attempts, .. }
        | crate::llm::Error::Api { attempts, .. }
        | crate::llm::Error::Timeout { attempts, .. }
        | crate::llm::Error::Connection { attempts, .. }
        | crate::llm::Error::BadReply { attempts, .. }
        | crate::llm::Error::SchemaInvalid { attempts, .. } => *attempts,
        _ => 1,
    }
}

/// The payload's `question` wrapped for the retrieval prompts.
pub(super) fn quoted_question(text: &str) -> String {
    format!("QUESTION: <<<{}>>>", Value::String(text.to_string()))
}
