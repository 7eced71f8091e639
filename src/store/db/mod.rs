//! The store's one SQL interface over its two backends: the embedded SQLite database
//! (rusqlite) and PostgreSQL (the `postgres` client of the tokio-postgres project, pooled by
//! r2d2).
//!
//! The store's modules write their SQL once, in the subset both databases read the same way
//! (`?N` placeholders, `ON CONFLICT`, `RETURNING`, `COALESCE`, `CASE`), and pass values as
//! [`Value`]s made by [`params!`]. Rows come back as owned [`Row`]s whose columns decode through
//! [`FromValue`], so no module but this one names a backend's types.
//!
//! Transactions:
//! - [`Conn::write`] serialises writers store-wide, as the store's read-then-write steps
//!   expect: SQLite's `BEGIN IMMEDIATE`, PostgreSQL's transaction-scoped advisory lock.
//! - [`Conn::read`] is one consistent snapshot: a deferred SQLite transaction, a PostgreSQL
//!   `REPEATABLE READ READ ONLY` one.
//!
//! Synchronous, like the store: callers in async code run it in `spawn_blocking`.

pub(crate) mod pg;
mod pg_tls;
mod sqlite;

use std::cell::RefCell;

use super::StoreError;

pub(crate) use pg::PgStore;

/// One SQL value, as bound to a statement or read from a row.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    /// SQL NULL.
    Null,
    /// A 64-bit integer (booleans are 0 and 1).
    Int(i64),
    /// A float.
    Real(f64),
    /// Text.
    Text(String),
    /// Bytes.
    Blob(Vec<u8>),
}

/// Anything [`params!`] can bind.
pub(crate) trait ToValue {
    /// The value to bind.
    fn to_value(&self) -> Value;
}

impl<T: ToValue + ?Sized> ToValue for &T {
    fn to_value(&self) -> Value {
        (**self).to_value()
    }
}

impl<T: ToValue> ToValue for Option<T> {
    fn to_value(&self) -> Value {
        self.as_ref().map_or(Value::Null, ToValue::to_value)
    }
}

impl ToValue for str {
    fn to_value(&self) -> Value {
        Value::Text(self.to_string())
    }
}

impl ToValue for String {
    fn to_value(&self) -> Value {
        Value::Text(self.clone())
    }
}

impl ToValue for [u8] {
    fn to_value(&self) -> Value {
        Value::Blob(self.to_vec())
    }
}

impl ToValue for Vec<u8> {
    fn to_value(&self) -> Value {
        Value::Blob(self.clone())
    }
}

impl ToValue for bool {
    fn to_value(&self) -> Value {
        Value::Int(i64::from(*self))
    }
}

impl ToValue for f64 {
    fn to_value(&self) -> Value {
        Value::Real(*self)
    }
}

impl ToValue for Value {
    fn to_value(&self) -> Value {
        self.clone()
    }
}

macro_rules! int_values {
    ($($t:ty),*) => {$(
        impl ToValue for $t {
            fn to_value(&self) -> Value {
                // Store integers (ids, counts, session numbers) are far below i64::MAX.
                Value::Int(i64::try_from(*self).unwrap_or(i64::MAX))
            }
        }
    )*};
}
int_values!(i32, i64, u32, u64, usize);

/// The values of a statement's `?1`, `?2`, … placeholders.
macro_rules! params {
    ($($value:expr),* $(,)?) => {
        &[$($crate::store::db::ToValue::to_value(&$value)),*][..]
    };
}
pub(crate) use params;

/// A column value decoded to a Rust type.
pub(crate) trait FromValue: Sized {
    /// The value as `Self`, or why not.
    fn from_value(value: &Value) -> Result<Self, String>;
}

impl FromValue for i64 {
    fn from_value(value: &Value) -> Result<Self, String> {
        match value {
            Value::Int(number) => Ok(*number),
            other => Err(format!("expected an integer, found {other:?}")),
        }
    }
}

