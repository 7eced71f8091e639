//! `job`: one background build (an add that did not wait, or outlasted its bound, answered
//! with it). `GET /v1/jobs/{job}`.

use std::sync::Arc;

use super::http::{Answer, HttpReply, HttpRequest, ID_ERRORS, reply, route, typed};
use super::{Access, ApiError, Operation, Service};
use crate::service::BackgroundJob;

pub(crate) const OPERATION: Operation = Operation {
    name: "job",
    routes: &[route(
        "get",
        "/v1/jobs/{job}",
        "job",
        &[reply(
            200,
            "the job: state, sessions done, failed and pending, tokens, errors",
            typed::<BackgroundJob>(),
        )],
        ID_ERRORS,
        http,
    )],
    tool: None,
};

/// Job `id`, if `access` reaches its conversation.
pub(crate) async fn run(
    service: &Service,
    access: &Access,
    id: i64,
) -> Result<BackgroundJob, ApiError> {
    access.job(service, id).await?;
    Ok(service.job(id).await?.into())
}

fn http<'a>(service: &'a Arc<Service>, access: &'a Access, request: HttpRequest) -> Answer<'a> {
    Box::pin(async move { HttpReply::ok(run(service, access, request.path.number("job")?).await?) })
}
