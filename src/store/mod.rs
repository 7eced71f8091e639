//! The persistent memory store of own conversations: one SQLite database (rusqlite, bundled
//! SQLite) at `data/store/mragent.sqlite`, or a PostgreSQL database shared by several
//! processes (`--store postgres://…`). Both run the same SQL through [`db`].
//!
//! Unlike the stage caches under `data/<dataset>/`, this store is a source of truth: the
//! messages exist nowhere else. Next to them it keeps what the build stages made of every
//! session (`session_outputs`), keyed by the session content they were made from, so that an
//! add runs only the sessions that are new or changed and earlier sessions are never re-asked.
//!
//! Durability and concurrency:
//! - Every write is one transaction. WAL journal with `synchronous=FULL`: a committed (and so
//!   acknowledged) add survives a kill -9 or a power cut, an interrupted one leaves nothing.
//! - WAL lets readers (search, ask, list) run while a writer commits.
//! - Writers wait for each other (`BEGIN IMMEDIATE` plus a busy timeout); whole adds to one
//!   conversation, model calls included, are serialised by a per-conversation lock file (see
//!   [`Store::lock_conversation`]).
//! - The schema is versioned (`schema.rs`); opening migrates an older database.
//!
//! Synchronous by design: callers in async code run it in `spawn_blocking`. Each call opens its
//! own SQLite connection (cheap) or takes one from the PostgreSQL pool, so the store is
//! `Clone + Send + Sync`.
//!
//! On PostgreSQL the same guarantees hold across processes: write transactions take one
//! advisory lock (serialised like SQLite's `BEGIN IMMEDIATE`), conversation locks are
//! session-level advisory locks released when their holder's connection ends, and the schema
//! is versioned in a table of its own (`schema_pg.rs`).

mod audit;
mod copy;
mod counts;
pub(crate) mod db;
mod edit;
mod error;
mod facts;
mod jobs;
mod keys;
mod read;
mod revision;
mod schema;
mod schema_pg;
mod vectors;
mod view;
mod words;
mod write;

use std::path::{Path, PathBuf};
use std::time::Duration;

use db::{Conn, Row, params};
use rusqlite::{Connection, OpenFlags};
use serde::Serialize;

pub use audit::{CORRECT_FACT, CORRECTION_LAPSED, Edit, FORGET_MESSAGE, UNDO};
pub use copy::{CopiedTable, copy_store};
pub use counts::StoreCounts;
pub use db::pg::shown as shown_url;
pub use edit::ForgottenMessage;
pub use error::StoreError;
pub use facts::{ChainPlan, ChainsApplied, FactPair, FactVerdict, StoredFact, Walk, walk};
pub use jobs::{Job, JobError, JobSessions, JobState, JobStep, JobTokens};
pub use keys::{ApiKey, CreatedKey, KEY_PREFIX, KeyScope, NewKey, parse_lifetime, split_key};
pub use read::{SessionFailure, StoredConversation, StoredMessage, StoredOutputs, StoredSession};
pub use schema::SCHEMA_VERSION;
pub(crate) use vectors::round_trip as compact_round_trip;
pub use view::SessionOrigin;
pub use write::{AddScope, Added};

/// How long a writer waits for another writer's transaction before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// One conversation in the listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConversationInfo {
    /// Its id.
    pub id: String,
    /// The embedder its vectors come from (`local` or an API model id).
    pub embedder: String,
    /// When it was first added to (RFC 3339).
    pub created_at: String,
    /// The user it belongs to, if any.
    pub user: Option<String>,
    /// The agent it belongs to, if any.
    pub agent: Option<String>,
    /// Messages stored.
    pub messages: i64,
    /// Sessions stored.
    pub sessions: i64,
    /// Sessions whose stage outputs are stored (the rest failed or were interrupted; the next
    /// add retries them).
    pub built_sessions: i64,
    /// Time of the earliest and latest timestamped message.
    pub first_message: Option<String>,
    /// See `first_message`.
    pub last_message: Option<String>,
}

/// The store: a SQLite file or a PostgreSQL database. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Store {
    place: Place,
}

#[derive(Debug, Clone)]
enum Place {
    Sqlite(PathBuf),
    Postgres(Box<db::PgStore>),
}

/// A held conversation lock (see [`Store::lock_conversation`]); released when dropped.
pub struct ConversationLock {
    _held: Held,
}

// Held only for their `Drop`, which releases the lock.
#[expect(dead_code, reason = "a lock is held, never read")]
enum Held {
    File(std::fs::File),
    Postgres(Box<db::pg::PgLock>),
}

impl std::fmt::Debug for ConversationLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ConversationLock")
    }
}

impl Store {
    /// `<root>/data/store/mragent.sqlite`.
    pub fn default_path(root: &Path) -> PathBuf {
        root.join("data").join("store").join("mragent.sqlite")
    }

