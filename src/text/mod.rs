//! Text helpers the stages share: splitting text into words ([`alphanumeric_runs`], [`words`],
//! [`apostrophe_words`]), the stop-word lists ([`stop_words`]), the word channel's
//! [`content_words`], NLTK's Porter stemmer ([`porter`]) and one short content hash
//! ([`short_hash`]).
//!
//! A leaf of the module graph: it imports nothing from the crate, so every stage may use it.
//! Pure and deterministic. What a stage does with the words (BM25 terms, memory keys, the
//! official LoCoMo normalisation, the scripted agent's cue words) stays with that stage; only
//! the pieces they share live here.

pub mod porter;
pub mod stop_words;
mod words;

pub use self::words::{alphanumeric_runs, apostrophe_words, content_words, words};

use sha2::{Digest as _, Sha256};

/// The first `n` bytes of the SHA-256 of `bytes` as lowercase hex (`2n` digits; at most the
/// whole digest, 32 bytes). Callers fix their own `n`: stage caches record 8-byte input
/// hashes, the store 16-byte content ids, prompts 6-byte versions; a different `n` would make
/// every stored hash stale.
pub fn short_hash(bytes: &[u8], n: usize) -> String {
    Sha256::digest(bytes).iter().take(n).map(|byte| format!("{byte:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_hash_is_a_hex_prefix_of_sha256() {
        // SHA-256("abc") = ba7816bf 8f01cfea 414140de 5dae2223 b00361a3 96177a9c b410ff61 f20015ad.
        assert_eq!(short_hash(b"abc", 8), "ba7816bf8f01cfea");
        assert_eq!(short_hash(b"abc", 16), "ba7816bf8f01cfea414140de5dae2223");
        assert_eq!(short_hash(b"abc", 64).len(), 64);
    }
}
