//! `add`: store messages in one conversation (created on its first add) and build their new
//! sessions. `POST /v1/conversations/{id}/messages`; MCP `add_messages`.
//!
//! The one `wait` branch of every add ([`store`], which the batch add calls per entry too):
//! waiting, the build runs at once and the add answers when it ends, or with its job when it
//! outlasts the bound (`MRAGENT_ADD_WAIT`); not waiting, the messages are stored with a job
//! that builds them in the background.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use futures::future::BoxFuture;
use serde::Serialize;
use serde_json::{Value, json};
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, Schema};
use utoipa::{PartialSchema, ToSchema};

use super::http::{Answer, BODY_ERRORS, HttpReply, HttpRequest, Route, reply, route, typed};
use super::schema::{Message, Validator, name_schema, tags_schema, tool, wait_schema};
use super::{Access, ApiError, Body, Called, Hints, McpTool, Operation, Service, fields, take_id};
use crate::names::{MAX_MESSAGE_CHARS, MAX_MESSAGES_PER_ADD, MAX_NAME_CHARS, NameKind};
use crate::service::{AddReport, Queued, ServiceError, Waited};
use crate::store::AddScope;

pub(crate) const OPERATION: Operation = Operation {
    name: "add",
    routes: &[Route {
        body: Some(typed::<AddRequest>()),
        ..route(
            "post",
            "/v1/conversations/{id}/messages",
            "add",
            &[
                reply(
                    200,
                    "what the add stored and built (idempotent: only new sessions are built)",
                    typed::<AddReport>(),
                ),
                reply(
                    202,
                    "with `wait: false`, or when the build outlasts the add's bounded wait \
                     (`MRAGENT_ADD_WAIT`, 25 s by default): what the add stored, and the job that \
                     builds it in the background",
                    typed::<Queued>(),
                ),
            ],
            BODY_ERRORS,
            http,
        )
    }],
    tool: Some(TOOL),
};

/// The MCP tool.
pub(crate) const TOOL: McpTool = McpTool {
    name: "add_messages",
    description: "Store messages of a conversation in long-term memory and build its \
        memory: a model rewrites, keywords and embeds each new session, so this takes a \
        while (seconds per new session, longer for many). Use it to remember what was said. \
        Creates the conversation on its first add. Re-adding messages already stored does \
        nothing, so retrying is safe. Returns what was stored and built (`new_messages`, \
        `duplicates`, `built_sessions`); sessions that failed to build are listed in \
        `failed_sessions` (the result is then flagged as an error: the messages are stored, \
        call again with the same messages to build them). A build that outlasts the bounded \
        wait (25 s by default) returns what was stored and its `job` instead; the build \
        goes on, and search says how many sessions are still pending.",
    hints: Hints::Writes { destructive: false, idempotent: true },
    input,
    call,
};

/// The body of an add.
#[derive(Debug, Clone)]
pub(crate) struct AddRequest {
    /// The messages, parsed.
    pub(crate) messages: Vec<crate::convo::Message>,
    /// Who the conversation belongs to, and the messages' tags.
    pub(crate) scope: AddScope,
    /// Whether to answer only once the sessions are built.
    pub(crate) wait: bool,
}

impl PartialSchema for AddRequest {
    fn schema() -> RefOr<Schema> {
        AddRequest::object().into()
    }
}

impl ToSchema for AddRequest {}

/// The compiled body schema.
pub(crate) static VALIDATOR: LazyLock<Validator> = LazyLock::new(Validator::of::<AddRequest>);

impl AddRequest {
    /// The add body's object schema (a batch entry extends it with `conversation`).
    pub(crate) fn object() -> ObjectBuilder {
        let messages = ArrayBuilder::new()
            .items(Message::schema())
            .min_items(Some(1))
            .max_items(Some(MAX_MESSAGES_PER_ADD));
        ObjectBuilder::new()
            .property("messages", messages)
            .property("wait", wait_schema())
            .property(
                "user",
                name_schema("the user the conversation belongs to (set when it is created)"),
            )
            .property(
                "agent",
                name_schema("the agent the conversation belongs to (set when it is created)"),
            )
            .property(
                "tags",
                tags_schema("tags every message of this add carries (search filters on them)"),
            )
            .required("messages")
    }