macro_rules! narrow_ints {
    ($($t:ty),*) => {$(
        impl FromValue for $t {
            fn from_value(value: &Value) -> Result<Self, String> {
                let wide = i64::from_value(value)?;
                <$t>::try_from(wide).map_err(|_| format!("{wide} is out of range"))
            }
        }
    )*};
}
narrow_ints!(i32, u32, u64, usize);

impl FromValue for bool {
    fn from_value(value: &Value) -> Result<Self, String> {
        Ok(i64::from_value(value)? != 0)
    }
}

impl FromValue for f64 {
    fn from_value(value: &Value) -> Result<Self, String> {
        match value {
            Value::Real(number) => Ok(*number),
            Value::Int(number) => Ok(*number as f64),
            other => Err(format!("expected a number, found {other:?}")),
        }
    }
}

impl FromValue for String {
    fn from_value(value: &Value) -> Result<Self, String> {
        match value {
            Value::Text(text) => Ok(text.clone()),
            other => Err(format!("expected text, found {other:?}")),
        }
    }
}

impl FromValue for Vec<u8> {
    fn from_value(value: &Value) -> Result<Self, String> {
        match value {
            Value::Blob(bytes) => Ok(bytes.clone()),
            other => Err(format!("expected bytes, found {other:?}")),
        }
    }
}

impl FromValue for Value {
    fn from_value(value: &Value) -> Result<Self, String> {
        Ok(value.clone())
    }
}

impl<T: FromValue> FromValue for Option<T> {
    fn from_value(value: &Value) -> Result<Self, String> {
        match value {
            Value::Null => Ok(None),
            other => T::from_value(other).map(Some),
        }
    }
}

/// One result row, owned.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Row(pub(crate) Vec<Value>);

impl Row {
    /// Column `index` (from 0) as `T`.
    pub(crate) fn get<T: FromValue>(&self, index: usize) -> Result<T, StoreError> {
        let value = self.0.get(index).ok_or_else(|| {
            StoreError::Corrupt(format!("a row of {} columns has no column {index}", self.0.len()))
        })?;
        T::from_value(value).map_err(|why| StoreError::Corrupt(format!("column {index}: {why}")))
    }
}

/// Which database a store is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Backend {
    /// The embedded SQLite file.
    Sqlite,
    /// A PostgreSQL server.
    Postgres,
}

/// One connection of either backend.
pub(crate) enum Conn {
    /// A SQLite connection (one per call: cheap).
    Sqlite(rusqlite::Connection),
    /// A pooled PostgreSQL connection (the client needs `&mut`; a connection is used by one
    /// thread at a time, so a `RefCell` is enough).
    Pg(Box<RefCell<pg::Pooled>>),
}

impl Conn {
    /// A pooled PostgreSQL connection as a `Conn`.
    pub(crate) fn pg(pooled: pg::Pooled) -> Self {
        Conn::Pg(Box::new(RefCell::new(pooled)))
    }

    /// The backend.
    pub(crate) fn backend(&self) -> Backend {
        match self {
            Conn::Sqlite(_) => Backend::Sqlite,
            Conn::Pg(_) => Backend::Postgres,
        }
    }

    /// Runs one statement; returns the rows it changed.
    pub(crate) fn execute(&self, sql: &str, params: &[Value]) -> Result<u64, StoreError> {
        match self {
            Conn::Sqlite(connection) => sqlite::execute(connection, sql, params),
            Conn::Pg(client) => pg::execute(&mut client.borrow_mut(), sql, params),
        }
    }

    /// Runs several statements without parameters.
    pub(crate) fn execute_batch(&self, sql: &str) -> Result<(), StoreError> {
        match self {
            Conn::Sqlite(connection) => Ok(connection.execute_batch(sql)?),
            Conn::Pg(client) => pg::execute_batch(&mut client.borrow_mut(), sql),
        }
    }

    /// Every row of a query.
    fn rows(&self, sql: &str, params: &[Value]) -> Result<Vec<Row>, StoreError> {
        match self {
            Conn::Sqlite(connection) => sqlite::query(connection, sql, params),
            Conn::Pg(client) => pg::query(&mut client.borrow_mut(), sql, params),
        }
    }