    /// Opens (creating it and its directory if needed) and migrates the SQLite database at
    /// `path`.
    pub fn open(path: impl Into<PathBuf>) -> Result<Self, StoreError> {
        let path: PathBuf = path.into();
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        // Processes opening one new store at once: SQLite does not wait (busy timeout) for the
        // switch of a new database to WAL, so the first connection and the migrations run under
        // an OS file lock beside the database, released when this returns or the process dies.
        let _opening = lock_file(&path.with_extension("open.lock"))?;
        let mut connection = sqlite_connect(&path)?;
        let found = schema::version(&connection)?;
        check_version(&path.display().to_string(), found)?;
        if found < SCHEMA_VERSION {
            // Another process may be migrating at the same moment: each step takes the write
            // lock before it re-reads the version (`migrate_to`), so steps never run twice.
            schema::migrate_to(&mut connection, SCHEMA_VERSION)?;
        }
        Ok(Self { place: Place::Sqlite(path) })
    }

    /// Opens the store a URL names: `postgres://…` (or `postgresql://…`) for a PostgreSQL
    /// database, migrated to this version (see `schema_pg`), or `sqlite:PATH` for a SQLite file.
    pub fn open_url(url: &str) -> Result<Self, StoreError> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let pg = db::PgStore::new(url)?;
            schema_pg::migrate(&pg, SCHEMA_VERSION)?;
            return Ok(Self { place: Place::Postgres(Box::new(pg)) });
        }
        match url.strip_prefix("sqlite:") {
            Some(path) if !path.is_empty() => Self::open(path),
            _ => Err(StoreError::BadUrl(db::pg::shown(url))),
        }
    }

    /// Where the store is, for messages: the SQLite file, or the PostgreSQL URL without its
    /// password.
    pub fn location(&self) -> String {
        match &self.place {
            Place::Sqlite(path) => format!("sqlite:{}", path.display()),
            Place::Postgres(pg) => pg.shown().to_string(),
        }
    }

    /// The SQLite file, for a SQLite store.
    pub fn path(&self) -> Option<&Path> {
        match &self.place {
            Place::Sqlite(path) => Some(path),
            Place::Postgres(_) => None,
        }
    }

    /// Whether the store is on PostgreSQL.
    pub fn is_postgres(&self) -> bool {
        matches!(self.place, Place::Postgres(_))
    }

    /// A connection with the store's settings: a new SQLite connection, or a pooled one.
    pub(crate) fn connect(&self) -> Result<Conn, StoreError> {
        match &self.place {
            Place::Sqlite(path) => Ok(Conn::Sqlite(sqlite_connect(path)?)),
            Place::Postgres(pg) => Ok(Conn::pg(pg.get()?)),
        }
    }

    /// Takes the exclusive add lock of `conversation` (blocking until it is free). It
    /// serialises adds across processes and is released when its holder drops it or dies:
    /// - SQLite: the OS lock of a lock file under `locks/` beside the database;
    /// - PostgreSQL: a session-level advisory lock on a connection of its own.
    pub fn lock_conversation(&self, conversation: &str) -> Result<ConversationLock, StoreError> {
        self.take_lock(conversation, true)?
            .ok_or_else(|| StoreError::Corrupt("a waiting lock returned without the lock".into()))
    }

    /// [`Store::lock_conversation`] without waiting: `None` while another holder (in this
    /// process or another) has it.
    pub fn try_lock_conversation(
        &self,
        conversation: &str,
    ) -> Result<Option<ConversationLock>, StoreError> {
        self.take_lock(conversation, false)
    }

    /// The lock of settling the facts of `conversation`'s scope (its user's conversations, or
    /// itself when it has no user), waiting for it: two settlings of one scope never
    /// interleave, so what they ask and store does not depend on which finished first. Taken
    /// after the conversation's own lock, never before it.
    pub fn lock_facts(&self, conversation: &str) -> Result<ConversationLock, StoreError> {
        check_conversation_id(conversation)?;
        let user: Option<String> = self
            .connect()?
            .query_opt(
                "SELECT user_id FROM conversations WHERE id = ?1",
                params![conversation],
                |row| row.get(0),
            )?
            .flatten();
        let name = match user {
            Some(user) => format!("facts of user {user}"),
            None => format!("facts of conversation {conversation}"),
        };
        self.take_named_lock(&name, &name, true)?
            .ok_or_else(|| StoreError::Corrupt("a waiting lock returned without the lock".into()))
    }

    fn take_lock(
        &self,
        conversation: &str,
        wait: bool,
    ) -> Result<Option<ConversationLock>, StoreError> {
        check_conversation_id(conversation)?;
        self.take_named_lock(conversation, &format!("conversation {conversation}"), wait)
    }

    /// A lock whose file (SQLite) is named by `file`'s content id, whose advisory key
    /// (PostgreSQL) is `name`'s.
    fn take_named_lock(
        &self,
        file: &str,
        name: &str,
        wait: bool,
    ) -> Result<Option<ConversationLock>, StoreError> {
        let held = match &self.place {
            Place::Sqlite(path) => {
                let dir = path.with_extension("locks");
                std::fs::create_dir_all(&dir)?;
                let path = dir.join(format!("{}.lock", content_id(file)));
                let file = std::fs::OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(path)?;
                if wait {
                    file.lock()?;
                } else {
                    match file.try_lock() {
                        Ok(()) => {}
                        Err(std::fs::TryLockError::WouldBlock) => return Ok(None),
                        Err(std::fs::TryLockError::Error(error)) => return Err(error.into()),
                    }
                }
                Held::File(file)
            }
            Place::Postgres(pg) => {
                let key = db::pg::lock_key(name);
                match pg.lock(key, wait)? {
                    Some(lock) => Held::Postgres(Box::new(lock)),
                    None => return Ok(None),
                }
            }
        };
        Ok(Some(ConversationLock { _held: held }))
    }

    /// Whether the database answers (a trivial query), for readiness probes.
    pub fn ping(&self) -> Result<(), StoreError> {
        self.connect()?.query_row("SELECT 1", params![], |_| Ok(()))
    }

    /// Every conversation, by id.
    pub fn list(&self) -> Result<Vec<ConversationInfo>, StoreError> {
        self.list_of(None)
    }

    /// The conversations of `user` (all when `None`), by id.
    pub fn list_of(&self, user: Option<&str>) -> Result<Vec<ConversationInfo>, StoreError> {
        if let Some(user) = user {
            crate::names::check_name(crate::names::NameKind::User, user)?;
        }
        self.connect()?.query(
            &format!("{INFO_QUERY} WHERE CAST(?1 AS TEXT) IS NULL OR c.user_id = ?1 ORDER BY c.id"),
            params![user],
            info_of_row,
        )
    }

    /// One conversation's summary, if it exists.
    pub fn info(&self, id: &str) -> Result<Option<ConversationInfo>, StoreError> {
        check_conversation_id(id)?;
        self.connect()?.query_opt(
            &format!("{INFO_QUERY} WHERE c.id = ?1"),
            params![id],
            info_of_row,
        )
    }

    /// Deletes a conversation with everything stored for it. Errors when it does not exist.
    pub fn forget(&self, id: &str) -> Result<ConversationInfo, StoreError> {
        check_conversation_id(id)?;
        let mut connection = self.connect()?;
        let transaction = connection.write()?;
        let info = transaction
            .query_opt(&format!("{INFO_QUERY} WHERE c.id = ?1"), params![id], info_of_row)?
            .ok_or_else(|| StoreError::UnknownConversation(id.to_string()))?;
        // The facts first: those of other conversations they replaced are handed on or revived.
        facts::delete_facts(&transaction, id, None)?;
        words::forget_unused_words(&transaction, id)?;
        transaction.execute("DELETE FROM conversations WHERE id = ?1", params![id])?;
        transaction.commit()?;
        Ok(info)
    }
}

