//! Porter stemming exactly as NLTK's `PorterStemmer()` does it in its default mode
//! (`NLTK_EXTENSIONS`), which is what the official LoCoMo scorer applies to every token
//! (`eval::f1`); BM25's terms (`retrieval::bm25`) are stemmed the same way.
//!
//! The work is done by the `nltk-porter` crate, a port of NLTK's stemmer. Other crates were
//! checked against 6,707 words stemmed by nltk 3.9.1 and do not match: `rust-stemmers` implements
//! Snowball "english" (Porter2, e.g. `badly` → `bad` where NLTK gives `badli`) and
//! `porter-stemmer` the 1980 paper (e.g. `age` → `ag`). `nltk-porter` matches every vector in
//! `tests/fixtures/eval/porter_nltk.tsv`.
//!
//! One NLTK quirk is out of this module's domain: NLTK looks its irregular-forms table up with
//! the word *before* lowercasing, so `Skies` stems to `ski` while `skies` stems to `sky`; the
//! crate looks the table up after lowercasing. The LoCoMo normaliser and BM25 lowercase before
//! they stem, so only lowercase tokens ever reach [`stem`] and the two agree on all of them.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::LazyLock;

use nltk_porter::{Mode, PorterStemmer};

/// One stemmer for the process: it is immutable after construction (it only holds NLTK's
/// irregular-forms table), so sharing it across threads is safe.
static STEMMER: LazyLock<PorterStemmer> = LazyLock::new(|| PorterStemmer::new(Mode::Nltk));

/// Stem one lowercase token the way NLTK's default `PorterStemmer().stem` does.
///
/// Words of one or two characters are returned unchanged; NLTK's irregular forms (`skies` →
/// `sky`, `dying` → `die`, `news` → `news`, ...) come from its table; everything else goes
/// through steps 1a–5b with NLTK's extensions.
pub fn stem(token: &str) -> String {
    // Answers repeat the same few thousand words, and the stemmer allocates on every step, so
    // each thread keeps a memo of the stems it has computed (bounded: cleared when full).
    MEMO.with(|memo| {
        let mut memo = memo.borrow_mut();
        if let Some(stemmed) = memo.get(token) {
            return stemmed.clone();
        }
        let stemmed = STEMMER.stem(token);
        if memo.len() >= MEMO_CAPACITY {
            memo.clear();
        }
        memo.insert(token.to_string(), stemmed.clone());
        stemmed
    })
}

/// Entries a thread's memo holds before it starts over.
const MEMO_CAPACITY: usize = 100_000;

thread_local! {
    /// Per-thread memo of token → stem; only a cache, it never changes a result.
    static MEMO: RefCell<HashMap<String, String>> = RefCell::new(HashMap::new());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(word: &str, expected: &str) {
        assert_eq!(stem(word), expected, "stem({word:?})");
    }

    #[test]
    fn irregular_forms_table() {
        check("skies", "sky");
        check("sky", "sky");
        check("dying", "die");
        check("lying", "lie");
        check("tying", "tie");
        check("news", "news");
        check("innings", "inning");
        check("outings", "outing");
        check("cannings", "canning");
        check("howe", "howe");
        check("proceed", "proceed");
        check("exceed", "exceed");
        check("succeed", "succeed");
    }

    #[test]
    fn short_words_are_untouched() {
        check("is", "is");
        check("as", "as");
        check("ys", "ys");
        check("a", "a");
        // Three letters already go through the steps.
        check("yes", "ye");
    }

    #[test]
    fn step_1a_and_ies_rules() {
        check("caresses", "caress");
        check("ponies", "poni");
        // NLTK extension: a four-letter word ending in `ies` keeps `ie`.
        check("ties", "tie");
        check("dies", "die");
        check("cats", "cat");
        check("caress", "caress");
    }

    #[test]
    fn step_1b_ed_ing_and_ied() {
        check("agreed", "agre");
        check("feed", "feed");
        check("plastered", "plaster");
        check("bled", "bled");
        check("motoring", "motor");
        check("sing", "sing");
        check("conflated", "conflat");
        check("troubled", "troubl");
        check("sized", "size");
        check("hopping", "hop");
        check("tanned", "tan");
        check("falling", "fall");
        check("hissing", "hiss");
        check("fizzed", "fizz");
        check("failing", "fail");
        check("filing", "file");
        // NLTK extension: `ied` → `ie` on four letters, `i` otherwise.
        check("tied", "tie");
        check("cried", "cri");
        check("studied", "studi");
    }

    #[test]
    fn step_1c_y_needs_a_consonant_before_it() {
        check("happy", "happi");
        check("enjoy", "enjoy");
        check("toy", "toy");
        check("fly", "fli");
    }

    #[test]
    fn steps_2_to_5_and_ly_handling() {
        check("relational", "relat");
        check("conditional", "condit");
        check("generously", "gener");
        check("badly", "badli");
        check("beautifully", "beauti");
        check("hopefully", "hope");
        check("radically", "radic");
        check("differently", "differ");
        check("analogy", "analog");
        check("geology", "geolog");
        check("revival", "reviv");
        check("electrical", "electr");
        check("adjustment", "adjust");
        check("adoption", "adopt");
        check("controll", "control");
        check("roll", "roll");
        check("cease", "ceas");
    }

    #[test]
    fn non_ascii_letters_count_as_consonants() {
        check("café", "café");
        check("σοφία", "σοφία");
    }
}
