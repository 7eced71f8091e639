//! The errors of the LLM layer ([`Error`]), by kind.

use std::time::Duration;

use super::Usage;

/// Errors of the LLM layer. Callers branch on the kind: retry decisions, context-length
/// handling, stopping a run on a fatal error ([`Error::is_fatal`]), and per-question error
/// reporting all depend on it. `Clone` so that the fatal latch can hand the same error to
/// every later call.
///
/// Serialisable so that a call that failed at the endpoint is recorded on a run's tape with
/// its error, and replayed as the same error ([`super::tape`]).
#[derive(Debug, Clone, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum Error {
    /// HTTP 429 after all retries.
    #[error("rate limited by the endpoint after {attempts} attempts (status 429): {body}")]
    RateLimited {
        /// Attempts made.
        attempts: u32,
        /// Response body excerpt.
        body: String,
        /// The wait the endpoint asked for (`Retry-After`), if it sent one.
        retry_after: Option<Duration>,
    },
    /// A non-success HTTP status that is not retryable, or still failing after all retries.
    #[error("endpoint returned status {status} after {attempts} attempts: {body}")]
    Api {
        /// HTTP status.
        status: u16,
        /// Attempts made.
        attempts: u32,
        /// Response body excerpt.
        body: String,
        /// The wait the endpoint asked for (`Retry-After`), if it sent one.
        retry_after: Option<Duration>,
    },
    /// The prompt does not fit the model's context window (a 400 saying so).
    #[error("prompt exceeds the model's context length: {body}")]
    ContextLength {
        /// Response body excerpt.
        body: String,
    },
    /// The request timed out on every attempt.
    #[error("request timed out after {attempts} attempts ({timeout:?} each)")]
    Timeout {
        /// Attempts made.
        attempts: u32,
        /// Per-attempt timeout.
        timeout: Duration,
    },
    /// The connection failed on every attempt.
    #[error("connection to the endpoint failed after {attempts} attempts: {message}")]
    Connection {
        /// Attempts made.
        attempts: u32,
        /// Underlying error text.
        message: String,
    },
    /// The endpoint answered 2xx but the body could not be understood (truncated, not JSON).
    /// Retried like a 5xx.
    #[error("could not decode the endpoint's response: {message}")]
    Decode {
        /// What went wrong, with a body excerpt.
        message: String,
    },
    /// The endpoint answered 2xx with a well-formed body that holds no usable reply: no
    /// choices, `finish_reason: "error"`, or neither text nor tool calls. Retried like a 5xx.
    #[error("the endpoint's reply is unusable after {attempts} attempts: {reason}")]
    BadReply {
        /// What was wrong with it.
        reason: String,
        /// Attempts made.
        attempts: u32,
        /// Tokens the endpoint reported for the unusable reply (they are billed all the same).
        usage: Usage,
    },
    /// The endpoint refused the credentials (401, 403). Fatal: no later call can succeed, so
    /// the client fails every later call at once with this error.
    #[error(
        "the endpoint refused the API key (status {status}: {}); set a valid key in {key_variable} (environment or .env), or check that --base-url / MRAGENT_BASE_URL points at the right server",
        or_no_details(body)
    )]
    Auth {
        /// HTTP status.
        status: u16,
        /// Response body excerpt (scrubbed of the key; may be empty).
        body: String,
        /// The environment variable the key is read from.
        key_variable: String,
    },
    /// The endpoint does not know the model (404, or an "invalid model" 400). Fatal like
    /// [`Error::Auth`].
    #[error(
        "the endpoint does not serve model `{model}` (status {status}: {}); choose another with --model / --re-model (MRAGENT_MODEL), or check --base-url / MRAGENT_BASE_URL",
        or_no_details(body)
    )]
    ModelNotFound {
        /// The model id that was asked for.
        model: String,
        /// HTTP status.
        status: u16,
        /// Response body excerpt.
        body: String,
    },
    /// Structured output still invalid after the allowed re-asks.
    #[error(
        "model output does not match schema `{schema}` at `{path}` after {attempts} attempts: {message}"
    )]
    SchemaInvalid {
        /// Schema name.
        schema: String,
        /// JSON pointer of the first failing location (`""` for the root or unparsable JSON).
        path: String,
        /// Validator message.
        message: String,
        /// Attempts made.
        attempts: u32,
        /// Tokens of all attempts (the first ask and every re-ask): billed all the same.
        usage: Usage,
        /// The last rejected reply, cut to [`structured::REJECTED_EXCERPT`] bytes, so traces
        /// can show what the model said.
        reply: String,
    },
    /// Configuration problem (missing key, bad URL).
    #[error("{0}")]
    Config(String),
    /// Replay without `--fill`: the code sent a request the run never recorded. Fatal.
    #[error(
        "replay: {what} was never recorded; nothing was sent (`--fill` sends the requests that are missing and records them)"
    )]
    Unrecorded {
        /// The work item and the request (key, model, size, last message).
        what: String,
    },
    /// The recorded calls could not be read or written. Fatal: a run whose calls cannot be
    /// recorded could not be replayed or verified.
    #[error("{0}")]
    Tape(String),
}

fn or_no_details(body: &str) -> &str {
    if body.trim().is_empty() { "no details in the reply" } else { body }
}

impl Error {
    /// Whether no later call to the same endpoint can succeed (refused key, unknown model,
    /// bad configuration): callers stop the run instead of failing item after item.
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            Error::Auth { .. }
                | Error::ModelNotFound { .. }
                | Error::Config(_)
                | Error::Unrecorded { .. }
                | Error::Tape(_)
        )
    }

    /// Attempts made before this error (1 for kinds that are not retried).
    pub fn attempts(&self) -> u32 {
        match self {
            Error::RateLimited { attempts, .. }
            | Error::Api { attempts, .. }
            | Error::Timeout { attempts, .. }
            | Error::Connection { attempts, .. }
            | Error::BadReply { attempts, .. }
            | Error::SchemaInvalid { attempts, .. } => *attempts,
            _ => 1,
        }
    }

    /// Tokens the endpoint reported for the failed call's replies (zero when none came back):
    /// add them to per-stage totals so failed calls are paid for.
    pub fn usage(&self) -> Usage {
        match self {
            Error::BadReply { usage, .. } | Error::SchemaInvalid { usage, .. } => *usage,
            _ => Usage::default(),
        }
    }
}
