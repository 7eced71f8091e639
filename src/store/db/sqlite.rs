//! The SQLite side of [`super::Conn`]: binding [`Value`]s and reading rows with rusqlite.

use rusqlite::types::{ToSqlOutput, ValueRef};

use super::{Row, Value};
use crate::store::StoreError;

impl rusqlite::ToSql for Value {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(match self {
            Value::Null => ValueRef::Null,
            Value::Int(number) => ValueRef::Integer(*number),
            Value::Real(number) => ValueRef::Real(*number),
            Value::Text(text) => ValueRef::Text(text.as_bytes()),
            Value::Blob(bytes) => ValueRef::Blob(bytes),
        }))
    }
}

/// Runs one statement (prepared once per connection).
pub(super) fn execute(
    connection: &rusqlite::Connection,
    sql: &str,
    params: &[Value],
) -> Result<u64, StoreError> {
    let changed = connection.prepare_cached(sql)?.execute(rusqlite::params_from_iter(params))?;
    Ok(changed as u64)
}

/// Every row of a query.
pub(super) fn query(
    connection: &rusqlite::Connection,
    sql: &str,
    params: &[Value],
) -> Result<Vec<Row>, StoreError> {
    let mut statement = connection.prepare_cached(sql)?;
    let columns = statement.column_count();
    let mut rows = statement.query(rusqlite::params_from_iter(params))?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        let mut values = Vec::with_capacity(columns);
        for index in 0..columns {
            values.push(match row.get_ref(index)? {
                ValueRef::Null => Value::Null,
                ValueRef::Integer(number) => Value::Int(number),
                ValueRef::Real(number) => Value::Real(number),
                ValueRef::Text(text) => Value::Text(
                    std::str::from_utf8(text)
                        .map_err(|error| StoreError::Corrupt(format!("column {index}: {error}")))?
                        .to_string(),
                ),
                ValueRef::Blob(bytes) => Value::Blob(bytes.to_vec()),
            });
        }
        out.push(Row(values));
    }
    Ok(out)
}
