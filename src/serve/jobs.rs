//! Background builds and batch adds:
//! - `GET /v1/jobs/{job}`: one job (an add with `"wait": false` answers 202 with it);
//! - `GET /v1/jobs?conversation=&unfinished=`: the jobs, newest first;
//! - `POST /v1/conversations` `{"conversations": [{"conversation", "messages", …}], "wait"}`:
//!   adds to many conversations in one request. Every entry is checked before anything is
//!   stored; then the adds run concurrently (their model calls share the client's adaptive
//!   limit; entries naming one conversation wait for each other on its lock), or with
//!   `wait: false` each is queued as a job. Each entry answers on its own: its
//!   report or job, or its error (say, a conversation of another user).

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Serialize;
use serde_json::{Map, Value};
use utoipa::openapi::path::{Parameter, ParameterIn};
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::{IntoParams, ToSchema};

use super::api::{AddRequest, BatchRequest, ErrorDetail, MAX_BATCH, name_schema};
use super::handlers::{Shared, object};
use super::openapi::{AddErrors, IdErrors};
use super::scoped::{JOB, Number, Params, id_number, params, path_parameter, query_parameter};
use super::{Access, ApiError, fields};
use crate::names::NameKind;
use crate::service::{AddReport, Queued, Waited};
use crate::store::Job;

/// Most jobs one listing returns.
const MAX_LISTED_JOBS: usize = 1000;

/// `{job}`.
pub(super) struct JobPath;

impl IntoParams for JobPath {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        vec![path_parameter("job", "job id, as the add that queued it answered", id_number())]
    }
}

/// The query of the job listing.
pub(super) struct JobParams;

impl IntoParams for JobParams {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        let flag =
            ObjectBuilder::new().schema_type(Type::String).enum_values(Some(["true", "false"]));
        vec![
            query_parameter(
                "conversation",
                "only jobs of this conversation",
                name_schema("conversation id"),
            ),
            query_parameter("unfinished", "only queued and running jobs (default false)", flag),
        ]
    }
}

/// `GET /v1/jobs`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub(crate) struct JobList {
    /// The jobs, newest first (at most 1000).
    pub(crate) jobs: Vec<Job>,
}

/// One entry's outcome.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub(crate) struct BatchResult {
    /// The conversation.
    pub(crate) conversation: String,
    /// What the add stored and built (`wait: true`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) added: Option<AddReport>,
    /// What the add stored, and its job (`wait: false`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) queued: Option<Queued>,
    /// Why this entry failed (the others are unaffected).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<ErrorDetail>,
}

/// `POST /v1/conversations`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub(crate) struct BatchReply {
    /// One result per entry, in the request's order.
    pub(crate) results: Vec<BatchResult>,
}

