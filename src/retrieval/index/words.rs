//! Soft word matching: a lexical channel that also counts near-synonyms. Its words are the
//! content words of [`crate::text::content_words`].
//!
//! BM25 counts a question word only where it occurs verbatim, and a turn's dense vector carries
//! its whole text (and its context), so a word mentioned in passing ("running, reading, or
//! playing my violin") barely moves it. Here every distinct content word of the memory and of
//! the query has its own vector (the memory's embedder on the bare word), and a turn scores
//!
//! `Σ_q idf(q) · max_{w ∈ turn} f(cos(q, w))`,  `f(s) = max(0, (s − θ) / (1 − θ))`
//!
//! over the query's content words q: a word of the turn equal to q gives f = 1, a close word
//! ("violin" for "instruments") a part of it, an unrelated word nothing. idf is BM25's
//! `ln(1 + (N − n + 0.5) / (n + 0.5))` over turns (n = 0 for a query word the memory lacks).
//! θ is [`FusionOptions::word_threshold`](super::FusionOptions::word_threshold).
//!
//! Word vectors are not unit vectors of a session: the index collects the vocabulary as turns
//! are added ([`WordIndex::add_turn`]); the caller embeds the words that lack a vector
//! ([`MemoryIndex::words_without_vectors`](super::MemoryIndex::words_without_vectors)) and hands
//! them back ([`MemoryIndex::set_word_vectors`](super::MemoryIndex::set_word_vectors)), and
//! embeds the query's words that the memory lacks ([`QueryWords`]).
//!
//! An own conversation's index holds its word vectors compact ([`WordIndex::hold_compact`]:
//! 8 bits per dimension, [`CompactVector`]), since they come compact from the store: the
//! vocabulary is most of a cached conversation's bytes, and a quarter of them is what the
//! service's memory budget then weighs.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::retrieval::units::TurnUnit;
use crate::retrieval::vector::{CompactVector, dot, unit_length as unit};
use crate::text::content_words;

/// A turn's words for soft word matching: the content words of its text without the speaker.
/// The one rule for what the index collects and what `memory add` embeds.
pub fn turn_words(turn: &TurnUnit) -> Vec<String> {
    content_words(turn.text_without_speaker())
}

/// Vectors of query words the memory lacks, by word (from the memory's embedder).
pub type QueryWords = BTreeMap<String, Vec<f32>>;

/// Why word scores cannot be computed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WordError {
    /// Some memory words were never given a vector.
    #[error(
        "{missing} memory words have no vector (embed MemoryIndex::words_without_vectors first)"
    )]
    MissingVectors {
        /// How many.
        missing: usize,
    },
}

/// A memory word's vector: exact (the indexes of `run` and `retrieve`, saved as plain arrays as
/// they always were), or compact (own memory's).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
enum WordVector {
    Exact(Vec<f32>),
    Compact(CompactVector),
}

impl WordVector {
    /// Similarity to a unit query vector.
    fn dot(&self, query: &[f32]) -> f32 {
        match self {
            Self::Exact(vector) => dot(query, vector),
            Self::Compact(vector) => vector.dot(query),
        }
    }

    /// The vector as f32 (when the word is itself a query word).
    fn to_f32(&self) -> Vec<f32> {
        match self {
            Self::Exact(vector) => vector.clone(),
            Self::Compact(vector) => vector.to_f32(),
        }
    }

    fn heap_bytes(&self) -> usize {
        match self {
            Self::Exact(vector) => crate::heap::flat(vector),
            Self::Compact(vector) => vector.heap_bytes(),
        }
    }
}

/// The memory's vocabulary: per turn its content words, per word its vector and turn count.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WordIndex {
    /// Word → id (ids in first-seen order).
    ids: BTreeMap<String, u32>,
    /// Per id: the word.
    words: Vec<String>,
    /// Per id: its vector, once given.
    vectors: Vec<Option<WordVector>>,
    /// Per id: turns that contain it.
    turn_counts: Vec<u32>,
    /// Per turn: its word ids, ascending.
    turns: Vec<Vec<u32>>,
    /// Vectors are held compact ([`WordIndex::hold_compact`]).
    #[serde(default)]
    compact: bool,
}

impl WordIndex {
    /// An estimate of the heap bytes it holds ([`crate::heap`]): each word twice (the map's key
    /// and the list), its vector, and the turns' word ids.
    pub fn heap_bytes(&self) -> usize {
        use crate::heap::{ALLOCATION_OVERHEAD, flat, text};
        let words: usize = self.words.iter().map(|word| 2 * text(word) + ALLOCATION_OVERHEAD).sum();
        let vectors: usize = self.vectors.iter().flatten().map(WordVector::heap_bytes).sum();
        let turns: usize = self.turns.iter().map(|ids| flat(ids)).sum();
        words
            + vectors
            + flat(&self.vectors)
            + flat(&self.turn_counts)
            + flat(&self.turns)
            + turns
            + flat(&self.words)
    }

