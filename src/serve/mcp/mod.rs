//! The memory service as MCP tools (the official Rust SDK, `rmcp`), over standard input and
//! output (`mragent mcp`, [`serve_stdio`]) or streamable HTTP at `/mcp` of `serve`
//! (`http_service`, behind the same bearer token as the rest of the API).
//!
//! Six tools: `add_messages`, `search_memory`, `ask_memory`, `list_conversations`,
//! `show_conversation`, `forget`. They are the HTTP API's operations with its request parsing:
//! a tool takes the JSON body of the matching route plus the path's ids (`conversation`,
//! `user`, `message`), and runs the same operation (`service::ops`): the same parser, the same
//! published request schema, the same access checks and service calls, the same JSON reply.
//! The input schemas the tools list are in `schema`.
//!
//! Errors are tool results, never JSON-RPC errors: `isError: true` with the HTTP API's error
//! body `{"error": {"code", "field", "message"}}` (`field` names what to fix), so the model
//! sees the message and can correct its call. Bad input never reaches the store; an unknown
//! conversation is `unknown_conversation`; a failing endpoint is `internal` with its reason. An
//! add that left sessions unbuilt and an ask whose loop failed are flagged `isError` too, with
//! their report (it says what failed). Each tool call is handled on its own: an error or a
//! failure ends that call, not the server.

mod schema;

use std::sync::Arc;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::model::{
    CallToolResult, Extensions, Implementation, JsonObject, ServerCapabilities, ServerConfig,
};
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ServerHandler, ServiceExt as _, tool, tool_handler, tool_router};
use serde_json::Value;

use super::{SchemaError, ServeOptions, Service};
use crate::names::NameKind;
use crate::service::Scope;
use crate::service::ops::add::AddRequest;
use crate::service::ops::ask::AskRequest;
use crate::service::ops::list::ListRequest;
use crate::service::ops::search::SearchRequest;
use crate::service::ops::{self, Access, ApiError, Body, fields, to_json};

/// What the server tells a client about itself (clients show it to the model).
const INSTRUCTIONS: &str = "Long-term memory of conversations. Store what was said with \
    add_messages (it builds the memory with a model: seconds per new session). Look it up with \
    search_memory (fast: ranked lines with their dates and ids) or ask_memory (an answering \
    agent reads the memory and answers, with the lines it used). list_conversations and \
    show_conversation tell what is stored; forget deletes a conversation or one message. Ids \
    (conversations, users, tags) are 1-128 ASCII letters, digits and . _ - : @ +, starting with \
    a letter or digit. A failed call returns isError with {\"error\": {\"code\", \"field\", \
    \"message\"}}: fix the named field and call again.";

/// The actor edits over stdio are logged as (over HTTP: the name of the request's token).
const STDIO_ACTOR: &str = "mcp";

/// The MCP server: the tools over one memory service.
#[derive(Clone)]
pub struct MemoryTools {
    service: Arc<Service>,
    tool_router: ToolRouter<Self>,
}

/// A tool's answer: a JSON value (the HTTP API's shape), or its error.
type Answer = Result<Value, ApiError>;

impl MemoryTools {
    /// The tools over `service`.
    pub fn new(service: Arc<Service>) -> Result<Self, SchemaError> {
        ops::check_schemas().map_err(SchemaError::request)?;
        let tool_router = Self::tool_router();
        ops::check_tools(listed_tools(&tool_router)).map_err(SchemaError::table)?;
        Ok(Self { service, tool_router })
    }
}

#[tool_router]
impl MemoryTools {
    #[tool(
        name = "add_messages",
        description = ops::add::TOOL.description,
        input_schema = schema::input::<schema::Add>(),
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn add_messages(&self, arguments: JsonObject, extensions: Extensions) -> CallToolResult {
        let added = self.add(arguments, &access(&extensions)).await;
        let incomplete = added.as_ref().is_ok_and(ops::add::Added::incomplete);
        reply(added.and_then(to_json), incomplete)
    }

    #[tool(
        name = "search_memory",
        description = ops::search::TOOL.description,
        input_schema = schema::input::<schema::Search>(),
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn search_memory(&self, arguments: JsonObject, extensions: Extensions) -> CallToolResult {
        reply(self.search(arguments, &access(&extensions)).await, false)
    }

    #[tool(
        name = "ask_memory",
        description = ops::ask::TOOL.description,
        input_schema = schema::input::<schema::Ask>(),
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn ask_memory(&self, arguments: JsonObject, extensions: Extensions) -> CallToolResult {
        let report = self.ask(arguments, &access(&extensions)).await;
        let failed = report.as_ref().is_ok_and(|report| !report.ok);
        reply(report.and_then(to_json), failed)
    }

    #[tool(
        name = "list_conversations",
        description = ops::list::TOOL.description,
        input_schema = schema::input::<schema::List>(),
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn list_conversations(
        &self,
        arguments: JsonObject,
        extensions: Extensions,
    ) -> CallToolResult {
        reply(self.list(arguments, &access(&extensions)).await, false)
    }

