//! What an index must hold for the methods asked of it: which unit vectors, and whether the
//! MemGAS association graph. A run of `bm25` alone embeds nothing and builds no graph; only
//! `memgas` (or fusion with a MemGAS weight) builds the graph.

use serde::{Deserialize, Serialize};

use super::options::{IndexOptions, Method};
use crate::retrieval::units::VectorNeeds;

/// The parts of a [`MemoryIndex`](super::MemoryIndex) that get built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexNeeds {
    /// Unit vectors to embed and keep.
    pub vectors: VectorNeeds,
    /// Whether to grow the association graph (MemGAS).
    pub graph: bool,
    /// Whether to collect every turn's content words for fusion's soft word matching (their
    /// vectors come from the caller: [`MemoryIndex::words_without_vectors`](super::MemoryIndex::words_without_vectors)).
    #[serde(default)]
    pub words: bool,
}

impl IndexNeeds {
    /// Everything: every vector and the graph (what an index for the agent's tool holds).
    pub const ALL: IndexNeeds = IndexNeeds { vectors: VectorNeeds::ALL, graph: true, words: true };

    /// What ranking with every method in `methods` reads, given `options` (fusion reads MemGAS
    /// only when its MemGAS weight is not zero).
    pub fn for_methods(methods: &[Method], options: &IndexOptions) -> IndexNeeds {
        let none = IndexNeeds { vectors: VectorNeeds::NONE, graph: false, words: false };
        methods.iter().fold(none, |needs, &method| needs.union(Self::for_method(method, options)))
    }

    /// What ranking with `method` reads.
    pub fn for_method(method: Method, options: &IndexOptions) -> IndexNeeds {
        let vectors =
            |needs: VectorNeeds| IndexNeeds { vectors: needs, graph: false, words: false };
        let none = VectorNeeds::NONE;
        match method {
            Method::Bm25 => vectors(none),
            Method::Session => vectors(VectorNeeds { session: true, ..none }),
            Method::Turn => vectors(VectorNeeds { turns: true, ..none }),
            Method::Summary => vectors(VectorNeeds { summary: true, ..none }),
            Method::Keyword => vectors(VectorNeeds { keywords: true, ..none }),
            Method::Hybrid => vectors(VectorNeeds { hybrid: true, ..none }),
            // Every granularity is a graph node; the hybrid text is not.
            Method::Memgas => IndexNeeds {
                vectors: VectorNeeds { hybrid: false, ..VectorNeeds::ALL },
                graph: true,
                words: false,
            },
            Method::Fusion => {
                let dense = IndexNeeds {
                    words: options.fusion.word_match != 0.0,
                    ..vectors(VectorNeeds { turns: true, ..none })
                };
                if options.fusion.memgas == 0.0 {
                    dense
                } else {
                    dense.union(Self::for_method(Method::Memgas, options))
                }
            }
        }
    }

    /// Everything either needs.
    pub fn union(self, other: IndexNeeds) -> IndexNeeds {
        IndexNeeds {
            vectors: self.vectors.union(other.vectors),
            graph: self.graph || other.graph,
            words: self.words || other.words,
        }
    }

    /// Whether an index built for `self` can serve what `other` needs.
    pub fn covers(&self, other: &IndexNeeds) -> bool {
        self.vectors.covers(&other.vectors)
            && (self.graph || !other.graph)
            && (self.words || !other.words)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::retrieval::index::{IndexError, MemoryIndex};

    fn grow(index: MemoryIndex, sessions: usize) -> MemoryIndex {
        index.test_circle(sessions)
    }

    #[test]
    fn an_index_without_vectors_ranks_lexically_and_refuses_dense_methods() {
        let none = IndexNeeds { vectors: VectorNeeds::NONE, graph: false, words: false };
        let index = grow(MemoryIndex::with_needs(IndexOptions::default(), none), 3);
        assert_eq!((index.n_turns(), index.graph().n_nodes()), (30, 0));
        let ranking = index.rank(Method::Bm25, "t12", &[]).unwrap();
        assert_eq!(index.turn_id(ranking.turns.unwrap()[0].index), "D2:3");
        for method in [Method::Turn, Method::Session, Method::Fusion, Method::Memgas] {
            assert_eq!(index.rank(method, "t12", &[]), Err(IndexError::NotBuilt { method }));
        }
    }

    #[test]
    fn large_memories_rank_turns_approximately_and_deterministically() {
        let mut options = IndexOptions::default();
        options.ann.threshold = 200;
        // Fusion's next-turn context would lift turn 598 above 599 (the last turn has no
        // follower); this test is about the approximate candidates, so it is switched off.
        options.fusion.next_turn = 0.0;
        let needs = IndexNeeds::for_methods(&[Method::Turn, Method::Fusion], &options);
        let build = || grow(MemoryIndex::with_needs(options, needs), 60);
        let (index, again) = (build(), build());
        assert!(index.is_approximate() && index.n_turns() == 600);
        let exact = grow(MemoryIndex::with_needs(IndexOptions::default(), needs), 60);
        assert!(!exact.is_approximate());
        for turn in [5usize, 250, 599] {
            let angle = turn as f32 * 0.01;
            let query = [angle.cos(), angle.sin(), 0.0, 0.0];
            let ranking = index.rank(Method::Turn, "", &query).unwrap();
            let turns = ranking.turns.clone().unwrap();
            let candidates = options.ann.candidates_for(600);
            assert_eq!(turns.len(), candidates, "only the candidates are ranked");
            let top: Vec<usize> = turns.iter().take(10).map(|t| t.index).collect();
            let exact_top: Vec<usize> = exact
                .rank(Method::Turn, "", &query)
                .unwrap()
                .turns
                .unwrap()
                .iter()
                .take(10)
                .map(|t| t.index)
                .collect();
            assert_eq!(top, exact_top, "turn {turn}");
            assert_eq!(again.rank(Method::Turn, "", &query).unwrap(), ranking);
            assert_eq!(ranking.sessions[0].index, turn / 10);
            let fused = index.rank(Method::Fusion, &format!("t{turn}"), &query).unwrap();
            assert_eq!(fused.turns.unwrap()[0].index, turn);
        }
    }

    #[test]
    fn bm25_needs_nothing_and_only_memgas_needs_the_graph() {
        let options = IndexOptions::default();
        let bm25 = IndexNeeds::for_methods(&[Method::Bm25], &options);
        assert!(!bm25.vectors.any() && !bm25.graph);
        let dense = IndexNeeds::for_methods(&[Method::Turn, Method::Fusion], &options);
        assert_eq!(dense.vectors, VectorNeeds { turns: true, ..VectorNeeds::NONE });
        assert!(!dense.graph);
        assert!(IndexNeeds::for_methods(&[Method::Memgas], &options).graph);
        let mut with_memgas = options;
        with_memgas.fusion.memgas = 0.5;
        assert!(IndexNeeds::for_methods(&[Method::Fusion], &with_memgas).graph);
        assert!(IndexNeeds::ALL.covers(&dense) && !dense.covers(&IndexNeeds::ALL));
        assert_eq!(IndexNeeds::for_methods(&Method::ALL, &options), IndexNeeds::ALL);
    }
}
