//! `mragent store copy`: a whole store into an empty one, across backends (SQLite to
//! PostgreSQL and back), then a check that every table holds the same rows on both sides.
//!
//! The rows are read from one snapshot of the source and written in one transaction of the
//! destination, table by table in the order of their references, in batches. The check counts
//! each table's rows on both sides and hashes them (SHA-256 over every value, rows in key
//! order) through the same decoding ([`db::Value`]), so equal hashes mean equal content
//! whatever the backends.

use serde::Serialize;
use sha2::{Digest as _, Sha256};

use super::db::{Conn, Row, Value, params};
use super::{Store, StoreError};

/// The tables with their columns and key order, parents first.
const TABLES: &[(&str, &str, &str)] = &[
    ("conversations", "id, embedder, created_at, revision, user_id, agent_id", "id"),
    ("sessions", "conversation_id, number, key", "conversation_id, number"),
    (
        "messages",
        "conversation_id, hash, session_number, seq, speaker, text, timestamp, sort_time, tags",
        "conversation_id, hash",
    ),
    (
        "session_outputs",
        "conversation_id, session_number, content_hash, model, rewrite, keywords, dims, vectors, units",
        "conversation_id, session_number",
    ),
    (
        "session_failures",
        "conversation_id, session_number, content_hash, error, attempts, failed_at",
        "conversation_id, session_number",
    ),
    ("embedder_words", "embedder, word, dims, vector", "embedder, word"),
    ("conversation_words", "conversation_id, word", "conversation_id, word"),
    (
        "facts",
        "id, conversation_id, session_number, key, person, aspect, value, extracted, origins,
         valid_from, valid_to, superseded_by, checked, source",
        "id",
    ),
    ("fact_verdicts", "key, replaces, model, decided_at", "key"),
    ("edits", "id, at, actor, kind, conversation_id, target, before, after, undoes", "id"),
    (
        "jobs",
        "id, conversation_id, state, created_at, started_at, finished_at, attempts, new_messages,
         duplicates, sessions_done, sessions_failed, sessions_pending, chat_calls, prompt_tokens,
         completion_tokens, errors, lease_owner, lease_until",
        "id",
    ),
    ("counters", "name, value", "name"),
    (
        "api_keys",
        "id, name, hash, user_id, agent_id, scope, created_at, expires_at, revoked_at",
        "id",
    ),
];

/// The tables whose ids come from an identity (PostgreSQL) or AUTOINCREMENT (SQLite).
const IDENTITIES: &[&str] = &["facts", "edits", "jobs"];

/// Rows read and written at a time.
const BATCH: i64 = 256;

/// One table of a verified copy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CopiedTable {
    /// The table.
    pub table: String,
    /// Its rows, on both sides.
    pub rows: u64,
    /// The SHA-256 of its content (hex), on both sides.
    pub sha256: String,
}

/// Copies every row of `from` into `to`, which must be empty, and verifies the copy.
/// `progress` hears each table as it is done.
pub fn copy_store(
    from: &Store,
    to: &Store,
    mut progress: impl FnMut(&CopiedTable),
) -> Result<Vec<CopiedTable>, StoreError> {
    let mut source = from.connect()?;
    let mut destination = to.connect()?;
    {
        let snapshot = source.read()?;
        let writing = destination.write()?;
        for (table, _, _) in TABLES.iter().filter(|(table, _, _)| *table != "counters") {
            let rows: i64 =
                writing.query_row(&format!("SELECT COUNT(*) FROM {table}"), params![], |row| {
                    row.get(0)
                })?;
            if rows > 0 {
                return Err(StoreError::Copy(format!(
                    "the destination {} is not empty ({table} has {rows} rows); copy into a new store",
                    to.location()
                )));
            }
        }
        for (table, columns, order) in TABLES {
            copy_table(&snapshot, &writing, table, columns, order)?;
        }
        if to.is_postgres() {
            for table in IDENTITIES {
                writing.execute_batch(&format!(
                    "SELECT setval(pg_get_serial_sequence('{table}', 'id'),
                        GREATEST((SELECT MAX(id) FROM {table}), 1),
                        (SELECT MAX(id) FROM {table}) IS NOT NULL)"
                ))?;
            }
        }
        writing.commit()?;
        snapshot.commit()?;
    }
    let mut copied = Vec::new();
    for (table, columns, order) in TABLES {
        let (rows, sha256) = digest(&source, table, columns, order)?;
        let (rows_there, sha_there) = digest(&destination, table, columns, order)?;
        if (rows, &sha256) != (rows_there, &sha_there) {
            return Err(StoreError::Copy(format!(
                "{table}: {rows} rows (sha256 {sha256}) in the source, {rows_there} \
                 (sha256 {sha_there}) in the destination"
            )));
        }
        let table = CopiedTable { table: table.to_string(), rows, sha256 };
        progress(&table);
        copied.push(table);
    }
    Ok(copied)
}

