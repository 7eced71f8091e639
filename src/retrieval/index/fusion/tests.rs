//! Unit tests of fusion's normalisation, aggregation, neighbour and feedback pieces.

use super::*;

#[test]
fn z_scores_standardise_and_floor_missing_values() {
    let z = z_scores(&[1.0, 2.0, 3.0]);
    let sd = (2.0f64 / 3.0).sqrt();
    assert!((z[0] + 1.0 / sd).abs() < 1e-12 && z[1].abs() < 1e-12);
    assert!((z[2] - 1.0 / sd).abs() < 1e-12);
    assert_eq!(z_scores(&[5.0, 5.0]), vec![0.0, 0.0]);
    let with_missing = z_scores(&[f64::NEG_INFINITY, 1.0, 3.0]);
    assert_eq!(with_missing, vec![-1.0, -1.0, 1.0]);
    assert_eq!(normalised(&[1.0, 3.0], Normalisation::MinMax), vec![0.0, 1.0]);
}

#[test]
fn top_decayed_sum_weights_the_best_values() {
    assert_eq!(top_decayed_sum(&[0.2, 0.9, 0.5], 1, 0.5), 0.9);
    assert!((top_decayed_sum(&[0.2, 0.9, 0.5], 2, 0.5) - (0.9 + 0.25)).abs() < 1e-12);
    assert!((top_decayed_sum(&[0.2, 0.9, 0.5], 9, 1.0) - 1.6).abs() < 1e-12);
    assert_eq!(top_decayed_sum(&[], 3, 0.5), f64::NEG_INFINITY);
}

#[test]
fn min_max_scales_and_handles_flat_input() {
    assert_eq!(min_max(&[1.0, 3.0, 2.0]), vec![0.0, 1.0, 0.5]);
    assert_eq!(min_max(&[2.0, 2.0]), vec![0.0, 0.0]);
    assert_eq!(min_max(&[f64::NEG_INFINITY, 1.0, 3.0]), vec![0.0, 0.0, 1.0]);
}
