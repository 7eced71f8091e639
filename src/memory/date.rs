//! Lenient parsing of the event dates the rewrite model writes, into the calendar days the
//! timeline indexes (the reference's `_to_date`, §7.3).
//!
//! The rewrite stage is asked for `YYYY-MM-DD`, but models also write zero parts
//! (`2023-05-00`), impossible days (`2023-02-31`), ranges (`2022–2023`,
//! `2023-05-01 to 2023-05-07`), other orders (`08/05/2023`) and two-digit years. Each form is
//! mapped to one day; a period becomes its midpoint, as the rewrite prompt asks.

use std::sync::LazyLock;

use chrono::{Datelike, NaiveDate};
use regex::Regex;

/// Compiles a pattern written in this file.
fn pattern(source: &str) -> Regex {
    // The patterns are constants of this file, covered by the unit tests below.
    #[allow(clippy::expect_used)]
    Regex::new(source).expect("date pattern is valid")
}

static YMD: LazyLock<Regex> =
    LazyLock::new(|| pattern(r"^(\d{4})-(\d{1,2}|XX|xx)-(\d{1,2}|XX|xx)$"));
static YEAR_RANGE: LazyLock<Regex> = LazyLock::new(|| pattern(r"^(\d{4})\s*[-–—]\s*(\d{4})$"));
static DATE_RANGE: LazyLock<Regex> = LazyLock::new(|| {
    pattern(r"^(\d{4}-\d{1,2}-\d{1,2})\s*(?:to|~|–|—)\s*(\d{4}-\d{1,2}-\d{1,2})$")
});
static QUARTER: LazyLock<Regex> = LazyLock::new(|| pattern(r"^(\d{4})-?[Qq]([1-4])$"));
static YEAR_MONTH: LazyLock<Regex> = LazyLock::new(|| pattern(r"^(\d{4})-(\d{1,2})$"));
static YEAR: LazyLock<Regex> = LazyLock::new(|| pattern(r"^(\d{4})$"));
static FOUR_DIGIT_YEAR_ORDERS: LazyLock<Regex> = LazyLock::new(|| {
    pattern(r"^(?:\d{4}/\d{1,2}/\d{1,2}|\d{1,2}-\d{1,2}-\d{4}|\d{1,2}/\d{1,2}/\d{4})$")
});
static SHORT_YMD: LazyLock<Regex> = LazyLock::new(|| pattern(r"^(\d{2})-(\d{1,2})-(\d{1,2})$"));

