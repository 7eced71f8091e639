//! Every stop-word list of the crate, side by side.
//!
//! They are not one list because each is pinned by what was measured, built or compared with
//! it; every constant's comment says why it must stay as it is. Lists are compared with
//! `contains` on lowercase words, so their order does not matter. Changing any of them changes
//! results: retrieval rankings, the words stored with vectors, which memory keys match, or the
//! official F1.

/// Short English function words: pronouns, auxiliaries, prepositions, question words and the
/// pieces contractions split into at the apostrophe (`s`, `t`, `m`, `re`, `ve`, `ll`, `d`).
/// BM25's stop words (`retrieval::bm25`, on lowercase alphanumeric words before stemming), and
/// the base of the word channel's ([`super::content_words`] drops these and
/// [`CHAT_STOP_WORDS`]). Fixed: BM25 and fusion rankings, the defaults `retrieve --folds`
/// chose and the retrieval numbers in the docs were measured with exactly this list.
pub const ENGLISH_STOP_WORDS: &[&str] = &[
    "a", "about", "after", "again", "all", "am", "an", "and", "any", "are", "as", "at", "be",
    "been", "before", "being", "both", "but", "by", "can", "could", "did", "do", "does", "doing",
    "for", "from", "had", "has", "have", "having", "he", "her", "here", "hers", "herself", "him",
    "himself", "his", "how", "i", "if", "in", "into", "is", "it", "its", "itself", "just", "me",
    "my", "myself", "of", "on", "or", "our", "ours", "she", "so", "some", "than", "that", "the",
    "their", "theirs", "them", "then", "there", "these", "they", "this", "those", "to", "too",
    "was", "we", "were", "what", "when", "where", "which", "while", "who", "whom", "why", "will",
    "with", "would", "you", "your", "yours", "s", "t", "m", "re", "ve", "ll", "d",
];

/// What the word channel ([`super::content_words`]) drops beyond [`ENGLISH_STOP_WORDS`]: chat
/// fillers (`yeah`, `thanks`, `wow`) that every other turn holds, and more function, quantity
/// and degree words. A separate list because BM25 keeps these words: adding them to
/// [`ENGLISH_STOP_WORDS`] would change BM25's rankings and every number measured with it, and
/// dropping them from the word channel would change its vocabulary, and with it the word
/// vectors the store and the index cache hold.
pub const CHAT_STOP_WORDS: &[&str] = &[
    "above",
    "against",
    "also",
    "because",
    "below",
    "between",
    "down",
    "during",
    "each",
    "ever",
    "few",
    "further",
    "get",
    "going",
    "gonna",
    "got",
    "hey",
    "like",
    "lot",
    "many",
    "more",
    "most",
    "much",
    "nor",
    "not",
    "now",
    "off",
    "once",
    "one",
    "only",
    "other",
    "ourselves",
    "out",
    "over",
    "own",
    "really",
    "same",
    "should",
    "such",
    "thank",
    "thanks",
    "themselves",
    "thing",
    "things",
    "through",
    "two",
    "under",
    "until",
    "very",
    "wow",
    "yeah",
    "yes",
    "yourself",
    "yourselves",
];

/// Words ignored when the token sets of memory keys are compared (`memory::key::tokens`, on
/// normalised keys). A small subset of [`ENGLISH_STOP_WORDS`], and it must stay this one:
/// it decides which graph keys a phrase matches (subset and Jaccard rules), and the
/// deterministic keywords of sentences the model left without, which the keyword stage cache
/// holds.
pub const KEY_STOP_WORDS: &[&str] = &[
    "a", "about", "an", "and", "are", "as", "at", "be", "by", "for", "from", "her", "his", "i",
    "in", "is", "it", "its", "me", "my", "of", "on", "or", "our", "she", "that", "the", "their",
    "them", "they", "this", "to", "was", "we", "were", "with", "you", "your", "he", "him", "s",
];

