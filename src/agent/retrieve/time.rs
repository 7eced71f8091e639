//! The date-window route: a question with a valid date window is answered from the timeline.
//!
//! Fixes over the reference (§17): an empty or `''` time constraint means "no window" instead of
//! an error (item 6); a month-day window that wraps past New Year covers both halves (item 7).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

use chrono::{Datelike, NaiveDate};
use regex::Regex;
use serde_json::json;

use super::input::{RetrieveInput, similarity};
use super::rerank::rerank;
use crate::agent::ids::origin_of;
use crate::agent::trace::{TraceEvent, TraceWriter};
use crate::dataset::DatasetKind;
use crate::llm::{ChatModel, Usage};
use crate::memory::query::{self, EventMatch, KeywordMatches};

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
}

/// Years present in a set of dates.
pub fn years_of(dates: impl IntoIterator<Item = NaiveDate>) -> BTreeSet<i32> {
    dates.into_iter().map(|date| date.year()).collect()
}

/// Step 2 when the question names a date window: the payload key and lines of the window's
/// events (re-ranked for LongMemEval when a busy window was cut), or `None` when the window
/// holds no event and the main route runs instead.
pub(super) async fn route_by_window<M: ChatModel>(
    model: &M,
    input: &RetrieveInput<'_>,
    window: &TimeWindow,
    matches: &KeywordMatches,
    trace: &mut TraceWriter,
    usage: &mut Usage,
) -> Option<(&'static str, Vec<String>)> {
    let routed = time_route(input, window, matches);
    trace.record(TraceEvent::Retrieval {
        step: "time_route".into(),
        detail: json!({ "window_events": routed.window_events, "shown": routed.sentences.len() }),
    });
    if routed.sentences.is_empty() {
        return None;
    }
    Some(match input.dataset {
        DatasetKind::Locomo => ("similar_sentence", routed.sentences),
        DatasetKind::LongMemEval | DatasetKind::Own => {
            let sentences = if routed.sentences.len() > input.settings.k2 && !routed.whole_window {
                let (kept, cost) = rerank(model, input, routed.sentences, trace).await;
                *usage += cost;
                kept
            } else {
                routed.sentences
            };
            ("key_sentences", sentences)
        }
    })
}

/// The date-window route's events.
struct TimeRouted {
    /// `Time:<date> <id>:<text>` lines.
    sentences: Vec<String>,
    /// Events in the window.
    window_events: usize,
    /// Whether the whole window is shown (it was small).
    whole_window: bool,
}

fn time_route(
    input: &RetrieveInput<'_>,
    window: &TimeWindow,
    matches: &KeywordMatches,
) -> TimeRouted {
    let settings = input.settings;
    let years = years_of(input.graph.episodes().filter_map(|episode| episode.date));
    let mut events = Vec::new();
    let mut origins = BTreeSet::new();
    for (from, to) in window.ranges(&years) {
        for event in query::events_between(input.graph, from, to) {
            if origins.insert(origin_of(&event.event_id).to_string()) {
                events.push(event);
            }
        }
    }
    let limit = match input.dataset {
        DatasetKind::Locomo => settings.time_event_limit,
        DatasetKind::LongMemEval | DatasetKind::Own => settings.k2,
    };
    let dates: BTreeMap<String, NaiveDate> =
        events.iter().map(|event| (origin_of(&event.event_id).to_string(), event.date)).collect();
    let window_events = events.len();
    if events.len() < limit {
        let sentences = events
            .iter()
            .map(|event| format!("Time:{} {}:{}", event.date, event.event_id, event.text))
            .collect();
        return TimeRouted { sentences, window_events, whole_window: true };
    }
    // A busy window: keep the events some question keyword reaches.
    let mut shown = BTreeSet::new();
    let mut reached: Vec<&EventMatch> = matches
        .full
        .iter()
        .chain(&matches.partial)
        .filter(|found| dates.contains_key(&found.origin) && shown.insert(found.origin.clone()))
        .collect();
    if input.dataset == DatasetKind::LongMemEval {
        let ids: Vec<(usize, f32)> = reached
            .iter()
            .enumerate()
            .map(|(index, found)| (index, similarity(input, &found.event_id)))
            .collect();
        let mut order: Vec<(usize, f32)> = ids;
        order.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        order.truncate(settings.k1);
        reached = order.into_iter().map(|(index, _)| reached[index]).collect();
    }
    let sentences = reached
        .iter()
        .map(|found| {
            let date = dates.get(&found.origin).map(ToString::to_string).unwrap_or_default();
            format!("Time:{date} {}:{}", found.event_id, found.text)
        })
        .collect();
    TimeRouted { sentences, window_events, whole_window: false }
}
