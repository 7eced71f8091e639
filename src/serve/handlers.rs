//! Request handlers: check the body field by field (errors name the field), call the service,
//! answer JSON.

use std::convert::Infallible;
use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt as _;
use serde_json::{Map, Value, json};

use super::{ApiError, AppState};
use crate::agent::events::LoopEvents;
use crate::service::ServiceError;

/// Largest `k` a search may ask for.
const MAX_K: u64 = 100;

type Shared = State<Arc<AppState>>;

/// The body as a JSON object; 413 when over the limit, 400 when not a JSON object.
fn object(body: Result<Bytes, BytesRejection>) -> Result<Map<String, Value>, ApiError> {
    let bytes = body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(rejection.status(), "too_large", "body", rejection.body_text())
        } else {
            ApiError::new(rejection.status(), "invalid", "body", rejection.body_text())
        }
    })?;
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(ApiError::bad("body", "expected a JSON object")),
        Err(error) => Err(ApiError::bad("body", format!("invalid JSON: {error}"))),
    }
}

/// A required non-empty string field.
fn string_field(map: &Map<String, Value>, field: &str) -> Result<String, ApiError> {
    match map.get(field) {
        Some(Value::String(text)) if !text.trim().is_empty() => Ok(text.clone()),
        Some(Value::String(_)) => Err(ApiError::bad(field, "must not be empty")),
        Some(_) => Err(ApiError::bad(field, "expected a string")),
        None => Err(ApiError::bad(field, "missing")),
    }
}

pub(super) async fn list(State(state): Shared) -> Result<Response, ApiError> {
    let conversations = state.service.list().await?;
    Ok(Json(json!({ "conversations": conversations })).into_response())
}

pub(super) async fn show(
    State(state): Shared,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let store = state.service.store().clone();
    let lookup = id.clone();
    let info = tokio::task::spawn_blocking(move || store.info(&lookup))
        .await
        .map_err(|error| ApiError::from(crate::service::ServiceError::Other(error.into())))?
        .map_err(|error| ApiError::from(crate::service::ServiceError::Store(error)))?;
    match info {
        Some(info) => Ok(Json(info).into_response()),
        None => Err(crate::service::ServiceError::Store(
            crate::store::StoreError::UnknownConversation(id),
        )
        .into()),
    }
}

pub(super) async fn forget(
    State(state): Shared,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let info = state.service.forget(&id).await?;
    Ok(Json(json!({ "deleted": info })).into_response())
}

pub(super) async fn add(
    State(state): Shared,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let mut map = object(body)?;
    let items = match map.remove("messages") {
        Some(Value::Array(items)) => items,
        Some(_) => return Err(ApiError::bad("messages", "expected an array of messages")),
        None => return Err(ApiError::bad("messages", "missing")),
    };
    let messages = crate::convo::parse_values(items)
        .map_err(|error| ApiError::bad(error.field(), error.to_string()))?;
    let report = state.service.add(&id, messages).await?;
    Ok(Json(report).into_response())
}

pub(super) async fn search(
    State(state): Shared,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let map = object(body)?;
    let query = string_field(&map, "query")?;
    let k = match map.get("k") {
        None | Some(Value::Null) => 10,
        Some(value) => value
            .as_u64()
            .filter(|k| (1..=MAX_K).contains(k))
            .ok_or_else(|| ApiError::bad("k", format!("expected an integer from 1 to {MAX_K}")))?,
    };
    let hits = state.service.search(&id, &query, k as usize).await?;
    Ok(Json(json!({ "conversation": id, "query": query, "hits": hits })).into_response())
}

pub(super) async fn ask(
    State(state): Shared,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let map = object(body)?;
    let question = string_field(&map, "question")?;
    let stream = match map.get("stream") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(stream)) => *stream,
        Some(_) => return Err(ApiError::bad("stream", "expected a boolean")),
    };
    if !stream {
        let report = state.service.ask(&id, &question).await?;
        return Ok(Json(report).into_response());
    }
    // Check the conversation before the stream starts, so that a bad id is still a 4xx.
    state.service.check_conversation(&id).await?;
    let started = Event::default()
        .event("started")
        .json_data(json!({"conversation": id, "question": question}));
    // The loop runs in its own task and reports each round through `sink`; the stream sends
    // those events as they come and ends with the answer once the loop (and so `sink`) is done.
    let (sink, rounds) = LoopEvents::channel();
    let service = Arc::clone(&state.service);
    let task =
        tokio::spawn(async move { service.ask_with_events(&id, &question, Some(sink)).await });
    let finished = async move {
        match task.await {
            Ok(Ok(report)) => Event::default().event("answer").json_data(report),
            Ok(Err(error)) => error_event(ApiError::from(error)),
            Err(error) => error_event(ApiError::from(ServiceError::Other(anyhow::anyhow!(
                "ask task failed: {error}"
            )))),
        }
    };
    let rounds = rounds.map(|event| Event::default().event("round").json_data(event));
    let events =
        futures::stream::iter([started]).chain(rounds).chain(futures::stream::once(finished)).map(
            |event| Ok::<_, Infallible>(event.unwrap_or_else(|_| Event::default().event("error"))),
        );
    Ok(Sse::new(events).into_response())
}

fn error_event(error: ApiError) -> Result<Event, axum::Error> {
    Event::default()
        .event("error")
        .json_data(json!({"code": error.code, "field": error.field, "message": error.message}))
}

pub(super) async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", "path", "no such endpoint; see /openapi.json")
}
