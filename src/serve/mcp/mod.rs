//! The memory service as MCP tools (the official Rust SDK, `rmcp`), over standard input and
//! output (`mragent mcp`, [`serve_stdio`]) or streamable HTTP at `/mcp` of `serve`
//! (`http_service`, behind the same bearer token as the rest of the API).
//!
//! One dispatcher over the operations' table (`service::ops::OPERATIONS`): the tools listed are
//! the table's (six: `add_messages`, `search_memory`, `ask_memory`, `list_conversations`,
//! `show_conversation`, `forget`), each with the name, description, input schema and hints its
//! operation's file gives, and a call runs that operation's tool entry: the JSON body of the
//! matching route plus the path's ids (`conversation`, `user`, `message`), read by the same
//! parser and held to the same published request schema, the same access checks and service
//! calls, the same JSON reply.
//!
//! Errors are tool results, never JSON-RPC errors: `isError: true` with the HTTP API's error
//! body `{"error": {"code", "field", "message"}}` (`field` names what to fix), so the model
//! sees the message and can correct its call. Bad input never reaches the store; an unknown
//! conversation is `unknown_conversation`; a failing endpoint is `internal` with its reason. An
//! add that left sessions unbuilt and an ask whose loop failed are flagged `isError` too, with
//! their report (it says what failed). Each tool call is handled on its own: an error or a
//! failure ends that call, not the server.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ErrorData, Extensions, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{RoleServer, ServerHandler, ServiceExt as _};
use serde_json::Value;

use super::{SchemaError, ServeOptions, Service};
use crate::service::ops::{self, Access, ApiError, Called, Hints};

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

/// The MCP server: the table's tools over one memory service.
#[derive(Clone)]
pub struct MemoryTools {
    service: Arc<Service>,
}

impl MemoryTools {
    /// The tools over `service`.
    pub fn new(service: Arc<Service>) -> Result<Self, SchemaError> {
        ops::check_schemas().map_err(SchemaError::request)?;
        Ok(Self { service })
    }
}

/// The table's tools, by name (the order clients list them in).
fn tools() -> Vec<(&'static ops::McpTool, Tool)> {
    let mut tools: Vec<_> = ops::OPERATIONS
        .iter()
        .filter_map(|operation| operation.tool.as_ref())
        .map(|tool| (tool, listed(tool)))
        .collect();
    tools.sort_by_key(|(tool, _)| tool.name);
    tools
}

/// A tool as clients see it.
fn listed(tool: &ops::McpTool) -> Tool {
    let hints = match tool.hints {
        Hints::Reads => ToolAnnotations::new().read_only(true),
        Hints::Writes { destructive, idempotent } => {
            ToolAnnotations::new().read_only(false).destructive(destructive).idempotent(idempotent)
        }
    };
    Tool::new(tool.name, tool.description, Arc::new((tool.input)()))
        .with_annotations(hints.open_world(false))
}

impl ServerHandler for MemoryTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(
                Implementation::new("mragent", env!("CARGO_PKG_VERSION"))
                    .with_title("mragent memory"),
            )
            .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools().into_iter().map(|(_, tool)| tool).collect()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        tools().into_iter().find(|(tool, _)| tool.name == name).map(|(_, listed)| listed)
    }

    /// Runs the named tool's operation; an unknown tool is a protocol error (as the MCP
    /// specification asks), every other failure a flagged result.
    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Some((tool, _)) = tools().into_iter().find(|(tool, _)| tool.name == request.name)
        else {
            return Err(ErrorData::invalid_params("tool not found", None));
        };
        let access = access(&context.extensions);
        let arguments = request.arguments.unwrap_or_default();
        let called = (tool.call)(&self.service, &access, arguments).await;
        Ok(CallToolResponse::Complete(reply(called)))
    }
}

/// The tool result: the reply as JSON (text and structured content), flagged `isError` when
/// it failed; an error as the HTTP API's error body, flagged `isError`.
fn reply(called: Result<Called, ApiError>) -> CallToolResult {
    match called {
        Ok(Called { reply, failed: true }) => CallToolResult::structured_error(reply),
        Ok(Called { reply, failed: false }) => CallToolResult::structured(reply),
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
