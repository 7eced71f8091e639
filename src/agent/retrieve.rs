//! Pre-loop retrieval for one question (spec §9.1–§9.5, §9.7): what the model sees before its
//! first tool call.
//!
//! Steps: the model extracts the question's keywords (with alternatives) and an optional date
//! window; the keywords are matched fuzzily against the graph's keys; a valid date window routes
//! through the timeline; otherwise candidate events are ranked by embedding similarity to the
//! question and re-ranked by the model to at most `k2`; keywords whose keys carry more than
//! `tag_max` tags get their tags scored by the model; the `topic_k` nearest topics are added.
//!
//! Fixes over the reference (§17): a re-rank that returns nothing usable falls back to the
//! similarity order, so the context is never empty when candidates exist (item 9); an empty or
//! `''` time constraint means "no window" instead of an error (item 6); a month-day window that
//! wraps past New Year covers both halves (item 7); ties are broken by candidate order, never by
//! hash order (item 21).

use std::collections::BTreeSet;

use chrono::{Datelike, NaiveDate};
use regex::Regex;
use serde::{Deserialize, Serialize};
use std::sync::LazyLock;

/// Numeric knobs of retrieval (spec §16).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RetrievalSettings {
    /// Coarse cap: candidates kept by embedding similarity before the re-rank (`K1`).
    pub k1: usize,
    /// Fine cap: events kept after the re-rank (`K2`); also the `edges_by_tag` cut.
    pub k2: usize,
    /// Topics shown (`TOPIC_K`).
    pub topic_k: usize,
    /// Keys with more tags than this get their tags scored by the model (`TAG_MAX`).
    pub tag_max: usize,
    /// Tags kept after scoring (`TAG_LIMIT`).
    pub tag_limit: usize,
    /// Scored tags at or above this have their events fetched up front.
    pub tag_fetch_threshold: f64,
    /// A date window with fewer events than this is shown whole (`TIME_EVENT_LIMIT`).
    pub time_event_limit: usize,
    /// Partial keyword matches need at least this many matched question keywords (main route).
    pub min_matched_keys: usize,
    /// Re-asks allowed for each structured retrieval call.
    pub max_reasks: u32,
}

impl Default for RetrievalSettings {
    fn default() -> Self {
        Self {
            k1: 80,
            k2: 20,
            topic_k: 8,
            tag_max: 15,
            tag_limit: 10,
            tag_fetch_threshold: 0.7,
            time_event_limit: 50,
            min_matched_keys: 2,
            max_reasks: 2,
        }
    }
}

/// A date constraint extracted from a question.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeWindow {
    /// Inclusive full-date range.
    Dates(NaiveDate, NaiveDate),
    /// Inclusive month-day range in an unknown year: applied to every year of the timeline.
    MonthDays((u32, u32), (u32, u32)),
}

static FULL_RANGE: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(
        r"^(\d{4})-(\d{1,2})-(\d{1,2})(?:\s*(?:,|to|~|–|—|/)\s*(\d{4})-(\d{1,2})-(\d{1,2}))?$",
    )
    .ok()
});
static MONTH_DAY_RANGE: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"^(\d{1,2})-(\d{1,2})(?:\s*(?:,|to|~|–|—|/)\s*(\d{1,2})-(\d{1,2}))?$").ok()
});

/// Reads the model's `question_time`: `YYYY-MM-DD, YYYY-MM-DD`, `MM-DD, MM-DD`, or a single date
/// of either form (a one-day window). Empty, quoted-empty or malformed text means no window; a
/// reversed range is put in order.
pub fn parse_time_window(text: &str) -> Option<TimeWindow> {
    let text = text.trim().trim_matches(|c| c == '\'' || c == '"').trim();
    if text.is_empty() {
        return None;
    }
    let number = |captures: &regex::Captures<'_>, index: usize| -> Option<u32> {
        captures.get(index).and_then(|group| group.as_str().parse().ok())
    };
    if let Some(captures) = FULL_RANGE.as_ref().and_then(|regex| regex.captures(text)) {
        let year = |index| number(&captures, index).and_then(|year| i32::try_from(year).ok());
        let start =
            NaiveDate::from_ymd_opt(year(1)?, number(&captures, 2)?, number(&captures, 3)?)?;
        let end = if captures.get(4).is_some() {
            NaiveDate::from_ymd_opt(year(4)?, number(&captures, 5)?, number(&captures, 6)?)?
        } else {
            start
        };
        return Some(TimeWindow::Dates(start.min(end), start.max(end)));
    }
    if let Some(captures) = MONTH_DAY_RANGE.as_ref().and_then(|regex| regex.captures(text)) {
        let start = (number(&captures, 1)?, number(&captures, 2)?);
        let end = if captures.get(3).is_some() {
            (number(&captures, 3)?, number(&captures, 4)?)
        } else {
            start
        };
        // Validate against a leap year so that 02-29 is accepted.
        NaiveDate::from_ymd_opt(2024, start.0, start.1)?;
        NaiveDate::from_ymd_opt(2024, end.0, end.1)?;
        return Some(TimeWindow::MonthDays(start, end));
    }
    None
}

