//! `query_personal_aspect`: the facts of one aspect of a person.

use serde::Deserialize;
use serde_json::{Value, json};

use super::args::{ArgSpec, ArgType, clean, typed};
use super::{Tool, ToolError};
use crate::memory::MemoryGraph;
use crate::memory::query;

/// The tool's name.
pub(super) const NAME: &str = "query_personal_aspect";

/// Its arguments, as offered to the model.
pub(super) const ARGUMENTS: &[ArgSpec] =
    &[("person", ArgType::String, true), ("aspect", ArgType::String, true)];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    person: String,
    aspect: String,
}

/// The typed call.
pub(super) fn parse(value: Value) -> Result<Tool, ToolError> {
    let args: Args = typed(NAME, value)?;
    Ok(Tool::QueryPersonalAspect {
        person: clean(NAME, "person", args.person)?,
        aspect: clean(NAME, "aspect", args.aspect)?,
    })
}

/// The result: `{"facts": [...]}`.
pub(super) fn apply(graph: &MemoryGraph, person: &str, aspect: &str) -> Result<Value, ToolError> {
    let facts: Vec<String> = query::query_personal_aspect(graph, person, aspect)?
        .iter()
        .map(ToString::to_string)
        .collect();
    Ok(json!({ "facts": facts }))
}
