//! `mragent serve`: the memory service as a JSON HTTP API (axum).
//!
//! Endpoints (all JSON; the OpenAPI document at `GET /openapi.json`, generated from the handlers
//! and their body types by utoipa, describes them with every constraint the handlers check):
//! - `GET /v1/conversations`: list; `GET /v1/conversations/{id}`: one summary;
//!   `DELETE /v1/conversations/{id}`: forget.
//! - `DELETE /v1/conversations/{id}/messages/{message}`: forget one message (its session is
//!   rebuilt from the messages left).
//! - `POST /v1/conversations/{id}/messages` `{"messages": [...]}`: add (the `convo` format).
//! - `POST /v1/conversations/{id}/search` `{"query": "...", "k": 10}`: search.
//! - `POST /v1/conversations/{id}/ask` `{"question": "..."}`: ask; with `"stream": true` the
//!   answer comes as server-sent events (`started`, then `answer` or `error`).
//! - `GET /metrics`: Prometheus metrics (`metrics`; not in the OpenAPI document).
//! - `/mcp`: the same operations as MCP tools over streamable HTTP (`mcp`; not in the OpenAPI
//!   document, which describes the JSON API alone).
//!
//! Layers, outermost first: the metrics (`metrics::track`: counts and times every request, a
//! 401 or a wait for a slot included), the concurrency limit (tower's
//! `GlobalConcurrencyLimitLayer`, one semaphore for all routes: requests beyond it wait), the
//! bearer token (when `MRAGENT_SERVE_TOKEN` is set, a request
//! without it gets 401), the body size limit (axum's `DefaultBodyLimit`: 413). Every error is
//! `{"error": {"code", "field", "message"}}` (`api::ErrorBody`), whatever the route or the cause
//! (unknown route, wrong method, an id that is not UTF-8), with a 4xx status for bad input, so a
//! client can tell which field to fix; bad input never reaches the store.

mod api;
mod fields;
mod handlers;
mod jobs;
pub mod mcp;
mod metrics;
mod openapi;
mod scoped;

use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use utoipa::OpenApi as _;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub use openapi::SchemaError;

use self::api::{ErrorBody, ErrorCode, ErrorDetail};
use crate::llm::Client;
use crate::service::{MemoryService, OwnEmbedder, ServiceError};
use crate::store::StoreError;

/// The environment variable holding the bearer token.
pub const TOKEN_ENV: &str = "MRAGENT_SERVE_TOKEN";

/// The service the server runs.
pub type Service = MemoryService<Client, OwnEmbedder>;

/// The environment variable holding named bearer tokens: `name=token` pairs separated by
/// commas. Each edit is logged under the name of the token that made it.
pub const TOKENS_ENV: &str = "MRAGENT_SERVE_TOKENS";

/// The name edits made with [`TOKEN_ENV`]'s token are logged under.
pub const DEFAULT_TOKEN_NAME: &str = "token";

/// Who made a request: the name of its token (`anonymous` on a server without tokens).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Actor(pub(crate) String);

/// Server options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServeOptions {
    /// Required bearer token, if any (its edits are logged as [`DEFAULT_TOKEN_NAME`]).
    pub token: Option<String>,
    /// Further accepted tokens, each with the name its edits are logged under.
    pub named_tokens: Vec<(String, String)>,
    /// Largest request body in bytes.
    pub max_body_bytes: usize,
    /// Requests handled at once.
    pub max_concurrency: usize,
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            token: None,
            named_tokens: Vec::new(),
            max_body_bytes: 4 * 1024 * 1024,
            max_concurrency: 16,
        }
    }
}

/// Shared by every request.
struct AppState {
    service: Arc<Service>,
    /// Accepted tokens with their names; empty: no token needed.
    tokens: Vec<(String, String)>,
    /// The OpenAPI document as served.
    document: serde_json::Value,
    /// The request body schemas of `document`, compiled.
    validators: openapi::Validators,
}

