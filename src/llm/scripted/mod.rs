//! The scripted endpoint: an OpenAI-compatible HTTP server on `127.0.0.1` (random port) that
//! tests and offline demos point the real client stack at.
//!
//! It serves `POST /v1/chat/completions` and `POST /v1/embeddings`, answering either from a
//! script (queues of [`ScriptedReply`] consumed in order) or from a responder function that
//! sees each [`RecordedRequest`] (for concurrent callers that must be answered by content). It
//! records every request (path, headers, JSON body) for assertions and can inject the faults
//! real providers produce: 429 with `Retry-After` and an OpenRouter-style integer `code`,
//! 5xx, replies slower than the client timeout, malformed or non-JSON bodies, invalid tool-call
//! arguments, and a context-length 400. Embeddings default to a deterministic hashed
//! bag-of-words vector, so similar texts get similar vectors.
//!
//! The server stops when the [`ScriptedServer`] is dropped. It must be started inside a Tokio
//! runtime.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Uri};
use axum::response::Response;
use serde_json::Value;
use tokio::sync::oneshot;

use super::config::LlmConfig;
use super::retry::RetryPolicy;
use super::secret::Secret;
use super::{ToolCall, Usage};

mod faults;
mod respond;

pub use faults::{FaultLog, FaultMix, HungRequest, InjectedFault};
pub use respond::hashed_embedding;
use respond::render;

/// The API key [`ScriptedServer::llm_config`] uses (the server accepts any key).
pub const SCRIPTED_API_KEY: &str = "sk-scripted-test-key";

/// Dimension of the hashed bag-of-words embeddings (unless the request asks for `dimensions`).
pub const HASH_EMBEDDING_DIM: usize = 64;

/// One scripted answer. Wrappers ([`ScriptedReply::Delayed`], [`ScriptedReply::WithUsage`])
/// compose with the others.
#[derive(Debug, Clone, PartialEq)]
pub enum ScriptedReply {
    /// A 200 chat completion whose assistant message is this text (`finish_reason: stop`).
    Text(String),
    /// A 200 chat completion calling tools (`finish_reason: tool_calls`). Arguments are sent
    /// verbatim, so invalid JSON arguments are just a string that does not parse; an empty
    /// id is replaced by `call_<request>_<index>`.
    ToolCalls {
        /// Optional text next to the calls.
        content: Option<String>,
        /// The calls.
        calls: Vec<ToolCall>,
    },
    /// The inner reply with this usage block instead of the estimated one.
    WithUsage {
        /// Usage to report.
        usage: Usage,
        /// The reply.
        reply: Box<ScriptedReply>,
    },
    /// The inner reply after a delay (make it longer than the client timeout to test timeouts).
    Delayed {
        /// How long to wait before answering.
        delay: Duration,
        /// The reply.
        reply: Box<ScriptedReply>,
    },
    /// 429 with an OpenRouter-style body (`{"error": {"code": 429, ...}}`) and, if given, this
    /// `Retry-After` header value.
    RateLimited {
        /// `Retry-After` header value (seconds or an HTTP date).
        retry_after: Option<String>,
    },
    /// Any status with an OpenAI-style JSON error body carrying `message`.
    Status {
        /// HTTP status.
        status: u16,
        /// Error message (may echo anything, e.g. a key, to test scrubbing).
        message: String,
    },
    /// 400 `context_length_exceeded`, worded as OpenAI does.
    ContextLengthExceeded,
    /// 200 with `application/json` content type and a truncated JSON body.
    MalformedJson,
    /// 200 with an HTML page instead of JSON.
    NonJson,
    /// A 200 embeddings response with exactly these vectors.
    Embeddings(Vec<Vec<f32>>),
    /// A 200 embeddings response with hashed bag-of-words vectors of the inputs.
    HashEmbeddings,
    /// Anything else: status, extra headers and a raw body.
    Raw {
        /// HTTP status.
        status: u16,
        /// Extra headers.
        headers: Vec<(String, String)>,
        /// Body, sent as is.
        body: String,
    },
}

impl ScriptedReply {
    /// A text reply.
    pub fn text(text: impl Into<String>) -> Self {
        Self::Text(text.into())
    }

    /// A text reply containing this JSON value.
    pub fn json(value: &Value) -> Self {
        Self::Text(value.to_string())
    }

    /// One tool call with JSON arguments.
    pub fn tool_call(id: impl Into<String>, name: impl Into<String>, arguments: &Value) -> Self {
        Self::tool_call_raw(id, name, arguments.to_string())
    }

