//! The answer loop's tools: a closed enum with JSON schemas, argument parsing and execution.
//!
//! Eight tools: the seven graph tools of the reference (§10, over `memory::query`) and
//! `query_memgas` (MemGAS retrieval, offered only when the conversation has an index). The model
//! calls tools by name with JSON arguments; [`Tool::parse`] turns such a call into a typed
//! variant, and [`Tool::apply`] runs it against the question's memory. Every failure (an
//! unknown tool, malformed or missing arguments, an id the memory does not hold) becomes a
//! [`ToolError`] whose text is shown to the model as the tool result, so it can correct itself;
//! nothing here aborts a question. Results are JSON objects with a fixed key order.
//!
//! This module does no IO: when `query_event_keywords` finds keys with too many tags,
//! [`Tool::apply`] hands them back as [`Applied::ScoreTags`] and the async driver in
//! `agent/mod.rs` has the model score them (the reference scored them against the event's own
//! text, §17 item 13; we score against the question) before calling [`finish_event_keywords`];
//! `query_memgas` comes back as [`Applied::Memgas`] for the driver to embed the query.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

use serde::Deserialize;
use serde_json::{Value, json};

use crate::ingest::SampleEmbeddings;
use crate::llm::ToolSpec;
use crate::memory::query::{self, KeyTags, QueryError};
use crate::memory::{MemoryGraph, normalize_key};
use crate::prompts;
use crate::retrieval::MemgasHits;
use crate::retrieval::vector::{dot, top_k};

/// One tool call of the answer loop, with typed arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tool {
    /// `edges_by_tag`: events linked to a keyword under one tag.
    EdgesByTag {
        /// Graph keyword (exact).
        key: String,
        /// One of the keyword's tags (exact).
        tag: String,
    },
    /// `query_conversation_time`: the session date of an event or turn.
    QueryConversationTime {
        /// `D<s>:<t>` or `D<s>:<t>-<k>`.
        event_id: String,
    },
    /// `query_event_keywords`: keywords (with tags) linked to an event.
    QueryEventKeywords {
        /// `D<s>:<t>` or `D<s>:<t>-<k>`.
        event_id: String,
    },
    /// `query_event_context`: the turn of an event with its neighbours.
    QueryEventContext {
        /// `D<s>:<t>` or `D<s>:<t>-<k>`.
        event_id: String,
    },
    /// `query_personal_information`: the aspects known about a person.
    QueryPersonalInformation {
        /// Person name.
        person: String,
    },
    /// `query_personal_aspect`: the facts of one aspect of a person.
    QueryPersonalAspect {
        /// Person name.
        person: String,
        /// Aspect name.
        aspect: String,
    },
    /// `query_topic_events`: the events of a topic.
    QueryTopicEvents {
        /// Topic id `D<s>:t<k>`.
        topic: String,
    },
    /// `query_memgas`: MemGAS multi-granularity retrieval over the whole conversation.
    QueryMemgas {
        /// Free-text query.
        query: String,
        /// Sessions and turns to return (1..=[`MEMGAS_MAX_K`]).
        k: usize,
    },
}

/// Default `k` of `query_memgas`.
pub const MEMGAS_DEFAULT_K: usize = 5;
/// Largest `k` of `query_memgas`.
pub const MEMGAS_MAX_K: usize = 10;

/// Why a tool call produced no result. The text is what the model reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    /// The model named a tool that does not exist.
    #[error("unknown tool `{name}`; the tools are: {available}")]
    UnknownTool {
        /// Name the model used.
        name: String,
        /// Comma-separated tool names.
        available: String,
    },
    /// The arguments are not a JSON object.
    #[error("the arguments of `{tool}` are not a valid JSON object: {message}")]
    MalformedArguments {
        /// Tool name.
        tool: String,
        /// Parser message.
        message: String,
    },
    /// The arguments are JSON but do not fit the tool's schema.
    #[error("invalid arguments for `{tool}`: {message}")]
    InvalidArguments {
        /// Tool name.
        tool: String,
        /// What is wrong.
        message: String,
    },
    /// An id or name the memory does not hold.
    #[error("{0}")]
    NotFound(String),
    /// The call was not executed because a limit on tool calls was reached.
    #[error("not executed: {0}")]
    LimitReached(String),
}

impl From<QueryError> for ToolError {
    fn from(error: QueryError) -> Self {
        ToolError::NotFound(error.to_string())
    }
}

impl ToolError {
    /// The tool-message text for this error: a one-key JSON object, so that successful and
    /// failed results are both JSON.
    pub fn to_tool_result(&self) -> String {
        json!({ "error": self.to_string() }).to_string()
    }
}

