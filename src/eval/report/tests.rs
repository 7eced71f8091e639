use super::*;

#[test]
fn mean_and_population_std() {
    let (mean, std) = mean_std(&[0.5, 0.7, 0.6]);
    assert!((mean - 0.6).abs() < 1e-12);
    assert!((std - (0.02f64 / 3.0).sqrt()).abs() < 1e-12);
    assert_eq!(mean_std(&[0.25]), (0.25, 0.0));
}

#[test]
fn categories_sort_by_number_then_known_types() {
    let mut locomo = [Category::Locomo(5), Category::Locomo(1), Category::Locomo(3)];
    locomo.sort_by_key(category_order);
    let labels: Vec<String> = locomo.iter().map(category_label).collect();
    assert_eq!(labels, ["1 multi-hop", "3 open-domain", "5 adversarial"]);
    let mut types = [
        Category::LongMemEval("some-new-type".into()),
        Category::LongMemEval("temporal-reasoning".into()),
        Category::LongMemEval("single-session-user".into()),
    ];
    types.sort_by_key(category_order);
    let labels: Vec<String> = types.iter().map(category_label).collect();
    assert_eq!(labels, ["single-session-user", "temporal-reasoning", "some-new-type"]);
}
