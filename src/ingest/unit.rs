//! Work units of the build: the slice of a conversation that one rewrite call covers.
//!
//! LoCoMo rewrites one session per call; LongMemEval groups `lm_batch` consecutive sessions
//! into one call (§4 of the reference). A unit fixes everything the later stages key on: its
//! name in the caches (`session_3`, `session_1-session_10`), the session number that prefixes
//! its topic and personal-fact ids, the dia_ids a valid rewrite must cover, and the dialogue
//! text the model sees. Pure data: no IO, no model calls.

use std::collections::BTreeSet;

use chrono::NaiveDate;

use crate::dataset::{Conversation, Session, Turn};
use crate::text::short_hash;

/// One rewrite call's worth of dialogue.
#[derive(Debug, Clone)]
pub(crate) struct Unit<'a> {
    /// Cache key: `session_<n>` or `session_<first>-session_<last>`.
    pub(crate) key: String,
    /// Session number of the first session; prefixes topic (`D<n>:t1`) and personal-fact
    /// (`D<n>:p1`) ids. Units never overlap, so these ids are unique within a conversation.
    pub(crate) first_session: u32,
    /// The sessions covered, in order (never empty).
    pub(crate) sessions: Vec<&'a Session>,
    /// Every turn's dia_id, in dialogue order; a valid rewrite covers each one.
    pub(crate) dia_ids: Vec<String>,
    /// The dialogue as rendered into the rewrite prompt.
    pub(crate) dialogue: String,
}

impl Unit<'_> {
    /// Session numbers covered.
    pub(crate) fn session_numbers(&self) -> Vec<u32> {
        self.sessions.iter().map(|session| session.index).collect()
    }

    /// The label the stage records carry: `D3`, or `D1-D10` for a batch.
    pub(crate) fn label(&self) -> String {
        match (self.sessions.first(), self.sessions.last()) {
            (Some(first), Some(last)) if first.index != last.index => {
                format!("D{}-D{}", first.index, last.index)
            }
            _ => format!("D{}", self.first_session),
        }
    }

    /// Number of sessions covered (what the progress bar counts).
    pub(crate) fn n_sessions(&self) -> usize {
        self.sessions.len()
    }

    /// The dia_ids as a set, for membership checks.
    pub(crate) fn dia_id_set(&self) -> BTreeSet<&str> {
        self.dia_ids.iter().map(String::as_str).collect()
    }

    /// The date of the session that holds `dia_id`, when the loader understood it.
    pub(crate) fn date_of(&self, dia_id: &str) -> Option<NaiveDate> {
        self.sessions
            .iter()
            .find(|session| session.turns.iter().any(|turn| turn.dia_id == dia_id))
            .and_then(|session| session.date)
    }

    /// The turn with `dia_id`, if it belongs to this unit.
    pub(crate) fn turn(&self, dia_id: &str) -> Option<&Turn> {
        self.sessions
            .iter()
            .flat_map(|session| session.turns.iter())
            .find(|turn| turn.dia_id == dia_id)
    }

    /// The date the model should report as `conversation_time`: the first session's.
    pub(crate) fn first_date(&self) -> Option<NaiveDate> {
        self.sessions.first().and_then(|session| session.date)
    }

    /// Hash of the rewrite input; a cached rewrite is reused only for identical input.
    pub(crate) fn input_hash(&self) -> String {
        short_hash(self.dialogue.as_bytes(), INPUT_HASH_BYTES)
    }
}

/// Split a conversation into units of `batch` consecutive sessions (`batch` 0 is taken as 1).
/// Sessions without turns are left out: they have nothing to rewrite.
pub(crate) fn plan_units(conversation: &Conversation, batch: usize) -> Vec<Unit<'_>> {
    let sessions: Vec<&Session> =
        conversation.sessions.iter().filter(|session| !session.turns.is_empty()).collect();
    sessions
        .chunks(batch.max(1))
        .filter_map(|chunk| {
            let first = chunk.first()?;
            let last = chunk.last()?;
            let key = if chunk.len() == 1 {
                format!("session_{}", first.index)
            } else {
                format!("session_{}-session_{}", first.index, last.index)
            };
            let dia_ids = chunk
                .iter()
                .flat_map(|session| session.turns.iter().map(|turn| turn.dia_id.clone()))
                .collect();
            Some(Unit {
                key,
                first_session: first.index,
                sessions: chunk.to_vec(),
                dia_ids,
                dialogue: render_dialogue(chunk, |_| true),
            })
        })
        .collect()
}

