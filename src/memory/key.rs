//! Key normalisation and deterministic fuzzy matching of cue words.
//!
//! Keys are normalised once, when they are stored, and every lookup normalises its input the
//! same way, so `Painting`, `painting` and `paintings` are one cue (the reference kept raw
//! strings, §17 item 17). Matching follows the reference rules (§8: equal strings, token-set
//! containment either way, Jaccard ≥ 0.6) with one restriction that fixes §17 item 18: a
//! *single* token only matches a longer phrase by containment when it is not a common token
//! (a speaker name, a stop word, or a key linked to a large share of the episodes).

use std::collections::BTreeSet;

use crate::text::apostrophe_words;
use crate::text::stop_words::KEY_STOP_WORDS;

/// Jaccard similarity of token sets at or above which two phrases match (reference value).
pub const JACCARD_THRESHOLD: f64 = 0.6;

/// Words ending in `s` that are not plurals, and that the folding rules would damage.
const NOT_PLURAL: &[&str] = &[
    "always",
    "news",
    "series",
    "species",
    "physics",
    "mathematics",
    "economics",
    "politics",
    "perhaps",
    "sometimes",
    "lens",
    "canvas",
    "christmas",
    "pants",
    "jeans",
    "clothes",
    "yes",
];

/// Normalises a key or query phrase for comparison: [`clean_key`], then each word
/// plural-folded. Returns an empty string when nothing is left.
///
/// ```
/// use mragent::memory::normalize_key;
/// assert_eq!(normalize_key("  Caroline's Paintings "), "caroline painting");
/// assert_eq!(normalize_key("LGBTQ support-groups"), "lgbtq support group");
/// assert_eq!(normalize_key("stories"), normalize_key("story"));
/// ```
pub fn normalize_key(text: &str) -> String {
    clean_key(text)
        .split(' ')
        .filter(|word| !word.is_empty())
        .map(fold_plural)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The display form of a key: lowercase; possessive `'s` removed; every run of characters that
/// are not letters or digits becomes one space; trimmed. Words are not folded, so the form stays
/// readable (`pottery classes`).
pub fn clean_key(text: &str) -> String {
    let lower = text.to_lowercase().replace(['\u{2019}', '`'], "'");
    let mut words: Vec<String> = Vec::new();
    for word in apostrophe_words(&lower) {
        let word = word.strip_suffix("'s").unwrap_or(word);
        let word: String = word.chars().filter(|c| c.is_alphanumeric()).collect();
        if !word.is_empty() {
            words.push(word);
        }
    }
    words.join(" ")
}

/// Folds an English plural (and the `-y`/`-ie` spelling variants) onto one form, so that the
/// singular and the plural normalise alike: `paintings`/`painting` → `painting`,
/// `stories`/`story` → `stori`, `movies`/`movie` → `movi`, `classes`/`class` → `class`,
/// `beaches`/`beach` → `beach`. The result is a matching form, not a dictionary word.
///
/// Hand-written rather than a stemmer crate: Porter/Snowball stemming also strips derivational
/// suffixes and merges unrelated cues (`university`/`universe`, `organization`/`organ`), while
/// the cue graph only needs plural folding.
fn fold_plural(word: &str) -> String {
    if word.chars().count() <= 3
        || word.chars().any(|c| c.is_ascii_digit())
        || NOT_PLURAL.contains(&word)
    {
        return word.to_string();
    }
    let mut folded = if let Some(stem) = word.strip_suffix("ies").filter(|stem| stem.len() >= 2) {
        format!("{stem}i")
    } else if word.ends_with('s')
        && !(word.ends_with("ss") || word.ends_with("us") || word.ends_with("is"))
    {
        word[..word.len() - 1].to_string()
    } else {
        word.to_string()
    };
    // A silent `e` after a sibilant is dropped in both forms (`beache(s)`/`beach`,
    // `classe(s)`/`class`, `horse(s)` → `hors`), so the `-es` plural meets its singular.
    if folded.len() > 3
        && ["sse", "xe", "che", "she", "zze", "se"].iter().any(|end| folded.ends_with(end))
    {
        folded.pop();
    }
    // `-ie` and consonant + `-y` both become `-i` (`movie`/`movies`, `story`/`stories`).
    if folded.len() > 3 {
        if folded.ends_with("ie") {
            folded.pop();
        } else if folded.ends_with('y') {
            let before = folded.as_bytes()[folded.len() - 2];
            if !b"aeiou".contains(&before) {
                folded.pop();
                folded.push('i');
            }
        }
    }
    folded
}

/// The content tokens of a normalised phrase: its words without [`KEY_STOP_WORDS`] (all its
/// words if only stop words are left).
pub fn tokens(normalized: &str) -> BTreeSet<&str> {
    let all: BTreeSet<&str> = normalized.split(' ').filter(|word| !word.is_empty()).collect();
    let content: BTreeSet<&str> =
        all.iter().copied().filter(|word| !KEY_STOP_WORDS.contains(word)).collect();
    if content.is_empty() { all } else { content }
}

/// How a query phrase matched a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum MatchKind {
    /// Same normalised text.
    Exact,
    /// One token set contains the other.
    Subset,
    /// Token sets overlap with Jaccard ≥ [`JACCARD_THRESHOLD`].
    Jaccard,
}

