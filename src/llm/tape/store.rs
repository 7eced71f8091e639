//! The file a run's model calls are recorded in: one SQLite database (WAL; every record is its
//! own transaction, so a kill -9 loses at most the call in flight, never one already used).
//!
//! - `calls`: one row per distinct request, keyed by the hash of the request
//!   ([`super::chat_key`], [`super::embed_key`]), with its kind, model, the work item it was
//!   sent for (a question id, or empty), the request skeleton and the reply; the row id keeps
//!   the order they were first recorded in.
//! - `bodies`: every message and tool list a skeleton names, stored once by content hash, so
//!   the system prompt and the growing transcript of a tool loop are not repeated per round.
//!
//! Skeletons, bodies and chat replies are zstd-compressed JSON; an embedding reply is its
//! vector as little-endian `f32` bytes, compressed too.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rusqlite::{Connection, OpenFlags, OptionalExtension as _, params};
use serde_json::Value;

use super::bodies::{rejoin, split_request};

/// The kind of a chat call that failed at the endpoint (after the client's retries): its reply
/// is the error, as JSON. A later record of the same request replaces it; nothing replaces a
/// reply.
pub const FAILED_CHAT: &str = "chat-failed";

/// The store's format; a file of another format is refused.
const FORMAT: &str = "mragent-calls-1";
/// zstd level: the default trade-off (fast, a few times smaller on JSON).
const LEVEL: i32 = 3;

/// What can go wrong with the call store.
#[derive(Debug, thiserror::Error)]
pub enum TapeError {
    /// SQLite failed.
    #[error("recorded calls {path}: {source}")]
    Sql {
        /// The store file.
        path: PathBuf,
        /// The SQLite error.
        source: rusqlite::Error,
    },
    /// A stored body could not be read back.
    #[error("recorded calls {path}: {what} is damaged ({message})")]
    Damaged {
        /// The store file.
        path: PathBuf,
        /// Which row.
        what: String,
        /// Why.
        message: String,
    },
    /// The file is not a call store of this format.
    #[error("{path} is not a store of recorded calls of format {FORMAT} (found {found:?})")]
    Format {
        /// The store file.
        path: PathBuf,
        /// The format it names.
        found: Option<String>,
    },
}

/// One recorded call as it is read back.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredCall {
    /// The request's key.
    pub key: String,
    /// `chat` or `embed`.
    pub kind: String,
    /// Model (or embedder) name.
    pub model: String,
    /// The work item it was sent for (a question id), or empty.
    pub context: String,
    /// The request, bodies put back in place.
    pub request: Value,
    /// The reply bytes (decompressed): chat JSON, or an embedding's `f32` bytes.
    pub reply: Vec<u8>,
}

/// A recorded chat call, as the tape looks it up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedChat {
    /// It failed at the endpoint ([`FAILED_CHAT`]): `reply` is the error.
    pub failed: bool,
    /// The work item it was recorded for.
    pub context: String,
    /// The reply (or the error) as JSON.
    pub reply: Vec<u8>,
}

/// Sizes of a store, for reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreSize {
    /// Recorded calls.
    pub calls: u64,
    /// Distinct bodies.
    pub bodies: u64,
    /// Bytes on disk of the database file (after a checkpoint).
    pub file_bytes: u64,
}

/// A call store (see the module documentation). Cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct CallStore {
    path: PathBuf,
    connection: Mutex<Connection>,
}

impl CallStore {
    /// Opens (creating when missing) the store at `path` for recording.
    pub fn open(path: &Path) -> Result<Self, TapeError> {
        if let Some(parent) = path.parent() {
            // A missing folder shows up as the SQLite error below, naming the file.
            let _ = std::fs::create_dir_all(parent);
        }
        let connection = Connection::open(path).map_err(|source| sql(path, source))?;
        let store = Self { path: path.to_path_buf(), connection: Mutex::new(connection) };
        store.init()?;
        Ok(store)
    }

    /// Opens an existing store without writing to it.
    pub fn open_read_only(path: &Path) -> Result<Self, TapeError> {
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let connection =
            Connection::open_with_flags(path, flags).map_err(|source| sql(path, source))?;
        let store = Self { path: path.to_path_buf(), connection: Mutex::new(connection) };
        store.check_format()?;
        Ok(store)
    }

