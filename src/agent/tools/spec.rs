//! The tool specs offered to the model: argument shapes here, descriptions from
//! `prompts/answer_tools.md`.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use serde_json::json;

use super::{MEMGAS_MAX_K, MEMGAS_TOOL, Tool};
use crate::llm::ToolSpec;
use crate::prompts;

/// JSON type of a tool argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ArgType {
    String,
    Integer,
}

/// One argument: name, JSON type, required.
type ArgSpec = (&'static str, ArgType, bool);

/// Arguments of each tool.
const TOOL_ARGUMENTS: [(&str, &[ArgSpec]); 8] = [
    (
        "edges_by_tag",
        &[
            ("key", ArgType::String, true),
            ("tag", ArgType::String, true),
            ("note", ArgType::String, false),
        ],
    ),
    ("query_conversation_time", &[("event_id", ArgType::String, true)]),
    ("query_event_keywords", &[("event_id", ArgType::String, true)]),
    ("query_event_context", &[("event_id", ArgType::String, true)]),
    ("query_personal_information", &[("person", ArgType::String, true)]),
    (
        "query_personal_aspect",
        &[("person", ArgType::String, true), ("aspect", ArgType::String, true)],
    ),
    ("query_topic_events", &[("topic", ArgType::String, true)]),
    (MEMGAS_TOOL, &[("query", ArgType::String, true), ("k", ArgType::Integer, false)]),
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
