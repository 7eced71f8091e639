//! `forget_message`: delete one message; its session is rebuilt from the messages left.
//! `DELETE /v1/conversations/{id}/messages/{message}`; MCP `forget` with `message`.

use serde::Serialize;
use utoipa::ToSchema;

use super::{Access, ApiError, Operation, Service, route};
use crate::service::AddReport;
use crate::store::ForgottenMessage;

pub(crate) const OPERATION: Operation = Operation {
    name: "forget_message",
    routes: &[route("delete", "/v1/conversations/{id}/messages/{message}", "forget_message")],
    tool: None,
};

/// `DELETE /v1/conversations/{id}/messages/{message}`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub(crate) struct ForgetMessageReply {
    /// The message forgotten and the session it was in.
    pub(crate) forgotten: ForgottenMessage,
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
    Ok(ForgetMessageReply { forgotten, rebuilt })
}
