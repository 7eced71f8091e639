//! The routes over a user's conversations, facts and edits:
//! - `POST /v1/users/{user}/search`, `POST /v1/users/{user}/ask`: as for one conversation, over
//!   all of the user's (each line names its conversation);
//! - `GET /v1/users/{user}/facts`, `GET /v1/conversations/{id}/facts`: facts with validity;
//! - `POST /v1/facts/{fact}/correct` `{"value": ...}`: correct one fact;
//! - `GET /v1/edits`: the audit log; `POST /v1/edits/{edit}/undo`: revert one edit.
//!
//! Every edit is logged under the name of the token that made it.

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::response::Response;
use axum::{Extension, Json};
use serde::Serialize;
use serde_json::Value;
use utoipa::IntoParams;
use utoipa::ToSchema;
use utoipa::openapi::path::{Parameter, ParameterBuilder, ParameterIn};
use utoipa::openapi::schema::{ObjectBuilder, Type};

use super::api::{ConversationId, CorrectRequest, SearchRequest, name_schema, time_schema};
use super::handlers::{Id, Shared, answer, find, object};
use super::openapi::{EditErrors, IdErrors, QueryErrors};
use super::{Access, ApiError, fields};
use crate::names::{NameKind, check_name};
use crate::service::{FactQuery, ListedFact, Scope, SearchHit, UndoReport};
use crate::store::Edit;

/// The `{user}` of the path, checked against the id rule.
pub(super) struct UserId(String);

impl<S: Send + Sync> FromRequestParts<S> for UserId {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Path(user) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|rejection| ApiError::bad("user", rejection.body_text()))?;
        check_name(NameKind::User, &user)
            .map_err(|error| ApiError::bad("user", error.to_string()))?;
        Ok(UserId(user))
    }
}

/// [`Number`] of a `{fact}`.
pub(super) const FACT: u8 = 0;
/// [`Number`] of an `{edit}`.
pub(super) const EDIT: u8 = 1;
/// [`Number`] of a `{job}`.
pub(super) const JOB: u8 = 2;

/// A numeric id in the path (`{fact}`, `{edit}`, `{job}`): a whole number from 1.
pub(super) struct Number<const KIND: u8>(pub(super) i64);

impl<S: Send + Sync, const KIND: u8> FromRequestParts<S> for Number<KIND> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let field = match KIND {
            FACT => "fact",
            EDIT => "edit",
            _ => "job",
        };
        let Path(text) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|rejection| ApiError::bad(field, rejection.body_text()))?;
        match text.parse::<i64>() {
            Ok(number) if number >= 1 && text.bytes().all(|byte| byte.is_ascii_digit()) => {
                Ok(Number(number))
            }
            _ => Err(ApiError::bad(field, format!("expected a whole number from 1, not {text:?}"))),
        }
    }
}

/// A path parameter of the scoped routes.
pub(super) fn path_parameter(name: &str, description: &str, schema: ObjectBuilder) -> Parameter {
    ParameterBuilder::new()
        .name(name)
        .parameter_in(ParameterIn::Path)
        .required(utoipa::openapi::Required::True)
        .description(Some(description))
        .schema(Some(schema))
        .build()
}

pub(super) fn id_number() -> ObjectBuilder {
    ObjectBuilder::new().schema_type(Type::Integer).minimum(Some(1)).maximum(Some(i64::MAX as f64))
}

/// `{user}`.
pub(super) struct UserPath;

impl IntoParams for UserPath {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        vec![path_parameter("user", "user id", name_schema("user id"))]
    }
}

/// `{fact}`.
pub(super) struct FactPath;

impl IntoParams for FactPath {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        vec![path_parameter("fact", "fact id, as the facts listing gives it", id_number())]
    }
}

/// `{edit}`.
pub(super) struct EditPath;

impl IntoParams for EditPath {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        vec![path_parameter("edit", "edit id, as the audit log gives it", id_number())]
    }
}

/// A query parameter.
pub(super) fn query_parameter(name: &str, description: &str, schema: ObjectBuilder) -> Parameter {
    ParameterBuilder::new()
        .name(name)
        .parameter_in(ParameterIn::Query)
        .required(utoipa::openapi::Required::False)
        .description(Some(description))
        .schema(Some(schema))
        .build()
}