/// The names of the graph tools, in the order they are offered to the model.
pub const TOOL_NAMES: [&str; 7] = [
    "edges_by_tag",
    "query_conversation_time",
    "query_event_keywords",
    "query_event_context",
    "query_personal_information",
    "query_personal_aspect",
    "query_topic_events",
];

/// The MemGAS tool, offered after the graph tools when the conversation has a MemGAS index.
pub const MEMGAS_TOOL: &str = "query_memgas";

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
                    "additionalProperties": false,
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
    /// The specs of the tools offered, in a fixed order: the seven graph tools, then
    /// `query_memgas` when the conversation has a MemGAS index.
    pub fn specs(memgas: bool) -> Vec<ToolSpec> {
        SPECS.iter().filter(|spec| memgas || spec.name != MEMGAS_TOOL).cloned().collect()
    }

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

    /// The parsed arguments as a JSON object (for traces).
    pub fn arguments_json(&self) -> Value {
        match self {
            Tool::EdgesByTag { key, tag } => json!({ "key": key, "tag": tag }),
            Tool::QueryConversationTime { event_id }
            | Tool::QueryEventKeywords { event_id }
            | Tool::QueryEventContext { event_id } => json!({ "event_id": event_id }),
            Tool::QueryPersonalInformation { person } => json!({ "person": person }),
            Tool::QueryPersonalAspect { person, aspect } => {
                json!({ "person": person, "aspect": aspect })
            }
            Tool::QueryTopicEvents { topic } => json!({ "topic": topic }),
            Tool::QueryMemgas { query, k } => json!({ "query": query, "k": k }),
        }
    }

    /// The tool's name as the model calls it.
    pub fn name(&self) -> &'static str {
        match self {
            Tool::EdgesByTag { .. } => "edges_by_tag",
            Tool::QueryConversationTime { .. } => "query_conversation_time",
            Tool::QueryEventKeywords { .. } => "query_event_keywords",
            Tool::QueryEventContext { .. } => "query_event_context",
            Tool::QueryPersonalInformation { .. } => "query_personal_information",
            Tool::QueryPersonalAspect { .. } => "query_personal_aspect",
            Tool::QueryTopicEvents { .. } => "query_topic_events",
            Tool::QueryMemgas { .. } => MEMGAS_TOOL,
        }
    }
}

/// What the tools read: one conversation's memory and the question's embedding.
#[derive(Debug, Clone, Copy)]
pub struct ToolContext<'a> {
    /// The conversation's memory graph.
    pub graph: &'a MemoryGraph,
    /// Embeddings of its events.
    pub vectors: &'a SampleEmbeddings,
    /// The question's embedding.
    pub question_vector: &'a [f32],
    /// `edges_by_tag` results longer than this are cut by similarity to the question.
    pub rerank_limit: usize,
    /// How many events such a cut keeps.
    pub keep: usize,
    /// Keys with more tags than this get their tags scored before they are shown.
    pub tag_max: usize,
    /// Whether the conversation has a MemGAS index (`query_memgas` is offered).
    pub memgas: bool,
}

/// What a question's tool calls have shown so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolState {
    /// Normalised keys already shown (question keywords, key candidates, earlier results):
    /// `query_event_keywords` leaves them out.
    pub seen_keys: BTreeSet<String>,
}

/// The result of [`Tool::apply`].
#[derive(Debug, Clone, PartialEq)]
pub enum Applied {
    /// The tool-message JSON.
    Done(Value),
    /// `query_event_keywords` found keys whose tags must be scored first: score the tags of
    /// each key with more than `tag_max` tags, then call [`finish_event_keywords`].
    ScoreTags {
        /// The event asked about.
        event_id: String,
        /// New keys with all their tags, in result order.
        keys: Vec<KeyTags>,
    },
    /// `query_memgas`: embed the query with the MemGAS index's embedder, then call
    /// [`memgas_result`].
    Memgas {
        /// Query text.
        query: String,
        /// Hits wanted.
        k: usize,
    },
}