    #[tool(
        name = "show_conversation",
        description = ops::show::TOOL.description,
        input_schema = schema::input::<schema::Show>(),
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn show_conversation(
        &self,
        arguments: JsonObject,
        extensions: Extensions,
    ) -> CallToolResult {
        reply(self.show(arguments, &access(&extensions)).await, false)
    }

    #[tool(
        name = "forget",
        description = ops::forget::TOOL.description,
        input_schema = schema::input::<schema::Forget>(),
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = false)
    )]
    async fn forget(&self, arguments: JsonObject, extensions: Extensions) -> CallToolResult {
        reply(self.forget_in(arguments, &access(&extensions)).await, false)
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for MemoryTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(
                Implementation::new("mragent", env!("CARGO_PKG_VERSION"))
                    .with_title("mragent memory"),
            )
            .with_instructions(INSTRUCTIONS)
    }
}

impl MemoryTools {
    /// `add_messages`: `ops::add`.
    async fn add(&self, arguments: Body, access: &Access) -> Result<ops::add::Added, ApiError> {
        access.write()?;
        let (conversation, request) = parse_add(arguments)?;
        ops::add::run(&self.service, access, &conversation, request).await
    }

    /// `search_memory`: `ops::search`.
    async fn search(&self, arguments: Body, access: &Access) -> Answer {
        let (scope, request) = parse_search(arguments)?;
        to_json(ops::search::run(&self.service, access, scope, request).await?)
    }

    /// `ask_memory`: `ops::ask`, never streamed.
    async fn ask(
        &self,
        arguments: Body,
        access: &Access,
    ) -> Result<crate::service::AskReport, ApiError> {
        let (scope, request) = parse_ask(arguments)?;
        ops::ask::run(&self.service, access, &scope, &request, None).await
    }

    /// `list_conversations`: `ops::list`, optionally one user's.
    async fn list(&self, arguments: Body, access: &Access) -> Answer {
        let request = ListRequest::parse(&arguments)?;
        to_json(ops::list::run(&self.service, access, request).await?)
    }

    /// `show_conversation`: `ops::show`.
    async fn show(&self, mut arguments: Body, access: &Access) -> Answer {
        let id = required_id(&mut arguments, "conversation", NameKind::Conversation)?;
        to_json(ops::show::run(&self.service, access, &id).await?)
    }

    /// `forget`: `ops::forget`, or `ops::forget_message` with a `message`.
    async fn forget_in(&self, arguments: Body, access: &Access) -> Answer {
        access.write()?;
        match parse_forget(arguments)? {
            (conversation, Some(message)) => to_json(
                ops::forget_message::run(&self.service, access, &conversation, &message).await?,
            ),
            (conversation, None) => {
                to_json(ops::forget::run(&self.service, access, &conversation).await?)
            }
        }
    }
}

/// The arguments of `add_messages`: the conversation, then the body of an add.
fn parse_add(mut arguments: Body) -> Result<(String, AddRequest), ApiError> {
    let conversation = required_id(&mut arguments, "conversation", NameKind::Conversation)?;
    Ok((conversation, AddRequest::read(arguments)?))
}

/// The arguments of `search_memory`: the scope, then the body of a search. With `user`, the
/// scope is the user's conversations and `conversation` the body's filter; without, the
/// conversation is the scope.
fn parse_search(mut arguments: Body) -> Result<(Scope, SearchRequest), ApiError> {
    let scope = match fields::name(&arguments, "user", NameKind::User)? {
        Some(user) => {
            arguments.remove("user");
            Scope::User(user)
        }
        None => Scope::Conversation(required_id(
            &mut arguments,
            "conversation",
            NameKind::Conversation,
        )?),
    };
    Ok((scope, SearchRequest::read(arguments)?))
}

/// The arguments of `ask_memory`: a conversation or a user, then the body of an ask.
fn parse_ask(mut arguments: Body) -> Result<(Scope, AskRequest), ApiError> {
    let user = fields::name(&arguments, "user", NameKind::User)?;
    let conversation = fields::name(&arguments, "conversation", NameKind::Conversation)?;
    let scope = match (user, conversation) {
        (Some(_), Some(_)) => {
            return Err(ApiError::bad("user", "give either `conversation` or `user`, not both"));
        }
        (Some(user), None) => Scope::User(user),
        (None, Some(conversation)) => Scope::Conversation(conversation),
        (None, None) => {
            return Err(ApiError::bad(
                "conversation",
                "missing: give `conversation` (or `user` for all of a user's)",
            ));
        }
    };
    arguments.remove("user");
    arguments.remove("conversation");
    Ok((scope, AskRequest::read(arguments)?))
}

