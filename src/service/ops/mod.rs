//! The memory service's operations, one file each: a closed set that every door (HTTP in
//! `serve`, MCP in `serve::mcp`) reads from [`OPERATIONS`].
//!
//! Each operation's file holds its request (the one parser, whose errors name the field, and
//! the one body schema, which the OpenAPI document publishes and [`schema::Validator`] holds the
//! body to), its `run` (the access checks and the service calls) and its reply. A door only
//! turns its own input into a request (a path, a query, a body, MCP arguments) and the reply
//! or the [`ApiError`] into its own output (a status and JSON, a tool result).
//!
//! The errors are the doors' one error ([`ApiError`]: a code that fixes the HTTP status, the
//! field to fix, a message); who may do what is [`Access`].

mod common;
pub(crate) use common::{access, fields, http, schema};

pub(crate) mod add;
pub(crate) mod add_batch;
pub(crate) mod ask;
pub(crate) mod correct;
pub(crate) mod facts;
pub(crate) mod forget;
pub(crate) mod forget_message;
pub(crate) mod history;
pub(crate) mod job;
pub(crate) mod jobs;
pub(crate) mod list;
pub(crate) mod search;
pub(crate) mod show;
pub(crate) mod undo;

pub(crate) use access::Access;
pub(crate) use common::error::{ApiError, ErrorBody, ErrorCode, ErrorDetail};
pub(crate) use http::Route;

use std::sync::Arc;

use futures::future::BoxFuture;
use serde::Serialize;
use serde_json::{Map, Value};

/// The service every door runs the operations on.
pub type Service = super::MemoryService<crate::llm::Client, super::OwnEmbedder>;

/// A request body or MCP arguments: a JSON object.
pub(crate) type Body = Map<String, Value>;

/// One operation as the doors see it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Operation {
    /// Its name (the module's).
    pub(crate) name: &'static str,
    /// Its HTTP routes (the conversation route and, for an operation over a user's
    /// conversations too, the user route).
    pub(crate) routes: &'static [Route],
    /// Its MCP tool, if it has one.
    pub(crate) tool: Option<McpTool>,
}

/// An MCP tool: what the MCP door lists (its name, the description and input schema a model
/// reads, its hints) and what it runs.
#[derive(Clone, Copy)]
pub(crate) struct McpTool {
    pub(crate) name: &'static str,
    pub(crate) description: &'static str,
    pub(crate) hints: Hints,
    /// Its input schema.
    pub(crate) input: fn() -> Map<String, Value>,
    /// Reads its arguments and runs the operation.
    pub(crate) call: McpCall,
}

impl std::fmt::Debug for McpTool {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("McpTool").field("name", &self.name).finish_non_exhaustive()
    }
}

/// What a tool tells a client about its effects (none reaches outside the memory).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hints {
    /// Changes nothing.
    Reads,
    /// Changes the memory.
    Writes { destructive: bool, idempotent: bool },
}

/// A tool's run: the arguments in, the reply (as JSON) out.
pub(crate) type McpCall =
    for<'a> fn(&'a Arc<Service>, &'a Access, Body) -> BoxFuture<'a, Result<Called, ApiError>>;

/// What a tool call answers: the operation's reply, and whether to flag it as an error (an add
/// that left sessions unbuilt, an ask whose loop failed: the reply says what failed).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Called {
    pub(crate) reply: Value,
    pub(crate) failed: bool,
}

impl Called {
    /// `reply` as JSON, flagged when `failed`.
    pub(crate) fn new(reply: impl Serialize, failed: bool) -> Result<Self, ApiError> {
        Ok(Self { reply: to_json(reply)?, failed })
    }
}

/// A required id in MCP arguments, checked against the id rule and taken out of them (the body
/// left is the HTTP route's).
pub(crate) fn take_id(
    arguments: &mut Body,
    field: &str,
    kind: crate::names::NameKind,
) -> Result<String, ApiError> {
    let id =
        fields::name(arguments, field, kind)?.ok_or_else(|| ApiError::bad(field, "missing"))?;
    arguments.remove(field);
    Ok(id)
}

/// Every operation, in the order the OpenAPI document lists their routes within each
/// collection (`/v1/conversations`, then `/v1/users`, …; MCP lists its tools by name).
pub(crate) const OPERATIONS: &[Operation] = &[
    list::OPERATION,
    add_batch::OPERATION,
    show::OPERATION,
    forget::OPERATION,
    add::OPERATION,
    forget_message::OPERATION,
    search::OPERATION,
    ask::OPERATION,
    facts::OPERATION,
    correct::OPERATION,
    history::OPERATION,
    undo::OPERATION,
    job::OPERATION,
    jobs::OPERATION,
];

/// Every request schema compiles (a bug in an operation otherwise): checked when a door opens.
pub(crate) fn check_schemas() -> Result<(), String> {
    add::VALIDATOR.compiled()?;
    add_batch::VALIDATOR.compiled()?;
    search::VALIDATOR.compiled()?;
    ask::VALIDATOR.compiled()?;
    correct::VALIDATOR.compiled()
}

/// Whether the table holds: each operation once, each method and path once, each path
/// placeholder one with a rule (checked when the HTTP door opens).
pub(crate) fn check_routes(table: &[Operation]) -> Result<(), String> {
    let (mut names, mut routes) =
        (std::collections::BTreeSet::new(), std::collections::BTreeSet::new());
    for operation in table {
        if !names.insert(operation.name) {
            return Err(format!("operation {} is in the table twice", operation.name));
        }
        for route in operation.routes {
            http::check_placeholders(route)?;
            if !routes.insert((route.method, route.path)) {
                return Err(format!("{route:?} is in the table twice"));
            }
        }
    }
    Ok(())
}

/// `value` as JSON (an operation's reply for a door that sends JSON).
pub(crate) fn to_json(value: impl Serialize) -> Result<Value, ApiError> {
    serde_json::to_value(value).map_err(|error| {
        super::ServiceError::Other(anyhow::anyhow!("encoding the answer: {error}")).into()
    })
}

/// A required string field with a non-whitespace character.
pub(crate) fn required_text(map: &Body, field: &str) -> Result<String, ApiError> {
    match map.get(field) {
        Some(Value::String(text)) if !text.trim().is_empty() => Ok(text.clone()),
        Some(Value::String(_)) => Err(ApiError::bad(field, "must not be empty")),
        Some(_) => Err(ApiError::bad(field, "expected a string")),
        None => Err(ApiError::bad(field, "missing")),
    }
}
