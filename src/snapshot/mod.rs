//! A conversation ready to answer ([`Snapshot`]): its memory graph, the stage-3 vectors the
//! pre-loop retrieval ranks with, and what the MemGAS tool needs (`memgas`). This module is the
//! only place one is assembled; the answer side (`agent`) and its callers (`service`,
//! `commands`) only read snapshots. Two sources:
//! - the file caches of a dataset run ([`Snapshot::from_caches`], `files`): the build's stage
//!   caches read back, the memory's fingerprint, and a MemGAS index loaded on first use from
//!   the index caches with the local embedder ([`CacheSource`]);
//! - the store of own conversations ([`Snapshot::from_store`], `store`): the graph and vectors
//!   made from the stored outputs of the built sessions, with the MemGAS index the service keeps.
//!
//! [`Snapshot::from_built`] takes a memory just built (`ingest::build_memory`), and
//! [`Snapshot::from_stage_outputs`] stage outputs made some other way (the scripted agent's
//! mechanical memory); both sources go through them.
//!
//! Layering: above `memory`, `ingest`, `store`, `retrieval` and `embedding`; below `agent`,
//! `service` and `commands`. It calls no chat model; its only IO is reading the caches and
//! loading the local embedder.

mod files;
mod memgas;
mod store;

pub use self::files::{CacheSource, MemgasCaches, memory_fingerprint};
pub(crate) use self::memgas::unit_vectors;
pub use self::memgas::{LoadedMemgas, MemgasMemory, MemgasSource, QueryAndWords, QueryEmbedder};

use crate::dataset::Conversation;
use crate::ingest::{BuiltMemory, SampleEmbeddings};
use crate::memory::input::{SessionKeywords, SessionRewrite};
use crate::memory::{self, MemoryGraph, build_graph};

/// One conversation ready to be answered: its questions, memory graph and embeddings.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The conversation and its questions.
    pub conversation: Conversation,
    /// Its memory graph.
    pub graph: MemoryGraph,
    /// Vectors of its sentences, topics and questions.
    pub embeddings: SampleEmbeddings,
    /// Its MemGAS index; when present, the loop offers the `query_memgas` tool.
    pub memgas: Option<MemgasMemory>,
    /// Whether the memory is whole, and its fingerprint.
    pub memory: MemoryStatus,
}

/// Whether a conversation's memory holds every session, and what it was built from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemoryStatus {
    /// Sessions whose build did not finish; while any is missing, no question of the
    /// conversation is answered (they stay pending until a rerun builds them).
    pub missing_sessions: Vec<u32>,
    /// Fingerprint of the stage caches the memory was loaded from (empty: unknown); recorded
    /// in every result line so that a rerun over a changed memory answers again.
    pub fingerprint: String,
}

impl MemoryStatus {
    /// Every session is in memory.
    pub fn is_complete(&self) -> bool {
        self.missing_sessions.is_empty()
    }
}

impl Snapshot {
    /// An estimate of the heap bytes it holds besides its MemGAS index (which it shares with
    /// the index's owner): the conversation, the memory graph and the vectors
    /// ([`crate::heap`]).
    pub fn heap_bytes(&self) -> usize {
        use crate::heap::{flat, text};
        let embeddings = &self.embeddings;
        let vectors: usize = [&embeddings.sentences, &embeddings.topics, &embeddings.questions]
            .into_iter()
            .flat_map(|map| map.iter())
            .map(|(id, vector)| text(id) + flat(vector) + 16)
            .sum();
        crate::heap::json(&self.conversation) + self.graph.heap_bytes() + vectors
    }

    /// A conversation's memory from its finished build (`ingest::build_memory` or
    /// `ingest::load_memory`), without a MemGAS index.
    pub fn from_built(conversation: Conversation, built: BuiltMemory) -> Self {
        let mut missing_sessions: Vec<u32> =
            built.summary.failed.iter().flat_map(|unit| unit.sessions.iter().copied()).collect();
        missing_sessions.sort_unstable();
        missing_sessions.dedup();
        Self {
            conversation,
            graph: built.graph,
            embeddings: built.embeddings,
            memgas: None,
            memory: MemoryStatus { missing_sessions, fingerprint: String::new() },
        }
    }

    /// A conversation's memory from the stage outputs of its sessions (in dialogue order) and
    /// their vectors, without a MemGAS index, complete and without a fingerprint.
    pub fn from_stage_outputs(
        conversation: Conversation,
        rewrites: &[SessionRewrite],
        keywords: &[SessionKeywords],
        embeddings: SampleEmbeddings,
    ) -> Result<Self, memory::Error> {
        let graph = build_graph(&conversation, rewrites, keywords)?;
        Ok(Self { conversation, graph, embeddings, memgas: None, memory: MemoryStatus::default() })
    }
}
