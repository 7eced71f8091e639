//! Personalized PageRank over the undirected, unweighted association graph (MemGAS §5.4).
//!
//! The stationary vector solves
//! `x = (1 − d)·r + d·Σ_{u~v} x_u / deg(u) + d·(Σ_{s : deg(s) = 0} x_s)·r`
//! with `r` the normalised reset (seed) vector and `d` the probability of following an edge
//! (MemGAS uses d = 0.1: 90 % of the mass restarts at the seeds every step). Dangling vertices
//! send their mass back through `r`, not uniformly, which is what igraph's PRPACK solver does for
//! a personalized run. Hand-written because petgraph has no personalized variant, and the fixed
//! point is a few lines: power iteration contracts by `d` per step, so it converges to 1e-15 in
//! a few dozen iterations for any d ≤ 0.5.
//!
//! Synchronous, pure, deterministic.

/// Why a PageRank run was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PprError {
    /// The reset vector has no positive mass after clamping.
    #[error("personalized pagerank reset vector has no positive mass")]
    EmptyReset,
    /// Reset and graph sizes differ.
    #[error("reset vector has {reset} entries but the graph has {nodes} nodes")]
    SizeMismatch {
        /// Entries in the reset vector.
        reset: usize,
        /// Nodes in the graph.
        nodes: usize,
    },
    /// Damping outside [0, 1).
    #[error("damping must be in [0, 1): {0}")]
    BadDamping(f64),
}

/// Stop when the L1 change of one iteration falls below this.
const TOLERANCE: f64 = 1e-15;

/// Hard cap on iterations (only reached for damping close to 1).
const MAX_ITERATIONS: usize = 10_000;

/// Personalized PageRank of every node. `neighbours[v]` lists the neighbours of `v` (each
/// undirected edge appears in both lists, no self loops). `reset` is clamped to non-negative
/// values (NaN counts as 0) and normalised to sum 1, so scaling it changes nothing. The result
/// sums to 1.
pub fn personalized_pagerank(
    neighbours: &[Vec<u32>],
    reset: &[f64],
    damping: f64,
) -> Result<Vec<f64>, PprError> {
    let weighted: Vec<Vec<(u32, f64)>> =
        neighbours.iter().map(|list| list.iter().map(|&v| (v, 1.0)).collect()).collect();
    weighted_personalized_pagerank(&weighted, reset, damping)
}

