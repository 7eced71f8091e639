//! Turning a model's tool call (name, raw JSON arguments) into a typed [`Tool`].

use serde::Deserialize;
use serde_json::Value;

use super::{MEMGAS_DEFAULT_K, MEMGAS_MAX_K, MEMGAS_TOOL, TOOL_NAMES, Tool, ToolError};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyTagArgs {
    key: String,
    tag: String,
    #[serde(default)]
    #[allow(dead_code)] // Accepted for the model's benefit; the reference ignores it too.
    note: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EventArgs {
    event_id: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PersonArgs {
    person: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PersonAspectArgs {
    person: String,
    aspect: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TopicArgs {
    topic: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MemgasArgs {
    query: String,
    #[serde(default)]
    k: Option<usize>,
}

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
        let invalid = |error: serde_json::Error| ToolError::InvalidArguments {
            tool: name.to_string(),
            message: error.to_string(),
        };
        let tool = match name {
            "edges_by_tag" => {
                let args: KeyTagArgs = serde_json::from_value(value).map_err(invalid)?;
                Tool::EdgesByTag { key: args.key, tag: args.tag }
            }
            "query_conversation_time" => {
                let args: EventArgs = serde_json::from_value(value).map_err(invalid)?;
                Tool::QueryConversationTime { event_id: args.event_id }
            }
            "query_event_keywords" => {
                let args: EventArgs = serde_json::from_value(value).map_err(invalid)?;
                Tool::QueryEventKeywords { event_id: args.event_id }
            }
            "query_event_context" => {
                let args: EventArgs = serde_json::from_value(value).map_err(invalid)?;
                Tool::QueryEventContext { event_id: args.event_id }
            }
            "query_personal_information" => {
                let args: PersonArgs = serde_json::from_value(value).map_err(invalid)?;
                Tool::QueryPersonalInformation { person: args.person }
            }
            "query_personal_aspect" => {
                let args: PersonAspectArgs = serde_json::from_value(value).map_err(invalid)?;
                Tool::QueryPersonalAspect { person: args.person, aspect: args.aspect }
            }
            "query_topic_events" => {
                let args: TopicArgs = serde_json::from_value(value).map_err(invalid)?;
                Tool::QueryTopicEvents { topic: args.topic }
            }
            MEMGAS_TOOL => {
                let args: MemgasArgs = serde_json::from_value(value).map_err(invalid)?;
                let k = args.k.unwrap_or(MEMGAS_DEFAULT_K);
                if !(1..=MEMGAS_MAX_K).contains(&k) {
                    return Err(ToolError::InvalidArguments {
                        tool: name.to_string(),
                        message: format!("`k` must be between 1 and {MEMGAS_MAX_K}, got {k}"),
                    });
                }
                Tool::QueryMemgas { query: args.query, k }
            }
            _ => {
                return Err(ToolError::UnknownTool {
                    name: name.to_string(),
                    available: format!("{}, {MEMGAS_TOOL}", TOOL_NAMES.join(", ")),
                });
            }
        };
        tool.trimmed()
    }

    /// Trims every argument and rejects empty ones.
    fn trimmed(self) -> Result<Tool, ToolError> {
        let name = self.name();
        let clean = |field: &str, value: String| -> Result<String, ToolError> {
            let trimmed = value.trim();
            if trimmed.is_empty() {
                Err(ToolError::InvalidArguments {
                    tool: name.to_string(),
                    message: format!("`{field}` must not be empty"),
                })
            } else {
                Ok(trimmed.to_string())
            }
        };
        Ok(match self {
            Tool::EdgesByTag { key, tag } => {
                Tool::EdgesByTag { key: clean("key", key)?, tag: clean("tag", tag)? }
            }
            Tool::QueryConversationTime { event_id } => {
                Tool::QueryConversationTime { event_id: clean("event_id", event_id)? }
            }
            Tool::QueryEventKeywords { event_id } => {
                Tool::QueryEventKeywords { event_id: clean("event_id", event_id)? }
            }
            Tool::QueryEventContext { event_id } => {
                Tool::QueryEventContext { event_id: clean("event_id", event_id)? }
            }
            Tool::QueryPersonalInformation { person } => {
                Tool::QueryPersonalInformation { person: clean("person", person)? }
            }
            Tool::QueryPersonalAspect { person, aspect } => Tool::QueryPersonalAspect {
                person: clean("person", person)?,
                aspect: clean("aspect", aspect)?,
            },
            Tool::QueryTopicEvents { topic } => {
                Tool::QueryTopicEvents { topic: clean("topic", topic)? }
            }
            Tool::QueryMemgas { query, k } => {
                Tool::QueryMemgas { query: clean("query", query)?, k }
            }
        })
    }
}