    /// Every row of a query, each mapped by `map`.
    pub(crate) fn query<T>(
        &self,
        sql: &str,
        params: &[Value],
        map: impl FnMut(&Row) -> Result<T, StoreError>,
    ) -> Result<Vec<T>, StoreError> {
        self.rows(sql, params)?.iter().map(map).collect()
    }

    /// The first row of a query, if any.
    pub(crate) fn query_opt<T>(
        &self,
        sql: &str,
        params: &[Value],
        map: impl FnOnce(&Row) -> Result<T, StoreError>,
    ) -> Result<Option<T>, StoreError> {
        self.rows(sql, params)?.first().map(map).transpose()
    }

    /// The first row of a query that always returns one (an aggregate, `EXISTS`, `RETURNING`).
    pub(crate) fn query_row<T>(
        &self,
        sql: &str,
        params: &[Value],
        map: impl FnOnce(&Row) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.query_opt(sql, params, map)?
            .ok_or_else(|| StoreError::Corrupt(format!("no row from {}", first_line(sql))))
    }

    /// A write transaction, serialised with every other writer of the store.
    pub(crate) fn write(&mut self) -> Result<Tx<'_>, StoreError> {
        match self {
            Conn::Sqlite(connection) => connection.execute_batch("BEGIN IMMEDIATE")?,
            Conn::Pg(client) => pg::begin_write(&mut client.borrow_mut())?,
        }
        Ok(Tx { conn: self, open: true })
    }

    /// A read-only transaction: one consistent snapshot.
    pub(crate) fn read(&mut self) -> Result<Tx<'_>, StoreError> {
        match self {
            Conn::Sqlite(connection) => connection.execute_batch("BEGIN DEFERRED")?,
            Conn::Pg(client) => {
                pg::execute_batch(
                    &mut client.borrow_mut(),
                    "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
                )?;
            }
        }
        Ok(Tx { conn: self, open: true })
    }
}

/// Statements on either backend's raw connection: what a migration step written in Rust
/// (`store::vectors::compact_stored_vectors`) runs inside the migration's transaction.
pub(crate) trait Statements {
    /// Runs one statement; returns the rows it changed.
    fn run(&self, sql: &str, params: &[Value]) -> Result<u64, StoreError>;
    /// Every row of a query.
    fn all(&self, sql: &str, params: &[Value]) -> Result<Vec<Row>, StoreError>;
}

impl Statements for rusqlite::Connection {
    fn run(&self, sql: &str, params: &[Value]) -> Result<u64, StoreError> {
        sqlite::execute(self, sql, params)
    }

    fn all(&self, sql: &str, params: &[Value]) -> Result<Vec<Row>, StoreError> {
        sqlite::query(self, sql, params)
    }
}

impl Statements for Conn {
    fn run(&self, sql: &str, params: &[Value]) -> Result<u64, StoreError> {
        self.execute(sql, params)
    }

    fn all(&self, sql: &str, params: &[Value]) -> Result<Vec<Row>, StoreError> {
        self.rows(sql, params)
    }
}

/// An open transaction; rolled back when dropped without [`Tx::commit`]. Derefs to its
/// connection, so a function taking `&Conn` runs inside it.
pub(crate) struct Tx<'a> {
    conn: &'a Conn,
    open: bool,
}

impl Tx<'_> {
    /// Commits.
    pub(crate) fn commit(mut self) -> Result<(), StoreError> {
        self.open = false;
        self.conn.execute_batch("COMMIT")
    }
}

impl std::ops::Deref for Tx<'_> {
    type Target = Conn;

    fn deref(&self) -> &Conn {
        self.conn
    }
}

impl Drop for Tx<'_> {
    fn drop(&mut self) {
        if self.open {
            // A failed rollback leaves a broken connection, which is dropped (SQLite) or
            // discarded by the pool (PostgreSQL); the transaction did not commit either way.
            let _ = self.conn.execute_batch("ROLLBACK");
        }
    }
}

/// The first line of a statement, for error messages.
fn first_line(sql: &str) -> &str {
    sql.trim().lines().next().unwrap_or_default()
}
