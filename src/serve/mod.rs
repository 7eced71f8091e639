//! `mragent serve`: the memory service as a JSON HTTP API (axum). Its routes are the
//! operations' (`service::ops::OPERATIONS`, one handler over them: `door`), described by the
//! OpenAPI document at `GET /openapi.json` (`openapi`, built from the same table). Outside the
//! document: `GET /metrics` (`metrics`), `/mcp` (the same operations as MCP tools over
//! streamable HTTP: `mcp`) and the `GET /ready` probe.
//!
//! Layers, outermost first: the metrics (`metrics::track`: counts and times every request, a
//! 401 or a wait for a slot included), the concurrency limit (tower's
//! `GlobalConcurrencyLimitLayer`, one semaphore for all routes: requests beyond it wait), the
//! bearer token (when `MRAGENT_SERVE_TOKEN` is set, a request
//! without it gets 401), the body size limit (axum's `DefaultBodyLimit`: 413). Every error is
//! `{"error": {"code", "field", "message"}}` (`ErrorBody`), whatever the route or the cause
//! (unknown route, wrong method, an id that is not UTF-8), with a 4xx status for bad input, so a
//! client can tell which field to fix; bad input never reaches the store.

mod door;
mod limits;
pub mod mcp;
mod metrics;
mod openapi;
mod tls;

use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

pub use openapi::SchemaError;
pub use tls::{TlsError, TlsFiles};

use crate::service::ServiceError;
pub(crate) use crate::service::ops::Access;
pub use crate::service::ops::Service;
use crate::service::ops::{ApiError, ErrorCode};
use crate::store::StoreError;

/// The environment variable holding the bearer token.
pub const TOKEN_ENV: &str = "MRAGENT_SERVE_TOKEN";

/// The environment variable holding named bearer tokens: `name=token` pairs separated by
/// commas. Each edit is logged under the name of the token that made it.
pub const TOKENS_ENV: &str = "MRAGENT_SERVE_TOKENS";

/// The name edits made with [`TOKEN_ENV`]'s token are logged under.
pub const DEFAULT_TOKEN_NAME: &str = "token";

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
    /// Requests per minute each token or key may make (`None`: no limit).
    pub key_rate_per_minute: Option<std::num::NonZeroU32>,
    /// Serve HTTPS with this certificate and key (`None`: plain HTTP).
    pub tls: Option<TlsFiles>,
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            token: None,
            named_tokens: Vec::new(),
            max_body_bytes: 4 * 1024 * 1024,
            max_concurrency: 16,
            key_rate_per_minute: None,
            tls: None,
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
    /// Each token's or key's request rate, by name (`None`: no limit).
    limits: Option<limits::KeyLimits>,
    /// The metrics (refused requests by key).
    metrics: Arc<metrics::ServiceMetrics>,
}

/// The OpenAPI document of the API (what `GET /openapi.json` answers).
pub fn document() -> serde_json::Value {
    openapi::build().unwrap_or_default()
}

