//! `edges_by_tag`: the events linked to a keyword under one tag (a long list cut by similarity
//! to the question).

use serde::Deserialize;
use serde_json::Value;

use super::args::{ArgSpec, ArgType, clean, typed};
use super::event_list::event_list;
use super::{Tool, ToolContext, ToolError};
use crate::memory::query;

/// The tool's name.
pub(super) const NAME: &str = "edges_by_tag";

/// Its arguments, as offered to the model.
pub(super) const ARGUMENTS: &[ArgSpec] = &[
    ("key", ArgType::String, true),
    ("tag", ArgType::String, true),
    ("note", ArgType::String, false),
];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    key: String,
    tag: String,
    #[serde(default)]
    #[allow(dead_code)] // Accepted for the model's benefit; the reference ignores it too.
    note: Option<String>,
}

/// The typed call.
pub(super) fn parse(value: Value) -> Result<Tool, ToolError> {
    let args: Args = typed(NAME, value)?;
    Ok(Tool::EdgesByTag { key: clean(NAME, "key", args.key)?, tag: clean(NAME, "tag", args.tag)? })
}

/// The result; a long list is cut to the events most similar to the question.
pub(super) fn apply(context: &ToolContext<'_>, key: &str, tag: &str) -> Result<Value, ToolError> {
    Ok(event_list(context, query::edges_by_tag(context.graph, key, tag)?))
}
