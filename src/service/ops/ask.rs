//! `ask`: an answer from memory (the answer loop, or one retrieval pass: `--answer`), over
//! one conversation or all of a user's. `POST /v1/conversations/{id}/ask`,
//! `POST /v1/users/{user}/ask` (JSON, or server-sent events with `stream: true`); MCP
//! `ask_memory` (never streamed).

use std::sync::{Arc, LazyLock};

use futures::StreamExt as _;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use serde::Serialize;
use serde_json::{Value, json};
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ObjectBuilder, Schema};
use utoipa::{PartialSchema, ToSchema};

use super::http::{Answer, BODY_ERRORS, HttpReply, HttpRequest, Reply, Route, route, typed};
use super::schema::{Validator, flag_schema, non_blank, time_schema, tool};
use super::{
    Access, ApiError, Body, Called, Hints, McpTool, Operation, Service, fields, required_text,
};
use crate::agent::events::LoopEvents;
use crate::names::NameKind;
use crate::service::{AskReport, Scope, ServiceError};

pub(crate) const OPERATION: Operation = Operation {
    name: "ask",
    routes: &[
        Route {
            body: Some(typed::<AskRequest>()),
            ..route(
                "post",
                "/v1/conversations/{id}/ask",
                "ask",
                &[Reply {
                    status: 200,
                    description: "the answer, its supporting lines and trace path; with \
                        `stream: true`, server-sent events: `started` (`{conversation, \
                        question}`), one `round` per loop step (kind `model`: the round's tool \
                        calls; kind `tools`: their results, summarised), then `answer` (the same \
                        report) or `error` (the error's `code`, `field`, `message`)",
                    body: typed::<AskReport>(),
                    events: true,
                }],
                BODY_ERRORS,
                http,
            )
        },
        Route {
            body: Some(typed::<AskRequest>()),
            ..route(
                "post",
                "/v1/users/{user}/ask",
                "user_ask",
                &[Reply {
                    status: 200,
                    description: "the answer over all the user's conversations (as `POST \
                        /v1/conversations/{id}/ask`); each supporting line names its conversation",
                    body: typed::<AskReport>(),
                    events: true,
                }],
                BODY_ERRORS,
                http,
            )
        },
    ],
    tool: Some(TOOL),
};

/// The MCP tool.
pub(crate) const TOOL: McpTool = McpTool {
    name: "ask_memory",
    description: "Answer a question from memory: an answering agent searches the \
        conversation's memory graph over several rounds (model calls: seconds to a minute) \
        and returns `answer` with the `supporting` lines it rests on. Use it for questions \
        that combine facts or reason about time (`When did…`, `What changed after…`, `How \
        many…`); for a plain lookup, search_memory is faster. Scope: one conversation or \
        all of a user's; `as_of` answers as known at a past time. A failed answer loop is \
        flagged as an error, its report says why.",
    hints: Hints::Reads,
    input,
    call,
};

/// The body of an ask.
#[derive(Debug, Clone)]
pub(crate) struct AskRequest {
    /// The question.
    pub(crate) question: String,
    /// Answer as server-sent events.
    pub(crate) stream: bool,
    /// Answer as known at this time (RFC 3339 UTC).
    pub(crate) as_of: Option<String>,
}

impl PartialSchema for AskRequest {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .property("question", non_blank("the question"))
            .property("stream", flag_schema("answer as server-sent events (default false)"))
            .property(
                "as_of",
                time_schema(
                    "answer from what was known at this time: later messages are invisible, \
                     facts valid then are current (a date: its end)",
                ),
            )
            .required("question")
            .into()
    }
}

impl ToSchema for AskRequest {}

/// The compiled body schema.
pub(crate) static VALIDATOR: LazyLock<Validator> = LazyLock::new(Validator::of::<AskRequest>);

impl AskRequest {
    /// The body's fields, each checked on its own (errors name the field).
    pub(crate) fn parse(map: &Body) -> Result<Self, ApiError> {
        let question = required_text(map, "question")?;
        let stream = match map.get("stream") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(stream)) => *stream,
            Some(_) => return Err(ApiError::bad("stream", "expected a boolean")),
        };
        Ok(Self { question, stream, as_of: fields::time(map, "as_of", true)? })
    }

    /// The body: its fields, then the whole body against the published schema.
    pub(crate) fn read(map: Body) -> Result<Self, ApiError> {
        VALIDATOR.read(map, Self::parse)
    }
}