    /// One tool call with verbatim (possibly invalid) argument text.
    pub fn tool_call_raw(
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Self {
        Self::ToolCalls {
            content: None,
            calls: vec![ToolCall { id: id.into(), name: name.into(), arguments: arguments.into() }],
        }
    }

    /// A 429 with `Retry-After: <seconds>`.
    pub fn rate_limited(retry_after_seconds: u64) -> Self {
        Self::RateLimited { retry_after: Some(retry_after_seconds.to_string()) }
    }

    /// A server error (500, 502, 503, ...).
    pub fn server_error(status: u16) -> Self {
        Self::Status {
            status,
            message: "the server had an error while processing your request".to_owned(),
        }
    }

    /// This reply, after `delay`.
    pub fn delayed(self, delay: Duration) -> Self {
        Self::Delayed { delay, reply: Box::new(self) }
    }

    /// This reply, reporting the given usage.
    pub fn with_usage(self, prompt_tokens: u64, completion_tokens: u64) -> Self {
        Self::WithUsage { usage: Usage { prompt_tokens, completion_tokens }, reply: Box::new(self) }
    }
}

/// A request the server received.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRequest {
    /// Zero-based arrival number over all paths.
    pub index: usize,
    /// When the request arrived (to measure waits between attempts).
    pub received_at: Instant,
    /// Request path, e.g. `/v1/chat/completions`.
    pub path: String,
    /// Headers, names lowercased (repeated headers joined with `, `).
    pub headers: BTreeMap<String, String>,
    /// Parsed JSON body (`Null` if it was not JSON).
    pub body: Value,
}

impl RecordedRequest {
    /// A header value by (case-insensitive) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(&name.to_ascii_lowercase()).map(String::as_str)
    }

    /// Whether this is a chat completion request.
    pub fn is_chat(&self) -> bool {
        self.path.ends_with("/chat/completions")
    }

    /// Whether this is an embeddings request.
    pub fn is_embeddings(&self) -> bool {
        self.path.ends_with("/embeddings")
    }

    /// The `messages` array of a chat request (empty otherwise).
    pub fn messages(&self) -> &[Value] {
        self.body.get("messages").and_then(Value::as_array).map_or(&[], Vec::as_slice)
    }

    /// Text content of the last message.
    pub fn last_message_text(&self) -> &str {
        self.messages()
            .last()
            .and_then(|message| message.get("content"))
            .and_then(Value::as_str)
            .unwrap_or("")
    }

    /// Text contents of all messages, joined by newlines (for responders matching on content).
    pub fn transcript(&self) -> String {
        self.messages()
            .iter()
            .filter_map(|message| message.get("content").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The `input` texts of an embeddings request (a single string counts as one).
    pub fn embedding_inputs(&self) -> Vec<String> {
        match self.body.get("input") {
            Some(Value::String(text)) => vec![text.clone()],
            Some(Value::Array(items)) => {
                items.iter().map(|item| item.as_str().unwrap_or_default().to_owned()).collect()
            }
            _ => Vec::new(),
        }
    }
}

type Responder = Arc<dyn Fn(&RecordedRequest) -> ScriptedReply + Send + Sync>;

/// The running server. Dropping it stops the server.
pub struct ScriptedServer {
    base_url: String,
    address: SocketAddr,
    state: Arc<ServerState>,
    shutdown: Option<oneshot::Sender<()>>,
}

/// Shared between the handle and the request handler. The mutex guards the queues and the
/// request log; it is locked only for short, non-async sections (never across an `.await`).
struct ServerState {
    responder: Option<Responder>,
    inner: Mutex<Script>,
}

#[derive(Default)]
struct Script {
    chat_script: VecDeque<ScriptedReply>,
    embedding_script: VecDeque<ScriptedReply>,
    requests: Vec<RecordedRequest>,
}

impl ScriptedServer {
    /// A server in script mode with empty queues (push replies with [`Self::push`]).
    pub async fn start() -> std::io::Result<Self> {
        Self::launch(None).await
    }

    /// A server answering chat requests with `replies`, in order.
    pub async fn with_script(
        replies: impl IntoIterator<Item = ScriptedReply>,
    ) -> std::io::Result<Self> {
        let server = Self::launch(None).await?;
        server.lock().chat_script.extend(replies);
        Ok(server)
    }

    /// A server answering every request (chat and embeddings) with `responder`.
    pub async fn with_responder<F>(responder: F) -> std::io::Result<Self>
    where
        F: Fn(&RecordedRequest) -> ScriptedReply + Send + Sync + 'static,
    {
        Self::launch(Some(Arc::new(responder))).await
    }

    async fn launch(responder: Option<Responder>) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let address = listener.local_addr()?;
        let state = Arc::new(ServerState { responder, inner: Mutex::new(Script::default()) });
        let app = Router::new().fallback(handle).with_state(Arc::clone(&state));
        let (shutdown, stopped) = oneshot::channel::<()>();
        tokio::spawn(async move {
            let serve = axum::serve(listener, app).with_graceful_shutdown(async move {
                let _ = stopped.await;
            });
            if let Err(error) = serve.await {
                tracing::warn!(%error, "scripted endpoint stopped with an error");
            }
        });
        Ok(Self {
            base_url: format!("http://{address}/v1"),
            address,
            state,
            shutdown: Some(shutdown),
        })
    }

    /// The API base to configure clients with, e.g. `http://127.0.0.1:41234/v1`.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// A client configuration for this server: [`SCRIPTED_API_KEY`], `model`, 5 s per
    /// attempt and fast retries (3 attempts, 10 ms base delay), so tests stay quick. Build the
    /// real stack from it with `build_chat_model` / `build_embedder`.
    pub fn llm_config(&self, model: &str) -> LlmConfig {
        let mut config =
            LlmConfig::new(self.base_url.clone(), Secret::new(SCRIPTED_API_KEY), model);
        config.timeout = Duration::from_secs(5);
        config.retry = RetryPolicy {
            max_attempts: 3,
            base_delay: Duration::from_millis(10),
            max_delay: Duration::from_millis(100),
            max_retry_after: Duration::from_secs(5),
        };
        config
    }

    /// The socket address the server listens on.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Append a reply to the chat script.
    pub fn push(&self, reply: ScriptedReply) {
        self.lock().chat_script.push_back(reply);
    }

    /// Append a reply to the embeddings script (when it is empty, embeddings are hashed).
    pub fn push_embedding(&self, reply: ScriptedReply) {
        self.lock().embedding_script.push_back(reply);
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.lock().requests.clone()
    }

    /// Requests received so far.
    pub fn request_count(&self) -> usize {
        self.lock().requests.len()
    }

    /// Chat replies not yet consumed.
    pub fn remaining(&self) -> usize {
        self.lock().chat_script.len()
    }

    fn lock(&self) -> MutexGuard<'_, Script> {
        self.state.lock()
    }
}

