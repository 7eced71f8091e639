//! The memory service as MCP tools (the official Rust SDK, `rmcp`), over standard input and
//! output (`mragent mcp`, [`serve_stdio`]) or streamable HTTP at `/mcp` of `serve`
//! (`http_service`, behind the same bearer token as the rest of the API).
//!
//! Six tools: `add_messages`, `search_memory`, `ask_memory`, `list_conversations`,
//! `show_conversation`, `forget`. They are the HTTP API's operations with its request parsing:
//! a tool takes the JSON body of the matching route plus the path's ids (`conversation`,
//! `user`, `message`), reads it with the same parsers (`AddRequest::parse`, …, `fields::…`),
//! holds it to the same published request schema (`openapi::Validators`), calls the same
//! [`MemoryService`](crate::service::MemoryService) method, and answers the same JSON shape.
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
use serde::Serialize;
use serde_json::Value;

use super::api::{
    AddRequest, AskRequest, ConversationList, Deleted, ErrorBody, ForgetMessageReply, SearchReply,
    SearchRequest,
};
use super::openapi::Validators;
use super::scoped::UserSearchReply;
use super::{Access, ApiError, SchemaError, ServeOptions, Service, fields};
use crate::names::NameKind;
use crate::service::{Scope, ServiceError, Waited};
use crate::store::StoreError;

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
    /// The request schemas of the HTTP API, compiled (`openapi::Validators`).
    validators: Arc<Validators>,
    tool_router: ToolRouter<Self>,
}

/// A tool's answer: a JSON value (the HTTP API's shape), or its error.
type Answer = Result<Value, ApiError>;

impl MemoryTools {
    /// The tools over `service`.
    pub fn new(service: Arc<Service>) -> Result<Self, SchemaError> {
        let validators = Arc::new(Validators::new(&super::document())?);
        Ok(Self { service, validators, tool_router: Self::tool_router() })
    }
}

#[tool_router]
impl MemoryTools {
    #[tool(
        name = "add_messages",
        description = "Store messages of a conversation in long-term memory and build its \
            memory: a model rewrites, keywords and embeds each new session, so this takes a \
            while (seconds per new session, longer for many). Use it to remember what was said. \
            Creates the conversation on its first add. Re-adding messages already stored does \
            nothing, so retrying is safe. Returns what was stored and built (`new_messages`, \
            `duplicates`, `built_sessions`); sessions that failed to build are listed in \
            `failed_sessions` (the result is then flagged as an error: the messages are stored, \
            call again with the same messages to build them). A build that outlasts the bounded \
            wait (25 s by default) returns what was stored and its `job` instead; the build \
            goes on, and search says how many sessions are still pending.",
        input_schema = schema::input::<schema::Add>(),
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn add_messages(&self, arguments: JsonObject, extensions: Extensions) -> CallToolResult {
        let answer = self.add(arguments, &access(&extensions)).await;
        let incomplete = answer.as_ref().is_ok_and(|report| {
            report["failed_sessions"].as_array().is_some_and(|failed| !failed.is_empty())
        });
        reply(answer, incomplete)
    }

    #[tool(
        name = "search_memory",
        description = "Find the stored lines most relevant to a query: ranked messages, each \
            with its conversation, message `id`, speaker, date and text. Fast (no chat model). \
            Use it to look things up, to see exact wording and dates, or to find a message id \
            (for `forget`); to get an answer to a question that needs several facts combined \
            or reasoned over, use ask_memory instead. Scope: one conversation (`conversation`) \
            or all of a user's (`user`); filters: speaker, time range, tags.",
        input_schema = schema::input::<schema::Search>(),
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn search_memory(&self, arguments: JsonObject, extensions: Extensions) -> CallToolResult {
        reply(self.search(arguments, &access(&extensions)).await, false)
    }

