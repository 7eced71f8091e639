//! [`ChatModel`] and [`Embedder`] through a reference or an `Arc`, so that decorators such as
//! [`Latched`](super::fatal::Latched) can wrap a borrowed or shared client.

use std::future::Future;

use super::{ChatModel, ChatRequest, ChatResponse, Embedder, Embeddings, Error, Step};

impl<M: ChatModel> ChatModel for &M {
    fn chat(
        &self,
        request: &ChatRequest,
    ) -> impl Future<Output = Result<ChatResponse, Error>> + Send {
        (**self).chat(request)
    }

    fn max_tokens(&self, step: Step) -> Option<u32> {
        (**self).max_tokens(step)
    }
}

impl<E: Embedder> Embedder for &E {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn embed(&self, texts: &[String]) -> impl Future<Output = Result<Embeddings, Error>> + Send {
        (**self).embed(texts)
    }
}

impl<M: ChatModel> ChatModel for std::sync::Arc<M> {
    fn chat(
        &self,
        request: &ChatRequest,
    ) -> impl Future<Output = Result<ChatResponse, Error>> + Send {
        (**self).chat(request)
    }

    fn max_tokens(&self, step: Step) -> Option<u32> {
        (**self).max_tokens(step)
    }
}

impl<E: Embedder> Embedder for std::sync::Arc<E> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn embed(&self, texts: &[String]) -> impl Future<Output = Result<Embeddings, Error>> + Send {
        (**self).embed(texts)
    }
}