impl Tool {
    /// Runs the tool against the memory. Unknown ids and names are errors the model reads.
    pub fn apply(
        &self,
        context: &ToolContext<'_>,
        state: &mut ToolState,
    ) -> Result<Applied, ToolError> {
        let graph = context.graph;
        let value = match self {
            Tool::EdgesByTag { key, tag } => {
                let hits = query::edges_by_tag(graph, key, tag)?;
                let total = hits.len();
                let hits = if total > context.rerank_limit {
                    let scores: Vec<f32> = hits
                        .iter()
                        .map(|hit| {
                            context
                                .vectors
                                .sentences
                                .get(&hit.event_id)
                                .map_or(f32::MIN, |vector| dot(vector, context.question_vector))
                        })
                        .collect();
                    top_k(&scores, context.keep)
                        .into_iter()
                        .map(|index| hits[index].clone())
                        .collect()
                } else {
                    hits
                };
                let events: Vec<String> = hits.iter().map(ToString::to_string).collect();
                let mut value = json!({ "key": normalize_key(key), "tag": tag, "events": events });
                if total > events.len() {
                    value["omitted"] = json!(format!(
                        "{} more events under this tag are less similar to the question",
                        total - events.len()
                    ));
                }
                value
            }
            Tool::QueryConversationTime { event_id } => {
                let time = query::query_conversation_time(graph, event_id)?;
                json!({ "event_id": time.event_id, "conversation_time": time.date.to_string() })
            }
            Tool::QueryEventKeywords { event_id } => {
                let keys = query::query_event_keywords(graph, event_id)?;
                let fresh: Vec<KeyTags> = keys
                    .into_iter()
                    .filter(|key| state.seen_keys.insert(normalize_key(&key.key)))
                    .collect();
                if fresh.iter().any(|key| key.tags.len() > context.tag_max) {
                    return Ok(Applied::ScoreTags { event_id: event_id.clone(), keys: fresh });
                }
                finish_event_keywords(event_id, fresh)
            }
            Tool::QueryEventContext { event_id } => {
                let turns: Vec<String> = query::query_event_context(graph, event_id)?
                    .iter()
                    .map(ToString::to_string)
                    .collect();
                json!({ "event_id": event_id, "turns": turns })
            }
            Tool::QueryPersonalInformation { person } => {
                let found = query::query_personal_information(graph, person)?;
                json!({ "person": found.person, "aspects": found.aspects })
            }
            Tool::QueryPersonalAspect { person, aspect } => {
                let facts: Vec<String> = query::query_personal_aspect(graph, person, aspect)?
                    .iter()
                    .map(ToString::to_string)
                    .collect();
                json!({ "person": person, "aspect": aspect, "facts": facts })
            }
            Tool::QueryTopicEvents { topic } => {
                let events: Vec<String> = query::query_topic_events(graph, topic)?
                    .iter()
                    .map(ToString::to_string)
                    .collect();
                json!({ "topic": topic, "events": events })
            }
            Tool::QueryMemgas { query, k } => {
                if !context.memgas {
                    return Err(ToolError::NotFound(format!(
                        "{MEMGAS_TOOL} is not available for this conversation (it has no MemGAS index)"
                    )));
                }
                return Ok(Applied::Memgas { query: query.clone(), k: *k });
            }
        };
        Ok(Applied::Done(value))
    }
}

/// The `query_event_keywords` result for keys whose tags are final.
pub fn finish_event_keywords(event_id: &str, keys: Vec<KeyTags>) -> Value {
    if keys.is_empty() {
        return json!({
            "event_id": event_id,
            "keys": [],
            "note": "every keyword of this event was already shown for this question"
        });
    }
    let keys: Vec<Value> =
        keys.into_iter().map(|key| json!({ "key": key.key, "tags": key.tags })).collect();
    json!({ "event_id": event_id, "keys": keys })
}

