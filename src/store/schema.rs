//! The store's schema, versioned with SQLite's `user_version`: migration N brings a database at
//! version N-1 to version N, inside one transaction, so a crash mid-migration leaves the old
//! version intact. Never edit a released migration; append a new one.

use rusqlite::{Connection, TransactionBehavior};

use super::StoreError;
use super::db::Statements;

/// Migrations in order; index i holds the SQL taking version i to version i+1.
pub(crate) const MIGRATIONS: &[&str] = &[
    // 1: the source of truth: conversations, their sessions and messages.
    "CREATE TABLE conversations (
        id TEXT PRIMARY KEY,
        embedder TEXT NOT NULL,
        created_at TEXT NOT NULL
    ) STRICT;
    CREATE TABLE sessions (
        conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        number INTEGER NOT NULL,
        key TEXT,
        PRIMARY KEY (conversation_id, number)
    ) STRICT;
    CREATE TABLE messages (
        conversation_id TEXT NOT NULL,
        hash TEXT NOT NULL,
        session_number INTEGER NOT NULL,
        seq INTEGER NOT NULL,
        speaker TEXT NOT NULL,
        text TEXT NOT NULL,
        timestamp TEXT,
        sort_time TEXT,
        PRIMARY KEY (conversation_id, hash),
        FOREIGN KEY (conversation_id, session_number)
            REFERENCES sessions(conversation_id, number) ON DELETE CASCADE
    ) STRICT;
    CREATE INDEX messages_by_session ON messages(conversation_id, session_number);",
    // 2: what the stages made of each session, keyed by the session content it was made from.
    "CREATE TABLE session_outputs (
        conversation_id TEXT NOT NULL,
        session_number INTEGER NOT NULL,
        content_hash TEXT NOT NULL,
        model TEXT NOT NULL,
        rewrite TEXT NOT NULL,
        keywords TEXT NOT NULL,
        dims INTEGER NOT NULL,
        vectors BLOB NOT NULL,
        units BLOB NOT NULL,
        PRIMARY KEY (conversation_id, session_number),
        FOREIGN KEY (conversation_id, session_number)
            REFERENCES sessions(conversation_id, number) ON DELETE CASCADE
    ) STRICT;",
    // 3: a revision per conversation, so readers can tell cheaply whether their cached index is
    // current. Every write transaction that changes a conversation takes the next value of the
    // store-wide counter, so a revision is never reused, not even after forget and re-add.
    "CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL) STRICT;
    INSERT INTO counters VALUES ('revision', 0);
    ALTER TABLE conversations ADD COLUMN revision INTEGER NOT NULL DEFAULT 0;",
    // 4: the vector of every distinct content word of a conversation's messages, for fusion's
    // soft word matching. Derived from the messages (like `session_outputs.units`), written by
    // the add that builds a session (or by the first query, for conversations stored before
    // this table); not part of the revision.
    "CREATE TABLE word_vectors (
        conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        word TEXT NOT NULL,
        dims INTEGER NOT NULL,
        vector BLOB NOT NULL,
        PRIMARY KEY (conversation_id, word)
    ) STRICT;",
    // 5: why a session has no outputs: the last build failure for its current content, so that
    // `memory show` and `ask` can say which sessions are missing and why. Cleared when the
    // session's outputs are stored.
    "CREATE TABLE session_failures (
        conversation_id TEXT NOT NULL,
        session_number INTEGER NOT NULL,
        content_hash TEXT NOT NULL,
        error TEXT NOT NULL,
        attempts INTEGER NOT NULL,
        failed_at TEXT NOT NULL,
        PRIMARY KEY (conversation_id, session_number),
        FOREIGN KEY (conversation_id, session_number)
            REFERENCES sessions(conversation_id, number) ON DELETE CASCADE
    ) STRICT;",
    // 6: scopes, facts with validity, and the audit log of single edits.
    // - A conversation may belong to a user (and an agent); messages keep the key/value tags
    //   given when they were added (a JSON object).
    // - `facts`: the personal facts of each built session as rows. `value` is what memory holds
    //   (a correction replaces it), `extracted` what the build made. A fact superseded by a
    //   later one gets `valid_to` and `superseded_by`; neither is ever deleted for that.
    //   Deleting the superseding fact (its session rebuilt or forgotten) hands the older one to
    //   the deleted fact's own successor, or makes it current again and undecided (trigger).
    //   `checked`: whether its conflicts were decided. The facts of the
    //   sessions built before are copied from their stored rewrites (the next add decides them).
    // - `fact_verdicts`: the model's cached conflict verdicts, by a hash of the pair.
    // - `edits`: append-only (triggers refuse UPDATE and DELETE); an undo is a new row.
    "ALTER TABLE conversations ADD COLUMN user_id TEXT;
    ALTER TABLE conversations ADD COLUMN agent_id TEXT;
    CREATE INDEX conversations_by_user ON conversations(user_id);
    ALTER TABLE messages ADD COLUMN tags TEXT;
    CREATE TABLE facts (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        conversation_id TEXT NOT NULL,
        session_number INTEGER NOT NULL,
        key TEXT NOT NULL,
        person TEXT NOT NULL,
        aspect TEXT NOT NULL,
        value TEXT NOT NULL,
        extracted TEXT NOT NULL,
        origins TEXT NOT NULL,
        valid_from TEXT,
        valid_to TEXT,
        superseded_by INTEGER,
        checked INTEGER NOT NULL DEFAULT 0,
        UNIQUE (conversation_id, session_number, key),
        FOREIGN KEY (conversation_id, session_number)
            REFERENCES sessions(conversation_id, number) ON DELETE CASCADE
    ) STRICT;
    INSERT OR IGNORE INTO facts (conversation_id, session_number, key, person, aspect, value,
        extracted, origins, valid_from)
    SELECT o.conversation_id, o.session_number, json_extract(f.value, '$.id'),
        COALESCE(json_extract(f.value, '$.person'), ''),
        COALESCE(json_extract(f.value, '$.aspect'), ''),
        COALESCE(json_extract(f.value, '$.fact'), ''),
        COALESCE(json_extract(f.value, '$.fact'), ''),
        COALESCE(json_extract(f.value, '$.origins'), '[]'),
        (SELECT MIN(m.sort_time) FROM messages m
         WHERE m.conversation_id = o.conversation_id AND m.session_number = o.session_number)
    FROM session_outputs o, json_each(o.rewrite, '$.personal_facts') f
    WHERE json_extract(f.value, '$.id') IS NOT NULL;
    CREATE INDEX facts_by_aspect ON facts(person, aspect);
    CREATE INDEX facts_by_successor ON facts(superseded_by);
    CREATE TRIGGER facts_successor_gone AFTER DELETE ON facts BEGIN
        UPDATE facts SET valid_to = OLD.valid_to, superseded_by = OLD.superseded_by,
            checked = CASE WHEN OLD.superseded_by IS NULL THEN 0 ELSE checked END
        WHERE superseded_by = OLD.id;
    END;
    CREATE TABLE fact_verdicts (
        key TEXT PRIMARY KEY,
        replaces INTEGER NOT NULL,
        model TEXT NOT NULL,
        decided_at TEXT NOT NULL
    ) STRICT;
    CREATE TABLE edits (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        at TEXT NOT NULL,
        actor TEXT NOT NULL,
        kind TEXT NOT NULL,
        conversation_id TEXT NOT NULL,
        target TEXT NOT NULL,
        before TEXT,
        after TEXT,
        undoes INTEGER
    ) STRICT;
    CREATE INDEX edits_by_conversation ON edits(conversation_id);
    CREATE TRIGGER edits_no_update BEFORE UPDATE ON edits BEGIN
        SELECT RAISE(ABORT, 'the audit log is append-only');
    END;
    CREATE TRIGGER edits_no_delete BEFORE DELETE ON edits BEGIN
        SELECT RAISE(ABORT, 'the audit log is append-only');
    END;",
    // 6 → 7: background build jobs (`POST …/messages` with `"wait": false`, `memory add
    // --no-wait`). A job is queued in the transaction that stores its messages; a runner builds
    // the conversation's pending sessions and keeps the counters current after each session.
    // `state`: queued, running, done (every session built) or failed (some session failed, or
    // the job could not run: `errors` says why). A running job whose runner died is queued
    // again by the next runner that takes its conversation's lock (`attempts` counts the runs).
    "CREATE TABLE jobs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        conversation_id TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('queued', 'running', 'done', 'failed')),
        created_at TEXT NOT NULL,
        started_at TEXT,
        finished_at TEXT,
        attempts INTEGER NOT NULL DEFAULT 0,
        new_messages INTEGER NOT NULL,
        duplicates INTEGER NOT NULL,
        sessions_done INTEGER NOT NULL DEFAULT 0,
        sessions_failed INTEGER NOT NULL DEFAULT 0,
        sessions_pending INTEGER NOT NULL DEFAULT 0,
        chat_calls INTEGER NOT NULL DEFAULT 0,
        prompt_tokens INTEGER NOT NULL DEFAULT 0,
        completion_tokens INTEGER NOT NULL DEFAULT 0,
        errors TEXT NOT NULL DEFAULT '[]'
    ) STRICT;
    CREATE INDEX jobs_by_conversation ON jobs(conversation_id);
    CREATE INDEX jobs_open ON jobs(state) WHERE state IN ('queued', 'running');",
    // 7 → 8: job leases. A runner claims a job by writing its own id and a lease end (RFC 3339
    // UTC, compared as text) and renews the lease while it builds; another runner may take a
    // running job over once its lease has expired (its runner died or lost the database).
    "ALTER TABLE jobs ADD COLUMN lease_owner TEXT;
    ALTER TABLE jobs ADD COLUMN lease_until TEXT;",
    // 8 → 9: a fact's source message (its id): with the aspect, the identity a correction
    // follows across rebuilds. Facts stored before have none (their corrections follow session,
    // key and extracted value, as before) until their session is rebuilt.
    "ALTER TABLE facts ADD COLUMN source TEXT;",
    // 9 → 10: one vector per (embedder, word), shared by every conversation embedded with that
    // embedder (a word's vector depends on nothing else), instead of one per conversation; which
    // conversation uses which word stays per conversation (`conversation_words`), so forgetting
    // the last conversation that uses a word deletes its vector too. Existing rows move over
    // in place: the first stored vector of each (embedder, word) is kept.
    "CREATE TABLE embedder_words (
        embedder TEXT NOT NULL,
        word TEXT NOT NULL,
        dims INTEGER NOT NULL,
        vector BLOB NOT NULL,
        PRIMARY KEY (embedder, word)
    ) STRICT;
    CREATE TABLE conversation_words (
        conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        word TEXT NOT NULL,
        PRIMARY KEY (conversation_id, word)
    ) STRICT;
    CREATE INDEX conversation_words_by_word ON conversation_words(word);
    INSERT INTO embedder_words (embedder, word, dims, vector)
        SELECT c.embedder, w.word, w.dims, w.vector
        FROM word_vectors w JOIN conversations c ON c.id = w.conversation_id
        WHERE true ORDER BY c.embedder, w.word, w.conversation_id
        ON CONFLICT DO NOTHING;
    INSERT INTO conversation_words (conversation_id, word)
        SELECT conversation_id, word FROM word_vectors;
    DROP TABLE word_vectors;",
    // 10 → 11: API keys (`mragent keys`, `store::keys`): the SHA-256 of each key's secret, never
    // the secret; the user and agent it is bound to; its scope; expiry and revocation times
    // (RFC 3339 UTC).
    "CREATE TABLE api_keys (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        hash TEXT NOT NULL,
        user_id TEXT,
        agent_id TEXT,
        scope TEXT NOT NULL CHECK (scope IN ('read', 'write', 'admin')),
        created_at TEXT NOT NULL,
        expires_at TEXT,
        revoked_at TEXT
    ) STRICT;",
    // 11 → 12: vectors in the compact form (`store::vectors`: one f32 scale and a signed byte
    // per dimension, a quarter of the bytes). The step is Rust, not SQL ([`code_step`]).
    "-- every vector blob is rewritten by store::vectors::compact_stored_vectors",
];

