//! What the HTTP door reads from a request before an operation sees it: the path's ids, each
//! checked against its rule (400 naming the field; axum's own rejection would be a
//! `text/plain` body), the body as a JSON object, and the query's parameters.

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{FromRequestParts, Path, Query};
use axum::http::StatusCode;
use axum::http::request::Parts;
use serde_json::Value;

use crate::names::{NameKind, check_name};
use crate::service::ops::{ApiError, Body, ErrorCode};

/// The `{id}` of the path: a conversation id.
pub(super) struct Id(pub(super) String);

impl<S: Send + Sync> FromRequestParts<S> for Id {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Path(id) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|rejection| ApiError::bad("conversation", rejection.body_text()))?;
        check_name(NameKind::Conversation, &id)
            .map_err(|error| ApiError::bad("conversation", error.to_string()))?;
        Ok(Id(id))
    }
}

/// The `{id}` and `{message}` of the path: 400 naming `conversation` or `message`.
pub(super) struct MessageId(pub(super) String, pub(super) String);

impl<S: Send + Sync> FromRequestParts<S> for MessageId {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Path((id, message)) = Path::<(String, String)>::from_request_parts(parts, state)
            .await
            .map_err(|rejection| ApiError::bad("path", rejection.body_text()))?;
        check_name(NameKind::Conversation, &id)
            .map_err(|error| ApiError::bad("conversation", error.to_string()))?;
        check_name(NameKind::Message, &message)
            .map_err(|error| ApiError::bad("message", error.to_string()))?;
        Ok(MessageId(id, message))
    }
}

/// The `{user}` of the path.
pub(super) struct UserId(pub(super) String);

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

/// A request body, as axum hands it over.
pub(super) type RawBody = Result<Bytes, BytesRejection>;

/// The body as a JSON object; 413 when over the limit, 400 when not a JSON object.
pub(super) fn object(body: RawBody) -> Result<Body, ApiError> {
    let bytes = body.map_err(|rejection| {
        let code = if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ErrorCode::TooLarge
        } else {
            ErrorCode::Invalid
        };
        ApiError::new(code, "body", rejection.body_text())
    })?;
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(ApiError::bad("body", "expected a JSON object")),
        Err(error) => Err(ApiError::bad("body", format!("invalid JSON: {error}"))),
    }
}

/// The query, as axum hands it over.
pub(super) type Params = Result<Query<BTreeMap<String, String>>, QueryRejection>;

/// The query parameters as strings, refusing any but `known`.
pub(super) fn params(given: Params, known: &[&str]) -> Result<Body, ApiError> {
    let Query(given) = given.map_err(|rejection| ApiError::bad("query", rejection.body_text()))?;
    if let Some(unknown) = given.keys().find(|key| !known.contains(&key.as_str())) {
        return Err(ApiError::bad(
            unknown,
            format!("unknown parameter; known: {}", known.join(", ")),
        ));
    }
    Ok(given.into_iter().map(|(key, value)| (key, Value::String(value))).collect())
}
