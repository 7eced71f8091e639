//! `forget`: delete a whole conversation and everything stored for it.
//! `DELETE /v1/conversations/{id}`; MCP `forget` (without `message`: with one, the tool is
//! `forget_message`'s).

use std::sync::Arc;

use futures::future::BoxFuture;
use serde::Serialize;
use serde_json::json;
use utoipa::ToSchema;

use super::http::{Answer, HttpReply, HttpRequest, ID_ERRORS, reply, route, typed};
use super::schema::tool;
use super::{Access, ApiError, Body, Called, Hints, McpTool, Operation, Service, fields, take_id};
use crate::names::NameKind;
use crate::service::ConversationSummary;

pub(crate) const OPERATION: Operation = Operation {
    name: "forget",
    routes: &[route(
        "delete",
        "/v1/conversations/{id}",
        "forget",
        &[reply(200, "the conversation, now forgotten", typed::<Deleted>())],
        ID_ERRORS,
        http,
    )],
    tool: Some(TOOL),
};

/// The MCP tool.
pub(crate) const TOOL: McpTool = McpTool {
    name: "forget",
    description: "Delete from memory. Without `message`: the whole conversation and \
        everything stored for it, for good. With `message` (a message id from \
        search_memory or ask_memory): only that message; its session is then rebuilt from \
        the messages left, which calls the model and can take a while.",
    hints: Hints::Writes { destructive: true, idempotent: false },
    input,
    call,
};

/// `DELETE /v1/conversations/{id}`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub(crate) struct Deleted {
    /// The conversation as it was.
    pub(crate) deleted: ConversationSummary,
}

/// Forgets conversation `id` for `access`.
pub(crate) async fn run(service: &Service, access: &Access, id: &str) -> Result<Deleted, ApiError> {
    access.write()?;
    access.conversation(service, id).await?;
    Ok(Deleted { deleted: service.forget(id).await?.into() })
}

/// The tool's input.
fn input() -> Body {
    tool::input(
        &["conversation"],
        json!({
            "conversation": tool::id("The conversation's id."),
            "message": tool::id(
                "Only this message: its id (32 hex digits), as the `id` of a `search_memory` \
                 line or of an `ask_memory` supporting line. Without it the whole conversation \
                 is forgotten.",
            ),
        }),
    )
}

/// The tool's arguments: a conversation, and maybe one of its messages.
pub(crate) fn parse_tool(mut arguments: Body) -> Result<(String, Option<String>), ApiError> {
    let conversation = take_id(&mut arguments, "conversation", NameKind::Conversation)?;
    Ok((conversation, fields::name(&arguments, "message", NameKind::Message)?))
}

/// The tool: the whole conversation, or one message (`forget_message`).
fn call<'a>(
    service: &'a Arc<Service>,
    access: &'a Access,
    arguments: Body,
) -> BoxFuture<'a, Result<Called, ApiError>> {
    Box::pin(async move {
        access.write()?;
        match parse_tool(arguments)? {
            (conversation, Some(message)) => {
                let reply = super::forget_message::run(service, access, &conversation, &message);
                Called::new(reply.await?, false)
            }
            (conversation, None) => Called::new(run(service, access, &conversation).await?, false),
        }
    })
}

fn http<'a>(service: &'a Arc<Service>, access: &'a Access, request: HttpRequest) -> Answer<'a> {
    Box::pin(
        async move { HttpReply::ok(run(service, access, &request.path.conversation()?).await?) },
    )
}
