//! Vector helpers shared by retrieval and the answer engine: similarity of L2-normalised
//! embeddings and stable top-k selection. Pure and deterministic.

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
    fn top_k_is_best_first_with_stable_ties() {
        assert_eq!(top_k(&[0.1, 0.9, 0.5, 0.9], 3), vec![1, 3, 2]);
        assert_eq!(top_k(&[0.1], 5), vec![0]);
    }
}