    /// Add the next turn by its content words ([`turn_words`]).
    pub fn add_turn(&mut self, words: Vec<String>) {
        let mut ids: Vec<u32> = words
            .into_iter()
            .map(|word| match self.ids.get(&word) {
                Some(&id) => id,
                None => {
                    let id = self.words.len() as u32;
                    self.ids.insert(word.clone(), id);
                    self.words.push(word);
                    self.vectors.push(None);
                    self.turn_counts.push(0);
                    id
                }
            })
            .collect();
        ids.sort_unstable();
        for &id in &ids {
            self.turn_counts[id as usize] += 1;
        }
        self.turns.push(ids);
    }

    /// Words without a vector yet, in first-seen order.
    pub fn without_vectors(&self) -> Vec<String> {
        self.words
            .iter()
            .zip(&self.vectors)
            .filter(|(_, vector)| vector.is_none())
            .map(|(word, _)| word.clone())
            .collect()
    }

    /// Give words their vectors, scaled to unit length (words the index does not hold are
    /// ignored); held compact after [`WordIndex::hold_compact`] (a vector with a non-finite
    /// value, which no store holds, stays exact).
    pub fn set_vectors(&mut self, words: &[String], vectors: Vec<Vec<f32>>) {
        for (word, vector) in words.iter().zip(vectors) {
            if let Some(&id) = self.ids.get(word) {
                self.vectors[id as usize] = Some(self.hold(unit(vector)));
            }
        }
    }

    /// Hold every vector, given and to come, compact (8 bits per dimension).
    pub fn hold_compact(&mut self) {
        self.compact = true;
        let vectors = std::mem::take(&mut self.vectors);
        self.vectors = vectors
            .into_iter()
            .map(|vector| vector.map(|vector| self.hold(vector.to_f32())))
            .collect();
    }

    fn hold(&self, vector: Vec<f32>) -> WordVector {
        if !self.compact {
            return WordVector::Exact(vector);
        }
        match CompactVector::new(&vector) {
            Ok(compact) => WordVector::Compact(compact),
            Err(_) => WordVector::Exact(vector),
        }
    }

    /// Whether `word` is in the memory.
    pub fn contains(&self, word: &str) -> bool {
        self.ids.contains_key(word)
    }

    /// Number of distinct words.
    pub fn len(&self) -> usize {
        self.words.len()
    }

    /// Whether no word was seen.
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// The soft-match score of every turn for `query_text` (see the module doc); query words the
    /// memory lacks take their vector from `extra`, and without one match nothing.
    pub fn scores(
        &self,
        query_text: &str,
        extra: &QueryWords,
        threshold: f64,
    ) -> Result<Vec<f64>, WordError> {
        let missing = self.vectors.iter().filter(|v| v.is_none()).count();
        if missing > 0 {
            return Err(WordError::MissingVectors { missing });
        }
        let n_turns = self.turns.len() as f64;
        let scale = (1.0 - threshold).max(f64::EPSILON);
        let mut scores = vec![0.0; self.turns.len()];
        for word in content_words(query_text) {
            let (count, vector) = match self.ids.get(&word) {
                Some(&id) => {
                    let vector = self.vectors[id as usize].as_ref().map(WordVector::to_f32);
                    (self.turn_counts[id as usize], vector)
                }
                None => (0, extra.get(&word).cloned()),
            };
            let Some(query) = vector.map(unit) else { continue };
            let n = f64::from(count);
            let idf = (1.0 + (n_turns - n + 0.5) / (n + 0.5)).ln();
            // Per memory word, its credit for this query word.
            let credit: Vec<f64> = self
                .vectors
                .iter()
                .flatten()
                .map(|v| ((f64::from(v.dot(&query)) - threshold) / scale).clamp(0.0, 1.0))
                .collect();
            for (score, ids) in scores.iter_mut().zip(&self.turns) {
                let best = ids.iter().map(|&id| credit[id as usize]).fold(0.0, f64::max);
                *score += idf * best;
            }
        }
        Ok(scores)
    }
}