    #[tool(
        name = "ask_memory",
        description = "Answer a question from memory: an answering agent searches the \
            conversation's memory graph over several rounds (model calls: seconds to a minute) \
            and returns `answer` with the `supporting` lines it rests on. Use it for questions \
            that combine facts or reason about time (`When did…`, `What changed after…`, `How \
            many…`); for a plain lookup, search_memory is faster. Scope: one conversation or \
            all of a user's; `as_of` answers as known at a past time. A failed answer loop is \
            flagged as an error, its report says why.",
        input_schema = schema::input::<schema::Ask>(),
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn ask_memory(&self, arguments: JsonObject, extensions: Extensions) -> CallToolResult {
        let answer = self.ask(arguments, &access(&extensions)).await;
        let failed = answer.as_ref().is_ok_and(|report| report["ok"] == Value::Bool(false));
        reply(answer, failed)
    }

    #[tool(
        name = "list_conversations",
        description = "List the stored conversations: each one's `id`, user, agent, number of \
            messages and sessions (and how many are built), first and last message time. Use \
            it to find conversation ids; `user` keeps only one user's.",
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
        description = "One conversation's summary, as list_conversations gives it: user, \
            agent, messages, sessions and built sessions, first and last message time. An \
            unknown id is an error (`unknown_conversation`).",
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
        description = "Delete from memory. Without `message`: the whole conversation and \
            everything stored for it, for good. With `message` (a message id from \
            search_memory or ask_memory): only that message; its session is then rebuilt from \
            the messages left, which calls the model and can take a while.",
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
    /// `add_messages`: `POST /v1/conversations/{id}/messages`.
    async fn add(&self, arguments: JsonObject, access: &Access) -> Answer {
        access.write()?;
        let (conversation, request) = parse_add(arguments, &self.validators)?;
        let AddRequest { messages, mut scope, wait } = request;
        access.add(&self.service, &conversation, &mut scope).await?;
        if wait {
            // The same bounded wait as over HTTP (`MRAGENT_ADD_WAIT`): a build still going on at
            // the bound returns what was stored and its job, and the build goes on.
            let bound = self.service.settings().add_wait;
            match self.service.add_waiting(&conversation, scope, messages, bound).await? {
                Waited::Done(report) => json(*report),
                Waited::Building(queued) => json(*queued),
            }
        } else {
            json(self.service.add_queued(&conversation, scope, messages).await?)
        }
    }

    /// `search_memory`: `POST /v1/conversations/{id}/search` or `POST /v1/users/{user}/search`.
    async fn search(&self, arguments: JsonObject, access: &Access) -> Answer {
        let (scope, request) = parse_search(arguments, &self.validators)?;
        access.scope(&self.service, &scope).await?;
        let k = request.k as usize;
        let hits = self.service.search_scoped(&scope, &request.query, k, &request.filters).await?;
        let pending_sessions = self.service.pending_sessions(&scope).await?;
        let query = request.query;
        match scope {
            Scope::Conversation(conversation) => {
                json(SearchReply { conversation, query, hits, pending_sessions })
            }
            Scope::User(user) => json(UserSearchReply { user, query, hits, pending_sessions }),
        }
    }

    /// `ask_memory`: `POST /v1/conversations/{id}/ask` or `POST /v1/users/{user}/ask`, never
    /// streamed.
    async fn ask(&self, arguments: JsonObject, access: &Access) -> Answer {
        let (scope, request) = parse_ask(arguments, &self.validators)?;
        access.scope(&self.service, &scope).await?;
        let as_of = request.as_of.as_deref();
        json(self.service.ask_scoped(&scope, &request.question, as_of, None).await?)
    }

    /// `list_conversations`: `GET /v1/conversations`, optionally one user's.
    async fn list(&self, arguments: JsonObject, access: &Access) -> Answer {
        let user = fields::name(&arguments, "user", NameKind::User)?;
        let mut conversations = access.filter(self.service.list().await?);
        if let Some(user) = user {
            conversations.retain(|conversation| conversation.user.as_ref() == Some(&user));
        }
        json(ConversationList { conversations })
    }