/// The part of migration `from` → `from + 1` written in Rust, run after its SQL in the same
/// transaction, on either backend.
pub(crate) fn code_step(db: &dyn Statements, from: u32) -> Result<(), StoreError> {
    if from == 11 {
        let converted = super::vectors::compact_stored_vectors(db)?;
        tracing::info!(rows = converted, "stored vectors converted to the compact form");
    }
    Ok(())
}

/// The version this code reads and writes.
pub const SCHEMA_VERSION: u32 = MIGRATIONS.len() as u32;

/// The database's schema version.
pub(crate) fn version(connection: &Connection) -> rusqlite::Result<u32> {
    connection.query_row("PRAGMA user_version", [], |row| row.get(0))
}

/// Applies the migrations after the database's version, up to `target`, each in its own
/// transaction. Returns the version reached.
///
/// Safe when several processes open one new store at once: each step takes the write lock
/// first (`BEGIN IMMEDIATE`, waiting up to the connection's busy timeout) and only then reads
/// the version, so a step another process has applied meanwhile is seen and skipped, never run
/// twice.
pub(crate) fn migrate_to(connection: &mut Connection, target: u32) -> Result<u32, StoreError> {
    loop {
        let transaction = connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let current = version(&transaction)?;
        if current >= target {
            return Ok(current);
        }
        transaction.execute_batch(MIGRATIONS[current as usize])?;
        code_step(&*transaction, current)?;
        transaction.pragma_update(None, "user_version", current + 1)?;
        transaction.commit()?;
    }
}
