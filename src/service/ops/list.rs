//! `list`: the stored conversations a caller reaches. `GET /v1/conversations`; MCP
//! `list_conversations` (which may keep one user's).

use std::sync::Arc;

use futures::future::BoxFuture;
use serde::Serialize;
use serde_json::json;
use utoipa::ToSchema;

use super::http::{AUTH_ERRORS, Answer, HttpReply, HttpRequest, reply, route, typed};
use super::schema::tool;
use super::{Access, ApiError, Body, Called, Hints, McpTool, Operation, Service, fields};
use crate::names::NameKind;
use crate::service::ConversationSummary;

pub(crate) const OPERATION: Operation = Operation {
    name: "list",
    routes: &[route(
        "get",
        "/v1/conversations",
        "list",
        &[reply(200, "every conversation", typed::<ConversationList>())],
        AUTH_ERRORS,
        http,
    )],
    tool: Some(TOOL),
};

/// The MCP tool.
pub(crate) const TOOL: McpTool = McpTool {
    name: "list_conversations",
    description: "List the stored conversations: each one's `id`, user, agent, number of \
        messages and sessions (and how many are built), first and last message time. Use \
        it to find conversation ids; `user` keeps only one user's.",
    hints: Hints::Reads,
    input,
    call,
};

/// What a listing keeps.
#[derive(Debug, Clone, Default)]
pub(crate) struct ListRequest {
    /// Only this user's conversations.
    pub(crate) user: Option<String>,
}

impl ListRequest {
    /// The MCP arguments (`user`).
    pub(crate) fn parse(map: &Body) -> Result<Self, ApiError> {
        Ok(Self { user: fields::name(map, "user", NameKind::User)? })
    }
}

/// `GET /v1/conversations`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub(crate) struct ConversationList {
    /// Every conversation, by id.
    pub(crate) conversations: Vec<ConversationSummary>,
}

/// The conversations `access` reaches, maybe one user's only.
pub(crate) async fn run(
    service: &Service,
    access: &Access,
    request: ListRequest,
) -> Result<ConversationList, ApiError> {
    let mut conversations = access.filter(service.list().await?);
    if let Some(user) = request.user {
        conversations.retain(|conversation| conversation.user.as_ref() == Some(&user));
    }
    Ok(ConversationList { conversations: conversations.into_iter().map(Into::into).collect() })
}

/// The tool's input.
fn input() -> Body {
    tool::input(&[], json!({"user": tool::id("Only this user's conversations.")}))
}

fn call<'a>(
    service: &'a Arc<Service>,
    access: &'a Access,
    arguments: Body,
) -> BoxFuture<'a, Result<Called, ApiError>> {
    Box::pin(async move {
        let request = ListRequest::parse(&arguments)?;
        Called::new(run(service, access, request).await?, false)
    })
}

fn http<'a>(service: &'a Arc<Service>, access: &'a Access, _: HttpRequest) -> Answer<'a> {
    Box::pin(async move { HttpReply::ok(run(service, access, ListRequest::default()).await?) })
}
