//! The one error every operation answers, whatever the door: [`ApiError`], its [`ErrorCode`]
//! (which fixes its HTTP status) and the body clients read, `{"error": {"code", "field",
//! "message"}}` ([`ErrorBody`]). A [`ServiceError`] becomes one here, once for every door.

use serde::Serialize;
use utoipa::ToSchema;

use crate::service::ServiceError;
use crate::store::StoreError;

/// What went wrong, for a client to act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ErrorCode {
    /// A field, the path or the body is unusable (400).
    Invalid,
    /// Missing, wrong, revoked or expired bearer token or key (401).
    Unauthorized,
    /// The key may not do this (403).
    Forbidden,
    /// Over the key's rate limit; retry after `Retry-After` seconds (429).
    RateLimited,
    /// No such endpoint (404).
    NotFound,
    /// No such conversation (404).
    UnknownConversation,
    /// No such message in the conversation (404).
    UnknownMessage,
    /// The user has no conversation (404).
    UnknownUser,
    /// No such fact (404).
    UnknownFact,
    /// No such edit (404).
    UnknownEdit,
    /// No such job (404).
    UnknownJob,
    /// The edit cannot be undone (409).
    NotUndoable,
    /// The add names another user or agent than the conversation has (409).
    ScopeMismatch,
    /// The method is not one the path takes (405).
    MethodNotAllowed,
    /// The conversation has no built session yet (409).
    NotBuilt,
    /// The conversation was embedded with another embedder (409).
    EmbedderMismatch,
    /// The body is over the size limit (413).
    TooLarge,
    /// The service failed (500).
    Internal,
    /// The store's database cannot be reached now; retry after `Retry-After` seconds (503).
    StoreUnavailable,
    /// The store's database refused mragent's credentials: an operator must fix the
    /// configuration; retrying does not help (500).
    StoreAuthentication,
}

impl ErrorCode {
    /// The HTTP status of an error with this code (one status per code).
    pub(crate) fn status(self) -> u16 {
        match self {
            Self::Invalid => 400,
            Self::Unauthorized => 401,
            Self::Forbidden => 403,
            Self::NotFound
            | Self::UnknownConversation
            | Self::UnknownMessage
            | Self::UnknownUser
            | Self::UnknownFact
            | Self::UnknownEdit
            | Self::UnknownJob => 404,
            Self::MethodNotAllowed => 405,
            Self::NotUndoable | Self::ScopeMismatch | Self::NotBuilt | Self::EmbedderMismatch => {
                409
            }
            Self::TooLarge => 413,
            Self::RateLimited => 429,
            Self::Internal | Self::StoreAuthentication => 500,
            Self::StoreUnavailable => 503,
        }
    }
}

/// The error's details.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub(crate) struct ErrorDetail {
    /// What went wrong.
    pub(crate) code: ErrorCode,
    /// What to fix: a body field, `conversation`, `path`, `method`, `body` or `authorization`;
    /// empty for internal errors.
    pub(crate) field: String,
    /// For a person.
    pub(crate) message: String,
}

/// Every error the API answers, whatever the route or the cause.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub(crate) struct ErrorBody {
    /// The error.
    pub(crate) error: ErrorDetail,
}

/// An operation's error: its details and, for a client to wait, `Retry-After` seconds.
#[derive(Debug)]
pub(crate) struct ApiError {
    pub(crate) detail: ErrorDetail,
    /// `Retry-After` seconds, when set.
    pub(crate) retry_after: Option<u64>,
    /// What the store said, when the client is told less: the operator's command line prints
    /// it; no door sends it.
    cause: Option<String>,
}

/// Seconds a client is asked to wait before retrying a request the store could not serve.
const STORE_RETRY_AFTER: u64 = 2;

impl ApiError {
    pub(crate) fn new(code: ErrorCode, field: &str, message: impl Into<String>) -> Self {
        let retry_after = matches!(code, ErrorCode::StoreUnavailable).then_some(STORE_RETRY_AFTER);
        Self {
            detail: ErrorDetail { code, field: field.to_string(), message: message.into() },
            retry_after,
            cause: None,
        }
    }