/// Parses an event date as the rewrite model wrote it; `None` when the text is not a date.
///
/// Rules, in order (the first that applies wins):
/// 1. `YYYY-MM-DD`: month `00`/`XX` → January 1st; day `00`/`XX` → the 1st; an impossible day
///    (`2023-02-31`) → the 1st of that month.
/// 2. An ISO date-time (`2023-05-08T10:00:00`) → its date.
/// 3. A year range `YYYY–YYYY` (hyphen, en or em dash) → midpoint of Jan 1 of the first year and
///    Dec 31 of the last.
/// 4. A date range `YYYY-MM-DD to|~|–|— YYYY-MM-DD` → midpoint.
/// 5. `YYYY/MM/DD`, `DD-MM-YYYY`, `DD/MM/YYYY`.
/// 6. `YY-MM-DD` → 20YY (impossible day → the 1st of the month).
/// 7. `YYYY-Qn` → the 15th of the quarter's middle month (legacy reference rule).
/// 8. `YYYY-MM` → the 15th; `YYYY` → July 2nd (the midpoint of the period; not in the reference,
///    which dropped these from the timeline).
pub fn parse_event_date(text: &str) -> Option<NaiveDate> {
    let text = text.trim();
    if let Some(parts) = YMD.captures(text) {
        let year = parts[1].parse().ok()?;
        let month = parts[2].parse::<u32>().unwrap_or(0);
        let day = parts[3].parse::<u32>().unwrap_or(0);
        if month == 0 {
            return NaiveDate::from_ymd_opt(year, 1, 1);
        }
        return NaiveDate::from_ymd_opt(year, month, day.max(1))
            .or_else(|| NaiveDate::from_ymd_opt(year, month, 1));
    }
    if let Ok(moment) = text.parse::<chrono::NaiveDateTime>() {
        return Some(moment.date());
    }
    if let Some(parts) = YEAR_RANGE.captures(text) {
        let first = NaiveDate::from_ymd_opt(parts[1].parse().ok()?, 1, 1)?;
        let last = NaiveDate::from_ymd_opt(parts[2].parse().ok()?, 12, 31)?;
        return Some(midpoint(first, last));
    }
    if let Some(parts) = DATE_RANGE.captures(text) {
        let first = parse_event_date(&parts[1])?;
        let last = parse_event_date(&parts[2])?;
        return Some(midpoint(first, last));
    }
    // chrono accepts short years for `%Y`, so the four-digit year is checked first: `23-05-08`
    // must reach the two-digit-year rule, not become the year 8.
    if FOUR_DIGIT_YEAR_ORDERS.is_match(text) {
        for format in ["%Y/%m/%d", "%d-%m-%Y", "%d/%m/%Y"] {
            if let Ok(date) = NaiveDate::parse_from_str(text, format) {
                return Some(date);
            }
        }
    }
    if let Some(parts) = SHORT_YMD.captures(text) {
        let year = 2000 + parts[1].parse::<i32>().ok()?;
        let month = parts[2].parse().ok()?;
        let day = parts[3].parse().ok()?;
        return NaiveDate::from_ymd_opt(year, month, day)
            .or_else(|| NaiveDate::from_ymd_opt(year, month, 1));
    }
    if let Some(parts) = QUARTER.captures(text) {
        let quarter: u32 = parts[2].parse().ok()?;
        return NaiveDate::from_ymd_opt(parts[1].parse().ok()?, quarter * 3 - 1, 15);
    }
    if let Some(parts) = YEAR_MONTH.captures(text) {
        return NaiveDate::from_ymd_opt(parts[1].parse().ok()?, parts[2].parse().ok()?, 15);
    }
    if let Some(parts) = YEAR.captures(text) {
        return NaiveDate::from_ymd_opt(parts[1].parse().ok()?, 7, 2);
    }
    None
}

/// The day halfway between two days (rounded down); order does not matter.
fn midpoint(first: NaiveDate, last: NaiveDate) -> NaiveDate {
    let (low, high) = if first <= last { (first, last) } else { (last, first) };
    let half = (high.num_days_from_ce() - low.num_days_from_ce()) / 2;
    low + chrono::Days::new(u64::try_from(half).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, expected: Option<&str>) {
        let expected = expected.map(|day| day.parse::<NaiveDate>().unwrap_or_default());
        assert_eq!(parse_event_date(text), expected, "{text:?}");
    }

    #[test]
    fn plain_and_damaged_iso_dates() {
        check("2023-05-08", Some("2023-05-08"));
        check(" 2023-5-8 ", Some("2023-05-08"));
        check("2023-00-00", Some("2023-01-01"));
        check("2023-05-00", Some("2023-05-01"));
        check("2023-02-31", Some("2023-02-01"));
        check("2023-XX-XX", Some("2023-01-01"));
        check("2023-06-XX", Some("2023-06-01"));
        check("2023-13-01", None);
        check("2023-05-08T10:30:00", Some("2023-05-08"));
    }

    #[test]
    fn ranges_become_midpoints() {
        check("2022-2023", Some("2022-12-31"));
        check("2021 – 2021", Some("2021-07-02"));
        check("2023-05-01 to 2023-05-07", Some("2023-05-04"));
        check("2023-05-07 ~ 2023-05-01", Some("2023-05-04"));
        check("2023-05-01—2023-05-03", Some("2023-05-02"));
    }

    #[test]
    fn other_orders_and_periods() {
        check("2023/05/08", Some("2023-05-08"));
        check("08-05-2023", Some("2023-05-08"));
        check("08/05/2023", Some("2023-05-08"));
        check("23-05-08", Some("2023-05-08"));
        check("23-02-30", Some("2023-02-01"));
        check("8/5/23", None);
        check("2023-Q2", Some("2023-05-15"));
        check("2023Q4", Some("2023-11-15"));
        check("2023-07", Some("2023-07-15"));
        check("2022", Some("2022-07-02"));
        check("last week", None);
        check("", None);
        check("None", None);
    }
}