/// Question words a question's deterministic fallback keywords leave out after
/// [`KEY_STOP_WORDS`] (`agent::retrieve::keywords::fallback_keywords`). Compared with words
/// already normalised like memory keys, so it holds normalised forms (`doe` is how `does`
/// folds); not [`BM25_QUESTION_WORDS`], which is compared with raw lowercase words.
pub const KEYWORD_QUESTION_WORDS: &[&str] = &[
    "what", "when", "where", "who", "whom", "whose", "which", "why", "how", "did", "do", "does",
    "doe", "has", "have", "had", "would", "could", "should", "will", "can", "been", "being",
    "many", "much", "some", "any", "ever", "kind", "there", "not", "but", "if", "so", "than",
    "then", "into", "after", "before", "during", "also", "all", "one", "like", "likely",
];

/// Words that frame a question ("What kind of ...", "Would X likely ...") without naming its
/// content; BM25 drops them from queries when `Bm25Params::drop_question_words` is set (off by
/// default: it did not help on dev). Compared with lowercase words before stemming.
pub const BM25_QUESTION_WORDS: &[&str] = &[
    "kind",
    "type",
    "types",
    "sort",
    "likely",
    "might",
    "many",
    "much",
    "ever",
    "also",
    "something",
    "anything",
    "thing",
    "things",
    "still",
    "yet",
    "whose",
    "does",
    "one",
];

/// The words the official LoCoMo normalisation deletes as whole words
/// (`regex.sub(r'\b(a|an|the|and)\b', ' ', text)` in snap-research/LoCoMo
/// `task_eval/evaluation.py`), used by `eval::f1`. Exactly these four, for F1 parity with the
/// official scorer: not a stop-word list of ours to tune.
pub const LOCOMO_ARTICLES: &[&str] = &["a", "an", "the", "and"];

/// Words the scripted agent and its mechanical memory (test support, `agent::scripted`) never
/// use as keywords or tags: common words, and words the category instructions add to a
/// question (`choose`, `answer`, `likely`, `mentioned`, `conversation`). Its own list because
/// the scripted replies, and the tests and benchmarks built on them, were written with it (one
/// entry, `with`, is listed twice).
#[cfg(any(test, feature = "test-support"))]
pub const SCRIPTED_STOP_WORDS: &[&str] = &[
    "about",
    "after",
    "also",
    "been",
    "being",
    "could",
    "did",
    "does",
    "doing",
    "from",
    "have",
    "into",
    "just",
    "like",
    "more",
    "much",
    "that",
    "their",
    "them",
    "then",
    "there",
    "they",
    "this",
    "what",
    "when",
    "where",
    "which",
    "while",
    "will",
    "with",
    "would",
    "your",
    "yours",
    "were",
    "with",
    "who",
    "whom",
    "whose",
    "how",
    "why",
    "the",
    "and",
    "for",
    "you",
    "are",
    "was",
    "she",
    "her",
    "his",
    "him",
    "our",
    "its",
    "not",
    "but",
    "has",
    "had",
    "any",
    "all",
    "can",
    "one",
    "too",
    "very",
    "some",
    "said",
    "answer",
    "choose",
    "these",
    "those",
    "mentioned",
    "conversation",
    "likely",
    "enjoy",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lists_relate_as_their_comments_say() {
        assert!(KEY_STOP_WORDS.iter().all(|word| ENGLISH_STOP_WORDS.contains(word)));
        assert!(CHAT_STOP_WORDS.iter().all(|word| !ENGLISH_STOP_WORDS.contains(word)));
        let lowercase = |list: &[&str]| list.iter().all(|word| *word == word.to_lowercase());
        for list in [ENGLISH_STOP_WORDS, CHAT_STOP_WORDS, KEY_STOP_WORDS, BM25_QUESTION_WORDS] {
            assert!(lowercase(list));
        }
    }
}
