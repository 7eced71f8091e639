//! Recorded model calls: a [`Tape`] keeps every chat and embedding request a run sent with the
//! reply that was used, in a [`CallStore`], and plays them back.
//!
//! - [`TapeMode::Record`] (every `run`, judged `eval`, `compare` and `learn`): a request
//!   already on the tape gets its recorded reply without being sent, so a request is sent at
//!   most once per recorded run and each key stands for exactly one reply; any other is sent
//!   through the client stack (retries, hedges and their log untouched) and recorded before its
//!   reply is used. A chat request asked while an identical one is in flight waits for it and
//!   takes its reply from the tape (two attempts with the same review prompt, say).
//! - [`TapeMode::Replay`] (`replay`, `verify`): nothing is sent. A request missing from the
//!   tape fails with [`Error::Unrecorded`], which names the work item (question) it belongs to
//!   and the request; with `fill` it is sent and recorded instead.
//!
//! Keys: a chat request's is the hash of its JSON (model, messages, tools, every parameter);
//! an embedding's is per text (embedder name and text), so batches may be cut differently on
//! replay. Local embeddings are recorded too: replaying them makes a run independent of the
//! host's floating-point kernels.
//!
//! The work item of a call comes from [`within`], a task-local label the answer loop sets per
//! question (and `learn` per fold, step and pass around it).
//!
//! A chat call that fails at the endpoint after the client's retries (a 5xx, a timeout, an
//! unusable reply; not a refused key) is recorded with its error ([`FAILED_CHAT`]), so a
//! replay meets the same failure and grades or salvages it as the run did. Recording, a
//! failure is met again by an identical request, unless an earlier run recorded it for the
//! same work item (a question asked again by a resumed run): that one is asked afresh and
//! replaced by what comes back.
//!
//! A judgement is one unit of calls ([`afresh_on_failure`]): answered from the tape when all its
//! calls were recorded; when it failed with every call replayed, its calls are taken off the
//! tape and it is asked afresh, so a failure is never replayed forever.

mod bodies;
mod keys;
pub mod store;
mod taped;
mod unit;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use serde::Serialize;
use serde_json::Value;

pub use keys::{chat_key, decode_vector, embed_key, encode_vector};
pub use store::{CallStore, FAILED_CHAT, NewCall, StoreSize, StoredCall, TapeError};
pub use taped::{Offline, TapedChat, TapedEmbedder};

use keys::{describe_chat, describe_embed};
pub use unit::{UnitCalls, afresh_on_failure};

use super::{ChatRequest, ChatResponse, Embeddings, Error, Usage};

tokio::task_local! {
    static CONTEXT: String;
}

/// Runs `future` with `label` (`question <id>`, `the build of <sample>`) as the work item its
/// model calls belong to. Inside another work item the label is added to it
/// (`learn fold 0 step 1 attempt 2: question conv-7:3`), so a call says where it belongs at
/// every level.
pub async fn within<F: Future>(label: String, future: F) -> F::Output {
    let label = match CONTEXT.try_with(Clone::clone) {
        Ok(outer) if !outer.is_empty() => format!("{outer}: {label}"),
        _ => label,
    };
    CONTEXT.scope(label, future).await
}

/// The current work item, or empty.
fn context() -> String {
    CONTEXT.try_with(Clone::clone).unwrap_or_default()
}

/// What a tape does with a request (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TapeMode {
    /// Send what is not recorded yet, and record it.
    Record,
    /// Send nothing; with `fill`, send and record what is missing.
    Replay {
        /// Send the requests that were never recorded.
        fill: bool,
    },
}

/// What a tape did, over all its clones.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct TapeTotals {
    /// Requests sent to the endpoint and recorded (chat calls and embedded texts).
    pub recorded: u64,
    /// Requests answered from the tape.
    pub replayed: u64,
    /// Requests answered from the tape while recording (sent before, in this run).
    pub reused: u64,
    /// Replay with `fill`: requests that were missing and were sent.
    pub filled: u64,
    /// Of `recorded` and `filled`: chat requests that failed at the endpoint, with their error.
    pub failed: u64,
    /// Embedded texts sent at the same time as an identical one (two batches asking at once):
    /// the store keeps the first vector, so they are neither recorded nor filled. (Identical
    /// chat requests wait for each other and are not sent twice.)
    pub duplicates: u64,
}

#[derive(Debug, Default)]
struct TapeCounters {
    recorded: AtomicU64,
    replayed: AtomicU64,
    reused: AtomicU64,
    filled: AtomicU64,
    failed: AtomicU64,
    duplicates: AtomicU64,
}

