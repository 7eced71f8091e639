//! Month mentions in questions and session dates, for date-aware session ranking.
//!
//! A question such as "Where did Joanna travel in July 2022?" names the month of the event, and
//! the event is told in a session dated that month or shortly after. [`month_mentions`] finds the
//! months a text names (with the year when one follows), [`session_month`] reads the month of a
//! session date such as `1:56 pm on 8 May, 2023`, and [`date_affinity`] scores how well a session
//! falls in or just after a mentioned month. Only the question text and the session dates are
//! used. Hand-written: the inputs are plain English month names, which a date crate does not find
//! inside free text.

/// English month names, January first; abbreviations are their first three letters.
pub const MONTHS: [&str; 12] = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
];

/// A month a text names: `month` is 1–12; `year` when a four-digit year follows within two words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MonthMention {
    /// Year, if given.
    pub year: Option<i32>,
    /// Month, 1–12.
    pub month: u32,
}

/// The month a whole word names: a full name or its first three letters ("aug"), so "marching"
/// is not March.
fn month_of(word: &str) -> Option<u32> {
    MONTHS
        .iter()
        .position(|name| *name == word || (word.len() == 3 && name.starts_with(word)))
        .map(|i| i as u32 + 1)
}

fn year_of(word: &str) -> Option<i32> {
    if word.len() == 4 && word.chars().all(|c| c.is_ascii_digit()) {
        word.parse().ok().filter(|y| (1900..2100).contains(y))
    } else {
        None
    }
}

/// Months named in `text`, in order. "May" counts only next to a day number or a year ("8 May",
/// "May 2023"), since it is also a verb ("may I ask").
pub fn month_mentions(text: &str) -> Vec<MonthMention> {
    let words: Vec<String> = crate::text::words(text).collect();
    let mut mentions = Vec::new();
    for (i, word) in words.iter().enumerate() {
        let Some(month) = month_of(word) else { continue };
        let year = words.iter().skip(i + 1).take(2).find_map(|w| year_of(w));
        if word == "may" {
            let day_before = i > 0 && words[i - 1].chars().all(|c| c.is_ascii_digit());
            let number_after =
                words.get(i + 1).is_some_and(|w| w.chars().all(|c| c.is_ascii_digit()));
            if !day_before && !number_after {
                continue;
            }
        }
        mentions.push(MonthMention { year, month });
    }
    mentions
}

/// The (year, month) of a session date such as `1:56 pm on 8 May, 2023`.
pub fn session_month(date: &str) -> Option<(i32, u32)> {
    let mention = month_mentions(date).into_iter().next()?;
    Some((mention.year?, mention.month))
}

/// How well a session dated `session` fits the question's month mentions: 1 when it is in a
/// mentioned month, `next_month` when it is in the month after (the event told a little later),
/// 0 otherwise or without mentions. A mention without a year matches that month of any year.
pub fn date_affinity(
    mentions: &[MonthMention],
    session: Option<(i32, u32)>,
    next_month: f64,
) -> f64 {
    let Some((year, month)) = session else { return 0.0 };
    let index = year * 12 + month as i32 - 1;
    let mut best: f64 = 0.0;
    for mention in mentions {
        let offset = match mention.year {
            Some(y) => index - (y * 12 + mention.month as i32 - 1),
            None => (month as i32 - mention.month as i32).rem_euclid(12),
        };
        let score = match offset {
            0 => 1.0,
            1 => next_month,
            _ => 0.0,
        };
        best = best.max(score);
    }
    best
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn finds_months_with_and_without_years() {
        assert_eq!(
            month_mentions("What did Joanna do in January 2022 and in March?"),
            vec![
                MonthMention { year: Some(2022), month: 1 },
                MonthMention { year: None, month: 3 }
            ]
        );
        assert_eq!(
            month_mentions("Where was John between August 11 and Aug 15, 2023?"),
            vec![
                MonthMention { year: None, month: 8 },
                MonthMention { year: Some(2023), month: 8 }
            ]
        );
        assert!(month_mentions("May I ask what you marched for?").is_empty());
        assert_eq!(
            month_mentions("on 1 May, 2022"),
            vec![MonthMention { year: Some(2022), month: 5 }]
        );
    }

    #[test]
    fn reads_session_dates() {
        assert_eq!(session_month("1:56 pm on 8 May, 2023"), Some((2023, 5)));
        assert_eq!(session_month("7:55 pm on 9 June, 2023"), Some((2023, 6)));
        assert_eq!(session_month("someday"), None);
    }

    #[test]
    fn affinity_prefers_the_month_then_the_next() {
        let july = month_mentions("in July 2022");
        assert_eq!(date_affinity(&july, Some((2022, 7)), 0.5), 1.0);
        assert_eq!(date_affinity(&july, Some((2022, 8)), 0.5), 0.5);
        assert_eq!(date_affinity(&july, Some((2022, 6)), 0.5), 0.0);
        assert_eq!(date_affinity(&july, Some((2023, 7)), 0.5), 0.0);
        let december = month_mentions("last December");
        assert_eq!(date_affinity(&december, Some((2024, 1)), 0.5), 0.5);
        assert_eq!(date_affinity(&december, Some((2021, 12)), 0.5), 1.0);
        assert_eq!(date_affinity(&[], Some((2021, 12)), 0.5), 0.0);
        assert_eq!(date_affinity(&july, None, 0.5), 0.0);
    }
}
