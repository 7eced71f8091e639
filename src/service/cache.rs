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
//! Readers never wait for a writer: entries are immutable and shared (`Arc`); the cache is
//! consulted only to look up or swap an entry, never while loading or building, and a query keeps
//! using the entry it took even while a newer one replaces it or the budget evicts it (the
//! entry is freed when its last query ends).
//!
//! **The budget.** Everything the cache keeps fits in [`CacheBudget::bytes`] (`--cache-mb`):
//! entries are weighed by an estimate of their heap bytes ([`crate::heap`]; an entry is weighed
//! again once its snapshot is made) and the least recently used whole entries are evicted
//! first. Query vectors ([`QueryVectorCache`]) have their own share of the same budget
//! ([`CacheBudget::query_share`]), so that a flood of distinct queries cannot push out the
//! conversations, which cost far more to rebuild. The caches are `moka`'s (concurrent,
//! weighted, with an LRU policy and an eviction listener), not hand-written. The build gates
//! (one per conversation being built) are dropped once no query waits on them, so nothing here
//! grows with the number of conversations ever queried.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use moka::notification::RemovalCause;
use moka::policy::EvictionPolicy;

use serde::Serialize;

use crate::llm::Embedder;
use crate::retrieval::{IndexError, IndexOptions, MemoryIndex};
use crate::snapshot::Snapshot;
use crate::store::StoredConversation;

/// The snapshot `ask` answers over, or why its memory graph could not be built.
pub(super) type AskSnapshot = Result<Arc<Snapshot>, String>;

/// An empty index for an own conversation: what the queries read (the query method and the
/// gate's channels), the word vectors held compact.
fn own_index() -> MemoryIndex {
    let options = IndexOptions::default();
    let mut index =
        MemoryIndex::with_needs(options, crate::retrieval::gate::served_needs(&options));
    index.hold_word_vectors_compact();
    index
}

/// One conversation as the queries see it.
pub(super) struct Cached {
    pub(super) stored: StoredConversation,
    pub(super) index: Arc<MemoryIndex>,
    /// (session number, content hash) of the sessions in `index`, in index order.
    indexed: Vec<(u32, String)>,
    snapshot: OnceLock<AskSnapshot>,
    /// The estimated heap bytes of `stored` and `index` (the snapshot's are added once made).
    bytes: usize,
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
            // The memory's words' vectors come from the store (see `set_word_vectors`).
            None => (own_index(), 0, true),
        };
        for (session, vectors) in units.into_iter().skip(skip) {
            index.add_session(session, vectors)?;
        }
        let mut entry =
            Cached { stored, index: Arc::new(index), indexed, snapshot: OnceLock::new(), bytes: 0 };
        entry.weigh();
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
        self.weigh();
    }

    /// Estimates the entry's heap bytes again (after its index changed).
    fn weigh(&mut self) {
        let indexed: usize = self.indexed.iter().map(|(_, hash)| crate::heap::text(hash)).sum();
        self.bytes = self.stored.heap_bytes()
            + self.index.heap_bytes()
            + crate::heap::flat(&self.indexed)
            + indexed;
    }

    /// The entry's estimated heap bytes, its snapshot's included once made.
    pub(super) fn heap_bytes(&self) -> usize {
        let snapshot = match self.snapshot.get() {
            Some(Ok(snapshot)) => snapshot.heap_bytes(),
            Some(Err(error)) => crate::heap::text(error),
            None => 0,
        };
        self.bytes + snapshot
    }

    /// Whether the snapshot has been made.
    pub(super) fn has_snapshot(&self) -> bool {
        self.snapshot.get().is_some()
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

/// The service's memory budget for cached conversations and query vectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CacheBudget {
    /// Bytes the caches may hold in all (estimated; see [`crate::heap`]).
    pub bytes: u64,
    /// The share of `bytes` the query vectors may take: `bytes / query_share`.
    pub query_share: u64,
}

impl CacheBudget {
    /// The budget of `serve` and `mcp` unless `--cache-mb` says otherwise, in MiB.
    pub const DEFAULT_MB: u64 = 512;

    /// A budget of `mb` MiB, a sixteenth of it for query vectors.
    pub fn mb(mb: u64) -> Self {
        Self { bytes: mb.saturating_mul(1024 * 1024), query_share: 16 }
    }

    /// The query vectors' bytes.
    fn query_bytes(&self) -> u64 {
        self.bytes / self.query_share.max(1)
    }

    /// The conversations' bytes.
    fn conversation_bytes(&self) -> u64 {
        self.bytes - self.query_bytes()
    }
}

impl Default for CacheBudget {
    fn default() -> Self {
        Self::mb(Self::DEFAULT_MB)
    }
}