/// Whether the normalised query `phrase` matches the normalised `key` (§8 rules, restricted so
/// that a single common token never matches by containment). `is_common` says whether a single
/// token is too common to stand for a longer phrase.
pub fn match_phrase(
    phrase: &str,
    key: &str,
    is_common: impl Fn(&str) -> bool,
) -> Option<MatchKind> {
    let phrase_tokens: Vec<&str> = tokens(phrase).into_iter().collect();
    let key_tokens: Vec<&str> = tokens(key).into_iter().collect();
    match_tokens(phrase, &phrase_tokens, key, &key_tokens, is_common)
}

/// [`match_phrase`] with the token sets already computed (sorted, without repeats), so a caller
/// scanning every key does not re-tokenise them.
pub(crate) fn match_tokens<P: AsRef<str>, K: AsRef<str>>(
    phrase: &str,
    phrase_tokens: &[P],
    key: &str,
    key_tokens: &[K],
    is_common: impl Fn(&str) -> bool,
) -> Option<MatchKind> {
    if phrase.is_empty() || key.is_empty() {
        return None;
    }
    if phrase == key {
        return Some(MatchKind::Exact);
    }
    let in_key = |token: &str| key_tokens.iter().any(|other| other.as_ref() == token);
    let shared = phrase_tokens.iter().filter(|token| in_key(token.as_ref())).count();
    if shared == 0 {
        return None;
    }
    if shared == phrase_tokens.len() && shared == key_tokens.len() {
        return Some(MatchKind::Exact);
    }
    // Containment either way: all tokens of the smaller set are shared.
    let smaller = phrase_tokens.len().min(key_tokens.len());
    if shared == smaller {
        let single_common = smaller == 1
            && if phrase_tokens.len() == 1 {
                is_common(phrase_tokens[0].as_ref())
            } else {
                is_common(key_tokens[0].as_ref())
            };
        if !single_common {
            return Some(MatchKind::Subset);
        }
    }
    let union = phrase_tokens.len() + key_tokens.len() - shared;
    // Token counts are small, so the f64 conversion is exact.
    #[allow(clippy::cast_precision_loss)]
    let jaccard = shared as f64 / union as f64;
    (jaccard >= JACCARD_THRESHOLD).then_some(MatchKind::Jaccard)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plural_forms_normalise_alike() {
        let same = [
            ("painting", "paintings"),
            ("Painting", "painting"),
            ("story", "stories"),
            ("movie", "movies"),
            ("class", "classes"),
            ("beach", "beaches"),
            ("box", "boxes"),
            ("horse", "horses"),
            ("city", "cities"),
            ("kid", "kids"),
            ("glass", "glasses"),
            ("headache", "headaches"),
            ("pie", "pies"),
            ("play", "plays"),
            ("support group", "Support-Groups"),
        ];
        for (singular, plural) in same {
            assert_eq!(normalize_key(singular), normalize_key(plural), "{singular} / {plural}");
        }
        let kept = ["bus", "tennis", "news", "gas", "this", "always", "2023", "canvas"];
        for word in kept {
            assert_eq!(normalize_key(word), word, "{word}");
        }
        assert_ne!(normalize_key("james"), normalize_key("jam"));
        assert_ne!(normalize_key("university"), normalize_key("universe"));
    }

    #[test]
    fn normalisation_cleans_punctuation_and_possessives() {
        assert_eq!(normalize_key("  Caroline's  art-show! "), "caroline art show");
        assert_eq!(normalize_key("Mel’s kids"), "mel kid");
        assert_eq!(normalize_key("!!!"), "");
        assert_eq!(normalize_key("don't"), "dont");
        assert_eq!(clean_key(" Pottery-Classes! "), "pottery classes");
    }

    #[test]
    fn matching_rules() {
        let never_common = |_: &str| false;
        let check = |phrase: &str, key: &str, expected: Option<MatchKind>| {
            let got = match_phrase(&normalize_key(phrase), &normalize_key(key), |token| {
                token == "caroline"
            });
            assert_eq!(got, expected, "{phrase} ~ {key}");
        };
        check("Paintings", "painting", Some(MatchKind::Exact));
        check("the beach", "beach", Some(MatchKind::Exact));
        check("watercolor painting", "painting", Some(MatchKind::Subset));
        check("painting", "abstract painting class", Some(MatchKind::Subset));
        // A common single token (speaker name) does not stand for a longer phrase, either way.
        check("Caroline's paintings", "caroline", None);
        check("caroline", "caroline mom", None);
        check("Caroline", "caroline", Some(MatchKind::Exact));
        check("charity race run", "charity race", Some(MatchKind::Subset));
        check("adoption agency interview", "adoption agency meeting", None);
        check(
            "adoption agency visit interview",
            "adoption agency visit meeting",
            Some(MatchKind::Jaccard),
        );
        check("pottery", "painting", None);
        assert_eq!(match_phrase("", "x", never_common), None);
    }
}
