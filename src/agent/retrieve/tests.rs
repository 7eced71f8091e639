use chrono::NaiveDate;

use super::*;

fn date(text: &str) -> NaiveDate {
    NaiveDate::parse_from_str(text, "%Y-%m-%d").unwrap_or_default()
}

#[test]
fn time_windows() {
    let check = |text: &str, expected: Option<TimeWindow>| {
        assert_eq!(parse_time_window(text), expected, "{text}")
    };
    check("", None);
    check("''", None);
    check("sometime in spring", None);
    check(
        "2023-05-01, 2023-05-31",
        Some(TimeWindow::Dates(date("2023-05-01"), date("2023-05-31"))),
    );
    check(
        "2023-05-31 to 2023-05-01",
        Some(TimeWindow::Dates(date("2023-05-01"), date("2023-05-31"))),
    );
    check("2023-05-07", Some(TimeWindow::Dates(date("2023-05-07"), date("2023-05-07"))));
    check("2023-02-30, 2023-03-01", None);
    check("05-01, 05-31", Some(TimeWindow::MonthDays((5, 1), (5, 31))));
    check("13-01, 13-05", None);
}

#[test]
fn month_day_windows_cover_every_year_and_wrap() {
    let years = years_of([date("2022-06-01"), date("2023-01-05")]);
    let window = TimeWindow::MonthDays((12, 20), (1, 10));
    assert_eq!(
        window.ranges(&years),
        vec![(date("2022-12-20"), date("2023-01-10")), (date("2023-12-20"), date("2024-01-10"))]
    );
    let leap = TimeWindow::MonthDays((2, 29), (3, 1));
    assert_eq!(
        leap.ranges(&years_of([date("2023-01-01"), date("2024-01-01")])),
        vec![(date("2024-02-29"), date("2024-03-01"))]
    );
}

#[test]
fn ranking_helpers_are_stable() {
    let ids: Vec<String> =
        ["D1:1-1", "D1:2-1", "D1:2-2", "D2:5-1"].iter().map(|s| s.to_string()).collect();
    let returned: Vec<String> = ["D2:5-1", "D1:2", "D9:9-1", "D2:5-1", "D1:1-1: Caroline: hi"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(map_reranked(&returned, &ids, 20), Some(vec![3, 1, 0]));
    assert_eq!(map_reranked(&returned, &ids, 2), Some(vec![3, 1]));
    assert_eq!(map_reranked(&["D7:7".to_string()], &ids, 20), None);
    assert_eq!(map_reranked(&[], &ids, 20), None);
    let tags: Vec<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
    let scores = serde_json::json!({"c": 0.9, "a": 0.9, "b": 0, "zzz": 1.0});
    let selected = select_tags(scores.as_object().unwrap_or(&serde_json::Map::new()), &tags, 10);
    assert_eq!(selected, Some(vec![("a".to_string(), 0.9), ("c".to_string(), 0.9)]));
}

#[test]
fn keyword_replies_are_read_with_defaults() {
    let read = |value: serde_json::Value| keywords::read_keywords(&value);
    let (time, keywords) = read(serde_json::json!({
        "question_time": null,
        "keywords": [
            {"id": "kitten", "alternatives": "cat"},
            {"id": "Lena"},
            "adopt",
            {"id": 2023, "alternatives": null},
            {"id": "  "}
        ],
        "explanation": "extra keys are ignored"
    }))
    .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(time, None);
    let ids: Vec<(&str, usize)> =
        keywords.iter().map(|k| (k.id.as_str(), k.alternatives.len())).collect();
    assert_eq!(ids, [("kitten", 1), ("Lena", 0), ("adopt", 0), ("2023", 0)]);
    assert!(read(serde_json::json!({"question_time": "2023-05-01"})).is_err());
    assert!(read(serde_json::json!(["kitten"])).is_err());
}

#[test]
fn fallback_keywords_are_the_questions_content_words() {
    let ids: Vec<String> = fallback_keywords("What is the name of Lena's kittens? Answer briefly.")
        .into_iter()
        .map(|keyword| keyword.id)
        .collect();
    assert_eq!(ids, ["name", "lena", "kitten"]);
    assert!(fallback_keywords("What is it?").is_empty());
}
