//! Unit tests of the fold machinery.

use super::*;

#[test]
fn start_point_finds_the_defaults_on_each_axis() {
    for method in [Method::Fusion, Method::Memgas] {
        let base = fold_start(method, &IndexOptions::default());
        let axes = axes(method);
        let start = start_point(&axes, &base);
        let mut rebuilt = base;
        for (axis, &i) in axes.iter().zip(&start) {
            (axis.apply)(&mut rebuilt, axis.values[i]);
        }
        assert_eq!(rebuilt, base, "{method}");
    }
    assert!(axes(Method::Turn).is_empty());
}