impl ServerState {
    fn lock(&self) -> MutexGuard<'_, Script> {
        // A panic while holding the lock cannot leave the queues half-updated (every section
        // is a single push/pop), so a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl fmt::Debug for ScriptedServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScriptedServer").field("base_url", &self.base_url).finish_non_exhaustive()
    }
}

impl Drop for ScriptedServer {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }
}

async fn handle(
    State(state): State<Arc<ServerState>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let mut header_map = BTreeMap::new();
    for (name, value) in &headers {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        header_map
            .entry(name.as_str().to_owned())
            .and_modify(|existing: &mut String| {
                existing.push_str(", ");
                existing.push_str(&value);
            })
            .or_insert(value);
    }
    let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let received_at = Instant::now();
    let (request, reply) = {
        let mut inner = state.lock();
        let request = RecordedRequest {
            index: inner.requests.len(),
            received_at,
            path: uri.path().to_owned(),
            headers: header_map,
            body,
        };
        inner.requests.push(request.clone());
        let reply = match &state.responder {
            Some(_) => None,
            None if request.is_chat() => {
                Some(inner.chat_script.pop_front().unwrap_or_else(|| ScriptedReply::Status {
                    status: 500,
                    message: format!(
                        "scripted endpoint: script exhausted at request {}",
                        request.index
                    ),
                }))
            }
            None if request.is_embeddings() => {
                Some(inner.embedding_script.pop_front().unwrap_or(ScriptedReply::HashEmbeddings))
            }
            None => Some(ScriptedReply::Status {
                status: 404,
                message: format!("no route for {}", request.path),
            }),
        };
        (request, reply)
    };
    let reply = match (reply, &state.responder) {
        (Some(reply), _) => reply,
        (None, Some(responder)) => responder(&request),
        (None, None) => ScriptedReply::Status { status: 500, message: "no reply".to_owned() },
    };
    render(reply, &request).await
}

#[cfg(test)]
mod tests;
