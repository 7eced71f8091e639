//! `show`: one conversation's summary. `GET /v1/conversations/{id}`; MCP `show_conversation`.

use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::json;

use super::http::{Answer, HttpReply, HttpRequest, ID_ERRORS, reply, route, typed};
use super::schema::tool;
use super::{Access, ApiError, Body, Called, Hints, McpTool, Operation, Service, take_id};
use crate::names::NameKind;
use crate::service::ConversationSummary;
use crate::store::{StoreError, StoredConversation};

pub(crate) const OPERATION: Operation = Operation {
    name: "show",
    routes: &[route(
        "get",
        "/v1/conversations/{id}",
        "show",
        &[reply(200, "the conversation's summary", typed::<ConversationSummary>())],
        ID_ERRORS,
        http,
    )],
    tool: Some(TOOL),
};

/// The MCP tool.
pub(crate) const TOOL: McpTool = McpTool {
    name: "show_conversation",
    description: "One conversation's summary, as list_conversations gives it: user, \
        agent, messages, sessions and built sessions, first and last message time. An \
        unknown id is an error (`unknown_conversation`).",
    hints: Hints::Reads,
    input,
    call,
};

/// Conversation `id`'s summary, if `access` reaches it.
pub(crate) async fn run(
    service: &Service,
    access: &Access,
    id: &str,
) -> Result<ConversationSummary, ApiError> {
    access.conversation(service, id).await?;
    let (store, lookup) = (service.store().clone(), id.to_string());
    let info = crate::service::blocking(move || store.info(&lookup)).await?;
    info.map(Into::into).ok_or_else(|| StoreError::UnknownConversation(id.to_string()).into())
}

/// Conversation `id` with its sessions and messages, if `access` reaches it (the command
/// line's `memory show`).
pub(crate) async fn sessions(
    service: &Service,
    access: &Access,
    id: &str,
) -> Result<StoredConversation, ApiError> {
    access.conversation(service, id).await?;
    let (store, lookup) = (service.store().clone(), id.to_string());
    Ok(crate::service::blocking(move || store.load(&lookup)).await?)
}

/// The tool's input.
fn input() -> Body {
    tool::input(&["conversation"], json!({"conversation": tool::id("The conversation's id.")}))
}

fn call<'a>(
    service: &'a Arc<Service>,
    access: &'a Access,
    mut arguments: Body,
) -> BoxFuture<'a, Result<Called, ApiError>> {
    Box::pin(async move {
        let id = take_id(&mut arguments, "conversation", NameKind::Conversation)?;
        Called::new(run(service, access, &id).await?, false)
    })
}

fn http<'a>(service: &'a Arc<Service>, access: &'a Access, request: HttpRequest) -> Answer<'a> {
    Box::pin(
        async move { HttpReply::ok(run(service, access, &request.path.conversation()?).await?) },
    )
}
