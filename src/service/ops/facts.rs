//! `facts`: the personal facts of one conversation or of all of a user's, with their validity.
//! `GET /v1/conversations/{id}/facts`, `GET /v1/users/{user}/facts`.

use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;
use utoipa::openapi::path::Parameter;
use utoipa::openapi::schema::{ObjectBuilder, Type};

use super::http::{Answer, HttpReply, HttpRequest, ID_ERRORS, Route, reply, route, typed};
use super::schema::{NON_BLANK_PATTERN, query_flag, query_parameter, time_schema};
use super::{Access, ApiError, Body, Operation, Service, fields};
use crate::service::{FactQuery, ListedFact, Scope};

pub(crate) const OPERATION: Operation = Operation {
    name: "facts",
    routes: &[
        Route {
            query: parameters,
            ..route(
                "get",
                "/v1/conversations/{id}/facts",
                "conversation_facts",
                &[reply(200, "the facts of the conversation", typed::<FactList>())],
                ID_ERRORS,
                http,
            )
        },
        Route {
            query: parameters,
            ..route(
                "get",
                "/v1/users/{user}/facts",
                "user_facts",
                &[reply(200, "the facts of the user's conversations", typed::<FactList>())],
                ID_ERRORS,
                http,
            )
        },
    ],
    tool: None,
};

/// The query parameters, as the document declares them.
fn parameters() -> Vec<Parameter> {
    let text = |description: &str| {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .min_length(Some(1))
            .max_length(Some(crate::names::MAX_NAME_CHARS))
            .pattern(Some(NON_BLANK_PATTERN))
            .description(Some(description))
    };
    vec![
        query_parameter(
            "person",
            "only facts about this person (letter case aside)",
            text("a person"),
        ),
        query_parameter("aspect", "only this aspect (letter case aside)", text("an aspect")),
        query_parameter("history", "earlier values too (default false)", query_flag()),
        query_parameter("as_of", "as known at this time (a date: its end)", time_schema("a time")),
    ]
}

/// The query (its parameters as strings).
pub(crate) fn parse(map: &Body) -> Result<FactQuery, ApiError> {
    let history = match map.get("history").and_then(Value::as_str) {
        None | Some("false") => false,
        Some("true") => true,
        Some(_) => return Err(ApiError::bad("history", "expected true or false")),
    };
    let max = crate::names::MAX_NAME_CHARS;
    Ok(FactQuery {
        person: fields::text(map, "person", max)?,
        aspect: fields::text(map, "aspect", max)?,
        history,
        as_of: fields::time(map, "as_of", true)?,
        ..FactQuery::default()
    })
}

/// `GET …/facts`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub(crate) struct FactList {
    /// The facts, current first within each person and aspect.
    pub(crate) facts: Vec<ListedFact>,
}

/// The facts of `scope` that `query` asks for, for `access`.
pub(crate) async fn run(
    service: &Service,
    access: &Access,
    scope: Scope,
    mut query: FactQuery,
) -> Result<FactList, ApiError> {
    access.scope(service, &scope).await?;
    match &scope {
        Scope::User(user) => query.user = Some(user.clone()),
        Scope::Conversation(id) => query.conversation = Some(id.clone()),
    }
    service.check_scope(&scope).await?;
    Ok(FactList { facts: service.facts(&query).await? })
}

fn http<'a>(service: &'a Arc<Service>, access: &'a Access, request: HttpRequest) -> Answer<'a> {
    Box::pin(async move {
        let query = parse(&request.query)?;
        HttpReply::ok(run(service, access, request.path.scope()?, query).await?)
    })
}
