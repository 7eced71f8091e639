#![allow(clippy::unwrap_used, clippy::expect_used)]
use super::*;

fn naive(m: usize, n: usize, k: usize, a: &[f32], b: &[f32]) -> Vec<f32> {
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            out[i * n + j] = (0..k).map(|c| a[i * k + c] * b[c * n + j]).sum();
        }
    }
    out
}

#[test]
fn matmul_matches_naive_product_with_strides_and_accumulation() {
    let (m, n, k) = (5, 7, 3);
    let a: Vec<f32> = (0..m * k).map(|i| (i as f32 * 0.37).sin()).collect();
    let b: Vec<f32> = (0..k * n).map(|i| (i as f32 * 0.11).cos()).collect();
    let expected = naive(m, n, k, &a, &b);
    let mut out = vec![1.0; m * n];
    matmul(
        MatMul { m, n, k, scale: 2.0, accumulate: true },
        (&a, k, 1),
        (&b, n, 1),
        (&mut out, n, 1),
    );
    for (got, want) in out.iter().zip(&expected) {
        assert!((got - (1.0 + 2.0 * want)).abs() < 1e-5);
    }
    // b given transposed: bt[j][c] = b[c][j], read with swapped strides.
    let mut bt = vec![0.0; n * k];
    for c in 0..k {
        for j in 0..n {
            bt[j * k + c] = b[c * n + j];
        }
    }
    let mut out = vec![0.0; m * n];
    matmul(
        MatMul { m, n, k, scale: 1.0, accumulate: false },
        (&a, k, 1),
        (&bt, 1, k),
        (&mut out, n, 1),
    );
    for (got, want) in out.iter().zip(&expected) {
        assert!((got - want).abs() < 1e-5);
    }
}

#[test]
#[should_panic(expected = "matmul rhs out of bounds")]
fn matmul_rejects_short_operands() {
    let a = vec![0.0; 6];
    let b = vec![0.0; 5];
    let mut out = vec![0.0; 4];
    matmul(
        MatMul { m: 2, n: 2, k: 3, scale: 1.0, accumulate: false },
        (&a, 3, 1),
        (&b, 2, 1),
        (&mut out, 2, 1),
    );
}

#[test]
fn fast_exp_and_erf_are_accurate() {
    let mut worst_exp: f64 = 0.0;
    let mut worst_erf: f64 = 0.0;
    for step in -8000..=8000 {
        let x = step as f32 * 0.01;
        let exact = f64::from(x).exp();
        worst_exp = worst_exp.max(((f64::from(exp(x)) - exact) / exact).abs());
        let reference = f64::from(libm::erff(x));
        worst_erf = worst_erf.max((f64::from(erf(x)) - reference).abs());
    }
    assert!(worst_exp < 5e-7, "exp relative error {worst_exp}");
    assert!(worst_erf < 3e-7, "erf absolute error {worst_erf}");
    let mut values: Vec<f32> = (0..37).map(|i| i as f32 * 0.3 - 5.0).collect();
    let expected: Vec<f32> = values.iter().map(|x| x.exp()).collect();
    exp_in_place(&mut values);
    for (got, want) in values.iter().zip(&expected) {
        assert!(((got - want) / want).abs() < 5e-7);
    }
}

#[test]
fn softmax_and_layer_norm_and_gelu_match_their_definitions() {
    let mut row = vec![1.0, 2.0, 3.0];
    softmax_in_place(&mut row);
    let denominator: f32 = [1.0f32, 2.0, 3.0].iter().map(|x| x.exp()).sum();
    assert!((row[2] - 3.0f32.exp() / denominator).abs() < 1e-6);

    let norm = LayerNorm { weight: vec![2.0; 4], bias: vec![1.0; 4], eps: 0.0 };
    let mut rows = vec![1.0, 2.0, 3.0, 4.0];
    norm.apply_rows(&mut rows);
    // mean 2.5, variance 1.25
    assert!((rows[0] - (1.0 + 2.0 * (-1.5 / 1.25f32.sqrt()))).abs() < 1e-5);

    let mut values = vec![0.0, 1.0, -1.0];
    gelu_in_place(&mut values);
    assert_eq!(values[0], 0.0);
    assert!((values[1] - 0.841_344_7).abs() < 1e-6);
    assert!((values[2] + 0.158_655_3).abs() < 1e-6);
}
