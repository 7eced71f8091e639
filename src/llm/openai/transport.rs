//! One HTTP attempt: the async-openai client with [`StatusAwareService`] in place of its
//! retrying default, run under the per-attempt timeout.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use async_openai::config::OpenAIConfig;
use async_openai::error::OpenAIError;
use async_openai::middleware::HttpRequestFactory;
use reqwest::header::{AUTHORIZATION, HeaderName, RETRY_AFTER};

use super::errors::{ErrorMapping, HttpStatusError};
use crate::llm::Error;
use crate::llm::budget::Step;
use crate::llm::config::LlmConfig;
use crate::llm::retry::parse_retry_after;
use crate::llm::usage::UsageMeter;

/// What chat and embeddings share: the async-openai client, the error mapping (key for
/// scrubbing, per-attempt timeout) and the run's usage meter.
#[derive(Clone)]
pub(super) struct Transport {
    pub(super) client: async_openai::Client<OpenAIConfig>,
    pub(super) base_url: String,
    pub(super) errors: ErrorMapping,
    pub(super) meter: Arc<UsageMeter>,
}

impl Transport {
    pub(super) fn new(config: &LlmConfig, meter: Arc<UsageMeter>) -> Result<Self, Error> {
        let base_url = config.base_url.trim_end_matches('/').to_owned();
        if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
            return Err(Error::Config(format!(
                "base url must start with http:// or https://: {base_url}"
            )));
        }
        let mut openai_config = OpenAIConfig::new()
            .with_api_base(base_url.clone())
            .with_api_key(config.api_key.expose());
        for (name, value) in &config.extra_headers {
            let header = HeaderName::from_bytes(name.as_bytes())
                .map_err(|error| Error::Config(format!("invalid header name `{name}`: {error}")))?;
            openai_config = openai_config.with_header(header, value.as_str()).map_err(|error| {
                Error::Config(format!("invalid value for header `{name}`: {error}"))
            })?;
        }
        let http = reqwest::Client::builder()
            .connect_timeout(config.timeout.min(Duration::from_secs(30)))
            .build()
            .map_err(|error| Error::Config(format!("cannot build the http client: {error}")))?;
        let client = async_openai::Client::with_config(openai_config)
            .with_http_service(StatusAwareService { http });
        Ok(Self {
            client,
            base_url,
            errors: ErrorMapping { api_key: config.api_key.clone(), timeout: config.timeout },
            meter,
        })
    }

    /// Run one request (of `step`, when it names one) under the per-attempt timeout, mapping
    /// every failure to a typed error.
    pub(super) async fn send<T, F, Fut>(&self, step: Option<Step>, call: F) -> Result<T, Error>
    where
        F: FnOnce(async_openai::Client<OpenAIConfig>) -> Fut,
        Fut: Future<Output = Result<T, OpenAIError>>,
    {
        self.meter.record_request(step);
        match tokio::time::timeout(self.errors.timeout, call(self.client.clone())).await {
            Err(_elapsed) => Err(Error::Timeout { attempts: 1, timeout: self.errors.timeout }),
            Ok(Err(error)) => Err(self.errors.map_error(error)),
            Ok(Ok(value)) => Ok(value),
        }
    }
}

/// The HTTP service installed into async-openai instead of its retrying default: sends each
/// request once and turns a non-2xx response into an [`HttpStatusError`] (boxed into
/// `OpenAIError::Boxed`) carrying the raw status, `Retry-After` and body.
#[derive(Clone, Debug)]
struct StatusAwareService {
    http: reqwest::Client,
}

type ResponseFuture = Pin<Box<dyn Future<Output = Result<reqwest::Response, OpenAIError>> + Send>>;

impl tower::Service<HttpRequestFactory> for StatusAwareService {
    type Response = reqwest::Response;
    type Error = OpenAIError;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, _context: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, factory: HttpRequestFactory) -> Self::Future {
        let http = self.http.clone();
        Box::pin(async move {
            let mut request = factory.build().await?;
            // Marked sensitive so that no Debug rendering of the request (ours, reqwest's or
            // hyper's) can print the key.
            if let Some(value) = request.headers_mut().get_mut(AUTHORIZATION) {
                value.set_sensitive(true);
            }
            let response = http.execute(request).await.map_err(OpenAIError::Reqwest)?;
            let status = response.status();
            if status.is_success() {
                return Ok(response);
            }
            let retry_after = response
                .headers()
                .get(RETRY_AFTER)
                .and_then(|value| value.to_str().ok())
                .and_then(parse_retry_after);
            let body = response.text().await.unwrap_or_default();
            Err(OpenAIError::Boxed(Box::new(HttpStatusError {
                status: status.as_u16(),
                retry_after,
                body,
            })))
        })
    }
}