/// The API's router.
pub fn router(service: Arc<Service>, options: &ServeOptions) -> Result<Router, SchemaError> {
    crate::service::ops::check_schemas().map_err(SchemaError::request)?;
    crate::service::ops::check_routes(crate::service::ops::OPERATIONS)
        .map_err(SchemaError::table)?;
    let document = openapi::build().map_err(SchemaError::document)?;
    let routes = door::routes()
        .map_err(SchemaError::table)?
        .route("/openapi.json", axum::routing::get(openapi::document));
    let tokens: Vec<(String, String)> = options
        .token
        .iter()
        .map(|token| (DEFAULT_TOKEN_NAME.to_string(), token.clone()))
        .chain(options.named_tokens.iter().cloned())
        .collect();
    let metrics = metrics::ServiceMetrics::new(&service);
    let limits = options.key_rate_per_minute.map(limits::KeyLimits::new);
    let state =
        Arc::new(AppState { service, tokens, document, limits, metrics: Arc::clone(&metrics) });
    Ok(routes
        .merge(metrics.router())
        .route_service("/mcp", mcp::http_service(Arc::clone(&state.service), options)?)
        .fallback(door::not_found)
        .method_not_allowed_fallback(door::method_not_allowed)
        .layer(DefaultBodyLimit::max(options.max_body_bytes))
        .layer(axum::middleware::from_fn_with_state(Arc::clone(&state), authorize))
        .layer(tower::limit::GlobalConcurrencyLimitLayer::new(options.max_concurrency.max(1)))
        .layer(axum::middleware::from_fn_with_state(metrics, metrics::track))
        // After the layers: probes need no token, are not counted, and are not held behind
        // requests in flight.
        .route("/ready", axum::routing::get(door::ready))
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
    let app = router(Arc::clone(&service), &options)?;
    let tls = options.tls.as_ref().map(tls::server_config).transpose()?;
    let runner = tokio::spawn(Arc::clone(&service).run_jobs(false));
    let served = match tls {
        Some(config) => {
            axum::serve(tls::TlsListener::new(listener, config), app)
                .with_graceful_shutdown(shutdown)
                .await
        }
        None => axum::serve(listener, app).with_graceful_shutdown(shutdown).await,
    }
    .map_err(|error| anyhow::anyhow!("the server failed: {error}"));
    // The runner's builds stop here (their conversation locks are dropped with them); their
    // jobs' leases are given up, so another replica takes them over at once rather than when
    // the leases expire.
    runner.abort();
    let _ = runner.await;
    match service.release_jobs().await {
        Ok(released) if released > 0 => {
            tracing::info!(released, "released the leases of unfinished jobs")
        }
        Ok(_) => {}
        Err(error) => tracing::warn!(%error, "could not release the leases of unfinished jobs"),
    }
    served
}

/// 401 unless the request carries `Authorization: Bearer <token>` naming an environment token
/// or a usable store key (when the server has tokens or the store has keys); 429 past the
/// key's rate. The request then carries its [`Access`].
async fn authorize(
    State(state): State<Arc<AppState>>,
    mut request: Request,
    next: Next,
) -> Response {
    let given = request
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .unwrap_or_default()
        .to_string();
    let access = match identify(&state, &given).await {
        Ok(Some(access)) => access,
        Ok(None) => {
            return ApiError::new(
                ErrorCode::Unauthorized,
                "authorization",
                "missing, wrong, revoked or expired bearer token (Authorization: Bearer <token \
                 or key>)",
            )
            .into_response();
        }
        Err(error) => return ApiError::from(ServiceError::Store(error)).into_response(),
    };
    if let Some(limits) = &state.limits
        && let Err(wait) = limits.check(&access.name)
    {
        state.metrics.limited(&access.name);
        return ApiError::new(
            ErrorCode::RateLimited,
            "authorization",
            format!("key {:?} is over its rate limit; retry in {wait} s", access.name),
        )
        .retry_after(wait)
        .into_response();
    }
    request.extensions_mut().insert(access);
    next.run(request).await
}

/// Who `given` is: an environment token (admin), a usable store key, or, on a server without
/// tokens whose store holds no key, anyone (admin). `None`: refused.
async fn identify(state: &AppState, given: &str) -> Result<Option<Access>, StoreError> {
    // Every token is compared (no early exit), so timing does not tell which one matched.
    let token = state.tokens.iter().fold(None, |found, (name, token)| {
        let matches = same_secret(given.as_bytes(), token.as_bytes()) && !given.is_empty();
        if matches && found.is_none() { Some(name.clone()) } else { found }
    });
    if let Some(name) = token {
        return Ok(Some(Access::admin(&name)));
    }
    let store = state.service.store().clone();
    let open = state.tokens.is_empty();
    let given = given.to_string();
    tokio::task::spawn_blocking(move || {
        if crate::store::split_key(&given).is_some() {
            return Ok(store.verify_key(&given)?.map(Access::of_key));
        }
        // Keys being made turn an open server into one that asks for them.
        if open && !store.has_keys()? {
            return Ok(Some(Access::admin("anonymous")));
        }
        Ok(None)
    })
    .await
    .map_err(|error| StoreError::Corrupt(format!("the key check failed: {error}")))?
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

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status =
            StatusCode::from_u16(self.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let retry = self.retry_after;
        let mut response = (status, axum::Json(self.body())).into_response();
        if let Some(seconds) = retry {
            response.headers_mut().insert(axum::http::header::RETRY_AFTER, seconds.into());
        }
        response
    }
}