    /// `show_conversation`: `GET /v1/conversations/{id}`.
    async fn show(&self, mut arguments: JsonObject, access: &Access) -> Answer {
        let id = required_id(&mut arguments, "conversation", NameKind::Conversation)?;
        access.conversation(&self.service, &id).await?;
        let (store, lookup) = (self.service.store().clone(), id.clone());
        let info = tokio::task::spawn_blocking(move || store.info(&lookup))
            .await
            .map_err(|error| ServiceError::Other(error.into()))?
            .map_err(ServiceError::Store)?;
        match info {
            Some(info) => json(info),
            None => Err(ServiceError::Store(StoreError::UnknownConversation(id)).into()),
        }
    }

    /// `forget`: `DELETE /v1/conversations/{id}` or
    /// `DELETE /v1/conversations/{id}/messages/{message}`, logged as `actor`'s.
    async fn forget_in(&self, arguments: JsonObject, access: &Access) -> Answer {
        access.write()?;
        let (conversation, message) = parse_forget(arguments)?;
        access.conversation(&self.service, &conversation).await?;
        match (conversation, message) {
            (conversation, Some(message)) => {
                let (forgotten, rebuilt) =
                    self.service.forget_message(&conversation, &message, &access.actor()).await?;
                json(ForgetMessageReply { forgotten, rebuilt })
            }
            (conversation, None) => {
                json(Deleted { deleted: self.service.forget(&conversation).await? })
            }
        }
    }
}

/// The arguments of `add_messages`: the conversation, then the body of
/// `POST /v1/conversations/{id}/messages`, read and checked as that route does.
fn parse_add(
    mut arguments: JsonObject,
    validators: &Validators,
) -> Result<(String, AddRequest), ApiError> {
    let conversation = required_id(&mut arguments, "conversation", NameKind::Conversation)?;
    let whole = Value::Object(arguments.clone());
    let request = AddRequest::parse(arguments)?;
    crate::service::check_limits(&request.messages)?;
    validators.add(&whole)?;
    Ok((conversation, request))
}

/// The arguments of `search_memory`: the scope, then the body of a search. With `user`, the
/// scope is the user's conversations and `conversation` the body's filter; without, the
/// conversation is the scope.
fn parse_search(
    mut arguments: JsonObject,
    validators: &Validators,
) -> Result<(Scope, SearchRequest), ApiError> {
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
    let request = SearchRequest::parse(&arguments)?;
    validators.search(&Value::Object(arguments))?;
    Ok((scope, request))
}

/// The arguments of `ask_memory`: a conversation or a user, then the body of an ask.
fn parse_ask(
    mut arguments: JsonObject,
    validators: &Validators,
) -> Result<(Scope, AskRequest), ApiError> {
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
    let request = AskRequest::parse(&arguments)?;
    validators.ask(&Value::Object(arguments))?;
    Ok((scope, request))
}

/// The arguments of `forget`: the conversation and maybe one of its messages.
fn parse_forget(mut arguments: JsonObject) -> Result<(String, Option<String>), ApiError> {
    let conversation = required_id(&mut arguments, "conversation", NameKind::Conversation)?;
    Ok((conversation, fields::name(&arguments, "message", NameKind::Message)?))
}

/// A required id argument, checked against the id rule and taken out of `arguments`.
fn required_id(
    arguments: &mut JsonObject,
    field: &str,
    kind: NameKind,
) -> Result<String, ApiError> {
    let id =
        fields::name(arguments, field, kind)?.ok_or_else(|| ApiError::bad(field, "missing"))?;
    arguments.remove(field);
    Ok(id)
}

fn json(value: impl Serialize) -> Answer {
    serde_json::to_value(value).map_err(|error| {
        ServiceError::Other(anyhow::anyhow!("encoding the answer: {error}")).into()
    })
}

/// The tool result: the answer as JSON (text and structured content), flagged `isError` when
/// `failed`; an error as the HTTP API's error body, flagged `isError`.
fn reply(answer: Answer, failed: bool) -> CallToolResult {
    match answer {
        Ok(value) if failed => CallToolResult::structured_error(value),
        Ok(value) => CallToolResult::structured(value),
        Err(error) => {
            let detail = error.detail;
            tracing::debug!(code = ?detail.code, field = %detail.field, message = %detail.message, "MCP tool error");
            let body = ErrorBody { error: detail };
            CallToolResult::structured_error(serde_json::to_value(body).unwrap_or(Value::Null))
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
