//! The word vectors of a conversation (schema migration 4): one row per distinct content word of
//! its messages, for fusion's soft word matching. They are derived data, like the unit vectors:
//! writing them does not change the conversation's revision, and forgetting the conversation
//! deletes them (foreign key cascade).

use super::db::params;
use super::read::{decode_vectors, encode_vectors};
use super::{Store, StoreError};

impl Store {
    /// The stored vectors of those of `words` that have one, in the order of `words`.
    pub fn word_vectors(
        &self,
        conversation: &str,
        words: &[String],
    ) -> Result<Vec<(String, Vec<f32>)>, StoreError> {
        let connection = self.connect()?;
        let mut found = Vec::new();
        for word in words {
            let row: Option<(i64, Vec<u8>)> = connection.query_opt(
                "SELECT dims, vector FROM word_vectors WHERE conversation_id = ?1 AND word = ?2",
                params![conversation, word],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )?;
            if let Some((dims, bytes)) = row {
                let vector = usize::try_from(dims)
                    .ok()
                    .and_then(|dims| decode_vectors(&bytes, dims))
                    .and_then(|mut rows| (rows.len() == 1).then(|| rows.remove(0)))
                    .ok_or_else(|| {
                        StoreError::Corrupt(format!("word vector of {word:?} in {conversation:?}"))
                    })?;
                found.push((word.clone(), vector));
            }
        }
        Ok(found)
    }

    /// Stores word vectors of `conversation` (one transaction; a word already stored keeps its
    /// vector). Returns `false`, writing nothing, when the conversation no longer exists (it was
    /// forgotten meanwhile).
    pub fn save_word_vectors(
        &self,
        conversation: &str,
        words: &[(String, Vec<f32>)],
    ) -> Result<bool, StoreError> {
        let mut connection = self.connect()?;
        let transaction = connection.write()?;
        let exists = transaction
            .query_opt("SELECT 1 FROM conversations WHERE id = ?1", params![conversation], |_| {
                Ok(())
            })?
            .is_some();
        if !exists {
            return Ok(false);
        }
        for (word, vector) in words {
            if vector.is_empty() {
                return Err(StoreError::Corrupt(format!("empty vector for word {word:?}")));
            }
            let bytes = encode_vectors(std::iter::once(vector), vector.len())?;
            transaction.execute(
                "INSERT INTO word_vectors (conversation_id, word, dims, vector)
                 VALUES (?1, ?2, ?3, ?4) ON CONFLICT DO NOTHING",
                params![conversation, word, vector.len() as i64, bytes],
            )?;
        }
        transaction.commit()?;
        Ok(true)
    }
}
