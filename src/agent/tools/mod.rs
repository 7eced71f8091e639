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
//! [`Tool::apply`] does no IO: when `query_event_keywords` finds keys with too many tags, it
//! hands them back as [`Applied::ScoreTags`], and `query_memgas` comes back as
//! [`Applied::Memgas`]; the async driver in `agent/tool_loop.rs` then calls the tool's own
//! `score_tags` (the model scores the tags) or `call` (the query is embedded).
//!
//! Layout: one file per tool, named after it, holding its name, its argument shapes
//! (`ARGUMENTS`, for the spec), its argument parsing, its execution and its result. This module
//! holds the shared types and the dispatch by variant; `spec` builds the schemas offered to the
//! model, `parse` the dispatch by name and the parsing steps every tool shares, `event_list`
//! the similarity cut of event lists, `compact` the shortening of repeated result lines.

mod args;
pub mod compact;
mod edges_by_tag;
mod event_list;
mod parse;
mod query_conversation_time;
mod query_event_context;
mod query_event_keywords;
mod query_memgas;
mod query_personal_aspect;
mod query_personal_information;
mod query_topic_events;
mod spec;
#[cfg(test)]
mod tests;

use std::collections::BTreeSet;

use serde_json::{Value, json};

pub(crate) use self::query_event_keywords::score_tags;
pub(crate) use self::query_memgas::call as call_memgas;
pub use self::query_memgas::{
    MEMGAS_DEFAULT_K, MEMGAS_MAX_K, MemgasQueryError, query_memgas, query_memgas_each,
};
use crate::ingest::SampleEmbeddings;
use crate::memory::MemoryGraph;
use crate::memory::query::{KeyTags, QueryError};
use crate::snapshot::MemgasMemory;

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
    edges_by_tag::NAME,
    query_conversation_time::NAME,
    query_event_keywords::NAME,
    query_event_context::NAME,
    query_personal_information::NAME,
    query_personal_aspect::NAME,
    query_topic_events::NAME,
];

/// The MemGAS tool, offered after the graph tools when the conversation has a MemGAS index.
pub const MEMGAS_TOOL: &str = query_memgas::NAME;

/// What the tools read: one conversation's memory, the question and its embedding.
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
    /// Tags a scored key keeps at most.
    pub tag_limit: usize,
    /// The question as retrieval calls see it (tag scoring).
    pub question: &'a str,
    /// The conversation's MemGAS index, if it has one (`query_memgas` is offered).
    pub memgas: Option<&'a MemgasMemory>,
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
    /// `query_event_keywords` found keys whose tags must be scored first: `score_tags`
    /// scores the tags of each key with more than `tag_max` tags and gives the result.
    ScoreTags {
        /// The event asked about.
        event_id: String,
        /// New keys with all their tags, in result order.
        keys: Vec<KeyTags>,
    },
    /// `query_memgas`: `call_memgas` embeds the query with the MemGAS index's embedder and
    /// gives the result.
    Memgas {
        /// Query text.
        query: String,
        /// Hits wanted.
        k: usize,
    },
}

impl Tool {
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
            Tool::EdgesByTag { .. } => edges_by_tag::NAME,
            Tool::QueryConversationTime { .. } => query_conversation_time::NAME,
            Tool::QueryEventKeywords { .. } => query_event_keywords::NAME,
            Tool::QueryEventContext { .. } => query_event_context::NAME,
            Tool::QueryPersonalInformation { .. } => query_personal_information::NAME,
            Tool::QueryPersonalAspect { .. } => query_personal_aspect::NAME,
            Tool::QueryTopicEvents { .. } => query_topic_events::NAME,
            Tool::QueryMemgas { .. } => query_memgas::NAME,
        }
    }

    /// Runs the tool against the memory. Unknown ids and names are errors the model reads.
    pub fn apply(
        &self,
        context: &ToolContext<'_>,
        state: &mut ToolState,
    ) -> Result<Applied, ToolError> {
        let graph = context.graph;
        let value = match self {
            Tool::EdgesByTag { key, tag } => edges_by_tag::apply(context, key, tag)?,
            Tool::QueryConversationTime { event_id } => {
                query_conversation_time::apply(graph, event_id)?
            }
            Tool::QueryEventKeywords { event_id } => {
                return query_event_keywords::apply(context, state, event_id);
            }
            Tool::QueryEventContext { event_id } => query_event_context::apply(graph, event_id)?,
            Tool::QueryPersonalInformation { person } => {
                query_personal_information::apply(graph, person)?
            }
            Tool::QueryPersonalAspect { person, aspect } => {
                query_personal_aspect::apply(graph, person, aspect)?
            }
            Tool::QueryTopicEvents { topic } => query_topic_events::apply(context, topic)?,
            Tool::QueryMemgas { query, k } => return query_memgas::apply(context, query, *k),
        };
        Ok(Applied::Done(value))
    }
}
