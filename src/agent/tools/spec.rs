//! The tool specs offered to the model: each tool's argument shapes from its own file
//! (`ARGUMENTS`), descriptions from `prompts/answer_tools.md`.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use serde_json::json;

use super::args::{ArgSpec, ArgType};
use super::{
    MEMGAS_MAX_K, MEMGAS_TOOL, Tool, edges_by_tag, query_conversation_time, query_event_context,
    query_event_keywords, query_memgas, query_personal_aspect, query_personal_information,
    query_topic_events,
};
use crate::llm::ToolSpec;
use crate::prompts;

/// Arguments of each tool, in the order the tools are offered.
const TOOL_ARGUMENTS: [(&str, &[ArgSpec]); 8] = [
    (edges_by_tag::NAME, edges_by_tag::ARGUMENTS),
    (query_conversation_time::NAME, query_conversation_time::ARGUMENTS),
    (query_event_keywords::NAME, query_event_keywords::ARGUMENTS),
    (query_event_context::NAME, query_event_context::ARGUMENTS),
    (query_personal_information::NAME, query_personal_information::ARGUMENTS),
    (query_personal_aspect::NAME, query_personal_aspect::ARGUMENTS),
    (query_topic_events::NAME, query_topic_events::ARGUMENTS),
    (MEMGAS_TOOL, query_memgas::ARGUMENTS),
];

/// The tool specs offered to the model, built once from `prompts/answer_tools.md` (descriptions)
/// and [`TOOL_ARGUMENTS`] (shapes). Schemas are hand-written JSON rather than derived with
/// schemars: seven flat objects of strings do not justify another dependency.
static SPECS: LazyLock<Vec<ToolSpec>> = LazyLock::new(build_specs);

fn build_specs() -> Vec<ToolSpec> {
    let docs = parse_tool_docs(prompts::ANSWER_TOOLS.text);
    TOOL_ARGUMENTS
        .iter()
        .map(|(name, arguments)| {
            let doc = docs.get(*name);
            let mut properties = serde_json::Map::new();
            let mut required = Vec::new();
            for (argument, kind, is_required) in arguments.iter() {
                let description =
                    doc.and_then(|doc| doc.arguments.get(*argument)).cloned().unwrap_or_default();
                let schema = match kind {
                    ArgType::String => json!({ "type": "string", "description": description }),
                    ArgType::Integer => json!({
                        "type": "integer",
                        "minimum": 1,
                        "maximum": MEMGAS_MAX_K,
                        "description": description,
                    }),
                };
                properties.insert((*argument).to_string(), schema);
                if *is_required {
                    required.push(json!(argument));
                }
            }
            ToolSpec {
                name: (*name).to_string(),
                description: doc.map(|doc| doc.description.clone()).unwrap_or_default(),
                parameters: json!({
                    "type": "object",
                    "properties": properties,
                    "required": required,
                }),
            }
        })
        .collect()
}

/// Description of one tool as written in `prompts/answer_tools.md`.
#[derive(Debug, Default)]
struct ToolDoc {
    description: String,
    arguments: BTreeMap<String, String>,
}

/// Parses `## name` sections: paragraph lines form the description, `- arg: text` lines describe
/// arguments.
fn parse_tool_docs(text: &str) -> BTreeMap<String, ToolDoc> {
    let mut docs: BTreeMap<String, ToolDoc> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        if let Some(name) = line.strip_prefix("## ") {
            current = Some(name.trim().to_string());
            docs.entry(name.trim().to_string()).or_default();
            continue;
        }
        let Some(name) = &current else { continue };
        let doc = docs.entry(name.clone()).or_default();
        if let Some(argument_line) = line.strip_prefix("- ") {
            if let Some((argument, description)) = argument_line.split_once(':') {
                doc.arguments.insert(argument.trim().to_string(), description.trim().to_string());
            }
        } else if !line.trim().is_empty() {
            if !doc.description.is_empty() {
                doc.description.push(' ');
            }
            doc.description.push_str(line.trim());
        }
    }
    docs
}

impl Tool {
    /// The specs of the tools offered, in a fixed order: the seven graph tools, then
    /// `query_memgas` when the conversation has a MemGAS index.
    pub fn specs(memgas: bool) -> Vec<ToolSpec> {
        SPECS.iter().filter(|spec| memgas || spec.name != MEMGAS_TOOL).cloned().collect()
    }
}