/// The arguments of `forget`: the conversation and maybe one of its messages.
fn parse_forget(mut arguments: Body) -> Result<(String, Option<String>), ApiError> {
    let conversation = required_id(&mut arguments, "conversation", NameKind::Conversation)?;
    Ok((conversation, ops::forget::parse_tool(&arguments)?))
}

/// The tools `router` lists: name and description.
fn listed_tools(router: &ToolRouter<MemoryTools>) -> Vec<(String, String)> {
    router
        .list_all()
        .into_iter()
        .map(|tool| (tool.name.to_string(), tool.description.unwrap_or_default().to_string()))
        .collect()
}

/// A required id argument, checked against the id rule and taken out of `arguments`.
fn required_id(arguments: &mut Body, field: &str, kind: NameKind) -> Result<String, ApiError> {
    let id =
        fields::name(arguments, field, kind)?.ok_or_else(|| ApiError::bad(field, "missing"))?;
    arguments.remove(field);
    Ok(id)
}

/// The tool result: the answer as JSON (text and structured content), flagged `isError` when
/// `failed`; an error as the HTTP API's error body, flagged `isError`.
fn reply(answer: Answer, failed: bool) -> CallToolResult {
    match answer {
        Ok(value) if failed => CallToolResult::structured_error(value),
        Ok(value) => CallToolResult::structured(value),
        Err(error) => {
            let detail = &error.detail;
            tracing::debug!(code = ?detail.code, field = %detail.field, message = %detail.message, "MCP tool error");
            CallToolResult::structured_error(
                serde_json::to_value(error.body()).unwrap_or(Value::Null),
            )
        }
    }
}

/// Who made the call and what it may reach: the HTTP request's token or key (the `authorize`
/// middleware puts it on the request, rmcp hands the request's parts to the tool), else the
/// stdio client (the operator who started `mragent mcp`: everything).
fn access(extensions: &Extensions) -> Access {
    match extensions.get::<axum::http::request::Parts>() {
        // Over HTTP every request passed `authorize`; parts without an access reach nothing.
        Some(parts) => parts.extensions.get::<Access>().cloned().unwrap_or_else(|| Access {
            scope: crate::store::KeyScope::Read,
            user: Some(String::new()),
            ..Access::admin("unknown")
        }),
        None => Access::admin(STDIO_ACTOR),
    }
}

/// Serves one client on standard input and output until it closes them or `shutdown`
/// resolves. Standard output carries only the protocol.
pub async fn serve_stdio(
    service: Arc<Service>,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    // Adds with `wait: false` are built in the background, as under `serve`.
    let runner = tokio::spawn(Arc::clone(&service).run_jobs(false));
    let _stop_runner = AbortOnDrop(runner);
    let tools = MemoryTools::new(service)?;
    let running = tools
        .serve(rmcp::transport::stdio_pipes())
        .await
        .map_err(|error| anyhow::anyhow!("starting the MCP session on stdio: {error}"))?;
    let stop = running.cancellation_token();
    tokio::select! {
        ended = running.waiting() => {
            let reason = ended.map_err(|error| anyhow::anyhow!("the MCP session failed: {error}"))?;
            tracing::info!(?reason, "MCP session ended");
        }
        () = shutdown => {
            tracing::info!("interrupted: ending the MCP session");
            stop.cancel();
        }
    }
    Ok(())
}

/// Aborts the task when dropped (the job runner ends with the stdio session).
struct AbortOnDrop(tokio::task::JoinHandle<crate::service::JobsRun>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The streamable-HTTP transport that `serve` mounts at `/mcp`, inside its guards.
///
/// Stateless (no `Mcp-Session-Id`; every POST is a whole exchange, answered as one JSON
/// body): a tool call needs nothing from earlier calls (the memory is in the store, not in
/// the session), so there is no session state to keep, lose on a restart, expire or leak
/// when a client never says goodbye; any `serve` process can answer any call, the bearer
/// token is checked on every request like the rest of the API, and no SSE stream is left open
/// to hold up a graceful shutdown. The server never calls the client back (no sampling, no
/// elicitation, no subscriptions), which is what sessions would be for.
///
/// The request body limit is the API's (`--max-body-bytes`). Without a token the `Host`
/// header must name a loopback address (rmcp's guard against DNS rebinding, for a local
/// server a web page could reach); with one, the token is the guard and any host may call.
pub(super) fn http_service(
    service: Arc<Service>,
    options: &ServeOptions,
) -> Result<StreamableHttpService<MemoryTools, NeverSessionManager>, SchemaError> {
    let tools = MemoryTools::new(service)?;
    let mut config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .with_max_request_body_bytes(options.max_body_bytes);
    if options.token.is_some() || !options.named_tokens.is_empty() {
        config = config.disable_allowed_hosts();
    }
    Ok(StreamableHttpService::new(
        move || Ok(tools.clone()),
        Arc::new(NeverSessionManager::default()),
        config,
    ))
}

#[cfg(test)]
mod tests;