/// What one of the caches holds and how it served, since the service started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CacheCounts {
    /// Estimated bytes held.
    pub bytes: u64,
    /// The most it may hold.
    pub budget_bytes: u64,
    /// Entries held.
    pub entries: u64,
    /// Lookups answered from the cache.
    pub hits: u64,
    /// Lookups that found nothing current (the conversation was loaded and indexed, or the
    /// query embedded).
    pub misses: u64,
    /// Entries dropped to stay within the budget.
    pub evictions: u64,
}

/// Both caches' [`CacheCounts`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CacheStats {
    /// Conversations (stored conversation, index and snapshot).
    pub conversations: CacheCounts,
    /// Query vectors.
    pub query_vectors: CacheCounts,
}

/// Weights are KiB (moka weighs in `u32`), rounded up so that no entry weighs nothing.
const WEIGHT_UNIT: usize = 1024;

fn weight(bytes: usize) -> u32 {
    u32::try_from(bytes.div_ceil(WEIGHT_UNIT).max(1)).unwrap_or(u32::MAX)
}

/// The counters of one cache.
#[derive(Default)]
struct CacheCounters {
    hits: AtomicU64,
    misses: AtomicU64,
    evictions: Arc<AtomicU64>,
}

impl CacheCounters {
    fn counts<K, V>(&self, cache: &moka::sync::Cache<K, V>, budget: u64) -> CacheCounts
    where
        K: std::hash::Hash + Eq + Send + Sync + 'static,
        V: Clone + Send + Sync + 'static,
    {
        // The cache applies its writes and evictions in batches; settle them so the counts
        // are those of every write made so far.
        cache.run_pending_tasks();
        CacheCounts {
            bytes: cache.weighted_size().saturating_mul(WEIGHT_UNIT as u64),
            budget_bytes: budget,
            entries: cache.entry_count(),
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            evictions: self.evictions.load(Ordering::Relaxed),
        }
    }