/// A call store in a mode (see the module documentation). Share it behind an `Arc`.
#[derive(Debug)]
pub struct Tape {
    store: Arc<CallStore>,
    mode: TapeMode,
    counters: TapeCounters,
    /// The chat requests being asked now, by key: an identical request waits for the first.
    inflight: Mutex<BTreeMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Replay: the first request that was not on the tape (its work item and request).
    first_unrecorded: Mutex<Option<String>>,
    /// The chat keys this tape recorded (this run's own calls, see [`unit`]).
    fresh: Mutex<std::collections::BTreeSet<String>>,
    /// Whether a failed unit may take an earlier run's calls off this tape (see
    /// [`Tape::keep_failures`]).
    forgets: std::sync::atomic::AtomicBool,
}

impl Tape {
    /// A tape over `store` in `mode`.
    pub fn new(store: Arc<CallStore>, mode: TapeMode) -> Arc<Self> {
        Arc::new(Self {
            store,
            mode,
            counters: TapeCounters::default(),
            inflight: Mutex::new(BTreeMap::new()),
            first_unrecorded: Mutex::new(None),
            fresh: Mutex::new(std::collections::BTreeSet::new()),
            forgets: std::sync::atomic::AtomicBool::new(true),
        })
    }

    /// No call is ever taken off this tape, a failed one included: for a run whose records on
    /// disk rest on every reply it met (`learn`'s steps), so that its replay meets the same
    /// replies. A reply that failed to be used (unreadable, off-schema) is met again until the
    /// tape is deleted; a failure at the endpoint ([`FAILED_CHAT`]) is still asked afresh by a
    /// later run, as on every tape, so an unreachable endpoint can be fixed and the run resumed.
    pub fn keep_failures(&self) {
        self.forgets.store(false, Ordering::Relaxed);
    }

