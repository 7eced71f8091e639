//! Rendering a [`ScriptedReply`] as the HTTP response a real provider would send: chat
//! completions, embeddings, and the injected faults.

use axum::http::header::{CONTENT_TYPE, RETRY_AFTER};
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::{HASH_EMBEDDING_DIM, RecordedRequest, ScriptedReply};
use crate::llm::{ToolCall, Usage};

/// Turn a reply into an HTTP response, unwrapping delays and usage overrides first.
pub(super) async fn render(mut reply: ScriptedReply, request: &RecordedRequest) -> Response {
    let mut usage_override = None;
    loop {
        match reply {
            ScriptedReply::Delayed { delay, reply: inner } => {
                tokio::time::sleep(delay).await;
                reply = *inner;
            }
            ScriptedReply::WithUsage { usage, reply: inner } => {
                usage_override = Some(usage);
                reply = *inner;
            }
            other => return respond(other, request, usage_override),
        }
    }
}

fn respond(
    reply: ScriptedReply,
    request: &RecordedRequest,
    usage_override: Option<Usage>,
) -> Response {
    match reply {
        ScriptedReply::Text(text) => {
            let completion = estimate_tokens(text.len());
            let message = json!({"role": "assistant", "content": text});
            chat_completion(
                request,
                message,
                "stop",
                usage_override.unwrap_or(estimated_usage(request, completion)),
            )
        }
        ScriptedReply::ToolCalls { content, calls } => {
            tool_calls_completion(request, content, calls, usage_override)
        }
        ScriptedReply::Embeddings(vectors) => {
            let usage = usage_override.unwrap_or(embedding_usage(request));
            embeddings_response(request, vectors, usage)
        }
        ScriptedReply::HashEmbeddings => {
            let usage = usage_override.unwrap_or(embedding_usage(request));
            embeddings_response(request, hash_embeddings(request), usage)
        }
        ScriptedReply::Raw { status, headers, body } => {
            raw(status, "application/json", &headers, body)
        }
        other => fault_response(other),
    }
}

/// A chat completion whose message carries tool calls (ids filled in where scripted empty).
fn tool_calls_completion(
    request: &RecordedRequest,
    content: Option<String>,
    calls: Vec<ToolCall>,
    usage_override: Option<Usage>,
) -> Response {
    let completion =
        estimate_tokens(calls.iter().map(|call| call.name.len() + call.arguments.len()).sum());
    let calls: Vec<Value> = calls
        .into_iter()
        .enumerate()
        .map(|(position, call)| {
            let id = if call.id.is_empty() { format!("call_{}_{position}", request.index) } else { call.id };
            json!({"id": id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}})
        })
        .collect();
    let message = json!({"role": "assistant", "content": content, "tool_calls": calls});
    chat_completion(
        request,
        message,
        "tool_calls",
        usage_override.unwrap_or(estimated_usage(request, completion)),
    )
}

/// The hashed bag-of-words vectors for the request's inputs, at the requested `dimensions`.
fn hash_embeddings(request: &RecordedRequest) -> Vec<Vec<f32>> {
    let dim = request
        .body
        .get("dimensions")
        .and_then(Value::as_u64)
        .and_then(|dim| usize::try_from(dim).ok())
        .filter(|dim| *dim > 0)
        .unwrap_or(HASH_EMBEDDING_DIM);
    request.embedding_inputs().iter().map(|text| hashed_embedding(text, dim)).collect()
}