    /// 400 `invalid`, naming `field`.
    pub(crate) fn bad(field: &str, message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Invalid, field, message)
    }

    /// 403 `forbidden`, naming `authorization`.
    pub(crate) fn forbidden(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Forbidden, "authorization", message)
    }

    /// The HTTP status.
    pub(crate) fn status(&self) -> u16 {
        self.detail.code.status()
    }

    /// The same error naming `field`.
    pub(crate) fn field(mut self, field: &str) -> Self {
        self.detail.field = field.to_string();
        self
    }

    /// The same error asking to retry after `seconds`.
    pub(crate) fn retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds);
        self
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

    /// The same error keeping `cause`, what the store said, for the operator.
    fn caused_by(mut self, cause: String) -> Self {
        self.cause = Some(cause);
        self
    }

    /// The body a client reads.
    pub(crate) fn body(self) -> ErrorBody {
        ErrorBody { error: self.detail }
    }
}

/// Its message, or what the store said where a client is told less: the command line, run by
/// the operator, prints it; the HTTP and MCP doors send [`ApiError::body`] only.
impl std::fmt::Display for ApiError {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.cause.as_deref().unwrap_or(&self.detail.message))
    }
}

impl std::error::Error for ApiError {}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        ServiceError::Store(error).into()
    }
}

impl From<ServiceError> for ApiError {
    fn from(error: ServiceError) -> Self {
        let message = error.to_string();
        let coded = |code: ErrorCode, field: &str| ApiError::new(code, field, message.clone());
        match error {
            ServiceError::Invalid { field, .. } => ApiError::bad(&field, message),
            ServiceError::UnknownUser(_) => coded(ErrorCode::UnknownUser, "user"),
            ServiceError::NotBuilt(..) => coded(ErrorCode::NotBuilt, "conversation"),
            ServiceError::Store(store) => from_store(store, message),
            ServiceError::Other(_) => {
                tracing::warn!(error = %message, "request failed");
                ApiError::new(ErrorCode::Internal, "", message)
            }
        }
    }
}

/// A store's error as clients see it: what they can do, never what the store is.
fn from_store(error: StoreError, message: String) -> ApiError {
    let coded = |code: ErrorCode, field: &str| ApiError::new(code, field, message.clone());
    match error {
        StoreError::UnknownFact(_) => coded(ErrorCode::UnknownFact, "fact"),
        StoreError::UnknownJob(_) => coded(ErrorCode::UnknownJob, "job"),
        StoreError::UnknownEdit(_) => coded(ErrorCode::UnknownEdit, "edit"),
        StoreError::NotUndoable { .. } => coded(ErrorCode::NotUndoable, "edit"),
        StoreError::ScopeMismatch { field, .. } => coded(ErrorCode::ScopeMismatch, field),
        StoreError::UnknownConversation(_) => coded(ErrorCode::UnknownConversation, "conversation"),
        StoreError::UnknownMessage { .. } => coded(ErrorCode::UnknownMessage, "message"),
        StoreError::InvalidName(invalid) => ApiError::bad(invalid.kind.field(), message),
        StoreError::EmbedderMismatch { .. } => coded(ErrorCode::EmbedderMismatch, "conversation"),
        // The database's details (its user, host, name, the driver's words) go to the log
        // only: a client learns what it can do, not what the store is.
        StoreError::Unavailable(_) => {
            tracing::warn!(error = %message, "store unavailable");
            ApiError::new(
                ErrorCode::StoreUnavailable,
                "",
                "the store cannot be reached now; retry after the Retry-After seconds",
            )
            .caused_by(message)
        }
        StoreError::Authentication(_) => {
            tracing::error!(error = %message, "the store refused the server's credentials");
            ApiError::new(
                ErrorCode::StoreAuthentication,
                "",
                "the store refused this server's credentials; an operator must fix the \
                 server's configuration (retrying does not help)",
            )
            .caused_by(message)
        }
        StoreError::Postgres(_)
        | StoreError::Sqlite(_)
        | StoreError::Io(_)
        | StoreError::Corrupt(_) => {
            tracing::warn!(error = %message, "store failed");
            ApiError::new(
                ErrorCode::Internal,
                "",
                "the store failed; the server's log has the details",
            )
            .caused_by(message)
        }
        _ => {
            tracing::warn!(error = %message, "request failed");
            ApiError::new(ErrorCode::Internal, "", message)
        }
    }
}
