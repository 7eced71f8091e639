//! `query_conversation_time`: the session date of an event or turn.

use serde_json::{Value, json};

use super::args::{ArgSpec, ArgType, event_id};
use super::{Tool, ToolError};
use crate::memory::MemoryGraph;
use crate::memory::query;

/// The tool's name.
pub(super) const NAME: &str = "query_conversation_time";

/// Its arguments, as offered to the model.
pub(super) const ARGUMENTS: &[ArgSpec] = &[("event_id", ArgType::String, true)];

/// The typed call.
pub(super) fn parse(value: Value) -> Result<Tool, ToolError> {
    Ok(Tool::QueryConversationTime { event_id: event_id(NAME, value)? })
}

/// The result: `{"conversation_time": "<date>"}`.
pub(super) fn apply(graph: &MemoryGraph, event_id: &str) -> Result<Value, ToolError> {
    let time = query::query_conversation_time(graph, event_id)?;
    Ok(json!({ "conversation_time": time.date.to_string() }))
}
