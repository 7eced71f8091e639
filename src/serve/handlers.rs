//! The HTTP door: one thin handler per route, each turning the path, the query and the body
//! into its operation's request (`service::ops`), running it, and answering its reply as JSON
//! (an error as `ErrorBody`). Each handler's `#[utoipa::path]` is its entry in the document;
//! `ops::OPERATIONS` names the same routes (a test holds them together).

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use futures::StreamExt as _;
use serde_json::json;

use super::AppState;
use super::api::{ConversationId, EditPath, FactPath, JobPath, MessagePath, UserPath};
use super::extract::{
    EDIT, FACT, Id, JOB, MessageId, Number, Params, RawBody, UserId, object, params,
};
use super::openapi::{AddErrors, AuthErrors, EditErrors, IdErrors, QueryErrors};
use crate::agent::events::LoopEvents;
use crate::service::ops::add::AddRequest;
use crate::service::ops::add_batch::{BatchReply, BatchRequest};
use crate::service::ops::ask::AskRequest;
use crate::service::ops::correct::CorrectRequest;
use crate::service::ops::facts::{FactList, FactParams};
use crate::service::ops::forget::Deleted;
use crate::service::ops::forget_message::ForgetMessageReply;
use crate::service::ops::history::{EditList, EditParams, HistoryRequest};
use crate::service::ops::jobs::{JobList, JobParams, JobsRequest};
use crate::service::ops::list::{ConversationList, ListRequest};
use crate::service::ops::search::{Found, SearchReply, SearchRequest, UserSearchReply};
use crate::service::ops::{self, Access, ApiError, ErrorCode};
use crate::service::{AddReport, AskReport, Queued, Scope, ServiceError, UndoReport};
use crate::store::{ConversationInfo, Edit, Job};

type AppRef = State<Arc<AppState>>;
type Caller = Extension<Access>;
type Answer<T> = Result<Json<T>, ApiError>;

#[utoipa::path(
    get,
    path = "/v1/conversations",
    responses((status = 200, description = "every conversation", body = ConversationList), AuthErrors)
)]
pub(super) async fn list(
    State(state): AppRef,
    Extension(access): Caller,
) -> Answer<ConversationList> {
    Ok(Json(ops::list::run(&state.service, &access, ListRequest::default()).await?))
}

#[utoipa::path(
    get,
    path = "/v1/conversations/{id}",
    params(ConversationId),
    responses((status = 200, description = "the conversation's summary", body = ConversationInfo), IdErrors)
)]
pub(super) async fn show(
    State(state): AppRef,
    Extension(access): Caller,
    Id(id): Id,
) -> Answer<ConversationInfo> {
    Ok(Json(ops::show::run(&state.service, &access, &id).await?))
}

#[utoipa::path(
    delete,
    path = "/v1/conversations/{id}",
    params(ConversationId),
    responses((status = 200, description = "the conversation, now forgotten", body = Deleted), IdErrors)
)]
pub(super) async fn forget(
    State(state): AppRef,
    Extension(access): Caller,
    Id(id): Id,
) -> Answer<Deleted> {
    Ok(Json(ops::forget::run(&state.service, &access, &id).await?))
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
    State(state): AppRef,
    Extension(access): Caller,
    MessageId(id, message): MessageId,
) -> Answer<ForgetMessageReply> {
    Ok(Json(ops::forget_message::run(&state.service, &access, &id, &message).await?))
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
    State(state): AppRef,
    Extension(access): Caller,
    Id(id): Id,
    body: RawBody,
) -> Result<Response, ApiError> {
    let request = AddRequest::read(object(body)?)?;
    let added = ops::add::run(&state.service, &access, &id, request).await?;
    Ok((accepted(added.building()), Json(added)).into_response())
}

#[utoipa::path(
    post,
    path = "/v1/conversations",
    request_body = BatchRequest,
    responses(
        (status = 200, description = "each conversation's add report or error, in order", body = BatchReply),
        (status = 202, description = "with `wait: false`, or when some entry's build outlasted the bounded wait (`MRAGENT_ADD_WAIT`): each conversation's report, job or error, in order", body = BatchReply),
        AddErrors
    )
)]
pub(super) async fn batch_add(
    State(state): AppRef,
    Extension(access): Caller,
    body: RawBody,
) -> Result<Response, ApiError> {
    access.write()?;
    let request = BatchRequest::read(object(body)?)?;
    let waited = request.wait;
    let reply = ops::add_batch::run(&state.service, &access, request).await?;
    Ok((accepted(!waited || reply.building()), Json(reply)).into_response())
}

