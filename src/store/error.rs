//! What the store's callers branch on.

/// Store failures callers branch on.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// No conversation with this id.
    #[error("unknown conversation {0:?}; `mragent memory list` shows the stored ones")]
    UnknownConversation(String),
    /// The conversation id breaks the one id rule ([`crate::names::check_name`]).
    #[error(transparent)]
    InvalidName(#[from] crate::names::InvalidName),
    /// The conversation was built with another embedder than the caller's.
    #[error(
        "conversation {conversation:?} is embedded with {stored:?}, not {requested:?}; use the same embedder or a new conversation"
    )]
    EmbedderMismatch {
        /// Conversation id.
        conversation: String,
        /// The embedder it was built with.
        stored: String,
        /// The embedder asked for.
        requested: String,
    },
    /// No message with this id in the conversation.
    #[error(
        "conversation {conversation:?} has no message {message:?}; `mragent memory show --conversation {conversation}` lists the message ids"
    )]
    UnknownMessage {
        /// Conversation id.
        conversation: String,
        /// The message id asked for.
        message: String,
    },
    /// No fact with this id.
    #[error("unknown fact {0}; `mragent memory facts` lists the facts with their ids")]
    UnknownFact(i64),
    /// No job with this id.
    #[error("unknown job {0}; `mragent memory jobs` lists the jobs")]
    UnknownJob(i64),
    /// No edit with this id.
    #[error("unknown edit {0}; `mragent memory history` lists the edits")]
    UnknownEdit(i64),
    /// The edit cannot be undone.
    #[error("edit {edit} cannot be undone: {why}")]
    NotUndoable {
        /// The edit.
        edit: i64,
        /// Why not.
        why: String,
    },
    /// An add names another user (or agent) than the conversation has.
    #[error(
        "conversation {conversation:?} belongs to {field} {stored:?}, not {requested:?}; a conversation keeps the {field} it was created with"
    )]
    ScopeMismatch {
        /// Conversation id.
        conversation: String,
        /// `user` or `agent`.
        field: &'static str,
        /// What it has.
        stored: String,
        /// What the add named.
        requested: String,
    },
    /// The database file was written by a newer mragent.
    #[error("{path}: schema version {found} is newer than this mragent's {supported}")]
    TooNew {
        /// The database.
        path: String,
        /// Its version.
        found: u32,
        /// Ours.
        supported: u32,
    },
    /// SQLite failed (the cause is part of the message, so not also the error's `source`).
    #[error("store database: {0}")]
    Sqlite(rusqlite::Error),
    /// PostgreSQL refused a statement.
    #[error("store database: {0}")]
    Postgres(String),
    /// The database refused the credentials (a wrong password or user): not worth a retry.
    #[error("store authentication failed: {0}")]
    Authentication(String),
    /// The database cannot be reached (down, restarting, refusing connections): worth a retry.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// A store URL that names neither backend.
    #[error("store URL {0:?}: expected postgres://user:password@host:port/database or sqlite:PATH")]
    BadUrl(String),
    /// An API key could not be made or found (`mragent keys`).
    #[error("keys: {0}")]
    Keys(String),
    /// A copy's destination already holds data, or the copy did not verify.
    #[error("store copy: {0}")]
    Copy(String),
    /// The store directory or a lock file could not be used (the cause is part of the
    /// message, so not also the error's `source`).
    #[error("store files: {0}")]
    Io(std::io::Error),
    /// A stored record did not decode (a bug or a damaged database).
    #[error("store record: {0}")]
    Corrupt(String),
}

impl From<rusqlite::Error> for StoreError {
    fn from(error: rusqlite::Error) -> Self {
        StoreError::Sqlite(error)
    }
}

impl From<std::io::Error> for StoreError {
    fn from(error: std::io::Error) -> Self {
        StoreError::Io(error)
    }
}