    /// A listener counting the entries evicted for size.
    fn listener<K, V>(&self) -> impl Fn(Arc<K>, V, RemovalCause) + Send + Sync + 'static {
        let evictions = Arc::clone(&self.evictions);
        move |_, _, cause| {
            if cause == RemovalCause::Size {
                evictions.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// A weighted LRU cache of `budget` bytes.
fn lru<K, V>(
    budget: u64,
    weigh: impl Fn(&K, &V) -> u32 + Send + Sync + 'static,
    counters: &CacheCounters,
) -> moka::sync::Cache<K, V>
where
    K: std::hash::Hash + Eq + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    moka::sync::Cache::builder()
        .max_capacity(budget / WEIGHT_UNIT as u64)
        .weigher(weigh)
        .eviction_policy(EvictionPolicy::lru())
        .eviction_listener(counters.listener())
        .build()
}

/// Entries by conversation id, within the conversations' share of the budget.
pub(super) struct ConversationCache {
    entries: moka::sync::Cache<String, Arc<Cached>>,
    /// Held while an entry is compared with the one it would replace and stored.
    swap: Mutex<()>,
    /// One gate per conversation being built, held while its entry is loaded and built: the
    /// queries that find the entry stale at once wait for one build and share it, instead of
    /// each loading and indexing the conversation (and embedding its words) again. A gate is
    /// dropped when its last holder releases it ([`ConversationCache::release`]).
    gates: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    counters: CacheCounters,
    builds: AtomicU64,
    extensions: AtomicU64,
    budget: u64,
    /// The query vectors, in their share of the budget.
    pub(super) queries: Arc<QueryVectorCache>,
}

impl Default for ConversationCache {
    fn default() -> Self {
        Self::new(CacheBudget::default())
    }
}

impl ConversationCache {
    /// Empty caches within `budget`.
    pub(super) fn new(budget: CacheBudget) -> Self {
        let counters = CacheCounters::default();
        let bytes = budget.conversation_bytes();
        let entries =
            lru(bytes, |_: &String, entry: &Arc<Cached>| weight(entry.heap_bytes()), &counters);
        Self {
            entries,
            swap: Mutex::new(()),
            gates: Mutex::default(),
            counters,
            builds: AtomicU64::new(0),
            extensions: AtomicU64::new(0),
            budget: bytes,
            queries: Arc::new(QueryVectorCache::new(budget.query_bytes())),
        }
    }

    /// The entry of `id` if it is at `revision`, else the entry to update; counted as a hit or
    /// a miss when `count` (a query's first look, not its second after waiting for a build).
    pub(super) fn lookup(
        &self,
        id: &str,
        revision: i64,
        count: bool,
    ) -> (Option<Arc<Cached>>, bool) {
        let entry = self.entries.get(id);
        let current = entry.as_ref().is_some_and(|entry| entry.stored.revision == revision);
        if count {
            let counter = if current { &self.counters.hits } else { &self.counters.misses };
            counter.fetch_add(1, Ordering::Relaxed);
        }
        (entry, current)
    }

    /// Stores `entry` unless a newer one arrived meanwhile; returns the entry to use.
    pub(super) fn store(&self, id: &str, entry: Cached, rebuilt: bool) -> Arc<Cached> {
        let counter = if rebuilt { &self.builds } else { &self.extensions };
        counter.fetch_add(1, Ordering::Relaxed);
        let entry = Arc::new(entry);
        let _swap = self.swap.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // moka records reads in a buffer and applies them, and evicts, in batches. A store
        // follows a miss (an index built, far dearer than this), so settle both here: the
        // recorded reads first, so the least recently used entry is the one evicted, and the
        // evictions after, so the budget holds as soon as the entry is in.
        self.entries.run_pending_tasks();
        match self.entries.get(id) {
            Some(newer) if newer.stored.revision > entry.stored.revision => {}
            _ => self.entries.insert(id.to_string(), Arc::clone(&entry)),
        }
        self.entries.run_pending_tasks();
        entry
    }

    /// Weighs `entry` again (its snapshot was just made), if it is still the entry of `id`.
    pub(super) fn reweigh(&self, id: &str, entry: &Arc<Cached>) {
        let _swap = self.swap.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if self.entries.get(id).is_some_and(|held| Arc::ptr_eq(&held, entry)) {
            self.entries.run_pending_tasks();
            self.entries.insert(id.to_string(), Arc::clone(entry));
            self.entries.run_pending_tasks();
        }
    }

    /// Whether `id` has an entry.
    pub(super) fn contains(&self, id: &str) -> bool {
        self.entries.contains_key(id)
    }

    /// Drops the entry of `id`.
    pub(super) fn remove(&self, id: &str) {
        self.entries.invalidate(id);
    }

    /// The build gate of `id`; give it back with [`ConversationCache::release`].
    pub(super) fn gate(&self, id: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut gates = self.gates.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        Arc::clone(gates.entry(id.to_string()).or_default())
    }

    /// Gives back a gate of [`ConversationCache::gate`] (already unlocked); the last holder's
    /// release drops it. Every holder took its clone under the same lock, so a count of two
    /// (the map's and this one) means no query waits on it.
    pub(super) fn release(&self, id: &str, gate: Arc<tokio::sync::Mutex<()>>) {
        let mut gates = self.gates.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let last = gates.get(id).is_some_and(|held| Arc::ptr_eq(held, &gate))
            && Arc::strong_count(&gate) == 2;
        if last {
            gates.remove(id);
        }
    }

    /// Gates held now (queries building or waiting for a build).
    pub(super) fn gates(&self) -> usize {
        self.gates.lock().unwrap_or_else(std::sync::PoisonError::into_inner).len()
    }

    pub(super) fn stats(&self) -> IndexStats {
        IndexStats {
            hits: self.counters.hits.load(Ordering::Relaxed),
            builds: self.builds.load(Ordering::Relaxed),
            extensions: self.extensions.load(Ordering::Relaxed),
        }
    }

    pub(super) fn cache_stats(&self) -> CacheStats {
        CacheStats {
            conversations: self.counters.counts(&self.entries, self.budget),
            query_vectors: self.queries.counts(),
        }
    }
}

/// Unit-length query vectors by (embedder, text), so the same query is not embedded twice.
/// A word of a query that the memory lacks is embedded the same way (and is the same text for
/// every conversation), so words share the cache.
pub(super) struct QueryVectorCache {
    vectors: moka::sync::Cache<(String, String), Arc<[f32]>>,
    counters: CacheCounters,
    budget: u64,
}

impl QueryVectorCache {
    fn new(budget: u64) -> Self {
        let counters = CacheCounters::default();
        let vectors = lru(
            budget,
            |(embedder, text): &(String, String), vector: &Arc<[f32]>| {
                weight(
                    crate::heap::text(embedder)
                        + crate::heap::text(text)
                        + crate::heap::flat(vector)
                        + 64,
                )
            },
            &counters,
        );
        Self { vectors, counters, budget }
    }

    /// The vector of `text` by `embedder`, if cached (counted as a hit or a miss).
    pub(super) fn get(&self, embedder: &str, text: &str) -> Option<Arc<[f32]>> {
        let found = self.vectors.get(&(embedder.to_string(), text.to_string()));
        let counter = if found.is_some() { &self.counters.hits } else { &self.counters.misses };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    /// Keeps the vector of `text` by `embedder`.
    pub(super) fn put(&self, embedder: &str, text: &str, vector: &[f32]) {
        self.vectors.insert((embedder.to_string(), text.to_string()), Arc::from(vector));
    }

    fn counts(&self) -> CacheCounts {
        self.counters.counts(&self.vectors, self.budget)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_own_index_is_built_for_the_queries_it_serves_and_no_more() {
        let index = own_index();
        let served = crate::retrieval::gate::served_needs(&IndexOptions::default());
        assert_eq!(index.needs(), served);
        assert!(!index.needs().graph, "no MemGAS graph for fusion without a MemGAS weight");
    }
}
