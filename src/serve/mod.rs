//! `mragent serve`: the memory service as a JSON HTTP API (axum).
//!
//! Endpoints (all JSON; the OpenAPI document at `GET /openapi.json` describes them):
//! - `GET /v1/conversations`: list; `GET /v1/conversations/{id}`: one summary;
//!   `DELETE /v1/conversations/{id}`: forget.
//! - `POST /v1/conversations/{id}/messages` `{"messages": [...]}`: add (the `convo` format).
//! - `POST /v1/conversations/{id}/search` `{"query": "...", "k": 10}`: search.
//! - `POST /v1/conversations/{id}/ask` `{"question": "..."}`: ask; with `"stream": true` the
//!   answer comes as server-sent events (`started`, then `answer` or `error`).
//!
//! Guards, outermost first: the concurrency limit (tower's `ConcurrencyLimitLayer`: requests
//! beyond it wait), the bearer token (when `MRAGENT_SERVE_TOKEN` is set, a request without it
//! gets 401), the body size limit (axum's `DefaultBodyLimit`: 413). Every error is
//! `{"error": {"code", "field", "message"}}` with a 4xx status for bad input, so a client can
//! tell which field to fix; bad input never reaches the store.

mod handlers;
mod openapi;

use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::json;

use crate::llm::Client;
use crate::service::{MemoryService, OwnEmbedder, ServiceError};
use crate::store::StoreError;

/// The environment variable holding the bearer token.
pub const TOKEN_ENV: &str = "MRAGENT_SERVE_TOKEN";

/// The service the server runs.
pub type Service = MemoryService<Client, OwnEmbedder>;

/// Server options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServeOptions {
    /// Required bearer token, if any.
    pub token: Option<String>,
    /// Largest request body in bytes.
    pub max_body_bytes: usize,
    /// Requests handled at once.
    pub max_concurrency: usize,
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self { token: None, max_body_bytes: 4 * 1024 * 1024, max_concurrency: 16 }
    }
}

/// Shared by every request.
struct AppState {
    service: Arc<Service>,
    token: Option<String>,
}

/// The API's router.
pub fn router(service: Arc<Service>, options: &ServeOptions) -> Router {
    let state = Arc::new(AppState { service, token: options.token.clone() });
    Router::new()
        .route("/openapi.json", get(openapi::document))
        .route("/v1/conversations", get(handlers::list))
        .route("/v1/conversations/{id}", get(handlers::show).delete(handlers::forget))
        .route("/v1/conversations/{id}/messages", post(handlers::add))
        .route("/v1/conversations/{id}/search", post(handlers::search))
        .route("/v1/conversations/{id}/ask", post(handlers::ask))
        .fallback(handlers::not_found)
        .layer(DefaultBodyLimit::max(options.max_body_bytes))
        .layer(axum::middleware::from_fn_with_state(Arc::clone(&state), authorize))
        .layer(tower::limit::ConcurrencyLimitLayer::new(options.max_concurrency.max(1)))
        .with_state(state)
}

/// Serves `service` on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    service: Arc<Service>,
    options: ServeOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    axum::serve(listener, router(service, &options))
        .with_graceful_shutdown(shutdown)
        .await
        .map_err(|error| anyhow::anyhow!("the server failed: {error}"))
}

/// 401 unless the request carries `Authorization: Bearer <token>` (when a token is set).
async fn authorize(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    if let Some(token) = &state.token {
        let given = request
            .headers()
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer "));
        if !given.is_some_and(|given| same_secret(given.as_bytes(), token.as_bytes())) {
            return ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "authorization",
                "missing or wrong bearer token (Authorization: Bearer <MRAGENT_SERVE_TOKEN>)",
            )
            .into_response();
        }
    }
    next.run(request).await
}

/// Compares without an early exit on the first differing byte, so timing does not reveal how
/// much of a guessed token is right. Hand-written: eight lines do not warrant a crate.
fn same_secret(given: &[u8], expected: &[u8]) -> bool {
    let mut difference = u8::from(given.len() != expected.len());
    for (index, byte) in expected.iter().enumerate() {
        difference |= byte ^ given.get(index).copied().unwrap_or(0);
    }
    difference == 0
}

/// A JSON error response.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    code: &'static str,
    field: String,
    message: String,
}

impl ApiError {
    pub(crate) fn new(
        status: StatusCode,
        code: &'static str,
        field: &str,
        message: impl Into<String>,
    ) -> Self {
        Self { status, code, field: field.to_string(), message: message.into() }
    }

    pub(crate) fn bad(field: &str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid", field, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body =
            json!({"error": {"code": self.code, "field": self.field, "message": self.message}});
        (self.status, axum::Json(body)).into_response()
    }
}

impl From<ServiceError> for ApiError {
    fn from(error: ServiceError) -> Self {
        let message = error.to_string();
        match error {
            ServiceError::Invalid { field, .. } => ApiError::bad(&field, message),
            ServiceError::NotBuilt(_) => {
                ApiError::new(StatusCode::CONFLICT, "not_built", "conversation", message)
            }
            ServiceError::Store(StoreError::UnknownConversation(_)) => ApiError::new(
                StatusCode::NOT_FOUND,
                "unknown_conversation",
                "conversation",
                message,
            ),
            ServiceError::Store(StoreError::InvalidName(invalid)) => {
                ApiError::bad(invalid.kind.field(), message)
            }
            ServiceError::Store(StoreError::EmbedderMismatch { .. }) => {
                ApiError::new(StatusCode::CONFLICT, "embedder_mismatch", "conversation", message)
            }
            ServiceError::Store(_) | ServiceError::Other(_) => {
                tracing::warn!(error = %message, "request failed");
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", "", message)
            }
        }
    }
}
