//! Vector helpers shared by retrieval and the answer engine: similarity of L2-normalised
//! embeddings, stable top-k selection and the compact (8-bit) form. Pure and deterministic.

/// Dot product (the vectors are L2-normalised, so this is cosine similarity).
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// [`dot`] widened to f64 (the sum itself is taken in f32, as the association graph always has).
pub fn dot_f64(a: &[f32], b: &[f32]) -> f64 {
    f64::from(dot(a, b))
}

/// `vector` scaled to length 1 (unchanged when it is zero).
pub fn unit_length(mut vector: Vec<f32>) -> Vec<f32> {
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        vector.iter_mut().for_each(|x| *x /= norm);
    }
    vector
}

/// A vector in 8 bits per dimension with one scale: component `i` is `values[i] × scale`. The
/// store keeps every vector so (`store::vectors` lays out the bytes), and an own conversation's
/// index holds its word vectors so (a quarter of f32's bytes; they come compact from the store
/// anyway, so holding them so loses nothing more).
///
/// The scale is the largest magnitude over 127 (symmetric: zero stays zero, the largest
/// component is exact) and each component is rounded to the nearest step, so it is off by at
/// most half a step, `max|x| / 254`. Compacting a compact vector again gives it back unchanged.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CompactVector {
    /// The value of one step.
    pub scale: f32,
    /// One signed step count per dimension, in −127..=127.
    pub values: Vec<i8>,
}

/// A vector with a non-finite value cannot be made compact (nor ranked).
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
#[error("a vector with a non-finite value ({0})")]
pub struct NotFinite(pub f32);

impl CompactVector {
    /// Steps on each side of zero.
    const STEPS: f32 = 127.0;

    /// `vector` in 8 bits per dimension.
    pub fn new(vector: &[f32]) -> Result<Self, NotFinite> {
        if let Some(&bad) = vector.iter().find(|value| !value.is_finite()) {
            return Err(NotFinite(bad));
        }
        let largest = vector.iter().fold(0.0f32, |max, value| max.max(value.abs()));
        let scale = largest / Self::STEPS;
        let values = vector
            .iter()
            .map(|value| {
                let step = if scale > 0.0 {
                    (value / scale).round().clamp(-Self::STEPS, Self::STEPS)
                } else {
                    0.0
                };
                // In −127..=127 by the clamp, so the cast neither wraps nor saturates.
                step as i8
            })
            .collect();
        Ok(Self { scale, values })
    }

    /// The vector it stands for.
    pub fn to_f32(&self) -> Vec<f32> {
        self.values.iter().map(|&step| f32::from(step) * self.scale).collect()
    }

    /// [`dot`] with an f32 vector, without widening this one first. Summed in 8 lanes (then
    /// the lanes in order), so the compiler can use vector instructions; the order is fixed, so
    /// the result is the same on every run.
    pub fn dot(&self, other: &[f32]) -> f32 {
        const LANES: usize = 8;
        let length = self.values.len().min(other.len());
        let (values, other) = (&self.values[..length], &other[..length]);
        let mut lanes = [0.0f32; LANES];
        let (head, tail) = values.split_at(length - length % LANES);
        for (steps, xs) in head.chunks_exact(LANES).zip(other.chunks_exact(LANES)) {
            for lane in 0..LANES {
                lanes[lane] += f32::from(steps[lane]) * xs[lane];
            }
        }
        let rest: f32 =
            tail.iter().zip(&other[head.len()..]).map(|(&step, x)| f32::from(step) * x).sum();
        (lanes.iter().sum::<f32>() + rest) * self.scale
    }

    /// Its estimated heap bytes ([`crate::heap`]).
    pub fn heap_bytes(&self) -> usize {
        self.values.len() + crate::heap::ALLOCATION_OVERHEAD
    }
}

/// Indices of the `k` best-scoring items, best first; equal scores keep input order.
pub fn top_k(scores: &[f32], k: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
    order.truncate(k);
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_is_the_sum_of_products() {
        assert_eq!(dot(&[1.0, 2.0, 3.0], &[4.0, -5.0, 6.0]), 12.0);
        assert_eq!(dot_f64(&[0.5, 0.5], &[0.5, 0.5]), 0.5);
    }

    #[test]
    fn a_compact_vector_is_within_half_a_step_dots_alike_and_compacts_to_itself() {
        use rand::{Rng as _, SeedableRng as _};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(8);
        for dims in [1, 7, 384, 1536] {
            for _ in 0..50 {
                let raw: Vec<f32> = (0..dims).map(|_| rng.random_range(-1.0f32..1.0)).collect();
                let vector = unit_length(raw);
                let compact = CompactVector::new(&vector).unwrap();
                let back = compact.to_f32();
                let half_step = compact.scale / 2.0 * 1.0001;
                assert!(vector.iter().zip(&back).all(|(x, y)| (x - y).abs() <= half_step));
                // Compacting what it stands for gives it back: holding a stored vector compact
                // costs nothing more.
                assert_eq!(CompactVector::new(&back).unwrap(), compact);
                let other =
                    unit_length((0..dims).map(|_| rng.random_range(-1.0f32..1.0)).collect());
                assert!((compact.dot(&other) - dot(&back, &other)).abs() < 1e-5);
                // Off by at most half a step per component; under 10⁻³ at embedding sizes.
                let moved = (compact.dot(&other) - dot(&vector, &other)).abs();
                let bound = half_step * other.iter().map(|x| x.abs()).sum::<f32>() + 1e-5;
                assert!(moved <= bound, "{dims}: {moved} over {bound}");
                assert!(dims < 384 || moved < 1e-3, "{dims}: {moved}");
            }
        }
        assert_eq!(CompactVector::new(&[0.0, -0.0]).unwrap().to_f32(), vec![0.0, 0.0]);
        assert!(CompactVector::new(&[1.0, f32::NAN]).is_err());
        assert!(CompactVector::new(&[f32::INFINITY]).is_err());
    }

    #[test]
    fn top_k_is_best_first_with_stable_ties() {
        assert_eq!(top_k(&[0.1, 0.9, 0.5, 0.9], 3), vec![1, 3, 2]);
        assert_eq!(top_k(&[0.1], 5), vec![0]);
    }
}