/// A new SQLite connection with the store's settings.
fn sqlite_connect(path: &Path) -> Result<Connection, StoreError> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let connection = Connection::open_with_flags(path, flags)?;
    connection.busy_timeout(BUSY_TIMEOUT)?;
    connection.pragma_update(None, "journal_mode", "WAL")?;
    connection.pragma_update(None, "synchronous", "FULL")?;
    connection.pragma_update(None, "foreign_keys", "ON")?;
    Ok(connection)
}

/// Refuses a database whose schema is newer than this mragent's.
fn check_version(place: &str, found: u32) -> Result<(), StoreError> {
    if found > SCHEMA_VERSION {
        return Err(StoreError::TooNew {
            path: place.to_string(),
            found,
            supported: SCHEMA_VERSION,
        });
    }
    Ok(())
}

const INFO_QUERY: &str = "SELECT c.id, c.embedder, c.created_at, c.user_id, c.agent_id,
    (SELECT COUNT(*) FROM messages m WHERE m.conversation_id = c.id),
    (SELECT COUNT(*) FROM sessions s WHERE s.conversation_id = c.id),
    (SELECT COUNT(*) FROM session_outputs o WHERE o.conversation_id = c.id),
    (SELECT MIN(sort_time) FROM messages m WHERE m.conversation_id = c.id),
    (SELECT MAX(sort_time) FROM messages m WHERE m.conversation_id = c.id)
    FROM conversations c";

fn info_of_row(row: &Row) -> Result<ConversationInfo, StoreError> {
    Ok(ConversationInfo {
        id: row.get(0)?,
        embedder: row.get(1)?,
        created_at: row.get(2)?,
        user: row.get(3)?,
        agent: row.get(4)?,
        messages: row.get(5)?,
        sessions: row.get(6)?,
        built_sessions: row.get(7)?,
        first_message: row.get(8)?,
        last_message: row.get(9)?,
    })
}

/// The exclusive OS lock of the file at `path` (created if needed), blocking until it is free;
/// held until the returned file is dropped.
fn lock_file(path: &Path) -> Result<std::fs::File, StoreError> {
    let file = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(path)?;
    file.lock()?;
    Ok(file)
}

/// A short stable id of some text (the first 16 bytes of its SHA-256, hex).
pub fn content_id(text: &str) -> String {
    crate::text::short_hash(text.as_bytes(), 16)
}

/// Checks a conversation id against the one id rule ([`crate::names::check_name`]).
pub fn check_conversation_id(id: &str) -> Result<(), StoreError> {
    Ok(crate::names::check_name(crate::names::NameKind::Conversation, id)?)
}

#[cfg(test)]
mod tests;