impl TimeWindow {
    /// Inclusive date ranges of the window, given the years the timeline covers. A month-day
    /// window becomes one range per year; one that wraps past New Year (`12-20, 01-10`) runs
    /// into the next year. Invalid days in a year (Feb 29) are skipped.
    pub fn ranges(&self, years: &BTreeSet<i32>) -> Vec<(NaiveDate, NaiveDate)> {
        match *self {
            TimeWindow::Dates(start, end) => vec![(start, end)],
            TimeWindow::MonthDays(start, end) => {
                let wraps = start > end;
                years
                    .iter()
                    .filter_map(|&year| {
                        let from = NaiveDate::from_ymd_opt(year, start.0, start.1)?;
                        let to_year = if wraps { year + 1 } else { year };
                        let to = NaiveDate::from_ymd_opt(to_year, end.0, end.1)?;
                        Some((from, to))
                    })
                    .collect()
            }
        }
    }

    /// The window's first day in the given years (for `current_date`-style displays).
    pub fn first_day(&self, years: &BTreeSet<i32>) -> Option<NaiveDate> {
        self.ranges(years).first().map(|(start, _)| *start)
    }
}

/// Years present in a set of dates.
pub fn years_of(dates: impl IntoIterator<Item = NaiveDate>) -> BTreeSet<i32> {
    dates.into_iter().map(|date| date.year()).collect()
}

/// Dot product (the vectors are L2-normalised, so this is cosine similarity).
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Indices of the `k` best-scoring items, best first; equal scores keep input order.
pub fn top_k(scores: &[f32], k: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
    order.truncate(k);
    order
}

/// Maps ids returned by the re-rank to candidate positions: an id matches a candidate with the
/// same id or whose id starts with `<id>-` (a turn id picks its first event). Unknown and
/// repeated ids are dropped; at most `limit` positions are kept. Returns `None` when nothing
/// usable came back, so the caller falls back to the similarity order.
pub fn map_reranked(
    returned: &[String],
    candidate_ids: &[String],
    limit: usize,
) -> Option<Vec<usize>> {
    let mut picked = Vec::new();
    let mut seen = BTreeSet::new();
    for id in returned {
        let id = id.trim();
        // Tolerate `D1:3-1:Caroline: ...` echoes of the whole candidate line.
        let id = id.split_once(": ").map_or(id, |(head, _)| head);
        let prefix = format!("{id}-");
        let position = candidate_ids
            .iter()
            .position(|candidate| candidate == id)
            .or_else(|| candidate_ids.iter().position(|candidate| candidate.starts_with(&prefix)));
        if let Some(position) = position
            && seen.insert(position)
        {
            picked.push(position);
            if picked.len() == limit {
                break;
            }
        }
    }
    (!picked.is_empty()).then_some(picked)
}

/// Tags to keep from a model's scores: scored tags that exist, score > 0, best first (ties in the
/// key's tag order), at most `limit`. `None` when no usable score came back.
pub fn select_tags(
    scores: &serde_json::Map<String, serde_json::Value>,
    tags: &[String],
    limit: usize,
) -> Option<Vec<(String, f64)>> {
    let mut scored: Vec<(usize, f64)> = tags
        .iter()
        .enumerate()
        .filter_map(|(index, tag)| {
            let score = scores.get(tag).and_then(serde_json::Value::as_f64)?;
            (score > 0.0).then_some((index, score))
        })
        .collect();
    if scored.is_empty() {
        return None;
    }
    scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    scored.truncate(limit);
    Some(scored.into_iter().map(|(index, score)| (tags[index].clone(), score)).collect())
}

#[cfg(test)]
mod tests {
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
            vec![
                (date("2022-12-20"), date("2023-01-10")),
                (date("2023-12-20"), date("2024-01-10"))
            ]
        );
        let leap = TimeWindow::MonthDays((2, 29), (3, 1));
        assert_eq!(
            leap.ranges(&years_of([date("2023-01-01"), date("2024-01-01")])),
            vec![(date("2024-02-29"), date("2024-03-01"))]
        );
    }

    #[test]
    fn ranking_helpers_are_stable() {
        assert_eq!(top_k(&[0.1, 0.9, 0.5, 0.9], 3), vec![1, 3, 2]);
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
        let selected =
            select_tags(scores.as_object().unwrap_or(&serde_json::Map::new()), &tags, 10);
        assert_eq!(selected, Some(vec![("a".to_string(), 0.9), ("c".to_string(), 0.9)]));
    }
}
