//! `history`: the audit log of edits (corrections, forgotten messages, undos), oldest first.
//! `GET /v1/edits`.

use std::sync::Arc;

use serde::Serialize;
use utoipa::ToSchema;
use utoipa::openapi::path::Parameter;

use super::http::{Answer, HttpReply, HttpRequest, ID_ERRORS, Route, reply, route, typed};
use super::schema::{name_schema, query_parameter};
use super::{Access, ApiError, Body, Operation, Service, fields};
use crate::names::NameKind;
use crate::service::EditEntry;

pub(crate) const OPERATION: Operation = Operation {
    name: "history",
    routes: &[Route {
        query: parameters,
        ..route(
            "get",
            "/v1/edits",
            "history",
            &[reply(200, "the audit log, oldest first", typed::<EditList>())],
            ID_ERRORS,
            http,
        )
    }],
    tool: None,
};

/// The query parameters, as the document declares them.
fn parameters() -> Vec<Parameter> {
    vec![
        query_parameter("user", "only edits of this user's conversations", name_schema("user id")),
        query_parameter(
            "conversation",
            "only edits of this conversation",
            name_schema("conversation id"),
        ),
    ]
}

/// Whose edits.
#[derive(Debug, Clone, Default)]
pub(crate) struct HistoryRequest {
    pub(crate) user: Option<String>,
    pub(crate) conversation: Option<String>,
}

impl HistoryRequest {
    /// The query (its parameters as strings).
    pub(crate) fn parse(map: &Body) -> Result<Self, ApiError> {
        Ok(Self {
            user: fields::name(map, "user", NameKind::User)?,
            conversation: fields::name(map, "conversation", NameKind::Conversation)?,
        })
    }
}

/// `GET /v1/edits`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub(crate) struct EditList {
    /// The edits, oldest first.
    pub(crate) edits: Vec<EditEntry>,
}

/// The edits `access` reaches.
pub(crate) async fn run(
    service: &Service,
    access: &Access,
    request: HistoryRequest,
) -> Result<EditList, ApiError> {
    let HistoryRequest { user, conversation } = request;
    let mut edits = service.history(user.as_deref(), conversation.as_deref()).await?;
    if access.bound() {
        // Only the edits of conversations the key reaches (those of forgotten conversations
        // belong to no one any more).
        let reached: std::collections::BTreeSet<String> =
            access.filter(service.list().await?).into_iter().map(|info| info.id).collect();
        edits.retain(|edit| reached.contains(&edit.conversation));
    }
    Ok(EditList { edits: edits.into_iter().map(Into::into).collect() })
}

fn http<'a>(service: &'a Arc<Service>, access: &'a Access, request: HttpRequest) -> Answer<'a> {
    Box::pin(async move {
        HttpReply::ok(run(service, access, HistoryRequest::parse(&request.query)?).await?)
    })
}