    /// Opens a store nothing writes any more (an archive's copy, unpacked by `verify`) as
    /// immutable: reading it takes no lock and leaves no `-wal` or `-shm` file beside it. A
    /// store with a write-ahead log beside it is opened read-only as usual. Never for a store
    /// another process may open for writing: it would be read torn.
    pub fn open_archived(path: &Path) -> Result<Self, TapeError> {
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let connection = match immutable_uri(path) {
            Some(uri) => Connection::open_with_flags(uri, flags | OpenFlags::SQLITE_OPEN_URI),
            None => Connection::open_with_flags(path, flags),
        }
        .map_err(|source| sql(path, source))?;
        let store = Self { path: path.to_path_buf(), connection: Mutex::new(connection) };
        store.check_format()?;
        Ok(store)
    }

    /// The store file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn init(&self) -> Result<(), TapeError> {
        let connection = self.lock();
        connection
            .execute_batch(
                "PRAGMA journal_mode=WAL;
                 PRAGMA synchronous=NORMAL;
                 PRAGMA busy_timeout=30000;
                 CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
                 CREATE TABLE IF NOT EXISTS bodies(hash TEXT PRIMARY KEY, body BLOB NOT NULL);
                 CREATE TABLE IF NOT EXISTS calls(
                     key TEXT PRIMARY KEY,
                     kind TEXT NOT NULL,
                     model TEXT NOT NULL,
                     context TEXT NOT NULL,
                     request BLOB NOT NULL,
                     reply BLOB NOT NULL);",
            )
            .map_err(|source| sql(&self.path, source))?;
        connection
            .execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('format', ?1)", [FORMAT])
            .map_err(|source| sql(&self.path, source))?;
        drop(connection);
        self.check_format()
    }

    fn check_format(&self) -> Result<(), TapeError> {
        let found: Option<String> = self
            .lock()
            .query_row("SELECT value FROM meta WHERE key = 'format'", [], |row| row.get(0))
            .optional()
            .map_err(|source| sql(&self.path, source))?;
        if found.as_deref() == Some(FORMAT) {
            Ok(())
        } else {
            Err(TapeError::Format { path: self.path.clone(), found })
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.connection.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The reply recorded for `key`, decompressed.
    pub fn reply(&self, key: &str) -> Result<Option<Vec<u8>>, TapeError> {
        Ok(self.replies(&[key.to_string()])?.pop().flatten())
    }

    /// The replies recorded for `keys`, in order, decompressed (one lock, one statement).
    pub fn replies(&self, keys: &[String]) -> Result<Vec<Option<Vec<u8>>>, TapeError> {
        let blobs: Vec<Option<Vec<u8>>> = {
            let connection = self.lock();
            let mut statement = connection
                .prepare_cached("SELECT reply FROM calls WHERE key = ?1")
                .map_err(|source| sql(&self.path, source))?;
            keys.iter()
                .map(|key| {
                    statement
                        .query_row([key], |row| row.get(0))
                        .optional()
                        .map_err(|source| sql(&self.path, source))
                })
                .collect::<Result<_, _>>()?
        };
        keys.iter()
            .zip(blobs)
            .map(|(key, blob)| {
                blob.map(|blob| self.unpack(&blob, &format!("the reply of {key}"))).transpose()
            })
            .collect()
    }

    /// The chat call recorded for `key`: whether it failed ([`FAILED_CHAT`]), the work item it
    /// was recorded for, and its reply (the error's JSON when it failed), decompressed.
    pub fn chat_reply(&self, key: &str) -> Result<Option<RecordedChat>, TapeError> {
        let row: Option<(String, String, Vec<u8>)> = self
            .lock()
            .prepare_cached("SELECT kind, context, reply FROM calls WHERE key = ?1")
            .and_then(|mut statement| {
                statement
                    .query_row([key], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
                    .optional()
            })
            .map_err(|source| sql(&self.path, source))?;
        row.map(|(kind, context, blob)| {
            let reply = self.unpack(&blob, &format!("the reply of {key}"))?;
            Ok(RecordedChat { failed: kind == FAILED_CHAT, context, reply })
        })
        .transpose()
    }

    /// Records one call (see [`CallStore::put_all`]); whether it was new.
    pub fn put(&self, call: &NewCall<'_>) -> Result<bool, TapeError> {
        Ok(self.put_all(std::slice::from_ref(call))? == 1)
    }

    /// Records calls in one transaction (a request already recorded keeps its first reply; a
    /// failed one, [`FAILED_CHAT`], is replaced); how many were new or replaced. Each request is split into a skeleton and bodies by
    /// [`split_request`].
    pub fn put_all(&self, calls: &[NewCall<'_>]) -> Result<usize, TapeError> {
        let mut packed = Vec::with_capacity(calls.len());
        for call in calls {
            let (skeleton, bodies) = split_request(call.request);
            let skeleton = pack(&self.path, &serde_json::to_vec(&skeleton).unwrap_or_default())?;
            let reply = pack(&self.path, call.reply)?;
            let bodies = bodies
                .into_iter()
                .map(|(hash, body)| Ok((hash, pack(&self.path, &body)?)))
                .collect::<Result<Vec<_>, TapeError>>()?;
            packed.push((call, skeleton, reply, bodies));
        }
        let mut connection = self.lock();
        let transaction = connection.transaction().map_err(|source| sql(&self.path, source))?;
        let mut inserted = 0;
        for (call, skeleton, reply, bodies) in &packed {
            for (hash, body) in bodies {
                transaction
                    .execute(
                        "INSERT OR IGNORE INTO bodies(hash, body) VALUES (?1, ?2)",
                        params![hash, body],
                    )
                    .map_err(|source| sql(&self.path, source))?;
            }
            // A failed call is replaced by the next record of its request; a reply never is.
            inserted += transaction
                .execute(
                    "INSERT INTO calls(key, kind, model, context, request, reply)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                     ON CONFLICT(key) DO UPDATE SET kind = excluded.kind,
                         model = excluded.model, context = excluded.context,
                         request = excluded.request, reply = excluded.reply
                     WHERE calls.kind = ?7",
                    params![
                        call.key,
                        call.kind,
                        call.model,
                        call.context,
                        skeleton,
                        reply,
                        FAILED_CHAT
                    ],
                )
                .map_err(|source| sql(&self.path, source))?;
        }
        transaction.commit().map_err(|source| sql(&self.path, source))?;
        Ok(inserted)
    }

    /// Takes the call `key` off the store if its recorded reply is still `reply` (another
    /// task may have forgotten it and recorded a new one since); whether it did. Its bodies
    /// stay, shared or not. What a failed judgement replayed is forgotten so it is asked
    /// afresh.
    pub fn forget_reply(&self, key: &str, reply: &[u8]) -> Result<bool, TapeError> {
        let mut connection = self.lock();
        let transaction = connection.transaction().map_err(|source| sql(&self.path, source))?;
        let blob: Option<Vec<u8>> = transaction
            .query_row("SELECT reply FROM calls WHERE key = ?1", [key], |row| row.get(0))
            .optional()
            .map_err(|source| sql(&self.path, source))?;
        let same = match blob {
            Some(blob) => self.unpack(&blob, &format!("the reply of {key}"))? == reply,
            None => false,
        };
        if same {
            transaction
                .execute("DELETE FROM calls WHERE key = ?1", [key])
                .map_err(|source| sql(&self.path, source))?;
        }
        transaction.commit().map_err(|source| sql(&self.path, source))?;
        Ok(same)
    }

    /// Every recorded call, in the order they were first recorded.
    pub fn calls(&self) -> Result<Vec<StoredCall>, TapeError> {
        let rows: Vec<RawRow> = {
            let connection = self.lock();
            let mut statement = connection
                .prepare(
                    "SELECT key, kind, model, context, request, reply FROM calls ORDER BY rowid",
                )
                .map_err(|source| sql(&self.path, source))?;
            let rows = statement
                .query_map([], |row| {
                    Ok((
                        row.get(0)?,
                        row.get(1)?,
                        row.get(2)?,
                        row.get(3)?,
                        row.get(4)?,
                        row.get(5)?,
                    ))
                })
                .map_err(|source| sql(&self.path, source))?;
            rows.collect::<Result<_, _>>().map_err(|source| sql(&self.path, source))?
        };
        rows.into_iter()
            .map(|(key, kind, model, context, request, reply)| {
                let skeleton = self.unpack(&request, &format!("the request of {key}"))?;
                let request = self.join_request(&key, &skeleton)?;
                let reply = self.unpack(&reply, &format!("the reply of {key}"))?;
                Ok(StoredCall { key, kind, model, context, request, reply })
            })
            .collect()
    }

    /// Rows and bytes (after folding the write-ahead log into the file).
    pub fn size(&self) -> Result<StoreSize, TapeError> {
        let connection = self.lock();
        let count = |table: &str| -> Result<u64, TapeError> {
            connection
                .query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |row| row.get::<_, i64>(0))
                .map(|count| u64::try_from(count).unwrap_or(0))
                .map_err(|source| sql(&self.path, source))
        };
        let (calls, bodies) = (count("calls")?, count("bodies")?);
        // Read-only connections cannot checkpoint; the file size is what it is then.
        let _ = connection.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);");
        let file_bytes = std::fs::metadata(&self.path).map(|meta| meta.len()).unwrap_or(0);
        Ok(StoreSize { calls, bodies, file_bytes })
    }

    /// Folds the write-ahead log into the database file, so the one file holds everything
    /// (before it is copied or archived).
    pub fn checkpoint(&self) -> Result<(), TapeError> {
        self.lock()
            .execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
            .map_err(|source| sql(&self.path, source))
    }

    fn unpack(&self, blob: &[u8], what: &str) -> Result<Vec<u8>, TapeError> {
        zstd::decode_all(blob).map_err(|error| TapeError::Damaged {
            path: self.path.clone(),
            what: what.to_string(),
            message: error.to_string(),
        })
    }

    /// The request of `key` with its bodies put back.
    fn join_request(&self, key: &str, skeleton: &[u8]) -> Result<Value, TapeError> {
        let damaged = |message: String| TapeError::Damaged {
            path: self.path.clone(),
            what: format!("the request of {key}"),
            message,
        };
        let mut value: Value =
            serde_json::from_slice(skeleton).map_err(|error| damaged(error.to_string()))?;
        let mut missing = None;
        let mut fetch = |hash: &str| -> Option<Value> {
            let blob: Option<Vec<u8>> = self
                .lock()
                .query_row("SELECT body FROM bodies WHERE hash = ?1", [hash], |row| row.get(0))
                .optional()
                .ok()
                .flatten();
            let body = blob.and_then(|blob| zstd::decode_all(blob.as_slice()).ok());
            let parsed = body.and_then(|body| serde_json::from_slice(&body).ok());
            if parsed.is_none() {
                missing.get_or_insert_with(|| hash.to_string());
            }
            parsed
        };
        rejoin(&mut value, &mut fetch);
        match missing {
            Some(hash) => Err(damaged(format!("body {hash} is missing or unreadable"))),
            None => Ok(value),
        }
    }
}

/// A `calls` row as stored: key, kind, model, context, packed request and reply.
type RawRow = (String, String, String, String, Vec<u8>, Vec<u8>);

/// A call to record.
#[derive(Debug, Clone, Copy)]
pub struct NewCall<'a> {
    /// The request's key.
    pub key: &'a str,
    /// `chat` or `embed`.
    pub kind: &'a str,
    /// Model (or embedder) name.
    pub model: &'a str,
    /// The work item it was sent for, or empty.
    pub context: &'a str,
    /// The request as JSON.
    pub request: &'a Value,
    /// The reply bytes.
    pub reply: &'a [u8],
}

/// The immutable URI of an archived store ([`CallStore::open_archived`]); `None` when a
/// write-ahead log is beside it (it is opened as usual) or the path is not UTF-8.
fn immutable_uri(path: &Path) -> Option<String> {
    let mut log = path.as_os_str().to_owned();
    log.push("-wal");
    if Path::new(&log).exists() {
        return None;
    }
    let text = path.to_str()?;
    let mut uri = String::from("file:");
    for character in text.chars() {
        match character {
            '%' => uri.push_str("%25"),
            '?' => uri.push_str("%3f"),
            '#' => uri.push_str("%23"),
            other => uri.push(other),
        }
    }
    uri.push_str("?immutable=1");
    Some(uri)
}

fn pack(path: &Path, bytes: &[u8]) -> Result<Vec<u8>, TapeError> {
    zstd::encode_all(bytes, LEVEL).map_err(|error| TapeError::Damaged {
        path: path.to_path_buf(),
        what: "a body to record".to_string(),
        message: error.to_string(),
    })
}

fn sql(path: &Path, source: rusqlite::Error) -> TapeError {
    TapeError::Sql { path: path.to_path_buf(), source }
}
