//! `forget_message`: delete one message; its session is rebuilt from the messages left.
//! `DELETE /v1/conversations/{id}/messages/{message}`; MCP `forget` with `message`.

use std::sync::Arc;

use serde::Serialize;
use utoipa::ToSchema;

use super::http::{Answer, HttpReply, HttpRequest, ID_ERRORS, reply, route, typed};
use super::{Access, ApiError, Operation, Service};
use crate::service::AddReport;
use crate::service::MessageForgotten;

pub(crate) const OPERATION: Operation = Operation {
    name: "forget_message",
    routes: &[route(
        "delete",
        "/v1/conversations/{id}/messages/{message}",
        "forget_message",
        &[reply(
            200,
            "the message, now forgotten, and the rebuild of its session",
            typed::<ForgetMessageReply>(),
        )],
        ID_ERRORS,
        http,
    )],
    tool: None,
};

/// `DELETE /v1/conversations/{id}/messages/{message}`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub(crate) struct ForgetMessageReply {
    /// The message forgotten and the session it was in.
    pub(crate) forgotten: MessageForgotten,
    /// The rebuild of that session from the messages left.
    pub(crate) rebuilt: AddReport,
}

/// Forgets `message` of conversation `id` for `access`, logged as its actor's.
pub(crate) async fn run(
    service: &Service,
    access: &Access,
    id: &str,
    message: &str,
) -> Result<ForgetMessageReply, ApiError> {
    access.write()?;
    access.conversation(service, id).await?;
    let (forgotten, rebuilt) = service.forget_message(id, message, &access.actor()).await?;
    Ok(ForgetMessageReply { forgotten: forgotten.into(), rebuilt })
}

fn http<'a>(service: &'a Arc<Service>, access: &'a Access, request: HttpRequest) -> Answer<'a> {
    Box::pin(async move {
        let (id, message) = (request.path.conversation()?, request.path.message()?);
        HttpReply::ok(run(service, access, &id, &message).await?)
    })
}
