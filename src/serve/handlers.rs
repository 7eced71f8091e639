//! Request handlers: check the body field by field (errors name the field), then against its
//! schema in the OpenAPI document, call the service, answer JSON. Each handler's
//! `#[utoipa::path]` is its entry in the document.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequestParts, Path, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use futures::StreamExt as _;
use serde_json::{Map, Value, json};

use super::api::{
    AddRequest, AskRequest, ConversationId, ConversationList, DEFAULT_K, Deleted, ErrorCode,
    ForgetMessageReply, MAX_K, MessagePath, SearchReply, SearchRequest,
};
use super::openapi::{AddErrors, AuthErrors, IdErrors, QueryErrors};
use super::{Access, ApiError, AppState, fields};
use crate::agent::events::LoopEvents;
use crate::names::{NameKind, check_name};
use crate::service::{
    AddReport, AskReport, Queued, Scope, SearchFilters, SearchHit, ServiceError, Waited,
};
use crate::store::ConversationInfo;

pub(super) type Shared = State<Arc<AppState>>;

/// The `{id}` of the path, checked against the id rule: 400 naming `conversation` when it is
/// not UTF-8 or breaks the rule (axum's own rejection would be a `text/plain` body).
pub(super) struct Id(pub(super) String);

impl<S: Send + Sync> FromRequestParts<S> for Id {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Path(id) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|rejection| ApiError::bad("conversation", rejection.body_text()))?;
        check_name(NameKind::Conversation, &id)
            .map_err(|error| ApiError::bad("conversation", error.to_string()))?;
        Ok(Id(id))
    }
}

/// The `{id}` and `{message}` of the path, each checked against the id rule: 400 naming
/// `conversation` or `message`.
pub(super) struct MessageId(String, String);

impl<S: Send + Sync> FromRequestParts<S> for MessageId {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Path((id, message)) = Path::<(String, String)>::from_request_parts(parts, state)
            .await
            .map_err(|rejection| ApiError::bad("path", rejection.body_text()))?;
        check_name(NameKind::Conversation, &id)
            .map_err(|error| ApiError::bad("conversation", error.to_string()))?;
        check_name(NameKind::Message, &message)
            .map_err(|error| ApiError::bad("message", error.to_string()))?;
        Ok(MessageId(id, message))
    }
}

/// The body as a JSON object; 413 when over the limit, 400 when not a JSON object.
pub(super) fn object(body: Result<Bytes, BytesRejection>) -> Result<Map<String, Value>, ApiError> {
    let bytes = body.map_err(|rejection| {
        let code = if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ErrorCode::TooLarge
        } else {
            ErrorCode::Invalid
        };
        ApiError::new(rejection.status(), code, "body", rejection.body_text())
    })?;
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(ApiError::bad("body", "expected a JSON object")),
        Err(error) => Err(ApiError::bad("body", format!("invalid JSON: {error}"))),
    }
}

/// A required string field with a non-whitespace character.
fn string_field(map: &Map<String, Value>, field: &str) -> Result<String, ApiError> {
    match map.get(field) {
        Some(Value::String(text)) if !text.trim().is_empty() => Ok(text.clone()),
        Some(Value::String(_)) => Err(ApiError::bad(field, "must not be empty")),
        Some(_) => Err(ApiError::bad(field, "expected a string")),
        None => Err(ApiError::bad(field, "missing")),
    }
}

#[utoipa::path(
    get,
    path = "/v1/conversations",
    responses((status = 200, description = "every conversation", body = ConversationList), AuthErrors)
)]
pub(super) async fn list(
    State(state): Shared,
    Extension(access): Extension<Access>,
) -> Result<Json<ConversationList>, ApiError> {
    let conversations = access.filter(state.service.list().await?);
    Ok(Json(ConversationList { conversations }))
}

#[utoipa::path(
    get,
    path = "/v1/conversations/{id}",
    params(ConversationId),
    responses((status = 200, description = "the conversation's summary", body = ConversationInfo), IdErrors)
)]
pub(super) async fn show(
    State(state): Shared,
    Extension(access): Extension<Access>,
    Id(id): Id,
) -> Result<Json<ConversationInfo>, ApiError> {
    access.conversation(&state.service, &id).await?;
    let store = state.service.store().clone();
    let lookup = id.clone();
    let info = tokio::task::spawn_blocking(move || store.info(&lookup))
        .await
        .map_err(|error| ApiError::from(ServiceError::Other(error.into())))?
        .map_err(|error| ApiError::from(ServiceError::Store(error)))?;
    match info {
        Some(info) => Ok(Json(info)),
        None => Err(ServiceError::Store(crate::store::StoreError::UnknownConversation(id)).into()),
    }
}

#[utoipa::path(
    delete,
    path = "/v1/conversations/{id}",
    params(ConversationId),
    responses((status = 200, description = "the conversation, now forgotten", body = Deleted), IdErrors)
)]
pub(super) async fn forget(
    State(state): Shared,
    Extension(access): Extension<Access>,
    Id(id): Id,
) -> Result<Json<Deleted>, ApiError> {
    access.write()?;
    access.conversation(&state.service, &id).await?;
    let deleted = state.service.forget(&id).await?;
    Ok(Json(Deleted { deleted }))
}

