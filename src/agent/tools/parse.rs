//! Turning a model's tool call (name, raw JSON arguments) into a typed [`Tool`]: a JSON object,
//! then the named tool's own parsing (its file), which uses the shared steps in `args`.

use serde_json::Value;

use super::{
    MEMGAS_TOOL, TOOL_NAMES, Tool, ToolError, edges_by_tag, query_conversation_time,
    query_event_context, query_event_keywords, query_memgas, query_personal_aspect,
    query_personal_information, query_topic_events,
};

impl Tool {
    /// Turns a model's call (`name`, raw JSON `arguments`) into a typed tool. Argument strings
    /// are trimmed; an empty required string is invalid.
    pub fn parse(name: &str, arguments: &str) -> Result<Tool, ToolError> {
        let raw = if arguments.trim().is_empty() { "{}" } else { arguments };
        let value: Value = serde_json::from_str(raw).map_err(|error| {
            ToolError::MalformedArguments { tool: name.to_string(), message: error.to_string() }
        })?;
        if !value.is_object() && (TOOL_NAMES.contains(&name) || name == MEMGAS_TOOL) {
            return Err(ToolError::MalformedArguments {
                tool: name.to_string(),
                message: format!("expected an object, got {value}"),
            });
        }
        match name {
            edges_by_tag::NAME => edges_by_tag::parse(value),
            query_conversation_time::NAME => query_conversation_time::parse(value),
            query_event_keywords::NAME => query_event_keywords::parse(value),
            query_event_context::NAME => query_event_context::parse(value),
            query_personal_information::NAME => query_personal_information::parse(value),
            query_personal_aspect::NAME => query_personal_aspect::parse(value),
            query_topic_events::NAME => query_topic_events::parse(value),
            query_memgas::NAME => query_memgas::parse(value),
            _ => Err(ToolError::UnknownTool {
                name: name.to_string(),
                available: format!("{}, {MEMGAS_TOOL}", TOOL_NAMES.join(", ")),
            }),
        }
    }
}
