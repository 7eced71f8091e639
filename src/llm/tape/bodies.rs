//! A recorded request as the store keeps it: a skeleton whose messages and tool list are
//! references to bodies stored once by content hash (see [`super::store`]).

use serde_json::Value;

/// The prefix of a body reference in a skeleton.
const BODY_REF: &str = "@body:";

/// Splits a request into a skeleton (each message and the tool list replaced by a reference)
/// and the bodies it references, each with its content hash.
pub(super) fn split_request(request: &Value) -> (Value, Vec<(String, Vec<u8>)>) {
    let mut skeleton = request.clone();
    let mut bodies = Vec::new();
    let mut take = |value: &mut Value| {
        let bytes = serde_json::to_vec(value).unwrap_or_default();
        let hash = crate::text::short_hash(&bytes, 16);
        *value = Value::String(format!("{BODY_REF}{hash}"));
        bodies.push((hash, bytes));
    };
    if let Some(Value::Array(messages)) = skeleton.get_mut("messages") {
        messages.iter_mut().for_each(&mut take);
    }
    if let Some(tools) = skeleton.get_mut("tools").filter(|tools| tools.is_array()) {
        take(tools);
    }
    (skeleton, bodies)
}

/// Puts bodies back into a skeleton made by [`split_request`].
pub(super) fn rejoin(value: &mut Value, fetch: &mut impl FnMut(&str) -> Option<Value>) {
    let mut restore = |slot: &mut Value| {
        if let Some(hash) = slot.as_str().and_then(|text| text.strip_prefix(BODY_REF))
            && let Some(body) = fetch(hash)
        {
            *slot = body;
        }
    };
    if let Some(Value::Array(messages)) = value.get_mut("messages") {
        messages.iter_mut().for_each(&mut restore);
    }
    if let Some(tools) = value.get_mut("tools") {
        restore(tools);
    }
}