fn copy_table(
    source: &Conn,
    destination: &Conn,
    table: &str,
    columns: &str,
    order: &str,
) -> Result<(), StoreError> {
    let width = columns.split(',').count();
    let slots: Vec<String> = (1..=width).map(|n| format!("?{n}")).collect();
    let insert = if table == "counters" {
        // The migration made the row; the copy takes the source's value.
        "UPDATE counters SET value = ?2 WHERE name = ?1".to_string()
    } else {
        format!("INSERT INTO {table} ({columns}) VALUES ({})", slots.join(", "))
    };
    pages(source, table, columns, order, |rows| {
        for row in rows {
            destination.execute(&insert, &row.0)?;
        }
        Ok(())
    })
}

/// Visits every row of `table` in key order, [`BATCH`] rows at a time, each page starting
/// after the last key of the one before (keyset paging: every page costs the same, where
/// `OFFSET` would read and skip every earlier row again).
fn pages(
    connection: &Conn,
    table: &str,
    columns: &str,
    order: &str,
    mut visit: impl FnMut(&[Row]) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    let names: Vec<&str> = columns.split(',').map(str::trim).collect();
    let keys: Vec<usize> = order
        .split(',')
        .map(|key| {
            names.iter().position(|name| *name == key.trim()).ok_or_else(|| {
                StoreError::Corrupt(format!("{table}: the key {key} is not a copied column"))
            })
        })
        .collect::<Result<_, _>>()?;
    let after: Vec<String> = (0..keys.len()).map(|n| format!("?{}", n + 2)).collect();
    let first = format!("SELECT {columns} FROM {table} ORDER BY {order} LIMIT ?1");
    let next = format!(
        "SELECT {columns} FROM {table} WHERE ({order}) > ({}) ORDER BY {order} LIMIT ?1",
        after.join(", ")
    );
    let mut last: Option<Vec<Value>> = None;
    loop {
        let rows: Vec<Row> = match &last {
            None => connection.query(&first, params![BATCH], |row| Ok(row.clone()))?,
            Some(key) => {
                let mut values = vec![Value::Int(BATCH)];
                values.extend(key.iter().cloned());
                connection.query(&next, &values, |row| Ok(row.clone()))?
            }
        };
        visit(&rows)?;
        match rows.last() {
            Some(row) if rows.len() as i64 == BATCH => {
                last = Some(keys.iter().map(|&index| row.0[index].clone()).collect());
            }
            _ => return Ok(()),
        }
    }
}

/// A table's row count and the SHA-256 of its rows in key order.
fn digest(
    connection: &Conn,
    table: &str,
    columns: &str,
    order: &str,
) -> Result<(u64, String), StoreError> {
    let mut hasher = Sha256::new();
    let mut count = 0u64;
    pages(connection, table, columns, order, |rows| {
        for row in rows {
            for value in &row.0 {
                hash_value(&mut hasher, value);
            }
            count += 1;
        }
        Ok(())
    })?;
    Ok((count, format!("{:x}", hasher.finalize())))
}

/// Feeds one value, with its type and length, so that no two rows hash alike by accident.
fn hash_value(hasher: &mut Sha256, value: &Value) {
    match value {
        Value::Null => hasher.update([0]),
        Value::Int(number) => {
            hasher.update([1]);
            hasher.update(number.to_le_bytes());
        }
        Value::Real(number) => {
            hasher.update([2]);
            hasher.update(number.to_le_bytes());
        }
        Value::Text(text) => {
            hasher.update([3]);
            hasher.update((text.len() as u64).to_le_bytes());
            hasher.update(text.as_bytes());
        }
        Value::Blob(bytes) => {
            hasher.update([4]);
            hasher.update((bytes.len() as u64).to_le_bytes());
            hasher.update(bytes);
        }
    }
}
