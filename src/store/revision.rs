//! The store-wide revision counter every write transaction that changes a conversation
//! advances (schema migration 3), so readers can tell cheaply whether a cached index is current.

use super::StoreError;

/// Gives `conversation` the next store-wide revision (see schema migration 3).
pub(super) fn bump_revision(
    transaction: &rusqlite::Transaction<'_>,
    conversation: &str,
) -> Result<(), StoreError> {
    transaction.execute("UPDATE counters SET value = value + 1 WHERE name = 'revision'", [])?;
    transaction.execute(
        "UPDATE conversations SET revision = (SELECT value FROM counters WHERE name = 'revision')
         WHERE id = ?1",
        [conversation],
    )?;
    Ok(())
}