#[utoipa::path(
    delete,
    path = "/v1/conversations/{id}/messages/{message}",
    params(MessagePath),
    responses(
        (status = 200, description = "the message, now forgotten, and the rebuild of its session", body = ForgetMessageReply),
        IdErrors
    )
)]
pub(super) async fn forget_message(
    State(state): Shared,
    Extension(access): Extension<Access>,
    MessageId(id, message): MessageId,
) -> Result<Json<ForgetMessageReply>, ApiError> {
    access.write()?;
    access.conversation(&state.service, &id).await?;
    let (forgotten, rebuilt) = state.service.forget_message(&id, &message, &access.actor()).await?;
    Ok(Json(ForgetMessageReply { forgotten, rebuilt }))
}

impl AddRequest {
    pub(super) fn parse(mut map: Map<String, Value>) -> Result<Self, ApiError> {
        let items = match map.remove("messages") {
            Some(Value::Array(items)) => items,
            Some(_) => return Err(ApiError::bad("messages", "expected an array of messages")),
            None => return Err(ApiError::bad("messages", "missing")),
        };
        let messages = crate::convo::parse_values(items)
            .map_err(|error| ApiError::bad(error.field(), error.to_string()))?;
        let scope = crate::store::AddScope {
            user: fields::name(&map, "user", NameKind::User)?,
            agent: fields::name(&map, "agent", NameKind::User)?,
            tags: fields::tags(&map)?,
        };
        let wait = fields::flag(&map, "wait")?.unwrap_or(true);
        Ok(Self { messages, scope, wait })
    }
}

#[utoipa::path(
    post,
    path = "/v1/conversations/{id}/messages",
    params(ConversationId),
    request_body = AddRequest,
    responses(
        (status = 200, description = "what the add stored and built (idempotent: only new sessions are built)", body = AddReport),
        (status = 202, description = "with `wait: false`, or when the build outlasts the add's bounded wait (`MRAGENT_ADD_WAIT`, 25 s by default): what the add stored, and the job that builds it in the background", body = Queued),
        AddErrors
    )
)]
pub(super) async fn add(
    State(state): Shared,
    Extension(access): Extension<Access>,
    Id(id): Id,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let map = object(body)?;
    let whole = Value::Object(map.clone());
    let request = AddRequest::parse(map)?;
    // The limits first, with the service's own message (the same the CLI gives), then the
    // whole body against the published schema.
    crate::service::check_limits(&request.messages)?;
    state.validators.add(&whole)?;
    let AddRequest { messages, mut scope, wait } = request;
    access.add(&state.service, &id, &mut scope).await?;
    if wait {
        // A bounded wait: a build still going on at the bound answers 202 with its job.
        let bound = state.service.settings().add_wait;
        match state.service.add_waiting(&id, scope, messages, bound).await? {
            Waited::Done(report) => Ok(Json(*report).into_response()),
            Waited::Building(queued) => Ok((StatusCode::ACCEPTED, Json(*queued)).into_response()),
        }
    } else {
        let queued = state.service.add_queued(&id, scope, messages).await?;
        Ok((StatusCode::ACCEPTED, Json(queued)).into_response())
    }
}

impl SearchRequest {
    pub(super) fn parse(map: &Map<String, Value>) -> Result<Self, ApiError> {
        let query = string_field(map, "query")?;
        let bad_k = || ApiError::bad("k", format!("expected an integer from 1 to {MAX_K}"));
        let k = match map.get("k") {
            None | Some(Value::Null) => DEFAULT_K,
            // JSON Schema's `integer` counts 5.0 as an integer; so does this.
            Some(Value::Number(number)) => number
                .as_u64()
                .or_else(|| {
                    number.as_f64().filter(|k| k.fract() == 0.0 && *k >= 1.0).map(|k| k as u64)
                })
                .filter(|k| (1..=MAX_K).contains(k))
                .ok_or_else(bad_k)?,
            Some(_) => return Err(bad_k()),
        };
        let filters = SearchFilters {
            speaker: fields::text(map, "speaker", crate::names::MAX_NAME_CHARS)?,
            from: fields::time(map, "from", false)?,
            to: fields::time(map, "to", true)?,
            conversation: fields::name(map, "conversation", NameKind::Conversation)?,
            tags: fields::tags(map)?,
        };
        Ok(Self { query, k, filters })
    }
}

