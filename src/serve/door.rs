//! The HTTP door: one handler for every route of the operations' table
//! (`service::ops::OPERATIONS`). It checks the path's ids by their placeholders' rules, keeps
//! the query to the parameters the route declares, reads the body as a JSON object (its error
//! left for the operation to answer when it reads it), runs the route's call, and answers its
//! reply as JSON or server-sent events, or its error as `ErrorBody`.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Query, State};
use axum::http::{StatusCode, Uri};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodFilter, MethodRouter};
use axum::{Extension, Json, Router};
use futures::StreamExt as _;
use serde_json::{Value, json};

use super::AppState;
use crate::service::ServiceError;
use crate::service::ops::http::{HttpReply, HttpRequest, PathIds};
use crate::service::ops::{Access, ApiError, Body, ErrorCode, OPERATIONS, Route};

/// The query, as axum hands it over.
type Params = Result<Query<BTreeMap<String, String>>, QueryRejection>;

/// A request body, as axum hands it over.
type RawBody = Result<Bytes, BytesRejection>;

/// Every route of the table, each path with its methods.
pub(super) fn routes() -> Result<Router<Arc<AppState>>, String> {
    let mut paths: Vec<(&'static str, MethodRouter<Arc<AppState>>)> = Vec::new();
    for route in OPERATIONS.iter().flat_map(|operation| operation.routes) {
        let filter = match route.method {
            "get" => MethodFilter::GET,
            "post" => MethodFilter::POST,
            "delete" => MethodFilter::DELETE,
            other => return Err(format!("{route:?}: no method {other}")),
        };
        // The parameters a route declares are fixed: named once, not per request.
        let known: Arc<[String]> = route.query_names().into();
        let handler = move |State(state): State<Arc<AppState>>,
                            Extension(access): Extension<Access>,
                            uri: Uri,
                            query: Params,
                            body: RawBody| async move {
            handle(route, &known, &state, &access, &uri, query, body).await
        };
        match paths.iter_mut().find(|(path, _)| *path == route.path) {
            Some((_, methods)) => *methods = std::mem::take(methods).on(filter, handler),
            None => paths.push((route.path, axum::routing::on(filter, handler))),
        }
    }
    Ok(paths.into_iter().fold(Router::new(), |router, (path, methods)| router.route(path, methods)))
}

/// Runs `route` and answers its reply or its error.
async fn handle(
    route: &'static Route,
    known: &[String],
    state: &AppState,
    access: &Access,
    uri: &Uri,
    query: Params,
    body: RawBody,
) -> Response {
    let reply = async {
        let path = PathIds::read(route.path, uri.path())?;
        // A route that declares no parameter does not read the query, nor one without a body
        // its body.
        let query = if known.is_empty() { Body::new() } else { params(query, known)? };
        let body = if route.body.is_some() { object(body) } else { Ok(Body::new()) };
        let request = HttpRequest { path, query, body };
        (route.call)(&state.service, access, request).await
    };
    match reply.await {
        Ok(HttpReply::Json { status, body }) => {
            (StatusCode::from_u16(status).unwrap_or(StatusCode::OK), Json(body)).into_response()
        }
        Ok(HttpReply::Events(events)) => {
            let events = events.map(|(name, data)| {
                Ok::<_, Infallible>(
                    Event::default()
                        .event(name)
                        .json_data(data)
                        .unwrap_or_else(|_| Event::default().event("error")),
                )
            });
            Sse::new(events).into_response()
        }
        Err(error) => error.into_response(),
    }
}

/// The body as a JSON object; 413 when over the limit, 400 when not a JSON object.
fn object(body: RawBody) -> Result<Body, ApiError> {
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

/// The query parameters as strings, refusing any but `known`.
fn params(given: Params, known: &[String]) -> Result<Body, ApiError> {
    let Query(given) = given.map_err(|rejection| ApiError::bad("query", rejection.body_text()))?;
    if let Some(unknown) = given.keys().find(|key| !known.contains(key)) {
        return Err(ApiError::bad(
            unknown,
            format!("unknown parameter; known: {}", known.join(", ")),
        ));
    }
    Ok(given.into_iter().map(|(key, value)| (key, Value::String(value))).collect())
}

pub(super) async fn not_found() -> ApiError {
    ApiError::new(ErrorCode::NotFound, "path", "no such endpoint; see /openapi.json")
}

pub(super) async fn method_not_allowed() -> ApiError {
    ApiError::new(
        ErrorCode::MethodNotAllowed,
        "method",
        "the path does not take this method; see /openapi.json",
    )
}

/// `GET /ready`: 200 while the store answers, else 503 `store_unavailable` (a readiness
/// probe; no token, outside the OpenAPI document).
pub(super) async fn ready(State(state): State<Arc<AppState>>) -> Response {
    let store = state.service.store().clone();
    let checked = tokio::task::spawn_blocking(move || store.ping()).await;
    match checked {
        Ok(Ok(())) => Json(json!({"status": "ready"})).into_response(),
        // The same answers as any request's: nothing about the database in the body.
        Ok(Err(error)) => ApiError::from(error).into_response(),
        Err(error) => ApiError::from(ServiceError::Other(anyhow::anyhow!(
            "the readiness check failed: {error}"
        )))
        .into_response(),
    }
}