/// The routes, each with its documentation: `routes!` adds a handler and its
/// `#[utoipa::path]` together.
fn routes() -> (Router<Arc<AppState>>, utoipa::openapi::OpenApi) {
    OpenApiRouter::with_openapi(openapi::Base::openapi())
        .routes(routes!(openapi::document))
        .routes(routes!(handlers::list, jobs::batch_add))
        .routes(routes!(handlers::show, handlers::forget))
        .routes(routes!(handlers::add))
        .routes(routes!(handlers::forget_message))
        .routes(routes!(handlers::search))
        .routes(routes!(handlers::ask))
        .routes(routes!(scoped::conversation_facts))
        .routes(routes!(scoped::user_search))
        .routes(routes!(scoped::user_ask))
        .routes(routes!(scoped::user_facts))
        .routes(routes!(scoped::correct))
        .routes(routes!(scoped::history))
        .routes(routes!(scoped::undo))
        .routes(routes!(jobs::job))
        .routes(routes!(jobs::jobs))
        .split_for_parts()
}

/// The OpenAPI document of the API (what `GET /openapi.json` answers).
pub fn document() -> serde_json::Value {
    openapi::to_json(routes().1).unwrap_or_default()
}

/// The API's router.
pub fn router(service: Arc<Service>, options: &ServeOptions) -> Result<Router, SchemaError> {
    let (routes, document) = routes();
    let document = openapi::to_json(document).map_err(SchemaError::document)?;
    let validators = openapi::Validators::new(&document)?;
    let tokens: Vec<(String, String)> = options
        .token
        .iter()
        .map(|token| (DEFAULT_TOKEN_NAME.to_string(), token.clone()))
        .chain(options.named_tokens.iter().cloned())
        .collect();
    let metrics = metrics::Metrics::new(&service);
    let state = Arc::new(AppState { service, tokens, document, validators });
    Ok(routes
        .merge(metrics.router())
        .route_service("/mcp", mcp::http_service(Arc::clone(&state.service), options)?)
        .fallback(handlers::not_found)
        .method_not_allowed_fallback(handlers::method_not_allowed)
        .layer(DefaultBodyLimit::max(options.max_body_bytes))
        .layer(axum::middleware::from_fn_with_state(Arc::clone(&state), authorize))
        .layer(tower::limit::GlobalConcurrencyLimitLayer::new(options.max_concurrency.max(1)))
        .layer(axum::middleware::from_fn_with_state(metrics, metrics::track))
        // After the layers: probes need no token, are not counted, and are not held behind
        // requests in flight.
        .route("/ready", axum::routing::get(handlers::ready))
        .with_state(state))
}

/// Serves `service` on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    service: Arc<Service>,
    options: ServeOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    // The background builds (`"wait": false`) and the jobs a killed server left unfinished
    // run beside the requests, until the server stops.
    let runner = tokio::spawn(Arc::clone(&service).run_jobs(false));
    let served = axum::serve(listener, router(service, &options)?)
        .with_graceful_shutdown(shutdown)
        .await
        .map_err(|error| anyhow::anyhow!("the server failed: {error}"));
    runner.abort();
    served
}

/// 401 unless the request carries `Authorization: Bearer <token>` (when a token is set).
/// The request then carries its [`Actor`]: the matching token's name.
async fn authorize(
    State(state): State<Arc<AppState>>,
    mut request: Request,
    next: Next,
) -> Response {
    let actor = if state.tokens.is_empty() {
        Some("anonymous".to_string())
    } else {
        let given = request
            .headers()
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer "))
            .unwrap_or_default();
        // Every token is compared (no early exit), so timing does not tell which one matched.
        state.tokens.iter().fold(None, |found, (name, token)| {
            let matches = same_secret(given.as_bytes(), token.as_bytes()) && !given.is_empty();
            if matches && found.is_none() { Some(name.clone()) } else { found }
        })
    };
    let Some(actor) = actor else {
        return ApiError::new(
            StatusCode::UNAUTHORIZED,
            ErrorCode::Unauthorized,
            "authorization",
            "missing or wrong bearer token (Authorization: Bearer <MRAGENT_SERVE_TOKEN>)",
        )
        .into_response();
    };
    request.extensions_mut().insert(Actor(actor));
    next.run(request).await
}

