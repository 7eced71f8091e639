//! The argument steps every tool's parsing shares: typed arguments from a JSON object, trimmed
//! non-empty strings, the one-event argument, and the argument shapes (`ArgSpec`) each tool
//! declares for its schema. Tools import these; nothing here knows a tool.

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::ToolError;

/// JSON type of a tool argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ArgType {
    String,
    Integer,
}

/// One argument: name, JSON type, required.
pub(super) type ArgSpec = (&'static str, ArgType, bool);

/// `value` (a JSON object) as the arguments `T` of `tool`; a mismatch is invalid arguments.
pub(super) fn typed<T: DeserializeOwned>(tool: &str, value: Value) -> Result<T, ToolError> {
    serde_json::from_value(value).map_err(|error| ToolError::InvalidArguments {
        tool: tool.to_string(),
        message: error.to_string(),
    })
}

/// The argument `field` of `tool` trimmed; empty is invalid.
pub(super) fn clean(tool: &str, field: &str, value: String) -> Result<String, ToolError> {
    let trimmed = value.trim();
    if trimmed.is_empty() {
        Err(ToolError::InvalidArguments {
            tool: tool.to_string(),
            message: format!("`{field}` must not be empty"),
        })
    } else {
        Ok(trimmed.to_string())
    }
}

/// The arguments of the tools that take one event (`query_conversation_time`,
/// `query_event_keywords`, `query_event_context`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EventArgs {
    event_id: String,
}

/// The trimmed `event_id` argument of `tool`.
pub(super) fn event_id(tool: &str, value: Value) -> Result<String, ToolError> {
    let args: EventArgs = typed(tool, value)?;
    clean(tool, "event_id", args.event_id)
}
