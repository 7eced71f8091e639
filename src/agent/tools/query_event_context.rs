//! `query_event_context`: the turn of an event with its neighbours.

use serde_json::{Value, json};

use super::args::{ArgSpec, ArgType, event_id};
use super::{Tool, ToolError};
use crate::memory::MemoryGraph;
use crate::memory::query;

/// The tool's name.
pub(super) const NAME: &str = "query_event_context";

/// Its arguments, as offered to the model.
pub(super) const ARGUMENTS: &[ArgSpec] = &[("event_id", ArgType::String, true)];

/// The typed call.
pub(super) fn parse(value: Value) -> Result<Tool, ToolError> {
    Ok(Tool::QueryEventContext { event_id: event_id(NAME, value)? })
}

/// The result: `{"turns": [...]}`, the previous turn, the turn and the next one.
pub(super) fn apply(graph: &MemoryGraph, event_id: &str) -> Result<Value, ToolError> {
    let turns: Vec<String> =
        query::query_event_context(graph, event_id)?.iter().map(ToString::to_string).collect();
    Ok(json!({ "turns": turns }))
}
