//! The store-wide revision counter every write transaction that changes a conversation
//! advances (schema migration 3), so readers can tell cheaply whether a cached index is current.

use super::StoreError;
use super::db::{Conn, params};

/// Gives `conversation` the next store-wide revision (see schema migration 3).
pub(super) fn bump_revision(transaction: &Conn, conversation: &str) -> Result<(), StoreError> {
    transaction
        .execute("UPDATE counters SET value = value + 1 WHERE name = 'revision'", params![])?;
    transaction.execute(
        "UPDATE conversations SET revision = (SELECT value FROM counters WHERE name = 'revision')
         WHERE id = ?1",
        params![conversation],
    )?;
    Ok(())
}