/// [`personalized_pagerank`] over weighted edges: a walker at `u` follows the edge to `v` with
/// probability `w(u, v) / Σ_x w(u, x)`. `neighbours[v]` lists `(neighbour, weight)`, each
/// undirected edge in both lists with the same weight; non-positive weights count as no edge.
/// With every weight 1 this is the unweighted walk of the paper; lighter edges of one kind
/// (e.g. similarity links between sessions) leave more of a node's outflow to the others.
pub fn weighted_personalized_pagerank(
    neighbours: &[Vec<(u32, f64)>],
    reset: &[f64],
    damping: f64,
) -> Result<Vec<f64>, PprError> {
    let n = neighbours.len();
    if reset.len() != n {
        return Err(PprError::SizeMismatch { reset: reset.len(), nodes: n });
    }
    if !(0.0..1.0).contains(&damping) {
        return Err(PprError::BadDamping(damping));
    }
    let clamped: Vec<f64> =
        reset.iter().map(|&value| if value > 0.0 { value } else { 0.0 }).collect();
    let total: f64 = clamped.iter().sum();
    if total <= 0.0 || !total.is_finite() {
        return Err(PprError::EmptyReset);
    }
    let restart: Vec<f64> = clamped.iter().map(|value| value / total).collect();
    // Out-weight of each node; 0 marks a dangling node.
    let strength: Vec<f64> =
        neighbours.iter().map(|list| list.iter().map(|&(_, w)| w.max(0.0)).sum::<f64>()).collect();

    let mut current = restart.clone();
    let mut next = vec![0.0; n];
    for _ in 0..MAX_ITERATIONS {
        let dangling: f64 =
            current.iter().zip(&strength).filter(|(_, s)| **s <= 0.0).map(|(mass, _)| mass).sum();
        let restart_weight = (1.0 - damping) + damping * dangling;
        for (slot, r) in next.iter_mut().zip(&restart) {
            *slot = restart_weight * r;
        }
        for (node, list) in neighbours.iter().enumerate() {
            if strength[node] <= 0.0 || current[node] == 0.0 {
                continue;
            }
            let share = damping * current[node] / strength[node];
            for &(neighbour, weight) in list {
                if weight > 0.0 {
                    next[neighbour as usize] += share * weight;
                }
            }
        }
        let change: f64 = next.iter().zip(&current).map(|(a, b)| (a - b).abs()).sum();
        std::mem::swap(&mut current, &mut next);
        if change < TOLERANCE {
            break;
        }
    }
    Ok(current)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn graph(n: usize, edges: &[(u32, u32)]) -> Vec<Vec<u32>> {
        let mut neighbours = vec![Vec::new(); n];
        for &(a, b) in edges {
            neighbours[a as usize].push(b);
            neighbours[b as usize].push(a);
        }
        neighbours
    }

    fn check(neighbours: &[Vec<u32>], reset: &[f64], damping: f64, expected: &[f64]) {
        let got = personalized_pagerank(neighbours, reset, damping).unwrap();
        for (index, (g, e)) in got.iter().zip(expected).enumerate() {
            assert!((g - e).abs() < 5e-7, "node {index}: got {g}, expected {e} (all: {got:?})");
        }
        assert!((got.iter().sum::<f64>() - 1.0).abs() < 1e-12);
    }

    // The four test vectors of memgas.md §5.4 (python-igraph 0.11.8, PRPACK).
    #[test]
    fn path_with_isolated_nodes_damping_point_one() {
        check(&graph(4, &[(0, 1)]), &[1.0, 0.0, 0.0, 0.0], 0.1, &[0.909091, 0.090909, 0.0, 0.0]);
    }

    #[test]
    fn path_with_isolated_nodes_damping_point_eight_five() {
        check(&graph(4, &[(0, 1)]), &[1.0, 0.0, 0.0, 0.0], 0.85, &[0.540541, 0.459459, 0.0, 0.0]);
    }

    #[test]
    fn isolated_seed_keeps_its_mass() {
        check(
            &graph(4, &[(0, 1)]),
            &[1.0, 0.0, 1.0, 0.0],
            0.1,
            &[0.478469, 0.047847, 0.473684, 0.0],
        );
    }

    #[test]
    fn star_seeded_on_a_leaf() {
        check(
            &graph(5, &[(0, 1), (0, 2), (0, 3)]),
            &[0.0, 1.0, 0.0, 0.0, 0.0],
            0.1,
            &[0.090909, 0.903030, 0.003030, 0.003030, 0.0],
        );
    }

    #[test]
    fn scaling_and_negative_entries_of_the_reset_change_nothing() {
        let g = graph(4, &[(0, 1)]);
        let a = personalized_pagerank(&g, &[1.0, 0.0, 1.0, 0.0], 0.1).unwrap();
        let b = personalized_pagerank(&g, &[7.0, -3.0, 7.0, f64::NAN], 0.1).unwrap();
        for (x, y) in a.iter().zip(&b) {
            assert!((x - y).abs() < 1e-15);
        }
    }

    #[test]
    fn lighter_edges_carry_less_of_the_outflow() {
        // Node 0 seeded, linked to 1 with weight 1 and to 2 with weight 0.25.
        let neighbours = vec![vec![(1, 1.0), (2, 0.25)], vec![(0, 1.0)], vec![(0, 0.25)]];
        let mass = weighted_personalized_pagerank(&neighbours, &[1.0, 0.0, 0.0], 0.5).unwrap();
        assert!((mass.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        // Everything 1 and 2 receive comes from 0 in the ratio of the edge weights.
        assert!((mass[1] / mass[2] - 4.0).abs() < 1e-9, "{mass:?}");
        // All weights 1 is the unweighted walk.
        let unit = vec![vec![(1, 1.0), (2, 1.0)], vec![(0, 1.0)], vec![(0, 1.0)]];
        let plain = personalized_pagerank(&graph(3, &[(0, 1), (0, 2)]), &[1.0, 0.0, 0.0], 0.5);
        assert_eq!(weighted_personalized_pagerank(&unit, &[1.0, 0.0, 0.0], 0.5), plain);
    }

    #[test]
    fn refuses_empty_reset_and_size_mismatch() {
        let g = graph(2, &[(0, 1)]);
        assert_eq!(personalized_pagerank(&g, &[0.0, -1.0], 0.1), Err(PprError::EmptyReset));
        assert!(matches!(
            personalized_pagerank(&g, &[1.0], 0.1),
            Err(PprError::SizeMismatch { .. })
        ));
        assert!(matches!(
            personalized_pagerank(&g, &[1.0, 0.0], 1.0),
            Err(PprError::BadDamping(_))
        ));
    }
}
