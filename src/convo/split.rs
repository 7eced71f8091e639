//! Placing incoming messages into sessions, existing or new. Pure: the store passes the spans of
//! the sessions it has and gets back where each message goes.
//!
//! Rules, in order:
//! 1. A message with a session id goes to the session with that id (an existing one, or one new
//!    session per new id).
//! 2. A message without a session id but with a time (its own, or else inherited from the
//!    nearest earlier message of the input, or else the nearest later one) joins the id-less
//!    session whose time range, widened by the gap on both sides, contains it (the closest one
//!    when several do), widening that range; otherwise it starts a new session. Messages are
//!    taken in time order, so an out-of-order message lands in the session of its time.
//! 3. Messages with neither (an input without any timestamp) form one new session.
//!
//! Sessions are never merged or split after the fact: a session keeps its number once stored, so
//! the work done for it stays valid unless its own messages change.

use chrono::{DateTime, TimeDelta, Utc};

use super::Message;

/// The default gap that starts a new session: four hours without a message.
pub const DEFAULT_SESSION_GAP: TimeDelta = TimeDelta::hours(4);

/// What the store knows about one of its sessions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionSpan {
    /// The session's number (`D<number>`).
    pub number: u32,
    /// The caller's session id, if the session was created from one.
    pub key: Option<String>,
    /// Time of its first and last message, when known.
    pub range: Option<(DateTime<Utc>, DateTime<Utc>)>,
}

/// Where one message goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// Into the existing session with this number.
    Existing(u32),
    /// Into the n-th new session (0-based, in the order of the returned list).
    New(usize),
}

/// A session to create: its caller id, if any.
pub type NewSession = Option<String>;

/// Where each of `messages` goes (same order), and the new sessions to create.
pub fn place_messages(
    existing: &[SessionSpan],
    messages: &[Message],
    gap: TimeDelta,
) -> (Vec<Placement>, Vec<NewSession>) {
    let times = effective_times(messages);
    let mut placements: Vec<Option<Placement>> = vec![None; messages.len()];
    let mut new_sessions: Vec<NewSession> = Vec::new();

    // Rule 1: caller session ids.
    for (position, message) in messages.iter().enumerate() {
        let Some(key) = &message.session else { continue };
        let placement = match existing.iter().find(|span| span.key.as_ref() == Some(key)) {
            Some(span) => Placement::Existing(span.number),
            None => match new_sessions.iter().position(|new| new.as_ref() == Some(key)) {
                Some(index) => Placement::New(index),
                None => {
                    new_sessions.push(Some(key.clone()));
                    Placement::New(new_sessions.len() - 1)
                }
            },
        };
        placements[position] = Some(placement);
    }

    // Rule 2: by time gap, in time order (ties in input order).
    let mut ranges: Vec<(Placement, DateTime<Utc>, DateTime<Utc>)> = existing
        .iter()
        .filter(|span| span.key.is_none())
        .filter_map(|span| {
            span.range.map(|(first, last)| (Placement::Existing(span.number), first, last))
        })
        .collect();
    let mut timed: Vec<(DateTime<Utc>, usize)> = messages
        .iter()
        .enumerate()
        .filter(|(_, message)| message.session.is_none())
        .filter_map(|(position, _)| times[position].map(|time| (time, position)))
        .collect();
    timed.sort();
    for (time, position) in timed {
        let closest = ranges
            .iter_mut()
            .filter(|(_, first, last)| within_gap(time, *first, *last, gap))
            .min_by_key(|(_, first, last)| distance(time, *first, *last));
        let placement = match closest {
            Some((placement, first, last)) => {
                *first = (*first).min(time);
                *last = (*last).max(time);
                placement.clone()
            }
            None => {
                new_sessions.push(None);
                let placement = Placement::New(new_sessions.len() - 1);
                ranges.push((placement.clone(), time, time));
                placement
            }
        };
        placements[position] = Some(placement);
    }

    // Rule 3: no time anywhere.
    if placements.iter().any(Option::is_none) {
        new_sessions.push(None);
        let index = new_sessions.len() - 1;
        for placement in placements.iter_mut().filter(|placement| placement.is_none()) {
            *placement = Some(Placement::New(index));
        }
    }
    let placements = placements.into_iter().map(|p| p.unwrap_or(Placement::New(0))).collect();
    (placements, new_sessions)
}

/// Whether `time` lies in `[first - gap, last + gap]`; a bound past the representable times
/// (a huge gap) is no bound.
fn within_gap(
    time: DateTime<Utc>,
    first: DateTime<Utc>,
    last: DateTime<Utc>,
    gap: TimeDelta,
) -> bool {
    first.checked_sub_signed(gap).is_none_or(|start| time >= start)
        && last.checked_add_signed(gap).is_none_or(|end| time <= end)
}

/// How far `time` lies outside `[first, last]` (zero inside).
fn distance(time: DateTime<Utc>, first: DateTime<Utc>, last: DateTime<Utc>) -> TimeDelta {
    if time < first {
        first - time
    } else if time > last {
        time - last
    } else {
        TimeDelta::zero()
    }
}

/// Each message's own time, else the nearest earlier one's in input order, else the nearest
/// later one's.
pub(crate) fn effective_times(messages: &[Message]) -> Vec<Option<DateTime<Utc>>> {
    let mut times: Vec<Option<DateTime<Utc>>> =
        messages.iter().map(|message| message.timestamp.map(|stamp| stamp.instant())).collect();
    let mut previous = None;
    for time in times.iter_mut() {
        match time {
            Some(own) => previous = Some(*own),
            None => *time = previous,
        }
    }
    let mut next = None;
    for (time, message) in times.iter_mut().zip(messages).rev() {
        if let Some(own) = message.timestamp.map(|stamp| stamp.instant()) {
            next = Some(own);
        } else if time.is_none() {
            *time = next;
        }
    }
    times
}
