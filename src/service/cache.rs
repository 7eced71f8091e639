//! The service's per-conversation read cache: the stored conversation, its MemGAS index and
//! (made on the first `ask`) its snapshot, kept between queries.
//!
//! A query first reads the conversation's revision from the store (one indexed row; the store
//! gives every write a new, never reused revision). The same revision means the cached entry is
//! current. Otherwise the conversation is reloaded (its vectors are in the store, nothing is
//! embedded again) and the index is brought up to date: when the cached index's sessions are
//! still the first sessions of the conversation with the same content (the usual case: `memory
//! add` appended sessions), a copy of it gets only the new sessions; otherwise (a session was
//! placed before others, or changed) it is rebuilt. `forget` drops the entry.
//!
//! Readers never wait for a writer: entries are immutable and shared (`Arc`); the map's lock is
//! held only to look up or swap an entry, never while loading or building, and a query keeps
//! using the entry it took even while a newer one replaces it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

use serde::Serialize;

use crate::llm::Embedder;
use crate::retrieval::{IndexError, IndexNeeds, IndexOptions, MemoryIndex};
use crate::snapshot::Snapshot;
use crate::store::StoredConversation;

/// The snapshot `ask` answers over, or why its memory graph could not be built.
pub(super) type AskSnapshot = Result<Arc<Snapshot>, String>;

/// One conversation as the queries see it.
pub(super) struct Cached {
    pub(super) stored: StoredConversation,
    pub(super) index: Arc<MemoryIndex>,
    /// (session number, content hash) of the sessions in `index`, in index order.
    indexed: Vec<(u32, String)>,
    snapshot: OnceLock<AskSnapshot>,
}

impl Cached {
    /// The entry for `stored`, reusing `previous`'s index when `stored` only appends sessions
    /// to it. The second value is whether the index was rebuilt from scratch.
    pub(super) fn update(
        stored: StoredConversation,
        previous: Option<&Cached>,
    ) -> Result<(Self, bool), IndexError> {
        let units = stored.memgas_units();
        let indexed: Vec<(u32, String)> = stored
            .sessions
            .iter()
            .filter(|session| session.outputs.is_some())
            .map(|session| (session.number, session.content_hash.clone()))
            .collect();
        let reusable = previous.filter(|previous| indexed.starts_with(&previous.indexed));
        let (mut index, skip, rebuilt) = match reusable {
            Some(previous) => ((*previous.index).clone(), previous.indexed.len(), false),
            // Every method's units, and the memory's words for fusion's soft word matching
            // (their vectors come from the store; see `set_word_vectors`).
            None => (MemoryIndex::with_needs(IndexOptions::default(), IndexNeeds::ALL), 0, true),
        };
        for (session, vectors) in units.into_iter().skip(skip) {
            index.add_session(session, vectors)?;
        }
        let entry = Cached { stored, index: Arc::new(index), indexed, snapshot: OnceLock::new() };
        Ok((entry, rebuilt))
    }

    /// The memory words the index has no vector for yet, in the order it met them (a function
    /// of the sessions' content). Fusion refuses to rank until every one has its vector.
    pub(super) fn words_without_vectors(&self) -> Vec<String> {
        self.index.words_without_vectors()
    }

    /// Gives memory words their vectors. Called before the entry is shared, so the index is
    /// not copied.
    pub(super) fn set_word_vectors(&mut self, words: Vec<(String, Vec<f32>)>) {
        let (words, vectors): (Vec<String>, Vec<Vec<f32>>) = words.into_iter().unzip();
        Arc::make_mut(&mut self.index).set_word_vectors(&words, vectors);
    }

    /// The conversation ready to answer, with this entry's index queried through `embedder`;
    /// made on first use (blocking work: the memory graph is built).
    pub(super) fn snapshot<E: Embedder + Clone + 'static>(&self, embedder: &E) -> &AskSnapshot {
        self.snapshot.get_or_init(|| {
            Snapshot::from_store(&self.stored, Arc::clone(&self.index), embedder.clone())
                .map(Arc::new)
        })
    }
}

/// How the cache has served queries since the service started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct IndexStats {
    /// Queries answered from a current entry.
    pub hits: u64,
    /// Indexes built from scratch (first query of a conversation, or sessions reordered).
    pub builds: u64,
    /// Indexes brought up to date by adding only the new sessions.
    pub extensions: u64,
}

/// Entries by conversation id.
#[derive(Default)]
pub(super) struct ConversationCache {
    entries: RwLock<HashMap<String, Arc<Cached>>>,
    /// One gate per conversation, held while its entry is loaded and built: the queries that
    /// find the entry stale at once wait for one build and share it, instead of each loading
    /// and indexing the conversation (and embedding its words) again.
    gates: std::sync::Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    hits: AtomicU64,
    builds: AtomicU64,
    extensions: AtomicU64,
}

impl ConversationCache {
    /// The entry of `id` if it is at `revision` (counted as a hit), else the entry to update.
    pub(super) fn lookup(&self, id: &str, revision: i64) -> (Option<Arc<Cached>>, bool) {
        let entry = self.read().get(id).cloned();
        let current = entry.as_ref().is_some_and(|entry| entry.stored.revision == revision);
        if current {
            self.hits.fetch_add(1, Ordering::Relaxed);
        }
        (entry, current)
    }

    /// Stores `entry` unless a newer one arrived meanwhile; returns the entry to use.
    pub(super) fn store(&self, id: &str, entry: Cached, rebuilt: bool) -> Arc<Cached> {
        let counter = if rebuilt { &self.builds } else { &self.extensions };
        counter.fetch_add(1, Ordering::Relaxed);
        let entry = Arc::new(entry);
        let mut entries = self.entries.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        match entries.get(id) {
            Some(newer) if newer.stored.revision > entry.stored.revision => {}
            _ => {
                entries.insert(id.to_string(), Arc::clone(&entry));
            }
        }
        entry
    }

    /// Whether `id` has an entry.
    pub(super) fn contains(&self, id: &str) -> bool {
        self.read().contains_key(id)
    }

    /// Drops the entry of `id`.
    pub(super) fn remove(&self, id: &str) {
        self.entries.write().unwrap_or_else(std::sync::PoisonError::into_inner).remove(id);
        self.gates.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(id);
    }

    /// The build gate of `id`.
    pub(super) fn gate(&self, id: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut gates = self.gates.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        Arc::clone(gates.entry(id.to_string()).or_default())
    }

    pub(super) fn stats(&self) -> IndexStats {
        IndexStats {
            hits: self.hits.load(Ordering::Relaxed),
            builds: self.builds.load(Ordering::Relaxed),
            extensions: self.extensions.load(Ordering::Relaxed),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Arc<Cached>>> {
        // A panic while the lock was held cannot leave the map half-updated (single insert or
        // remove), so a poisoned lock is still safe to use.
        self.entries.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