/// The query of a facts listing.
pub(super) struct FactParams;

impl IntoParams for FactParams {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        let text = |description: &str| {
            ObjectBuilder::new()
                .schema_type(Type::String)
                .min_length(Some(1))
                .max_length(Some(crate::names::MAX_NAME_CHARS))
                .pattern(Some(super::api::NON_BLANK_PATTERN))
                .description(Some(description))
        };
        let history =
            ObjectBuilder::new().schema_type(Type::String).enum_values(Some(["true", "false"]));
        vec![
            query_parameter(
                "person",
                "only facts about this person (letter case aside)",
                text("a person"),
            ),
            query_parameter("aspect", "only this aspect (letter case aside)", text("an aspect")),
            query_parameter("history", "earlier values too (default false)", history),
            query_parameter(
                "as_of",
                "as known at this time (a date: its end)",
                time_schema("a time"),
            ),
        ]
    }
}

/// The query of the audit log.
pub(super) struct EditParams;

impl IntoParams for EditParams {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        vec![
            query_parameter(
                "user",
                "only edits of this user's conversations",
                name_schema("user id"),
            ),
            query_parameter(
                "conversation",
                "only edits of this conversation",
                name_schema("conversation id"),
            ),
        ]
    }
}

pub(super) type Params = Result<Query<BTreeMap<String, String>>, QueryRejection>;

/// The query parameters, refusing any but `known`.
pub(super) fn params(
    given: Params,
    known: &[&str],
) -> Result<serde_json::Map<String, Value>, ApiError> {
    let Query(given) = given.map_err(|rejection| ApiError::bad("query", rejection.body_text()))?;
    if let Some(unknown) = given.keys().find(|key| !known.contains(&key.as_str())) {
        return Err(ApiError::bad(
            unknown,
            format!("unknown parameter; known: {}", known.join(", ")),
        ));
    }
    Ok(given.into_iter().map(|(key, value)| (key, Value::String(value))).collect())
}

/// A facts query from the parameters.
fn fact_query(given: Params) -> Result<FactQuery, ApiError> {
    let map = params(given, &["person", "aspect", "history", "as_of"])?;
    let history = match map.get("history").and_then(Value::as_str) {
        None | Some("false") => false,
        Some("true") => true,
        Some(_) => return Err(ApiError::bad("history", "expected true or false")),
    };
    let max = crate::names::MAX_NAME_CHARS;
    Ok(FactQuery {
        person: fields::text(&map, "person", max)?,
        aspect: fields::text(&map, "aspect", max)?,
        history,
        as_of: fields::time(&map, "as_of", true)?,
        ..FactQuery::default()
    })
}

/// `GET …/facts`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub(crate) struct FactList {
    /// The facts, current first within each person and aspect.
    pub(crate) facts: Vec<ListedFact>,
}

/// `GET /v1/edits`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub(crate) struct EditList {
    /// The edits, oldest first.
    pub(crate) edits: Vec<Edit>,
}

/// `POST /v1/users/{user}/search`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub(crate) struct UserSearchReply {
    /// The user.
    pub(crate) user: String,
    /// The query as given.
    pub(crate) query: String,
    /// The lines found, best first, each naming its conversation.
    pub(crate) hits: Vec<SearchHit>,
    /// Sessions of the user's conversations stored but not built yet (see the conversation
    /// search).
    pub(crate) pending_sessions: u64,
}

#[utoipa::path(
    post,
    path = "/v1/users/{user}/search",
    params(UserPath),
    request_body = SearchRequest,
    responses((status = 200, description = "ranked memory lines of all the user's conversations (no chat model)", body = UserSearchReply), QueryErrors)
)]
pub(super) async fn user_search(
    State(state): Shared,
    Extension(access): Extension<Access>,
    UserId(user): UserId,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<UserSearchReply>, ApiError> {
    let (query, hits, pending_sessions) =
        find(&state, &access, &Scope::User(user.clone()), body).await?;
    Ok(Json(UserSearchReply { user, query, hits, pending_sessions }))
}

#[utoipa::path(
    post,
    path = "/v1/users/{user}/ask",
    params(UserPath),
    request_body = super::api::AskRequest,
    responses(
        (status = 200, description = "the answer over all the user's conversations (as `POST /v1/conversations/{id}/ask`); each supporting line names its conversation",
            content((crate::service::AskReport = "application/json"), (String = "text/event-stream"))),
        QueryErrors
    )
)]
pub(super) async fn user_ask(
    State(state): Shared,
    Extension(access): Extension<Access>,
    UserId(user): UserId,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    answer(state, &access, Scope::User(user), body).await
}