/// Whether `access` may ask `scope` and `scope` has something to answer from: what a stream
/// checks before it starts, so that a bad id is still an error status.
pub(crate) async fn check(
    service: &Service,
    access: &Access,
    scope: &Scope,
) -> Result<(), ApiError> {
    access.scope(service, scope).await?;
    Ok(service.check_scope(scope).await?)
}

/// Answers `request` from `scope` for `access`; each round of the loop is reported to
/// `events`, if given.
pub(crate) async fn run(
    service: &Service,
    access: &Access,
    scope: &Scope,
    request: &AskRequest,
    events: Option<LoopEvents>,
) -> Result<AskReport, ApiError> {
    access.scope(service, scope).await?;
    let as_of = request.as_of.as_deref();
    Ok(service.ask_scoped(scope, &request.question, as_of, events).await?)
}

/// The tool's input: a conversation or a user, then the body of an ask (never streamed).
fn input() -> Body {
    tool::input(
        &["question"],
        json!({
            "conversation": tool::id(
                "The conversation to answer from (give this or `user`, not both).",
            ),
            "user": tool::id(
                "A user id: answer from all of the user's conversations (give this or \
                 `conversation`).",
            ),
            "question": tool::non_blank(
                "The question, in words, e.g. `When did Alice move to Lisbon?`.",
            ),
            "as_of": tool::time(
                "Answer from what was known at this time: later messages are invisible, facts \
                 valid then are current (a date: its end). Default: now.",
            ),
        }),
    )
}

/// The tool's arguments: a conversation or a user, then the body of an ask.
pub(crate) fn parse_tool(mut arguments: Body) -> Result<(Scope, AskRequest), ApiError> {
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

/// The tool: flagged when the answer loop failed.
fn call<'a>(
    service: &'a Arc<Service>,
    access: &'a Access,
    arguments: Body,
) -> BoxFuture<'a, Result<Called, ApiError>> {
    Box::pin(async move {
        let (scope, request) = parse_tool(arguments)?;
        let report = run(service, access, &scope, &request, None).await?;
        let failed = !report.ok;
        Called::new(report, failed)
    })
}

/// An ask over the route's scope: JSON, or server-sent events with `stream: true`.
fn http<'a>(service: &'a Arc<Service>, access: &'a Access, request: HttpRequest) -> Answer<'a> {
    Box::pin(async move {
        let scope = request.path.scope()?;
        let body = AskRequest::read(request.body?)?;
        if !body.stream {
            return HttpReply::ok(run(service, access, &scope, &body, None).await?);
        }
        // Checked before the stream starts, so that a bad id is still an error status.
        check(service, access, &scope).await?;
        Ok(HttpReply::Events(events(Arc::clone(service), access.clone(), scope, body)))
    })
}

/// A streamed ask: `started` (`{conversation, question}`), a `round` per loop step as the loop
/// reports it (the loop runs in its own task), then `answer` (the report) or `error`.
fn events(
    service: Arc<Service>,
    access: Access,
    scope: Scope,
    request: AskRequest,
) -> BoxStream<'static, (&'static str, Value)> {
    let started =
        event("started", json!({"conversation": scope.label(), "question": request.question}));
    let (sink, rounds) = LoopEvents::channel();
    let task =
        tokio::spawn(async move { run(&service, &access, &scope, &request, Some(sink)).await });
    let finished = async move {
        match task.await {
            Ok(Ok(report)) => event("answer", report),
            Ok(Err(error)) => event("error", error.detail),
            Err(error) => {
                let failed = anyhow::anyhow!("ask task failed: {error}");
                event("error", ApiError::from(ServiceError::Other(failed)).detail)
            }
        }
    };
    let rounds = rounds.map(|round| event("round", round));
    futures::stream::iter([started]).chain(rounds).chain(futures::stream::once(finished)).boxed()
}

/// An event named `name` with `data`; one that cannot be written as JSON is an `error` event
/// saying so.
fn event(name: &'static str, data: impl Serialize) -> (&'static str, Value) {
    match serde_json::to_value(data) {
        Ok(data) => (name, data),
        Err(error) => {
            let failed = anyhow::anyhow!("encoding the {name} event: {error}");
            ("error", json!(ApiError::from(ServiceError::Other(failed)).detail))
        }
    }
}
