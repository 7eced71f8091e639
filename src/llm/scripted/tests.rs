use super::*;

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[test]
fn hashed_embeddings_are_deterministic_and_similarity_preserving() {
    let a = hashed_embedding("Caroline went to the LGBTQ support group", 64);
    let b = hashed_embedding("caroline went to a support group yesterday", 64);
    let c = hashed_embedding("quarterly tax filing deadline", 64);
    assert_eq!(a, hashed_embedding("Caroline went to the LGBTQ support group", 64));
    assert!((cosine(&a, &a) - 1.0).abs() < 1e-5);
    assert!(cosine(&a, &b) > cosine(&a, &c) + 0.3, "{} vs {}", cosine(&a, &b), cosine(&a, &c));
    assert!(hashed_embedding("", 8).iter().all(|x| *x == 0.0));
}