/// The `query_memgas` result: the top sessions (id, date) and turns (`<dia_id>:<text>`, with
/// the session date), best first.
pub fn memgas_result(query: &str, hits: &MemgasHits) -> Value {
    let sessions: Vec<Value> = hits
        .sessions
        .iter()
        .map(|hit| json!({ "session": hit.session_id, "date": hit.date }))
        .collect();
    let turns: Vec<String> = hits
        .turns
        .iter()
        .map(|hit| match &hit.date {
            Some(date) => format!("{}:{} (session date: {date})", hit.dia_id, hit.text),
            None => format!("{}:{}", hit.dia_id, hit.text),
        })
        .collect();
    json!({ "query": query, "sessions": sessions, "turns": turns })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_parse(name: &str, arguments: &str, expected: Result<Tool, &str>) {
        let parsed = Tool::parse(name, arguments);
        match (parsed, expected) {
            (Ok(tool), Ok(expected)) => assert_eq!(tool, expected),
            (Err(error), Err(fragment)) => {
                let text = error.to_string();
                assert!(text.contains(fragment), "`{text}` should contain `{fragment}`");
            }
            (parsed, expected) => {
                panic!("parse({name}, {arguments}) = {parsed:?}, want {expected:?}")
            }
        }
    }

    #[test]
    fn parses_every_tool() {
        check_parse(
            "edges_by_tag",
            r#"{"key":"painting","tag":"Art Class","note":"where she paints"}"#,
            Ok(Tool::EdgesByTag { key: "painting".into(), tag: "Art Class".into() }),
        );
        check_parse(
            "edges_by_tag",
            r#"{"key":" painting ","tag":"Art"}"#,
            Ok(Tool::EdgesByTag { key: "painting".into(), tag: "Art".into() }),
        );
        check_parse(
            "query_conversation_time",
            r#"{"event_id":"D1:3"}"#,
            Ok(Tool::QueryConversationTime { event_id: "D1:3".into() }),
        );
        check_parse(
            "query_event_keywords",
            r#"{"event_id":"D1:3-2"}"#,
            Ok(Tool::QueryEventKeywords { event_id: "D1:3-2".into() }),
        );
        check_parse(
            "query_event_context",
            r#"{"event_id":"D2:1"}"#,
            Ok(Tool::QueryEventContext { event_id: "D2:1".into() }),
        );
        check_parse(
            "query_personal_information",
            r#"{"person":"Caroline"}"#,
            Ok(Tool::QueryPersonalInformation { person: "Caroline".into() }),
        );
        check_parse(
            "query_personal_aspect",
            r#"{"person":"Caroline","aspect":"hobbies"}"#,
            Ok(Tool::QueryPersonalAspect { person: "Caroline".into(), aspect: "hobbies".into() }),
        );
        check_parse(
            "query_topic_events",
            r#"{"topic":"D1:t2"}"#,
            Ok(Tool::QueryTopicEvents { topic: "D1:t2".into() }),
        );
        check_parse(
            "query_memgas",
            r#"{"query":"kitten adoption"}"#,
            Ok(Tool::QueryMemgas { query: "kitten adoption".into(), k: MEMGAS_DEFAULT_K }),
        );
        check_parse(
            "query_memgas",
            r#"{"query":"kitten","k":3}"#,
            Ok(Tool::QueryMemgas { query: "kitten".into(), k: 3 }),
        );
    }

    #[test]
    fn bad_calls_become_readable_errors() {
        check_parse(
            "delete_memory",
            "{}",
            Err("unknown tool `delete_memory`; the tools are: edges_by_tag"),
        );
        check_parse(
            "edges_by_tag",
            r#"{"key": "painting", "tag": "#,
            Err("not a valid JSON object"),
        );
        check_parse("edges_by_tag", r#"["painting"]"#, Err("expected an object"));
        check_parse("edges_by_tag", r#"{"key":"painting"}"#, Err("missing field `tag`"));
        check_parse("query_topic_events", r#"{"topic":3}"#, Err("invalid type: integer `3`"));
        check_parse("query_topic_events", r#"{"topic":"D1:t1","k":3}"#, Err("unknown field `k`"));
        check_parse(
            "query_event_context",
            r#"{"event_id":"  "}"#,
            Err("`event_id` must not be empty"),
        );
        check_parse("query_event_context", "", Err("missing field `event_id`"));
        check_parse("query_memgas", r#"{"query":"x","k":50}"#, Err("`k` must be between 1 and 10"));
        check_parse("query_memgas", r#"{"query":"x","k":"two"}"#, Err("invalid type: string"));
        let error = Tool::parse("edges_by_tag", "{").err();
        let text = error.map(|error| error.to_tool_result()).unwrap_or_default();
        let value: Value = serde_json::from_str(&text).unwrap_or_default();
        assert!(value["error"].as_str().is_some_and(|text| text.contains("edges_by_tag")));
    }

    #[test]
    fn specs_cover_every_tool_with_described_arguments() {
        assert_eq!(Tool::specs(false).len(), 7);
        let specs = Tool::specs(true);
        let names: Vec<&str> = specs.iter().map(|spec| spec.name.as_str()).collect();
        assert_eq!(names[..7], TOOL_NAMES);
        assert_eq!(names[7], MEMGAS_TOOL);
        for spec in &specs {
            assert!(spec.description.len() > 40, "{} lacks a description", spec.name);
            let properties = spec.parameters["properties"].as_object().cloned().unwrap_or_default();
            assert!(!properties.is_empty());
            for (argument, schema) in properties {
                assert!(schema["type"] == "string" || schema["type"] == "integer");
                let description = schema["description"].as_str().unwrap_or_default();
                assert!(!description.is_empty(), "{}.{argument} lacks a description", spec.name);
            }
            // Every required argument is a declared property.
            for required in spec.parameters["required"].as_array().cloned().unwrap_or_default() {
                assert!(
                    spec.parameters["properties"].get(required.as_str().unwrap_or("")).is_some()
                );
            }
        }
    }
}
