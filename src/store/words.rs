//! Word vectors for fusion's soft word matching (schema migrations 4 and 9): one vector per
//! (embedder, word) in `embedder_words`, shared by every conversation embedded with that
//! embedder (a word's vector depends on nothing else), and per conversation the words it uses
//! in `conversation_words`. They are derived data, like the unit vectors: writing them does not
//! change the conversation's revision. Forgetting a conversation deletes its uses (foreign key
//! cascade) and the vectors of the words no other conversation of its embedder uses
//! ([`forget_unused_words`]).

use super::db::{Conn, params};
use super::vectors::{decode_vectors, encode_vectors};
use super::{Store, StoreError};

impl Store {
    /// The stored vectors of those of `words` that have one for `conversation`'s embedder, in
    /// the order of `words` (whichever conversation stored them).
    pub fn word_vectors(
        &self,
        conversation: &str,
        words: &[String],
    ) -> Result<Vec<(String, Vec<f32>)>, StoreError> {
        let connection = self.connect()?;
        let Some(embedder) = embedder_of(&connection, conversation)? else {
            return Ok(Vec::new());
        };
        let mut found = Vec::new();
        for word in words {
            let row: Option<(i64, Vec<u8>)> = connection.query_opt(
                "SELECT dims, vector FROM embedder_words WHERE embedder = ?1 AND word = ?2",
                params![embedder, word],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )?;
            if let Some((dims, bytes)) = row {
                let vector = usize::try_from(dims)
                    .ok()
                    .and_then(|dims| decode_vectors(&bytes, dims))
                    .and_then(|mut rows| (rows.len() == 1).then(|| rows.remove(0)))
                    .ok_or_else(|| {
                        StoreError::Corrupt(format!("word vector of {word:?} for {embedder:?}"))
                    })?;
                found.push((word.clone(), vector));
            }
        }
        Ok(found)
    }

    /// Records that `conversation` uses `used` and stores the vectors of `words` for its
    /// embedder (one transaction; a word that already has a vector keeps it). Returns `false`,
    /// writing nothing, when the conversation no longer exists (it was forgotten meanwhile).
    pub fn save_word_vectors(
        &self,
        conversation: &str,
        used: &[String],
        words: &[(String, Vec<f32>)],
    ) -> Result<bool, StoreError> {
        let mut connection = self.connect()?;
        let transaction = connection.write()?;
        let Some(embedder) = embedder_of(&transaction, conversation)? else {
            return Ok(false);
        };
        for (word, vector) in words {
            if vector.is_empty() {
                return Err(StoreError::Corrupt(format!("empty vector for word {word:?}")));
            }
            let bytes = encode_vectors(std::iter::once(vector), vector.len())?;
            transaction.execute(
                "INSERT INTO embedder_words (embedder, word, dims, vector)
                 VALUES (?1, ?2, ?3, ?4) ON CONFLICT DO NOTHING",
                params![embedder, word, vector.len() as i64, bytes],
            )?;
        }
        let uses = used.iter().chain(words.iter().map(|(word, _)| word));
        for word in uses {
            transaction.execute(
                "INSERT INTO conversation_words (conversation_id, word) VALUES (?1, ?2)
                 ON CONFLICT DO NOTHING",
                params![conversation, word],
            )?;
        }
        transaction.commit()?;
        Ok(true)
    }
}

/// The embedder of a conversation, if it exists.
fn embedder_of(connection: &Conn, conversation: &str) -> Result<Option<String>, StoreError> {
    connection.query_opt(
        "SELECT embedder FROM conversations WHERE id = ?1",
        params![conversation],
        |row| row.get(0),
    )
}

/// Deletes the vectors of the words `conversation` uses that no other conversation of its
/// embedder uses; run inside the transaction that forgets it, before its rows go.
pub(super) fn forget_unused_words(connection: &Conn, conversation: &str) -> Result<(), StoreError> {
    connection.execute(
        "DELETE FROM embedder_words
         WHERE embedder = (SELECT embedder FROM conversations WHERE id = ?1)
           AND word IN (SELECT word FROM conversation_words WHERE conversation_id = ?1)
           AND NOT EXISTS (
               SELECT 1 FROM conversation_words u
               JOIN conversations c ON c.id = u.conversation_id
               WHERE u.word = embedder_words.word
                 AND c.embedder = embedder_words.embedder
                 AND u.conversation_id <> ?1)",
        params![conversation],
    )?;
    Ok(())
}