/// 202 while a build goes on in the background, else 200.
fn accepted(building: bool) -> StatusCode {
    if building { StatusCode::ACCEPTED } else { StatusCode::OK }
}

#[utoipa::path(
    post,
    path = "/v1/conversations/{id}/search",
    params(ConversationId),
    request_body = SearchRequest,
    responses((status = 200, description = "ranked memory lines (no chat model)", body = SearchReply), QueryErrors)
)]
pub(super) async fn search(
    State(state): AppRef,
    Extension(access): Caller,
    Id(id): Id,
    body: RawBody,
) -> Answer<Found> {
    let request = SearchRequest::read(object(body)?)?;
    Ok(Json(ops::search::run(&state.service, &access, Scope::Conversation(id), request).await?))
}

#[utoipa::path(
    post,
    path = "/v1/users/{user}/search",
    params(UserPath),
    request_body = SearchRequest,
    responses((status = 200, description = "ranked memory lines of all the user's conversations (no chat model)", body = UserSearchReply), QueryErrors)
)]
pub(super) async fn user_search(
    State(state): AppRef,
    Extension(access): Caller,
    UserId(user): UserId,
    body: RawBody,
) -> Answer<Found> {
    let request = SearchRequest::read(object(body)?)?;
    Ok(Json(ops::search::run(&state.service, &access, Scope::User(user), request).await?))
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
    State(state): AppRef,
    Extension(access): Caller,
    Id(id): Id,
    body: RawBody,
) -> Result<Response, ApiError> {
    answer(state, &access, Scope::Conversation(id), body).await
}

#[utoipa::path(
    post,
    path = "/v1/users/{user}/ask",
    params(UserPath),
    request_body = AskRequest,
    responses(
        (status = 200, description = "the answer over all the user's conversations (as `POST /v1/conversations/{id}/ask`); each supporting line names its conversation",
            content((AskReport = "application/json"), (String = "text/event-stream"))),
        QueryErrors
    )
)]
pub(super) async fn user_ask(
    State(state): AppRef,
    Extension(access): Caller,
    UserId(user): UserId,
    body: RawBody,
) -> Result<Response, ApiError> {
    answer(state, &access, Scope::User(user), body).await
}

/// An ask over `scope`: JSON, or server-sent events with `stream: true`.
async fn answer(
    state: Arc<AppState>,
    access: &Access,
    scope: Scope,
    body: RawBody,
) -> Result<Response, ApiError> {
    let request = AskRequest::read(object(body)?)?;
    if !request.stream {
        let report = ops::ask::run(&state.service, access, &scope, &request, None).await?;
        return Ok(Json(report).into_response());
    }
    // Checked before the stream starts, so that a bad id is still a 4xx.
    ops::ask::check(&state.service, access, &scope).await?;
    let started = Event::default()
        .event("started")
        .json_data(json!({"conversation": scope.label(), "question": request.question}));
    // The loop runs in its own task and reports each round through `sink`; the stream sends
    // those events as they come and ends with the answer once the loop (and so `sink`) is done.
    let (sink, rounds) = LoopEvents::channel();
    let (service, access) = (Arc::clone(&state.service), access.clone());
    let task = tokio::spawn(async move {
        ops::ask::run(&service, &access, &scope, &request, Some(sink)).await
    });
    let finished = async move {
        match task.await {
            Ok(Ok(report)) => Event::default().event("answer").json_data(report),
            Ok(Err(error)) => error_event(error),
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

#[utoipa::path(
    get,
    path = "/v1/conversations/{id}/facts",
    params(ConversationId, FactParams),
    responses((status = 200, description = "the facts of the conversation", body = FactList), IdErrors)
)]
pub(super) async fn conversation_facts(
    State(state): AppRef,
    Extension(access): Caller,
    Id(id): Id,
    given: Params,
) -> Answer<FactList> {
    let query = ops::facts::parse(&params(given, ops::facts::PARAMETERS)?)?;
    Ok(Json(ops::facts::run(&state.service, &access, Scope::Conversation(id), query).await?))
}

#[utoipa::path(
    get,
    path = "/v1/users/{user}/facts",
    params(UserPath, FactParams),
    responses((status = 200, description = "the facts of the user's conversations", body = FactList), IdErrors)
)]
pub(super) async fn user_facts(
    State(state): AppRef,
    Extension(access): Caller,
    UserId(user): UserId,
    given: Params,
) -> Answer<FactList> {
    let query = ops::facts::parse(&params(given, ops::facts::PARAMETERS)?)?;
    Ok(Json(ops::facts::run(&state.service, &access, Scope::User(user), query).await?))
}

