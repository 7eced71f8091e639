//! Approximate nearest neighbours over unit vectors, for dense retrieval over large memories.
//!
//! Exact search reads every vector per query: over a million 384-dimension turns that is 1.5 GB
//! per query, about 40 ms or more on two cores. Above [`AnnOptions::threshold`] turns the index
//! asks an HNSW graph for candidates instead and scores those exactly
//! ([`crate::retrieval::MemoryIndex`]); below it nothing changes.
//!
//! The graph is USearch's (the `usearch` crate), not our own: it is maintained (frequent
//! releases), compact (one tape of vectors and a graph of 32-bit slots: ≈ 1.7 GB for a million
//! 384-dimension vectors, where `hnsw_rs` keeps per-point `Arc` neighbour lists of ≈ 3.5 KB a
//! point, which breaks a 4 GB budget next to our own copy of the vectors), builds here from
//! crates.io with the C++ compiler the bundled SQLite already needs, and is deterministic when
//! vectors are added one at a time in a fixed order (its level generator has a fixed seed), which
//! is how [`AnnIndex::add`] is used: the same memory gives the same graph and the same answers.
//! `instant-distance` builds in parallel (an order that varies) and has had no release since 2023.

use serde::{Deserialize, Serialize};

/// When and how the approximate index is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnnOptions {
    /// Use the approximate index once a memory has at least this many turns (0: never). Below
    /// it dense retrieval is exact, so LoCoMo and LongMemEval haystacks are unchanged.
    pub threshold: usize,
    /// Candidates asked of the graph per query; they are then scored exactly.
    pub candidates: usize,
    /// Graph connectivity (HNSW's M).
    pub connectivity: usize,
    /// Beam width while adding (HNSW's efConstruction).
    pub expansion_add: usize,
    /// Beam width while searching (HNSW's ef; at least `candidates` is used).
    pub expansion_search: usize,
}

impl Default for AnnOptions {
    fn default() -> Self {
        Self {
            threshold: 50_000,
            candidates: 100,
            connectivity: 16,
            expansion_add: 128,
            expansion_search: 128,
        }
    }
}

/// Why the approximate index failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnnError {
    /// The native index reported an error.
    #[error("approximate index: {0}")]
    Native(String),
    /// A vector of the wrong dimension.
    #[error("approximate index: vector of {got} dimensions, the index has {expected}")]
    Dims {
        /// Dimensions given.
        got: usize,
        /// Dimensions of the index.
        expected: usize,
    },
}

/// An HNSW index over unit vectors (inner product), keyed by position.
pub struct AnnIndex {
    index: usearch::Index,
    dims: usize,
}

impl std::fmt::Debug for AnnIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnnIndex").field("dims", &self.dims).field("len", &self.len()).finish()
    }
}

fn native(error: impl std::fmt::Display) -> AnnError {
    AnnError::Native(error.to_string())
}

impl AnnIndex {
    /// An empty index for vectors of `dims` dimensions.
    pub fn new(dims: usize, options: &AnnOptions) -> Result<Self, AnnError> {
        let settings = usearch::IndexOptions {
            dimensions: dims,
            metric: usearch::MetricKind::IP,
            quantization: usearch::ScalarKind::F32,
            connectivity: options.connectivity,
            expansion_add: options.expansion_add,
            expansion_search: options.expansion_search.max(options.candidates),
            multi: false,
        };
        let index = usearch::Index::new(&settings).map_err(native)?;
        Ok(Self { index, dims })
    }

    /// Add the vector of item `key` (keys are positions, added in order for a deterministic graph).
    pub fn add(&mut self, key: usize, vector: &[f32]) -> Result<(), AnnError> {
        self.check(vector)?;
        if self.index.size() >= self.index.capacity() {
            // Grow geometrically; one thread adds, so one search context is enough.
            let capacity = (self.index.capacity() * 2).max(1024);
            self.index.reserve_capacity_and_threads(capacity, 1).map_err(native)?;
        }
        self.index.add(key as u64, vector).map_err(native)
    }

    /// The keys of (about) the `k` most similar vectors, most similar first.
    pub fn search(&self, query: &[f32], k: usize) -> Result<Vec<usize>, AnnError> {
        self.check(query)?;
        let matches = self.index.search(query, k).map_err(native)?;
        Ok(matches.keys.into_iter().map(|key| key as usize).collect())
    }

    /// Number of vectors.
    pub fn len(&self) -> usize {
        self.index.size()
    }

    /// Whether no vector was added.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes the native index holds (vectors and graph).
    pub fn memory_usage(&self) -> usize {
        self.index.memory_usage()
    }

    fn check(&self, vector: &[f32]) -> Result<(), AnnError> {
        if vector.len() == self.dims {
            Ok(())
        } else {
            Err(AnnError::Dims { got: vector.len(), expected: self.dims })
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn unit(angle: f32) -> Vec<f32> {
        vec![angle.cos(), angle.sin(), 0.0, 0.0]
    }

    #[test]
    fn finds_the_nearest_vectors_and_rejects_wrong_dimensions() {
        let mut index = AnnIndex::new(4, &AnnOptions::default()).unwrap();
        for key in 0..2000 {
            index.add(key, &unit(key as f32 * 0.003)).unwrap();
        }
        assert_eq!(index.len(), 2000);
        let found = index.search(&unit(1000.0 * 0.003), 3).unwrap();
        assert_eq!(found[0], 1000);
        let mut near = found.clone();
        near.sort_unstable();
        assert_eq!(near, vec![999, 1000, 1001]);
        assert!(matches!(index.search(&[1.0], 3), Err(AnnError::Dims { got: 1, expected: 4 })));
        assert!(index.memory_usage() > 2000 * 16);
    }
}