    /// Replay: the first request asked that was not on the tape, as [`Error::Unrecorded`]
    /// named it; whoever asked may have counted the failure as a wrong answer and gone on.
    pub fn first_unrecorded(&self) -> Option<String> {
        self.first_unrecorded.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// The error of a request missing from a replayed tape; the first is kept.
    fn unrecorded(&self, what: String) -> Error {
        let mut first =
            self.first_unrecorded.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        first.get_or_insert_with(|| what.clone());
        Error::Unrecorded { what }
    }

    /// The store.
    pub fn store(&self) -> &Arc<CallStore> {
        &self.store
    }

    /// The mode.
    pub fn mode(&self) -> TapeMode {
        self.mode
    }

    /// What the tape did so far.
    pub fn totals(&self) -> TapeTotals {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        TapeTotals {
            recorded: load(&self.counters.recorded),
            replayed: load(&self.counters.replayed),
            reused: load(&self.counters.reused),
            filled: load(&self.counters.filled),
            failed: load(&self.counters.failed),
            duplicates: load(&self.counters.duplicates),
        }
    }

    fn count_hit(&self, n: u64) {
        let counter = match self.mode {
            TapeMode::Record => &self.counters.reused,
            TapeMode::Replay { .. } => &self.counters.replayed,
        };
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// `sent` requests went out, of which `stored` were new to the store: the others were
    /// duplicates of a request recorded meanwhile.
    fn count_sent(&self, sent: u64, stored: u64) {
        let counter = match self.mode {
            TapeMode::Record => &self.counters.recorded,
            TapeMode::Replay { .. } => &self.counters.filled,
        };
        counter.fetch_add(stored, Ordering::Relaxed);
        self.counters.duplicates.fetch_add(sent.saturating_sub(stored), Ordering::Relaxed);
    }

    fn sends(&self) -> bool {
        !matches!(self.mode, TapeMode::Replay { fill: false })
    }

    /// The reply to `request`: recorded, or obtained by `send` and recorded (see the module
    /// documentation). An identical request in flight is waited for, then read from the tape.
    pub async fn chat<F, Fut>(&self, request: &ChatRequest, send: F) -> Result<ChatResponse, Error>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<ChatResponse, Error>>,
    {
        let value = serde_json::to_value(request).map_err(|error| tape_error(&error))?;
        let key = chat_key(&value);
        let hold = self.gate(&key);
        let _turn = hold.gate.lock().await;
        self.chat_once(&key, value, request, send).await
    }

    /// This task's hold on the gate of `key`, shared by the tasks asking it now.
    fn gate(&self, key: &str) -> GateHold<'_> {
        let mut inflight = self.inflight.lock().unwrap_or_else(PoisonError::into_inner);
        let gate = Arc::clone(inflight.entry(key.to_string()).or_default());
        GateHold { tape: self, key: key.to_string(), gate }
    }

    /// [`Tape::chat`] for the task whose turn it is.
    async fn chat_once<F, Fut>(
        &self,
        key: &str,
        value: Value,
        request: &ChatRequest,
        send: F,
    ) -> Result<ChatResponse, Error>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<ChatResponse, Error>>,
    {
        let key = key.to_string();
        let recorded = match self.lookup_chat(&key).await? {
            Some(call) if call.failed => match self.recorded_failure(&key, call) {
                Some(error) => return Err(error),
                // An earlier run's failure of this work item, recording: asked afresh, and
                // replaced.
                None => None,
            },
            Some(call) => Some(call.reply),
            None => None,
        };
        if let Some(bytes) = recorded {
            let response = serde_json::from_slice(&bytes).map_err(|error| {
                Error::Tape(format!("the recorded reply of {key} is unreadable: {error}"))
            })?;
            self.count_hit(1);
            if self.mode == TapeMode::Record {
                let fresh = self.fresh.lock().unwrap_or_else(PoisonError::into_inner);
                let earlier = self.forgets.load(Ordering::Relaxed) && !fresh.contains(&key);
                drop(fresh);
                unit::note_replayed(unit::Replayed {
                    store: Arc::clone(&self.store),
                    key: key.clone(),
                    reply: bytes,
                    earlier,
                });
            }
            return Ok(response);
        }
        if !self.sends() {
            return Err(self.unrecorded(describe_chat(&key, request)));
        }
        unit::note_sent();
        let response = match send().await {
            Ok(response) => response,
            Err(error) => {
                if records_failure(&error) {
                    let failure = serde_json::to_vec(&error).map_err(|error| tape_error(&error))?;
                    self.fresh.lock().unwrap_or_else(PoisonError::into_inner).insert(key.clone());
                    let model = request.model.clone();
                    let stored = self.record(key, FAILED_CHAT, model, value, failure).await?;
                    self.count_sent(1, stored as u64);
                    self.counters.failed.fetch_add(stored as u64, Ordering::Relaxed);
                }
                return Err(error);
            }
        };
        unit::note_usage(response.usage);
        let reply = serde_json::to_vec(&response).map_err(|error| tape_error(&error))?;
        self.fresh.lock().unwrap_or_else(PoisonError::into_inner).insert(key.clone());
        let stored = self.record(key, "chat", request.model.clone(), value, reply).await?;
        self.count_sent(1, stored as u64);
        Ok(response)
    }

    /// The vectors of `texts` by `model`: recorded ones from the tape, the others from `send`
    /// (called once, with the missing texts in order) and recorded.
    pub async fn embed<F, Fut>(
        &self,
        model: &str,
        texts: &[String],
        send: F,
    ) -> Result<Embeddings, Error>
    where
        F: FnOnce(Vec<String>) -> Fut,
        Fut: Future<Output = Result<Embeddings, Error>>,
    {
        let keys: Vec<String> = texts.iter().map(|text| embed_key(model, text)).collect();
        let mut vectors: Vec<Option<Vec<f32>>> = self
            .lookup_all(keys.clone())
            .await?
            .into_iter()
            .map(|bytes| bytes.map(|bytes| decode_vector(&bytes)))
            .collect();
        let missing: Vec<usize> = (0..texts.len()).filter(|&i| vectors[i].is_none()).collect();
        self.count_hit((texts.len() - missing.len()) as u64);
        let mut usage = Usage::default();
        if let Some(&first) = missing.first() {
            if !self.sends() {
                return Err(self.unrecorded(describe_embed(
                    &keys[first],
                    model,
                    &texts[first],
                    missing.len(),
                )));
            }
            // A text that is twice in the batch is asked once.
            let mut unique: Vec<usize> = Vec::with_capacity(missing.len());
            for &i in &missing {
                if !unique.iter().any(|&j| keys[j] == keys[i]) {
                    unique.push(i);
                }
            }
            let asked: Vec<String> = unique.iter().map(|&i| texts[i].clone()).collect();
            let embedded = send(asked).await?;
            if embedded.vectors.len() != unique.len() {
                return Err(Error::Decode {
                    message: format!(
                        "asked for {} embeddings, got {}",
                        unique.len(),
                        embedded.vectors.len()
                    ),
                });
            }
            usage = embedded.usage;
            let mut records = Vec::with_capacity(unique.len());
            for (&i, vector) in unique.iter().zip(embedded.vectors) {
                let request = serde_json::json!({ "model": model, "input": texts[i] });
                records.push((keys[i].clone(), request, encode_vector(&vector)));
                vectors[i] = Some(vector);
            }
            for &i in &missing {
                if vectors[i].is_none()
                    && let Some(&j) = unique.iter().find(|&&j| keys[j] == keys[i])
                {
                    vectors[i] = vectors[j].clone();
                }
            }
            // One transaction for the batch.
            let stored = self.record_all("embed", model.to_string(), records).await?;
            self.count_sent(unique.len() as u64, stored as u64);
            self.count_hit((missing.len() - unique.len()) as u64);
        }
        Ok(Embeddings { vectors: vectors.into_iter().flatten().collect(), usage })
    }

    /// The error a failed call recorded for `key` is played back as: always when replaying;
    /// when recording, if this run recorded it (a request stands for one reply per run) or
    /// another work item recorded it (what that item wrote rests on the failure). `None` for
    /// an earlier run's failure of the work item asking now, which is asked afresh.
    fn recorded_failure(&self, key: &str, call: store::RecordedChat) -> Option<Error> {
        let ours = self.fresh.lock().unwrap_or_else(PoisonError::into_inner).contains(key);
        if self.mode == TapeMode::Record && !ours && call.context == context() {
            return None;
        }
        self.count_hit(1);
        if self.mode == TapeMode::Record {
            // Met again, not sent: a unit that fails on it must not take other calls off the
            // tape as if every call it met were an earlier run's (`unit::afresh_on_failure`).
            unit::note_replayed(unit::Replayed {
                store: Arc::clone(&self.store),
                key: key.to_string(),
                reply: call.reply.clone(),
                earlier: false,
            });
        }
        Some(serde_json::from_slice(&call.reply).unwrap_or_else(|error| {
            Error::Tape(format!("the recorded failure of {key} is unreadable: {error}"))
        }))
    }

    async fn lookup_chat(&self, key: &str) -> Result<Option<store::RecordedChat>, Error> {
        let store = Arc::clone(&self.store);
        let key = key.to_string();
        tokio::task::spawn_blocking(move || store.chat_reply(&key))
            .await
            .map_err(|error| Error::Tape(format!("reading the recorded calls: {error}")))?
            .map_err(|error| Error::Tape(error.to_string()))
    }

    async fn lookup_all(&self, keys: Vec<String>) -> Result<Vec<Option<Vec<u8>>>, Error> {
        let store = Arc::clone(&self.store);
        tokio::task::spawn_blocking(move || store.replies(&keys))
            .await
            .map_err(|error| Error::Tape(format!("reading the recorded calls: {error}")))?
            .map_err(|error| Error::Tape(error.to_string()))
    }

    async fn record(
        &self,
        key: String,
        kind: &'static str,
        model: String,
        request: Value,
        reply: Vec<u8>,
    ) -> Result<usize, Error> {
        self.record_all(kind, model, vec![(key, request, reply)]).await
    }

    /// Records `(key, request, reply)` calls of one kind and model in one transaction, under
    /// the current work item; how many were new to the store.
    async fn record_all(
        &self,
        kind: &'static str,
        model: String,
        calls: Vec<(String, Value, Vec<u8>)>,
    ) -> Result<usize, Error> {
        let store = Arc::clone(&self.store);
        let context = context();
        tokio::task::spawn_blocking(move || {
            let calls: Vec<NewCall<'_>> = calls
                .iter()
                .map(|(key, request, reply)| NewCall {
                    key,
                    kind,
                    model: &model,
                    context: &context,
                    request,
                    reply,
                })
                .collect();
            store.put_all(&calls)
        })
        .await
        .map_err(|error| Error::Tape(format!("recording calls: {error}")))?
        .map_err(|error| Error::Tape(error.to_string()))
    }
}

/// Whether a call that failed with `error` is recorded: a failure at the endpoint after the
/// client's retries, which the caller grades or salvages, so that a replay meets it too. Not a
/// fatal one ([`Error::is_fatal`]: a refused key, an unknown model, this process's
/// configuration or its tape), which stops the run.
fn records_failure(error: &Error) -> bool {
    !error.is_fatal()
}

fn tape_error(error: &serde_json::Error) -> Error {
    Error::Tape(format!("a request or reply could not be written as JSON: {error}"))
}

/// A task's hold on the gate of its key. Dropped when the call ends, fails or is cancelled
/// (waiting or sending), it forgets the gate once no other task holds it: the map's and this
/// hold's are then the only references, and clones are taken under the map's lock, so the
/// count is exact.
struct GateHold<'a> {
    tape: &'a Tape,
    key: String,
    gate: Arc<tokio::sync::Mutex<()>>,
}

impl Drop for GateHold<'_> {
    fn drop(&mut self) {
        let mut inflight = self.tape.inflight.lock().unwrap_or_else(PoisonError::into_inner);
        if Arc::strong_count(&self.gate) == 2 {
            inflight.remove(&self.key);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
