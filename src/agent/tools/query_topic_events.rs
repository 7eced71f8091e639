//! `query_topic_events`: the events of a topic (a long list cut by similarity to the question).

use serde::Deserialize;
use serde_json::Value;

use super::args::{ArgSpec, ArgType, clean, typed};
use super::event_list::event_list;
use super::{Tool, ToolContext, ToolError};
use crate::memory::query;

/// The tool's name.
pub(super) const NAME: &str = "query_topic_events";

/// Its arguments, as offered to the model.
pub(super) const ARGUMENTS: &[ArgSpec] = &[("topic", ArgType::String, true)];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    topic: String,
}

/// The typed call.
pub(super) fn parse(value: Value) -> Result<Tool, ToolError> {
    let args: Args = typed(NAME, value)?;
    Ok(Tool::QueryTopicEvents { topic: clean(NAME, "topic", args.topic)? })
}

/// The result; a long list is cut to the events most similar to the question.
pub(super) fn apply(context: &ToolContext<'_>, topic: &str) -> Result<Value, ToolError> {
    Ok(event_list(context, query::query_topic_events(context.graph, topic)?))
}