#[utoipa::path(
    post,
    path = "/v1/facts/{fact}/correct",
    params(FactPath),
    request_body = CorrectRequest,
    responses((status = 200, description = "the correction's row in the audit log", body = Edit), EditErrors)
)]
pub(super) async fn correct(
    State(state): AppRef,
    Extension(access): Caller,
    Number(fact): Number<FACT>,
    body: RawBody,
) -> Answer<Edit> {
    access.write()?;
    let request = CorrectRequest::read(object(body)?)?;
    Ok(Json(ops::correct::run(&state.service, &access, fact, request).await?))
}

#[utoipa::path(
    get,
    path = "/v1/edits",
    params(EditParams),
    responses((status = 200, description = "the audit log, oldest first", body = EditList), IdErrors)
)]
pub(super) async fn history(
    State(state): AppRef,
    Extension(access): Caller,
    given: Params,
) -> Answer<EditList> {
    let request = HistoryRequest::parse(&params(given, ops::history::PARAMETERS)?)?;
    Ok(Json(ops::history::run(&state.service, &access, request).await?))
}

#[utoipa::path(
    post,
    path = "/v1/edits/{edit}/undo",
    params(EditPath),
    responses((status = 200, description = "the undo's row in the audit log, and the rebuild of a restored message's session", body = UndoReport), EditErrors)
)]
pub(super) async fn undo(
    State(state): AppRef,
    Extension(access): Caller,
    Number(edit): Number<EDIT>,
) -> Answer<UndoReport> {
    Ok(Json(ops::undo::run(&state.service, &access, edit).await?))
}

#[utoipa::path(
    get,
    path = "/v1/jobs/{job}",
    params(JobPath),
    responses((status = 200, description = "the job: state, sessions done, failed and pending, tokens, errors", body = Job), IdErrors)
)]
pub(super) async fn job(
    State(state): AppRef,
    Extension(access): Caller,
    Number(id): Number<JOB>,
) -> Answer<Job> {
    Ok(Json(ops::job::run(&state.service, &access, id).await?))
}

#[utoipa::path(
    get,
    path = "/v1/jobs",
    params(JobParams),
    responses((status = 200, description = "the jobs, newest first", body = JobList), IdErrors)
)]
pub(super) async fn jobs(
    State(state): AppRef,
    Extension(access): Caller,
    given: Params,
) -> Answer<JobList> {
    let request = JobsRequest::parse(&params(given, ops::jobs::PARAMETERS)?)?;
    Ok(Json(ops::jobs::run(&state.service, &access, request).await?))
}

pub(super) async fn not_found() -> ApiError {
    ApiError::new(ErrorCode::NotFound, "path", "no such endpoint; see /openapi.json")
}

pub(super) async fn method_not_allowed() -> ApiError {
    ApiError::new(
        ErrorCode::MethodNotAllowed,
        "method",
        "the path does not take this method; see /openapi.json",
    )
}

/// `GET /ready`: 200 while the store answers, else 503 `store_unavailable` (a readiness
/// probe; no token, outside the OpenAPI document).
pub(super) async fn ready(State(state): AppRef) -> Response {
    let store = state.service.store().clone();
    let checked = tokio::task::spawn_blocking(move || store.ping()).await;
    match checked {
        Ok(Ok(())) => Json(json!({"status": "ready"})).into_response(),
        // The same answers as any request's: nothing about the database in the body.
        Ok(Err(error)) => ApiError::from(error).into_response(),
        Err(error) => ApiError::from(ServiceError::Other(anyhow::anyhow!(
            "the readiness check failed: {error}"
        )))
        .into_response(),
    }
}