impl BatchRequest {
    fn parse(map: &Map<String, Value>) -> Result<Self, ApiError> {
        let entries = match map.get("conversations") {
            Some(Value::Array(entries)) if !entries.is_empty() && entries.len() <= MAX_BATCH => {
                entries
            }
            Some(Value::Array(_)) => {
                let problem = format!("expected 1 to {MAX_BATCH} conversations");
                return Err(ApiError::bad("conversations", problem));
            }
            Some(_) => return Err(ApiError::bad("conversations", "expected an array")),
            None => return Err(ApiError::bad("conversations", "missing")),
        };
        let mut adds = Vec::with_capacity(entries.len());
        for (index, entry) in entries.iter().enumerate() {
            let within = |error: ApiError| error.within(&format!("conversations[{index}]"));
            let Value::Object(entry) = entry else {
                return Err(within(ApiError::bad("body", "expected an object")));
            };
            let id = fields::name(entry, "conversation", NameKind::Conversation)
                .and_then(|id| id.ok_or_else(|| ApiError::bad("conversation", "missing")))
                .map_err(within)?;
            let request = AddRequest::parse(entry.clone()).map_err(within)?;
            crate::service::check_limits(&request.messages)
                .map_err(|error| within(error.into()))?;
            adds.push((id, request));
        }
        Ok(Self { adds, wait: fields::flag(map, "wait")?.unwrap_or(true) })
    }
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
    State(state): Shared,
    Extension(access): Extension<Access>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    access.write()?;
    let map = object(body)?;
    let mut request = BatchRequest::parse(&map)?;
    state.validators.batch(&Value::Object(map))?;
    // An entry naming another user or agent than the key's refuses the whole batch, before
    // anything is stored.
    for (index, (_, add)) in request.adds.iter_mut().enumerate() {
        access
            .bind(&mut add.scope)
            .map_err(|error| error.within(&format!("conversations[{index}]")))?;
    }
    let service = &state.service;
    let access = &access;
    let error = |error: crate::service::ServiceError| Some(ApiError::from(error).detail);
    // One bound for the whole request: an entry still building then answers with its job.
    let deadline = tokio::time::Instant::now() + service.settings().add_wait;
    let results = futures::future::join_all(request.adds.into_iter().map(|(id, add)| async move {
        let mut result =
            BatchResult { conversation: id.clone(), added: None, queued: None, error: None };
        let AddRequest { messages, mut scope, wait: _ } = add;
        // A conversation the key does not reach fails this entry as a missing one would.
        if let Err(refused) = access.add(service, &id, &mut scope).await {
            result.error = Some(refused.detail);
            return result;
        }
        if request.wait {
            let bound = deadline.saturating_duration_since(tokio::time::Instant::now());
            match service.add_waiting(&id, scope, messages, bound).await {
                Ok(Waited::Done(report)) => result.added = Some(*report),
                Ok(Waited::Building(queued)) => result.queued = Some(*queued),
                Err(failure) => result.error = error(failure),
            }
        } else {
            match service.add_queued(&id, scope, messages).await {
                Ok(queued) => result.queued = Some(queued),
                Err(failure) => result.error = error(failure),
            }
        }
        result
    }))
    .await;
    let building = results.iter().any(|result| result.queued.is_some());
    let status = if !request.wait || building { StatusCode::ACCEPTED } else { StatusCode::OK };
    Ok((status, Json(BatchReply { results })).into_response())
}

#[utoipa::path(
    get,
    path = "/v1/jobs/{job}",
    params(JobPath),
    responses((status = 200, description = "the job: state, sessions done, failed and pending, tokens, errors", body = Job), IdErrors)
)]
pub(super) async fn job(
    State(state): Shared,
    Extension(access): Extension<Access>,
    Number(id): Number<JOB>,
) -> Result<Json<Job>, ApiError> {
    access.job(&state.service, id).await?;
    Ok(Json(state.service.job(id).await?))
}

#[utoipa::path(
    get,
    path = "/v1/jobs",
    params(JobParams),
    responses((status = 200, description = "the jobs, newest first", body = JobList), IdErrors)
)]
pub(super) async fn jobs(
    State(state): Shared,
    Extension(access): Extension<Access>,
    given: Params,
) -> Result<Json<JobList>, ApiError> {
    let map = params(given, &["conversation", "unfinished"])?;
    let conversation = fields::name(&map, "conversation", NameKind::Conversation)?;
    let unfinished = match map.get("unfinished").and_then(Value::as_str) {
        None | Some("false") => false,
        Some("true") => true,
        Some(_) => return Err(ApiError::bad("unfinished", "expected true or false")),
    };
    let jobs = if access.bound() {
        // Only the jobs of conversations the key reaches.
        let reached: Vec<String> =
            access.filter(state.service.list().await?).into_iter().map(|info| info.id).collect();
        let wanted = match conversation {
            Some(id) => reached.into_iter().filter(|reached| *reached == id).collect(),
            None => reached,
        };
        state.service.jobs_of(wanted, unfinished, MAX_LISTED_JOBS).await?
    } else {
        state.service.jobs(conversation, unfinished, MAX_LISTED_JOBS).await?
    };
    Ok(Json(JobList { jobs }))
}
