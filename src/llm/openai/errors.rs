//! Error mapping: every transport failure and every error body becomes a typed [`Error`],
//! with server text scrubbed of the API key and bounded in length.

use async_openai::error::OpenAIError;
use serde_json::Value;

use std::time::Duration;

use serde::Deserialize;

use crate::llm::Error;
use crate::llm::retry::error_for_status;
use crate::llm::secret::Secret;

/// Longest body excerpt kept in an error message (bytes, cut at a character boundary).
pub(super) const BODY_EXCERPT: usize = 2000;

/// What error mapping needs to know: the key to scrub from server text and the per-attempt
/// timeout to report.
#[derive(Clone)]
pub(super) struct ErrorMapping {
    pub(super) api_key: Secret,
    pub(super) timeout: Duration,
}

/// A non-success response, captured before async-openai tries to parse its body.
#[derive(Debug, thiserror::Error)]
#[error("endpoint returned status {status}")]
pub(super) struct HttpStatusError {
    pub(super) status: u16,
    pub(super) retry_after: Option<Duration>,
    pub(super) body: String,
}

/// An error object; `code` may be an integer (OpenRouter) or a string (OpenAI).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct WireError {
    pub(super) message: Option<String>,
    pub(super) code: Option<Value>,
}

impl ErrorMapping {
    pub(super) fn map_error(&self, error: OpenAIError) -> Error {
        match error {
            OpenAIError::Boxed(boxed) => match boxed.downcast::<HttpStatusError>() {
                Ok(status) => {
                    error_for_status(status.status, status.retry_after, self.excerpt(&status.body))
                }
                Err(other) => Error::Connection {
                    attempts: 1,
                    message: self.api_key.scrub(&error_chain(&*other)),
                },
            },
            OpenAIError::Reqwest(error) if error.is_timeout() => {
                Error::Timeout { attempts: 1, timeout: self.timeout }
            }
            OpenAIError::Reqwest(error) => {
                Error::Connection { attempts: 1, message: self.api_key.scrub(&error_chain(&error)) }
            }
            OpenAIError::JSONDeserialize(error, body) => {
                Error::Decode { message: format!("{error}: {}", self.excerpt(&body)) }
            }
            OpenAIError::ApiError(api) => Error::Api {
                status: api.status_code.as_u16(),
                attempts: 1,
                body: self.excerpt(&api.api_error.to_string()),
                retry_after: None,
            },
            other => Error::Config(self.api_key.scrub(&other.to_string())),
        }
    }

    /// A scrubbed, bounded excerpt of server text.
    pub(super) fn excerpt(&self, text: &str) -> String {
        let scrubbed = self.api_key.scrub(text.trim());
        if scrubbed.len() <= BODY_EXCERPT {
            return scrubbed;
        }
        let mut end = BODY_EXCERPT;
        while !scrubbed.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}…", &scrubbed[..end])
    }

    /// An error object inside a 2xx body (OpenRouter does this when the upstream provider
    /// fails mid-request). A numeric `code` that is an HTTP status is used as such; anything
    /// else counts as a 502 from the upstream, which is retryable.
    pub(super) fn embedded_error(&self, error: WireError) -> Error {
        let status = match &error.code {
            Some(Value::Number(number)) => number.as_u64(),
            Some(Value::String(text)) => text.parse().ok(),
            _ => None,
        }
        .and_then(|code| u16::try_from(code).ok())
        .filter(|code| (400..600).contains(code))
        .unwrap_or(502);
        let body = serde_json::json!({ "error": { "message": error.message, "code": error.code } })
            .to_string();
        error_for_status(status, None, self.excerpt(&body))
    }
}

/// An error and its sources on one line (reqwest puts the interesting part, e.g. "connection
/// refused", in the source chain).
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