/// The injected provider faults: rate limits, error statuses, context length, broken bodies.
/// [`respond`] sends every other reply elsewhere; the wrappers ([`ScriptedReply::Delayed`],
/// [`ScriptedReply::WithUsage`]) are unwrapped by [`render`] and so never get here.
fn fault_response(fault: ScriptedReply) -> Response {
    match fault {
        ScriptedReply::RateLimited { retry_after } => {
            let body = json!({"error": {"message": "Rate limit exceeded: too many requests", "code": 429,
                "metadata": {"provider_name": "scripted"}}});
            let headers = retry_after
                .map(|value| vec![(RETRY_AFTER.as_str().to_owned(), value)])
                .unwrap_or_default();
            raw(429, "application/json", &headers, body.to_string())
        }
        ScriptedReply::Status { status, message } => {
            let body =
                json!({"error": {"message": message, "type": "scripted_error", "code": status}});
            raw(status, "application/json", &[], body.to_string())
        }
        ScriptedReply::ContextLengthExceeded => {
            let body = json!({"error": {
                "message": "This model's maximum context length is 8192 tokens. However, your messages resulted in 9100 tokens. Please reduce the length of the messages.",
                "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}});
            raw(400, "application/json", &[], body.to_string())
        }
        ScriptedReply::MalformedJson => raw(
            200,
            "application/json",
            &[],
            r#"{"id": "chatcmpl-broken", "choices": [{"message": {"content": "#.to_owned(),
        ),
        ScriptedReply::NonJson => raw(
            200,
            "text/html",
            &[],
            "<html><body><h1>502 Bad Gateway</h1>upstream sent an invalid response</body></html>"
                .to_owned(),
        ),
        _ => raw(500, "text/plain", &[], "scripted endpoint: unexpected wrapper".to_owned()),
    }
}

fn chat_completion(
    request: &RecordedRequest,
    message: Value,
    finish_reason: &str,
    usage: Usage,
) -> Response {
    let body = json!({
        "id": format!("chatcmpl-scripted-{}", request.index),
        "object": "chat.completion",
        "created": 0,
        "model": request.body.get("model").cloned().unwrap_or(Value::Null),
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": usage_json(usage),
    });
    raw(200, "application/json", &[], body.to_string())
}

fn embeddings_response(
    request: &RecordedRequest,
    vectors: Vec<Vec<f32>>,
    usage: Usage,
) -> Response {
    let data: Vec<Value> = vectors
        .into_iter()
        .enumerate()
        .map(|(index, vector)| json!({"object": "embedding", "index": index, "embedding": vector}))
        .collect();
    let body = json!({
        "object": "list",
        "model": request.body.get("model").cloned().unwrap_or(Value::Null),
        "data": data,
        "usage": {"prompt_tokens": usage.prompt_tokens, "total_tokens": usage.total()},
    });
    raw(200, "application/json", &[], body.to_string())
}

fn usage_json(usage: Usage) -> Value {
    json!({"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens, "total_tokens": usage.total()})
}

fn raw(
    status: u16,
    content_type: &'static str,
    headers: &[(String, String)],
    body: String,
) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, body).into_response();
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    for (name, value) in headers {
        if let (Ok(name), Ok(value)) =
            (HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_str(value))
        {
            response.headers_mut().insert(name, value);
        }
    }
    response
}

/// Usage the server reports when none is scripted: a quarter of the characters of the
/// message texts (prompt) and of the reply (completion).
fn estimated_usage(request: &RecordedRequest, completion_tokens: u64) -> Usage {
    Usage { prompt_tokens: estimate_tokens(request.transcript().len()), completion_tokens }
}

fn embedding_usage(request: &RecordedRequest) -> Usage {
    let chars = request.embedding_inputs().iter().map(String::len).sum();
    Usage { prompt_tokens: estimate_tokens(chars), completion_tokens: 0 }
}

fn estimate_tokens(chars: usize) -> u64 {
    chars.div_ceil(4) as u64
}

/// A deterministic embedding: lowercase alphanumeric words hashed (SHA-256) into `dim`
/// buckets with a hash-derived sign, then L2-normalised. Texts sharing words get a positive
/// cosine similarity; an empty text gives the zero vector.
pub fn hashed_embedding(text: &str, dim: usize) -> Vec<f32> {
    let mut vector = vec![0.0f32; dim.max(1)];
    for word in crate::text::alphanumeric_runs(text) {
        let digest = Sha256::digest(word.to_lowercase().as_bytes());
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(&digest[..8]);
        let hash = u64::from_le_bytes(bytes);
        let bucket = (hash % vector.len() as u64) as usize;
        vector[bucket] += if hash >> 63 == 0 { 1.0 } else { -1.0 };
    }
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        vector.iter_mut().for_each(|x| *x /= norm);
    }
    vector
}