/// A deterministic stand-in word vector for tests: one-hot in 64 dimensions by a stable hash of
/// the word (distinct words are nearly always orthogonal, a word matches only itself).
#[cfg(test)]
pub(crate) fn test_word_vector(word: &str) -> Vec<f32> {
    let hash = word.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    let mut vector = vec![0.0; 64];
    vector[(hash % 64) as usize] = 1.0;
    vector
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// 2-D word vectors at the given angles (radians).
    fn index_with(turns: &[&str], angles: &[(&str, f32)]) -> WordIndex {
        let mut index = WordIndex::default();
        for turn in turns {
            index.add_turn(content_words(turn));
        }
        let words: Vec<String> = angles.iter().map(|(w, _)| w.to_string()).collect();
        let vectors = angles.iter().map(|(_, a)| vec![a.cos(), a.sin()]).collect();
        index.set_vectors(&words, vectors);
        index
    }

    #[test]
    fn a_close_word_scores_part_of_an_exact_one_and_a_far_word_nothing() {
        let index = index_with(
            &["playing my violin", "went running", "violin lessons today"],
            &[
                ("playing", 1.2),
                ("violin", 0.3),
                ("went", 2.5),
                ("running", 2.0),
                ("lessons", 1.5),
                ("today", 3.0),
            ],
        );
        assert!(index.without_vectors().is_empty());
        // "instruments" is not in the memory: its vector comes from the caller.
        let extra: QueryWords = [("instruments".to_string(), vec![1.0, 0.0])].into();
        let scores = index.scores("Which instruments?", &extra, 0.5).unwrap();
        // cos(0.3) = 0.955 → credit 0.91 for both violin turns; cos(2.0) < 0 for running.
        assert!(scores[0] > 0.0 && (scores[0] - scores[2]).abs() < 1e-12);
        assert_eq!(scores[1], 0.0);
        // The exact word scores the full idf; a rarer exact word more.
        let exact = index.scores("violin", &QueryWords::new(), 0.5).unwrap();
        let idf_violin = (1.0f64 + (3.0 - 2.0 + 0.5) / 2.5).ln();
        assert!((exact[0] - idf_violin).abs() < 1e-9, "{exact:?}");
        let rare = index.scores("running", &QueryWords::new(), 0.5).unwrap();
        assert!(rare[1] > exact[0]);
        // Without a vector an unknown query word matches nothing.
        assert_eq!(index.scores("instruments", &QueryWords::new(), 0.5).unwrap(), vec![0.0; 3]);
    }

    #[test]
    fn an_index_held_compact_scores_as_the_exact_one_in_a_quarter_of_the_vector_bytes() {
        use rand::{Rng as _, SeedableRng as _};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(384);
        let turns: Vec<String> = (0..40)
            .map(|turn| format!("word{} word{} word{}", turn % 7, turn % 11, turn))
            .collect();
        let mut exact = WordIndex::default();
        for turn in &turns {
            exact.add_turn(content_words(turn));
        }
        let words = exact.without_vectors();
        let vectors: Vec<Vec<f32>> = words
            .iter()
            .map(|_| (0..384).map(|_| rng.random_range(-1.0f32..1.0)).collect())
            .collect();
        let mut compact = exact.clone();
        exact.set_vectors(&words, vectors.clone());
        // Half the words given before holding compact (converted), half after (held so).
        let half = words.len() / 2;
        compact.set_vectors(&words[..half], vectors[..half].to_vec());
        compact.hold_compact();
        compact.set_vectors(&words[half..], vectors[half..].to_vec());
        let extra: QueryWords =
            [("unseen".to_string(), (0..384).map(|_| rng.random_range(-1.0f32..1.0)).collect())]
                .into();
        for query in ["word3 word5", "word17 unseen", "word0 word10 word39", "unseen"] {
            let (a, b) = (
                exact.scores(query, &extra, 0.0).unwrap(),
                compact.scores(query, &extra, 0.0).unwrap(),
            );
            assert!(a.iter().zip(&b).all(|(x, y)| (x - y).abs() < 1e-2), "{query}: {a:?} {b:?}");
        }
        let bytes = |index: &WordIndex| {
            index.vectors.iter().flatten().map(WordVector::heap_bytes).sum::<usize>()
        };
        assert!(
            bytes(&compact) * 3 < bytes(&exact),
            "{} against {}",
            bytes(&compact),
            bytes(&exact)
        );
        // Its saved form reads back; an exact index saves plain arrays as before.
        let saved = serde_json::to_string(&compact).unwrap();
        assert_eq!(serde_json::from_str::<WordIndex>(&saved).unwrap(), compact);
        let plain = serde_json::to_value(&exact).unwrap();
        assert!(plain["vectors"][0].is_array(), "{}", plain["vectors"][0]);
    }

    #[test]
    fn scores_refuse_a_memory_with_words_lacking_vectors() {
        let mut index = WordIndex::default();
        index.add_turn(content_words("violin lessons"));
        assert_eq!(index.without_vectors(), vec!["lessons", "violin"]);
        index.set_vectors(&["violin".to_string()], vec![vec![1.0, 0.0]]);
        assert_eq!(
            index.scores("violin", &QueryWords::new(), 0.5),
            Err(WordError::MissingVectors { missing: 1 })
        );
    }
}
