//! Models with a tape in front ([`TapedChat`], [`TapedEmbedder`]), and the model with no
//! endpoint a tape is played back over ([`Offline`]).

use std::sync::Arc;

use super::Tape;
use crate::llm::{ChatModel, ChatRequest, ChatResponse, Embedder, Embeddings, Error, Step};

/// Any embedder with a tape: what `run` hands the answer loop for the local MiniLM query
/// embeddings, so that replay does not depend on the host's kernels.
#[derive(Debug, Clone)]
pub struct TapedEmbedder<E> {
    inner: E,
    tape: Arc<Tape>,
}

impl<E> TapedEmbedder<E> {
    /// `inner` recorded on (or replayed from) `tape`.
    pub fn new(inner: E, tape: Arc<Tape>) -> Self {
        Self { inner, tape }
    }
}

impl<E: Embedder> Embedder for TapedEmbedder<E> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn embed(&self, texts: &[String]) -> Result<Embeddings, Error> {
        let name = self.inner.name().to_string();
        self.tape.embed(&name, texts, |asked| async move { self.inner.embed(&asked).await }).await
    }
}

/// Any chat model with a tape: the run's build and answer clients, the judge.
#[derive(Debug, Clone)]
pub struct TapedChat<M> {
    inner: M,
    tape: Arc<Tape>,
}

impl<M> TapedChat<M> {
    /// `inner` recorded on (or replayed from) `tape`.
    pub fn new(inner: M, tape: Arc<Tape>) -> Self {
        Self { inner, tape }
    }
}

impl<M: ChatModel> ChatModel for TapedChat<M> {
    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, Error> {
        self.tape.chat(request, || self.inner.chat(request)).await
    }

    fn max_tokens(&self, step: Step) -> Option<u32> {
        self.inner.max_tokens(step)
    }
}

/// A chat model with no endpoint: what `verify` plays a judge's tape back over. A call that
/// reaches it fails with [`Error::Config`] (the tape refuses unrecorded requests first).
#[derive(Debug, Clone, Copy, Default)]
pub struct Offline;

impl ChatModel for Offline {
    async fn chat(&self, _request: &ChatRequest) -> Result<ChatResponse, Error> {
        Err(Error::Config("offline: no model endpoint is used here".to_string()))
    }
}
