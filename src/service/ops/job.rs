//! `job`: one background build (an add that did not wait, or outlasted its bound, answered
//! with it). `GET /v1/jobs/{job}`.

use super::{Access, ApiError, Operation, Service, route};
use crate::store::Job;

pub(crate) const OPERATION: Operation =
    Operation { name: "job", routes: &[route("get", "/v1/jobs/{job}", "job")], tool: None };

/// Job `id`, if `access` reaches its conversation.
pub(crate) async fn run(service: &Service, access: &Access, id: i64) -> Result<Job, ApiError> {
    access.job(service, id).await?;
    Ok(service.job(id).await?)
}
