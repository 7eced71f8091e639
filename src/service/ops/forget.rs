//! `forget`: delete a whole conversation and everything stored for it.
//! `DELETE /v1/conversations/{id}`; MCP `forget` (without `message`: with one, the tool is
//! `forget_message`'s).

use serde::Serialize;
use utoipa::ToSchema;

use super::{Access, ApiError, Body, Operation, Service, Tool, fields, route};
use crate::names::NameKind;
use crate::store::ConversationInfo;

pub(crate) const OPERATION: Operation = Operation {
    name: "forget",
    routes: &[route("delete", "/v1/conversations/{id}", "forget")],
    tool: Some(TOOL),
};

/// The MCP tool.
pub(crate) const TOOL: Tool = Tool {
    name: "forget",
    description: "Delete from memory. Without `message`: the whole conversation and \
        everything stored for it, for good. With `message` (a message id from \
        search_memory or ask_memory): only that message; its session is then rebuilt from \
        the messages left, which calls the model and can take a while.",
};

/// The MCP tool's arguments: a conversation, and maybe one of its messages (then the tool
/// runs `forget_message`).
pub(crate) fn parse_tool(map: &Body) -> Result<Option<String>, ApiError> {
    fields::name(map, "message", NameKind::Message)
}

/// `DELETE /v1/conversations/{id}`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub(crate) struct Deleted {
    /// The conversation as it was.
    pub(crate) deleted: ConversationInfo,
}

/// Forgets conversation `id` for `access`.
pub(crate) async fn run(service: &Service, access: &Access, id: &str) -> Result<Deleted, ApiError> {
    access.write()?;
    access.conversation(service, id).await?;
    Ok(Deleted { deleted: service.forget(id).await? })
}