    /// The body's fields, each checked on its own (errors name the field), and the size
    /// limits (the service's own message, the one the CLI gives).
    pub(crate) fn parse(mut map: Body) -> Result<Self, ApiError> {
        let items = match map.remove("messages") {
            Some(Value::Array(items)) => items,
            Some(_) => return Err(ApiError::bad("messages", "expected an array of messages")),
            None => return Err(ApiError::bad("messages", "missing")),
        };
        let messages = crate::convo::parse_values(items)
            .map_err(|error| ApiError::bad(error.field(), error.to_string()))?;
        let scope = AddScope {
            user: fields::name(&map, "user", NameKind::User)?,
            agent: fields::name(&map, "agent", NameKind::User)?,
            tags: fields::tags(&map)?,
        };
        let wait = fields::flag(&map, "wait")?.unwrap_or(true);
        crate::service::check_limits(&messages)?;
        Ok(Self { messages, scope, wait })
    }

    /// The body: its fields, then the whole body against the published schema.
    pub(crate) fn read(map: Body) -> Result<Self, ApiError> {
        let whole = Value::Object(map.clone());
        let request = Self::parse(map)?;
        VALIDATOR.check(&whole)?;
        Ok(request)
    }
}

/// What an add answers: built (HTTP 200), or still building with its job (202).
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub(crate) enum AddReply {
    Done(Box<AddReport>),
    Building(Box<Queued>),
}

impl AddReply {
    /// Whether the build goes on in the background.
    pub(crate) fn building(&self) -> bool {
        matches!(self, Self::Building(_))
    }

    /// Whether sessions failed to build (the messages are stored; the same add retries them).
    pub(crate) fn incomplete(&self) -> bool {
        matches!(self, Self::Done(report) if !report.failed_sessions.is_empty())
    }
}

/// Adds `request` to conversation `id` for `access`.
pub(crate) async fn run(
    service: &Arc<Service>,
    access: &Access,
    id: &str,
    request: AddRequest,
) -> Result<AddReply, ApiError> {
    run_within(service, access, id, request, Wait::AtMost(service.settings().add_wait)).await
}

/// Adds `request` to conversation `id` for `access`, waiting for the build as `bound` says
/// when the request waits (a request at most its bound; the command line until it ends).
pub(crate) async fn run_within(
    service: &Arc<Service>,
    access: &Access,
    id: &str,
    request: AddRequest,
    bound: Wait,
) -> Result<AddReply, ApiError> {
    let AddRequest { messages, mut scope, wait } = request;
    access.add(service, id, &mut scope).await?;
    let wait = if wait { bound } else { Wait::No };
    Ok(store(service, id, scope, messages, wait).await?)
}

/// How long an add waits for its build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    /// Until it ends (the command line: the user asked to wait).
    Whole,
    /// At most this long, then it answers with the job (a request: gateways cut long ones).
    AtMost(Duration),
    /// Not at all: a job builds it in the background.
    No,
}

/// The one `wait` branch of every add (HTTP, MCP, batch, command line).
pub(crate) async fn store(
    service: &Arc<Service>,
    id: &str,
    scope: AddScope,
    messages: Vec<crate::convo::Message>,
    wait: Wait,
) -> Result<AddReply, ServiceError> {
    Ok(match wait {
        Wait::Whole => AddReply::Done(Box::new(service.add_scoped(id, scope, messages).await?)),
        Wait::AtMost(bound) => match service.add_waiting(id, scope, messages, bound).await? {
            Waited::Done(report) => AddReply::Done(report),
            Waited::Building(queued) => AddReply::Building(queued),
        },
        Wait::No => AddReply::Building(Box::new(service.add_queued(id, scope, messages).await?)),
    })
}