#[utoipa::path(
    get,
    path = "/v1/users/{user}/facts",
    params(UserPath, FactParams),
    responses((status = 200, description = "the facts of the user's conversations", body = FactList), IdErrors)
)]
pub(super) async fn user_facts(
    State(state): Shared,
    Extension(access): Extension<Access>,
    UserId(user): UserId,
    given: Params,
) -> Result<Json<FactList>, ApiError> {
    list_facts(state, &access, Scope::User(user), given).await
}

/// The facts of `scope` the parameters ask for.
async fn list_facts(
    state: std::sync::Arc<super::AppState>,
    access: &Access,
    scope: Scope,
    given: Params,
) -> Result<Json<FactList>, ApiError> {
    let mut query = fact_query(given)?;
    access.scope(&state.service, &scope).await?;
    match &scope {
        Scope::User(user) => query.user = Some(user.clone()),
        Scope::Conversation(id) => query.conversation = Some(id.clone()),
    }
    state.service.check_scope(&scope).await?;
    Ok(Json(FactList { facts: state.service.facts(&query).await? }))
}

#[utoipa::path(
    get,
    path = "/v1/conversations/{id}/facts",
    params(ConversationId, FactParams),
    responses((status = 200, description = "the facts of the conversation", body = FactList), IdErrors)
)]
pub(super) async fn conversation_facts(
    State(state): Shared,
    Extension(access): Extension<Access>,
    Id(id): Id,
    given: Params,
) -> Result<Json<FactList>, ApiError> {
    list_facts(state, &access, Scope::Conversation(id), given).await
}

#[utoipa::path(
    post,
    path = "/v1/facts/{fact}/correct",
    params(FactPath),
    request_body = CorrectRequest,
    responses((status = 200, description = "the correction's row in the audit log", body = Edit), EditErrors)
)]
pub(super) async fn correct(
    State(state): Shared,
    Extension(access): Extension<Access>,
    Number(fact): Number<FACT>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Edit>, ApiError> {
    access.write()?;
    let map = object(body)?;
    let value = fields::text(&map, "value", crate::names::MAX_MESSAGE_CHARS)?
        .ok_or_else(|| ApiError::bad("value", "missing"))?;
    state.validators.correct(&Value::Object(map))?;
    access.fact(&state.service, fact).await?;
    Ok(Json(state.service.correct_fact(fact, &value, &access.actor()).await?))
}

#[utoipa::path(
    get,
    path = "/v1/edits",
    params(EditParams),
    responses((status = 200, description = "the audit log, oldest first", body = EditList), IdErrors)
)]
pub(super) async fn history(
    State(state): Shared,
    Extension(access): Extension<Access>,
    given: Params,
) -> Result<Json<EditList>, ApiError> {
    let map = params(given, &["user", "conversation"])?;
    let user = fields::name(&map, "user", NameKind::User)?;
    let conversation = fields::name(&map, "conversation", NameKind::Conversation)?;
    let mut edits = state.service.history(user.as_deref(), conversation.as_deref()).await?;
    if access.bound() {
        // Only the edits of conversations the key reaches (those of forgotten conversations
        // belong to no one any more).
        let reached: std::collections::BTreeSet<String> =
            access.filter(state.service.list().await?).into_iter().map(|info| info.id).collect();
        edits.retain(|edit| reached.contains(&edit.conversation));
    }
    Ok(Json(EditList { edits }))
}

#[utoipa::path(
    post,
    path = "/v1/edits/{edit}/undo",
    params(EditPath),
    responses((status = 200, description = "the undo's row in the audit log, and the rebuild of a restored message's session", body = UndoReport), EditErrors)
)]
pub(super) async fn undo(
    State(state): Shared,
    Extension(access): Extension<Access>,
    Number(edit): Number<EDIT>,
) -> Result<Json<UndoReport>, ApiError> {
    access.write()?;
    access.edit(&state.service, edit).await?;
    Ok(Json(state.service.undo(edit, &access.actor()).await?))
}
