//! The keys of recorded calls, how a vector is stored, and how a request missing from a tape
//! is named.

use super::context;
use serde_json::Value;

use crate::llm::ChatRequest;

/// The key of a chat request given as JSON.
pub fn chat_key(request: &Value) -> String {
    let bytes = serde_json::to_vec(request).unwrap_or_default();
    let mut keyed = b"chat\0".to_vec();
    keyed.extend_from_slice(&bytes);
    crate::text::short_hash(&keyed, 16)
}

/// The key of one text embedded by `model`.
pub fn embed_key(model: &str, text: &str) -> String {
    crate::text::short_hash(format!("embed\0{model}\0{text}").as_bytes(), 16)
}

/// A vector as little-endian `f32` bytes.
pub fn encode_vector(vector: &[f32]) -> Vec<u8> {
    vector.iter().flat_map(|value| value.to_le_bytes()).collect()
}

/// The vector of [`encode_vector`]'s bytes (a trailing partial value is dropped).
pub fn decode_vector(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|chunk| f32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]))
        .collect()
}

/// How an unrecorded chat request is named: work item, key, model, size and its last message.
pub(super) fn describe_chat(key: &str, request: &ChatRequest) -> String {
    let last = request.messages.last().map_or_else(String::new, |message| {
        let text = message.content.as_deref().unwrap_or_default();
        format!("; last message ({:?}): {:?}", message.role, excerpt(text))
    });
    format!(
        "{}chat request {key} to {} ({} messages, {} tools{last})",
        item(),
        request.model,
        request.messages.len(),
        request.tools.len()
    )
}

pub(super) fn describe_embed(key: &str, model: &str, text: &str, missing: usize) -> String {
    format!(
        "{}embedding request {key} by {model} for {:?} ({missing} text(s) of the batch missing)",
        item(),
        excerpt(text)
    )
}

fn item() -> String {
    let label = context();
    if label.is_empty() { String::new() } else { format!("{label}: ") }
}

fn excerpt(text: &str) -> String {
    const LIMIT: usize = 160;
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= LIMIT {
        flat
    } else {
        let cut: String = flat.chars().take(LIMIT).collect();
        format!("{cut}…")
    }
}