/// The tool's input: the conversation, then the body of an add.
fn input() -> Body {
    let message = json!({
        "description": "One message.",
        "type": "object",
        "properties": {
            "speaker": tool::text(
                "Who said it, e.g. `Alice` or `assistant` (`name` or `role` are accepted instead).",
                MAX_NAME_CHARS,
            ),
            "text": tool::text(
                "What was said, up to 16,000 characters (`content` is accepted instead, also as \
                 OpenAI-style text parts).",
                MAX_MESSAGE_CHARS,
            ),
            "timestamp": tool::time(
                "When it was said: RFC 3339 (`2024-05-03T14:00:00Z`), `YYYY-MM-DD HH:MM[:SS]` \
                 (UTC) or `YYYY-MM-DD` (`time`, `date` or `created_at` are accepted instead). \
                 Messages are kept in time order; a gap of hours starts a new session. Without \
                 it, a message follows the conversation's last one.",
            ),
            "session": {
                "description": "Your own session id (a string or an integer): messages with the \
                    same one form a session (`session_id` is accepted instead).",
                "type": ["string", "integer"],
                "minLength": 1,
            },
        },
        "required": ["speaker", "text"],
    });
    tool::input(
        &["conversation", "messages"],
        json!({
            "conversation": tool::id(
                "The conversation's id, e.g. `support-2024-05-03` or `alice:chat`: 1-128 ASCII \
                 letters, digits and . _ - : @ +, starting with a letter or digit, no `..`. \
                 Created by its first add.",
            ),
            "messages": {
                "description": "The messages, in any order (each is placed by its timestamp; one \
                    already stored is skipped).",
                "type": "array",
                "items": message,
                "minItems": 1,
                "maxItems": MAX_MESSAGES_PER_ADD,
            },
            "user": tool::id(
                "The user the conversation belongs to (an id, as `conversation`): set when the \
                 conversation is created; later adds may omit it but not name another. Search \
                 and ask can then cover all of a user's conversations.",
            ),
            "agent": tool::id("The agent the conversation belongs to (an id), set like `user`."),
            "tags": tool::tags(
                "Tags every message of this add carries, e.g. `{\"topic\": \"travel\"}` (ids \
                 to ids, at most 32); search can keep only lines with given tags.",
            ),
            "wait": {
                "description": "`true` (the default): return when the memory is built, or with \
                    its job when the build outlasts the bounded wait (25 s by default). \
                    `false`: store the messages and return at once with a background job; \
                    search then answers over what is built so far and says how many sessions \
                    are still pending.",
                "type": ["boolean", "null"],
                "default": null,
            },
        }),
    )
}

/// The tool's arguments: the conversation, then the body of an add.
pub(crate) fn parse_tool(mut arguments: Body) -> Result<(String, AddRequest), ApiError> {
    let conversation = take_id(&mut arguments, "conversation", NameKind::Conversation)?;
    Ok((conversation, AddRequest::read(arguments)?))
}

/// The tool: flagged when sessions failed to build.
fn call<'a>(
    service: &'a Arc<Service>,
    access: &'a Access,
    arguments: Body,
) -> BoxFuture<'a, Result<Called, ApiError>> {
    Box::pin(async move {
        access.write()?;
        let (conversation, request) = parse_tool(arguments)?;
        let added = run(service, access, &conversation, request).await?;
        let incomplete = added.incomplete();
        Called::new(added, incomplete)
    })
}

fn http<'a>(service: &'a Arc<Service>, access: &'a Access, request: HttpRequest) -> Answer<'a> {
    Box::pin(async move {
        let id = request.path.conversation()?;
        let body = AddRequest::read(request.body?)?;
        let added = run(service, access, &id, body).await?;
        HttpReply::with(added.building(), added)
    })
}
