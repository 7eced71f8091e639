//! `query_personal_information`: the aspects known about a person.

use serde::Deserialize;
use serde_json::{Value, json};

use super::args::{ArgSpec, ArgType, clean, typed};
use super::{Tool, ToolError};
use crate::memory::MemoryGraph;
use crate::memory::query;

/// The tool's name.
pub(super) const NAME: &str = "query_personal_information";

/// Its arguments, as offered to the model.
pub(super) const ARGUMENTS: &[ArgSpec] = &[("person", ArgType::String, true)];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    person: String,
}

/// The typed call.
pub(super) fn parse(value: Value) -> Result<Tool, ToolError> {
    let args: Args = typed(NAME, value)?;
    Ok(Tool::QueryPersonalInformation { person: clean(NAME, "person", args.person)? })
}

/// The result: `{"person": ..., "aspects": [...]}`.
pub(super) fn apply(graph: &MemoryGraph, person: &str) -> Result<Value, ToolError> {
    let found = query::query_personal_information(graph, person)?;
    Ok(json!({ "person": found.person, "aspects": found.aspects }))
}
