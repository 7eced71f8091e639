//! Approximate nearest neighbours over unit vectors, for dense retrieval over large memories.
//!
//! Exact search reads every vector per query: over a million 384-dimension turns that is 1.5 GB
//! per query, about 40 ms or more on two cores. Above [`AnnOptions::threshold`] turns the index
//! asks an HNSW graph for candidates instead and scores those exactly
//! ([`crate::retrieval::MemoryIndex`]); below it nothing changes.
//!
//! The graph is USearch's (the `usearch` crate), not our own: it is maintained (frequent
//! releases), compact (one tape of vectors and a graph of 32-bit slots: ≈ 1.7 GB for a million
//! 384-dimension f32 vectors; the 8-bit copy ([`AnnQuantization::I8`]) used by default takes
//! under a third of f32's (80 MiB against 272 MiB at 100k turns, by `memory_usage`), where `hnsw_rs` keeps per-point `Arc` neighbour lists of ≈ 3.5 KB a point, which
//! breaks a 4 GB budget next to our own copy of the vectors), builds here from
//! crates.io with the C++ compiler the bundled SQLite already needs, and is deterministic when
//! vectors are added one at a time in a fixed order (its level generator has a fixed seed), which
//! is how [`AnnIndex::add`] is used: the same memory gives the same graph and the same answers.
//! `instant-distance` builds in parallel (an order that varies) and has had no release since 2023.
//!
//! The graph only proposes candidates: [`AnnOptions::candidates_for`] of them, scored exactly on
//! our f32 vectors. So its own vector copy can be coarse (8 bits a component: a build about 1.5
//! times faster than f32's at 100k of the scale bench's turns, with the same recall), and recall is bought back at query time with more candidates as the
//! memory grows, not with a slower build.

use serde::{Deserialize, Serialize};

/// When and how the approximate index is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnnOptions {
    /// Use the approximate index once a memory has at least this many turns (0: never). Below
    /// it dense retrieval is exact, so LoCoMo and LongMemEval haystacks are unchanged.
    pub threshold: usize,
    /// Candidates asked of the graph per query at `threshold` turns; they are then scored
    /// exactly. Larger memories ask for more ([`AnnOptions::candidates_for`]).
    pub candidates: usize,
    /// Graph connectivity (HNSW's M).
    pub connectivity: usize,
    /// Beam width while adding (HNSW's efConstruction).
    pub expansion_add: usize,
    /// Beam width while searching (HNSW's ef); the candidates asked for widen it.
    pub expansion_search: usize,
    /// How the graph stores its own copy of the vectors (candidates are scored on ours, f32).
    #[serde(default)]
    pub quantization: AnnQuantization,
}

impl Default for AnnOptions {
    fn default() -> Self {
        Self {
            threshold: 50_000,
            candidates: 100,
            connectivity: 16,
            expansion_add: 128,
            expansion_search: 128,
            quantization: AnnQuantization::I8,
        }
    }
}

impl AnnOptions {
    /// Candidates asked of the graph over `turns` turns: [`AnnOptions::candidates`] at the
    /// threshold (and below it), times the square root of how many times larger the memory is
    /// (rounded up): 100, 142 at 100k turns, 448 at a million. A larger graph needs a wider
    /// beam for the same recall (on the scale bench, 100 candidates find 0.96 of the exact top
    /// 10 at 100k turns but 0.85 at a million), and rescoring the extra candidates exactly is
    /// cheap next to the graph search.
    pub fn candidates_for(&self, turns: usize) -> usize {
        if self.threshold == 0 || turns <= self.threshold {
            return self.candidates;
        }
        let growth = (turns as f64 / self.threshold as f64).sqrt();
        (self.candidates as f64 * growth).ceil() as usize
    }
}

/// The scalar type of the graph's vector copy. The graph's distances only pick candidates,
/// which are then scored exactly, so a coarse copy costs little recall and saves memory and
/// time (fewer bytes read per distance).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AnnQuantization {
    /// 32-bit floats, as given: 1,536 bytes a 384-dimension vector.
    F32,
    /// bfloat16 (f32 with the low 16 bits of the mantissa dropped): half the bytes.
    Bf16,
    /// 8-bit integers: usearch scales each vector by 127 over its norm and truncates toward zero,
    /// so a unit 384-dimension vector (components about ±0.05) keeps about 6 levels a component.
    /// A quarter of the bytes; on the scale bench its candidates recall as much as f32's.
    #[default]
    I8,
}

impl AnnQuantization {
    fn scalar_kind(self) -> usearch::ScalarKind {
        match self {
            Self::F32 => usearch::ScalarKind::F32,
            Self::Bf16 => usearch::ScalarKind::BF16,
            Self::I8 => usearch::ScalarKind::I8,
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
            quantization: options.quantization.scalar_kind(),
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

    /// The keys of (about) the `k` most similar vectors, most similar by the graph's
    /// (quantized) distance first; the beam is at least `k` wide.
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

    use rand::{Rng, SeedableRng};

    fn unit(angle: f32) -> Vec<f32> {
        vec![angle.cos(), angle.sin(), 0.0, 0.0]
    }

    #[test]
    fn finds_the_nearest_vectors_and_rejects_wrong_dimensions() {
        // Neighbours 0.003 radians apart: closer than 8-bit levels resolve, so f32 here.
        let options = AnnOptions { quantization: AnnQuantization::F32, ..AnnOptions::default() };
        let mut index = AnnIndex::new(4, &options).unwrap();
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

    /// Seeded unit vectors in 384 dimensions, like sentence embeddings' (components about ±0.05).
    fn random_units(count: usize) -> Vec<Vec<f32>> {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        (0..count)
            .map(|_| {
                let v: Vec<f32> = (0..384).map(|_| rng.random_range(-1.0..1.0)).collect();
                let norm = crate::retrieval::vector::dot(&v, &v).sqrt();
                v.into_iter().map(|x| x / norm).collect()
            })
            .collect()
    }

    #[test]
    fn eight_bit_candidates_hold_the_exact_nearest_vectors() {
        let vectors = random_units(3000);
        let mut index = AnnIndex::new(384, &AnnOptions::default()).unwrap();
        for (key, vector) in vectors.iter().enumerate() {
            index.add(key, vector).unwrap();
        }
        let mut found = 0;
        for query in vectors.iter().step_by(100) {
            let scores: Vec<f32> =
                vectors.iter().map(|v| crate::retrieval::vector::dot(v, query)).collect();
            let exact = crate::retrieval::vector::top_k(&scores, 10);
            let candidates = index.search(query, 100).unwrap();
            assert_eq!(candidates.len(), 100);
            found += exact.iter().filter(|key| candidates.contains(key)).count();
        }
        // 30 queries; each is its own nearest vector.
        assert!(found >= 30 * 10 * 95 / 100, "{found} of 300");
    }

    #[test]
    fn candidates_grow_with_the_square_root_of_the_memory() {
        let options = AnnOptions::default();
        assert_eq!(options.candidates_for(10), 100);
        assert_eq!(options.candidates_for(50_000), 100);
        assert_eq!(options.candidates_for(100_000), 142);
        assert_eq!(options.candidates_for(1_000_000), 448);
        assert_eq!(AnnOptions { threshold: 0, ..options }.candidates_for(1_000_000), 100);
    }
}
