//! The association graph between units (MemGAS §4), grown one session at a time.
//!
//! Every unit is a node. When a session is added, each of its nodes is compared with the nodes of
//! all *earlier* sessions (dot products of unit vectors, i.e. cosine for normalised embeddings);
//! the `mem_threshold` most similar candidates are kept, a seeded two-component Gaussian mixture
//! ([`super::gmm`]) splits their similarities, and an undirected edge joins the node to every
//! candidate in the higher-mean component. Earlier nodes and edges are never revisited, so adding
//! a session costs one pass over the existing nodes instead of a rebuild (the reference
//! quickstart rebuilds the whole graph on every query, memgas.md §4.3).
//!
//! Like the research code, a node only creates edges once the pool of earlier nodes is large
//! enough for a split to mean something (`min_pool`; the research code starts at node 20, i.e.
//! after five sessions of four nodes). Synchronous, pure, deterministic.

use std::ops::Range;

use serde::{Deserialize, Serialize};

use super::gmm::{self, GmmOptions};

/// Graph construction settings (MemGAS defaults).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GraphOptions {
    /// Candidates kept per node before the GMM split (`mem_threshold`, 30).
    pub mem_threshold: usize,
    /// Nodes link only when at least this many earlier-session nodes exist (20).
    pub min_pool: usize,
    /// The mixture fitted to each candidate list.
    pub gmm: GmmOptions,
}

impl Default for GraphOptions {
    fn default() -> Self {
        Self { mem_threshold: 30, min_pool: 20, gmm: GmmOptions::default() }
    }
}

/// Undirected, unweighted adjacency lists; node ids are indices into the caller's node list.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AssociationGraph {
    neighbours: Vec<Vec<u32>>,
    n_edges: usize,
}

impl AssociationGraph {
    /// An estimate of the heap bytes it holds ([`crate::heap`]).
    pub fn heap_bytes(&self) -> usize {
        crate::heap::flat(&self.neighbours)
            + self.neighbours.iter().map(|list| crate::heap::flat(list)).sum::<usize>()
    }

    /// Adjacency lists (each edge in both endpoints' lists).
    pub fn neighbours(&self) -> &[Vec<u32>] {
        &self.neighbours
    }

    /// Number of nodes.
    pub fn n_nodes(&self) -> usize {
        self.neighbours.len()
    }

    /// Number of undirected edges.
    pub fn n_edges(&self) -> usize {
        self.n_edges
    }

    /// Add the nodes `new_nodes` (a range ending at `vectors.len()`) of one new session and link
    /// them to the nodes before `new_nodes.start`, which all belong to earlier sessions.
    /// `vectors[i]` is node i's vector.
    pub fn add_session(
        &mut self,
        vectors: &[Vec<f32>],
        new_nodes: Range<usize>,
        options: &GraphOptions,
    ) {
        debug_assert_eq!(self.neighbours.len(), new_nodes.start, "graph and node list out of step");
        debug_assert_eq!(new_nodes.end, vectors.len());
        self.neighbours.resize(new_nodes.end, Vec::new());
        let pool = new_nodes.start;
        if pool < options.min_pool.max(1) {
            return;
        }
        for node in new_nodes {
            let mut candidates: Vec<(usize, f64)> = (0..pool)
                .map(|other| (other, super::vector::dot_f64(&vectors[node], &vectors[other])))
                .collect();
            // Most similar first; equal similarities keep node order.
            candidates.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            candidates.truncate(options.mem_threshold.max(1));
            let similarities: Vec<f64> =
                candidates.iter().map(|(_, similarity)| *similarity).collect();
            let accepted = gmm::accept_upper(&similarities, &options.gmm);
            for ((other, _), accept) in candidates.iter().zip(accepted) {
                if accept {
                    self.neighbours[node].push(*other as u32);
                    self.neighbours[*other].push(node as u32);
                    self.n_edges += 1;
                }
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn unit(angle: f32) -> Vec<f32> {
        vec![angle.cos(), angle.sin()]
    }

    #[test]
    fn links_new_nodes_to_the_similar_block_of_earlier_nodes() {
        // Earlier sessions: three nodes near angle 0, three near angle 1.5.
        let mut vectors: Vec<Vec<f32>> =
            [0.0, 0.05, 0.1, 1.5, 1.45, 1.55].iter().map(|a| unit(*a)).collect();
        let options = GraphOptions { min_pool: 4, ..GraphOptions::default() };
        let mut graph = AssociationGraph::default();
        graph.add_session(&vectors[..2], 0..2, &options);
        graph.add_session(&vectors[..6], 2..6, &options);
        // Pools of 2 nodes are below min_pool: no edges yet.
        assert_eq!(graph.n_edges(), 0);
        vectors.push(unit(0.02));
        graph.add_session(&vectors, 6..7, &options);
        let mut linked = graph.neighbours()[6].clone();
        linked.sort_unstable();
        assert_eq!(linked, vec![0, 1, 2]);
        assert_eq!(graph.n_edges(), 3);
        assert!(graph.neighbours()[0].contains(&6));
    }

    #[test]
    fn adding_a_session_extends_and_never_rewrites() {
        let vectors: Vec<Vec<f32>> = (0..12).map(|i| unit(i as f32 * 0.3)).collect();
        let options = GraphOptions { min_pool: 3, ..GraphOptions::default() };
        let mut graph = AssociationGraph::default();
        graph.add_session(&vectors[..4], 0..4, &options);
        graph.add_session(&vectors[..8], 4..8, &options);
        let before = graph.clone();
        graph.add_session(&vectors, 8..12, &options);
        // Every old adjacency list is a prefix of the new one.
        for (old, new) in before.neighbours().iter().zip(graph.neighbours()) {
            assert_eq!(&new[..old.len()], old.as_slice());
        }
        assert!(graph.n_edges() > before.n_edges());
    }
}