/// Render sessions the way the rewrite prompt describes them: a header with the session date
/// (source text and, when parsed, `YYYY-MM-DD`), then one `[dia_id] speaker: text` line per
/// turn that `keep` selects (sessions without such a turn are left out). Line breaks inside an
/// utterance become spaces so that one line is always one turn.
pub(crate) fn render_dialogue(sessions: &[&Session], keep: impl Fn(&Turn) -> bool) -> String {
    let mut out = String::new();
    for session in sessions {
        if !session.turns.iter().any(&keep) {
            continue;
        }
        if !out.is_empty() {
            out.push('\n');
        }
        let date = match (&session.date_time, session.date) {
            (Some(text), Some(date)) => format!("{text} ({date})"),
            (Some(text), None) => text.clone(),
            (None, Some(date)) => date.to_string(),
            (None, None) => "unknown".to_string(),
        };
        out.push_str(&format!("Session {}, date: {date}\n", session.id()));
        for turn in session.turns.iter().filter(|turn| keep(turn)) {
            out.push_str(&format!("[{}] {}\n", turn.dia_id, turn_line(turn)));
        }
    }
    out
}

/// A turn as one line of text, `speaker: utterance` (line breaks become spaces).
pub(crate) fn turn_line(turn: &Turn) -> String {
    turn.display().replace(['\r', '\n'], " ").trim().to_string()
}

/// Bytes of SHA-256 a stage input hash keeps ([`short_hash`], 16 hex digits): enough to tell
/// inputs apart in a cache. Every stage cache records hashes of this length, so changing it
/// makes them all stale.
pub(crate) const INPUT_HASH_BYTES: usize = 8;

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::dataset::DatasetKind;

    /// A conversation with `sessions` sessions of `turns` turns each, dated from 2023-05-01.
    pub(crate) fn conversation(sessions: u32, turns: u32) -> Conversation {
        let sessions = (1..=sessions)
            .map(|index| Session {
                index,
                date_time: Some(format!("10:00 am on {index} May, 2023")),
                date: NaiveDate::from_ymd_opt(2023, 5, index),
                turns: (1..=turns)
                    .map(|turn| Turn {
                        dia_id: format!("D{index}:{turn}"),
                        speaker: if turn % 2 == 1 { "Ana".into() } else { "Bo".into() },
                        text: format!("line {turn}\nof session {index}"),
                        blip_caption: None,
                        has_answer: false,
                    })
                    .collect(),
            })
            .collect();
        Conversation {
            sample_id: "conv-1".into(),
            dataset: DatasetKind::Locomo,
            speakers: vec!["Ana".into(), "Bo".into()],
            sessions,
            empty_sessions: Vec::new(),
            questions: Vec::new(),
        }
    }

    #[test]
    fn one_unit_per_session_by_default() {
        let conversation = conversation(3, 2);
        let units = plan_units(&conversation, 1);
        let keys: Vec<_> = units.iter().map(|unit| unit.key.as_str()).collect();
        assert_eq!(keys, ["session_1", "session_2", "session_3"]);
        assert_eq!(units[1].dia_ids, ["D2:1", "D2:2"]);
        assert_eq!(units[1].first_session, 2);
        assert_eq!(units[1].label(), "D2");
        assert_eq!(
            units[0].dialogue,
            "Session D1, date: 10:00 am on 1 May, 2023 (2023-05-01)\n[D1:1] Ana: line 1 of session 1\n[D1:2] Bo: line 2 of session 1\n"
        );
    }

    #[test]
    fn batches_group_consecutive_sessions_and_skip_empty_ones() {
        let mut conversation = conversation(5, 1);
        conversation.sessions[2].turns.clear();
        let units = plan_units(&conversation, 2);
        let keys: Vec<_> = units.iter().map(|unit| unit.key.as_str()).collect();
        assert_eq!(keys, ["session_1-session_2", "session_4-session_5"]);
        assert_eq!(units[1].session_numbers(), [4, 5]);
        assert_eq!(units[1].label(), "D4-D5");
        assert_eq!(units[1].dia_ids, ["D4:1", "D5:1"]);
        assert_eq!(units[1].date_of("D5:1"), NaiveDate::from_ymd_opt(2023, 5, 5));
        assert!(units[0].dialogue.contains("\nSession D2, date:"));
    }

    #[test]
    fn input_hash_follows_the_dialogue() {
        let conversation = conversation(2, 2);
        let mut changed = conversation.clone();
        changed.sessions[0].turns[0].text = "something else".into();
        let (a, b) = (plan_units(&conversation, 1), plan_units(&changed, 1));
        assert_ne!(a[0].input_hash(), b[0].input_hash());
        assert_eq!(a[1].input_hash(), b[1].input_hash());
    }
}
