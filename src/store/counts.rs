//! How much the store holds, for `serve`'s metrics (`GET /metrics`): a handful of `COUNT`s in
//! one read, cheap next to any add or query.

use super::db::params;
use super::{Store, StoreError};

/// Rows of the store, by kind (`i64` like every count the store reads, SQLite's integer).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreCounts {
    /// Conversations.
    pub conversations: i64,
    /// Sessions, built or not.
    pub sessions: i64,
    /// Sessions whose stage outputs (rewrite, keywords, MemGAS units) are stored for their
    /// current content.
    pub built_sessions: i64,
    /// Messages.
    pub messages: i64,
    /// Facts that hold now (no later fact replaced them).
    pub current_facts: i64,
    /// Facts that a later fact replaced (kept with their validity).
    pub superseded_facts: i64,
    /// Build jobs per state, in [`super::JobState::ALL`] order.
    pub jobs: [i64; 4],
}

impl Store {
    /// The counts, read in one statement (one consistent snapshot under WAL).
    pub fn counts(&self) -> Result<StoreCounts, StoreError> {
        let connection = self.connect()?;
        let counts = connection.query_row(
            "SELECT (SELECT COUNT(*) FROM conversations),
                (SELECT COUNT(*) FROM sessions),
                (SELECT COUNT(*) FROM session_outputs),
                (SELECT COUNT(*) FROM messages),
                (SELECT COUNT(*) FROM facts WHERE valid_to IS NULL),
                (SELECT COUNT(*) FROM facts WHERE valid_to IS NOT NULL),
                (SELECT COUNT(*) FROM jobs WHERE state = 'queued'),
                (SELECT COUNT(*) FROM jobs WHERE state = 'running'),
                (SELECT COUNT(*) FROM jobs WHERE state = 'done'),
                (SELECT COUNT(*) FROM jobs WHERE state = 'failed')",
            params![],
            |row| {
                Ok(StoreCounts {
                    conversations: row.get(0)?,
                    sessions: row.get(1)?,
                    built_sessions: row.get(2)?,
                    messages: row.get(3)?,
                    current_facts: row.get(4)?,
                    superseded_facts: row.get(5)?,
                    jobs: [row.get(6)?, row.get(7)?, row.get(8)?, row.get(9)?],
                })
            },
        )?;
        Ok(counts)
    }
}