#[utoipa::path(
    post,
    path = "/v1/conversations/{id}/search",
    params(ConversationId),
    request_body = SearchRequest,
    responses((status = 200, description = "ranked memory lines (no chat model)", body = SearchReply), QueryErrors)
)]
pub(super) async fn search(
    State(state): Shared,
    Extension(access): Extension<Access>,
    Id(id): Id,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<SearchReply>, ApiError> {
    let (query, hits, pending_sessions) =
        find(&state, &access, &Scope::Conversation(id.clone()), body).await?;
    Ok(Json(SearchReply { conversation: id, query, hits, pending_sessions }))
}

/// A search over `scope`: the query as given, the lines found, and the sessions not built yet.
pub(super) async fn find(
    state: &AppState,
    access: &Access,
    scope: &Scope,
    body: Result<Bytes, BytesRejection>,
) -> Result<(String, Vec<SearchHit>, u64), ApiError> {
    let map = object(body)?;
    let request = SearchRequest::parse(&map)?;
    state.validators.search(&Value::Object(map))?;
    access.scope(&state.service, scope).await?;
    let k = request.k as usize;
    let hits = state.service.search_scoped(scope, &request.query, k, &request.filters).await?;
    let pending = state.service.pending_sessions(scope).await?;
    Ok((request.query, hits, pending))
}

impl AskRequest {
    pub(super) fn parse(map: &Map<String, Value>) -> Result<Self, ApiError> {
        let question = string_field(map, "question")?;
        let stream = match map.get("stream") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(stream)) => *stream,
            Some(_) => return Err(ApiError::bad("stream", "expected a boolean")),
        };
        Ok(Self { question, stream, as_of: fields::time(map, "as_of", true)? })
    }
}

#[utoipa::path(
    post,
    path = "/v1/conversations/{id}/ask",
    params(ConversationId),
    request_body = AskRequest,
    responses(
        (status = 200, description = "the answer, its supporting lines and trace path; with `stream: true`, server-sent events: `started` (`{conversation, question}`), one `round` per loop step (kind `model`: the round's tool calls; kind `tools`: their results, summarised), then `answer` (the same report) or `error` (the error's `code`, `field`, `message`)",
            content((AskReport = "application/json"), (String = "text/event-stream"))),
        QueryErrors
    )
)]
pub(super) async fn ask(
    State(state): Shared,
    Extension(access): Extension<Access>,
    Id(id): Id,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    answer(state, &access, Scope::Conversation(id), body).await
}

/// An ask over `scope`: JSON, or server-sent events with `stream: true`.
pub(super) async fn answer(
    state: Arc<AppState>,
    access: &Access,
    scope: Scope,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let map = object(body)?;
    let AskRequest { question, stream, as_of } = AskRequest::parse(&map)?;
    state.validators.ask(&Value::Object(map))?;
    access.scope(&state.service, &scope).await?;
    if !stream {
        let report = state.service.ask_scoped(&scope, &question, as_of.as_deref(), None).await?;
        return Ok(Json(report).into_response());
    }
    // Check the scope before the stream starts, so that a bad id is still a 4xx.
    state.service.check_scope(&scope).await?;
    let started = Event::default()
        .event("started")
        .json_data(json!({"conversation": scope.label(), "question": question}));
    // The loop runs in its own task and reports each round through `sink`; the stream sends
    // those events as they come and ends with the answer once the loop (and so `sink`) is done.
    let (sink, rounds) = LoopEvents::channel();
    let service = Arc::clone(&state.service);
    let task = tokio::spawn(async move {
        service.ask_scoped(&scope, &question, as_of.as_deref(), Some(sink)).await
    });
    let finished = async move {
        match task.await {
            Ok(Ok(report)) => Event::default().event("answer").json_data(report),
            Ok(Err(error)) => error_event(ApiError::from(error)),
            Err(error) => error_event(ApiError::from(ServiceError::Other(anyhow::anyhow!(
                "ask task failed: {error}"
            )))),
        }
    };
    let rounds = rounds.map(|event| Event::default().event("round").json_data(event));
    let events =
        futures::stream::iter([started]).chain(rounds).chain(futures::stream::once(finished)).map(
            |event| Ok::<_, Infallible>(event.unwrap_or_else(|_| Event::default().event("error"))),
        );
    Ok(Sse::new(events).into_response())
}

fn error_event(error: ApiError) -> Result<Event, axum::Error> {
    Event::default().event("error").json_data(error.detail)
}

pub(super) async fn not_found() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        ErrorCode::NotFound,
        "path",
        "no such endpoint; see /openapi.json",
    )
}

pub(super) async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        ErrorCode::MethodNotAllowed,
        "method",
        "the path does not take this method; see /openapi.json",
    )
}

/// `GET /ready`: 200 while the store answers, else 503 `store_unavailable` (a readiness
/// probe; no token, outside the OpenAPI document).
pub(super) async fn ready(State(state): State<Arc<AppState>>) -> Response {
    let store = state.service.store().clone();
    let checked = tokio::task::spawn_blocking(move || store.ping()).await;
    match checked {
        Ok(Ok(())) => Json(json!({"status": "ready"})).into_response(),
        // The same answers as any request's: nothing about the database in the body.
        Ok(Err(error)) => ApiError::from(ServiceError::Store(error)).into_response(),
        Err(error) => ApiError::from(ServiceError::Other(anyhow::anyhow!(
            "the readiness check failed: {error}"
        )))
        .into_response(),
    }
}
