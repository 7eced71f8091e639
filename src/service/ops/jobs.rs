//! `jobs`: the background builds, newest first. `GET /v1/jobs?conversation=&unfinished=`.

use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;
use utoipa::openapi::path::Parameter;

use super::http::{Answer, HttpReply, HttpRequest, ID_ERRORS, Route, reply, route, typed};
use super::schema::{name_schema, query_flag, query_parameter};
use super::{Access, ApiError, Body, Operation, Service, fields};
use crate::names::NameKind;
use crate::service::BackgroundJob;

pub(crate) const OPERATION: Operation = Operation {
    name: "jobs",
    routes: &[Route {
        query: parameters,
        ..route(
            "get",
            "/v1/jobs",
            "jobs",
            &[reply(200, "the jobs, newest first", typed::<JobList>())],
            ID_ERRORS,
            http,
        )
    }],
    tool: None,
};

/// Most jobs one listing returns.
const MAX_LISTED_JOBS: usize = 1000;

/// The query parameters, as the document declares them.
fn parameters() -> Vec<Parameter> {
    vec![
        query_parameter(
            "conversation",
            "only jobs of this conversation",
            name_schema("conversation id"),
        ),
        query_parameter("unfinished", "only queued and running jobs (default false)", query_flag()),
    ]
}

/// Which jobs.
#[derive(Debug, Clone, Default)]
pub(crate) struct JobsRequest {
    pub(crate) conversation: Option<String>,
    pub(crate) unfinished: bool,
}

impl JobsRequest {
    /// The query (its parameters as strings).
    pub(crate) fn parse(map: &Body) -> Result<Self, ApiError> {
        let conversation = fields::name(map, "conversation", NameKind::Conversation)?;
        let unfinished = match map.get("unfinished").and_then(Value::as_str) {
            None | Some("false") => false,
            Some("true") => true,
            Some(_) => return Err(ApiError::bad("unfinished", "expected true or false")),
        };
        Ok(Self { conversation, unfinished })
    }
}

/// `GET /v1/jobs`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub(crate) struct JobList {
    /// The jobs, newest first (at most 1000).
    pub(crate) jobs: Vec<BackgroundJob>,
}

/// The jobs `access` reaches.
pub(crate) async fn run(
    service: &Service,
    access: &Access,
    request: JobsRequest,
) -> Result<JobList, ApiError> {
    let JobsRequest { conversation, unfinished } = request;
    let jobs = if access.bound() {
        // Only the jobs of conversations the key reaches.
        let reached: Vec<String> =
            access.filter(service.list().await?).into_iter().map(|info| info.id).collect();
        let wanted = match conversation {
            Some(id) => reached.into_iter().filter(|reached| *reached == id).collect(),
            None => reached,
        };
        service.jobs_of(wanted, unfinished, MAX_LISTED_JOBS).await?
    } else {
        service.jobs(conversation, unfinished, MAX_LISTED_JOBS).await?
    };
    Ok(JobList { jobs: jobs.into_iter().map(Into::into).collect() })
}

fn http<'a>(service: &'a Arc<Service>, access: &'a Access, request: HttpRequest) -> Answer<'a> {
    Box::pin(async move {
        HttpReply::ok(run(service, access, JobsRequest::parse(&request.query)?).await?)
    })
}