/// Named tokens from `name=token,name=token` ([`TOKENS_ENV`]); names follow the one id rule.
pub fn parse_named_tokens(text: &str) -> Result<Vec<(String, String)>, String> {
    text.split(',')
        .filter(|pair| !pair.trim().is_empty())
        .map(|pair| {
            let (name, token) = pair.split_once('=').ok_or_else(|| {
                format!("{TOKENS_ENV}: expected name=token pairs separated by commas")
            })?;
            let (name, token) = (name.trim(), token.trim());
            crate::names::check_name(crate::names::NameKind::User, name)
                .map_err(|error| format!("{TOKENS_ENV}: {error}"))?;
            if token.is_empty() {
                return Err(format!("{TOKENS_ENV}: the token of {name:?} is empty"));
            }
            Ok((name.to_string(), token.to_string()))
        })
        .collect()
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
    detail: ErrorDetail,
}

impl ApiError {
    pub(crate) fn new(
        status: StatusCode,
        code: ErrorCode,
        field: &str,
        message: impl Into<String>,
    ) -> Self {
        Self {
            status,
            detail: ErrorDetail { code, field: field.to_string(), message: message.into() },
        }
    }

    pub(crate) fn bad(field: &str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, ErrorCode::Invalid, field, message)
    }

    /// The error of a field inside `prefix` (say `conversations[2]`): its field is prefixed.
    pub(crate) fn within(mut self, prefix: &str) -> Self {
        let field = &self.detail.field;
        self.detail.field = if field.is_empty() || field == "body" {
            prefix.to_string()
        } else {
            format!("{prefix}.{field}")
        };
        self
    }
}

/// Seconds a client is asked to wait before retrying a request the store could not serve.
const STORE_RETRY_AFTER: &str = "2";

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let retry = matches!(self.detail.code, ErrorCode::StoreUnavailable);
        let mut response =
            (self.status, axum::Json(ErrorBody { error: self.detail })).into_response();
        if retry {
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from_static(STORE_RETRY_AFTER),
            );
        }
        response
    }
}

impl From<ServiceError> for ApiError {
    fn from(error: ServiceError) -> Self {
        let message = error.to_string();
        match error {
            ServiceError::Invalid { field, .. } => ApiError::bad(&field, message),
            ServiceError::UnknownUser(_) => {
                ApiError::new(StatusCode::NOT_FOUND, ErrorCode::UnknownUser, "user", message)
            }
            ServiceError::Store(StoreError::UnknownFact(_)) => {
                ApiError::new(StatusCode::NOT_FOUND, ErrorCode::UnknownFact, "fact", message)
            }
            ServiceError::Store(StoreError::UnknownJob(_)) => {
                ApiError::new(StatusCode::NOT_FOUND, ErrorCode::UnknownJob, "job", message)
            }
            ServiceError::Store(StoreError::UnknownEdit(_)) => {
                ApiError::new(StatusCode::NOT_FOUND, ErrorCode::UnknownEdit, "edit", message)
            }
            ServiceError::Store(StoreError::NotUndoable { .. }) => {
                ApiError::new(StatusCode::CONFLICT, ErrorCode::NotUndoable, "edit", message)
            }
            ServiceError::Store(StoreError::ScopeMismatch { field, .. }) => {
                ApiError::new(StatusCode::CONFLICT, ErrorCode::ScopeMismatch, field, message)
            }
            ServiceError::NotBuilt(..) => {
                ApiError::new(StatusCode::CONFLICT, ErrorCode::NotBuilt, "conversation", message)
            }
            ServiceError::Store(StoreError::UnknownConversation(_)) => ApiError::new(
                StatusCode::NOT_FOUND,
                ErrorCode::UnknownConversation,
                "conversation",
                message,
            ),
            ServiceError::Store(StoreError::UnknownMessage { .. }) => {
                ApiError::new(StatusCode::NOT_FOUND, ErrorCode::UnknownMessage, "message", message)
            }
            ServiceError::Store(StoreError::InvalidName(invalid)) => {
                ApiError::bad(invalid.kind.field(), message)
            }
            ServiceError::Store(StoreError::EmbedderMismatch { .. }) => ApiError::new(
                StatusCode::CONFLICT,
                ErrorCode::EmbedderMismatch,
                "conversation",
                message,
            ),
            ServiceError::Store(StoreError::Unavailable(_)) => {
                tracing::warn!(error = %message, "store unavailable");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    ErrorCode::StoreUnavailable,
                    "",
                    message,
                )
            }
            ServiceError::Store(_) | ServiceError::Other(_) => {
                tracing::warn!(error = %message, "request failed");
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, ErrorCode::Internal, "", message)
            }
        }
    }
}

#[cfg(test)]
mod tests;
