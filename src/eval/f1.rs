//! The official LoCoMo answer scorer (snap-research/LoCoMo `task_eval/evaluation.py`),
//! re-implemented rule for rule: normalisation, Porter-stemmed multiset token F1, exact match,
//! and the per-category rules (1: comma-split partial credit, 3: gold cut at `;`, 5: refusal
//! check).
//!
//! Pure and synchronous: strings in, numbers out. Where the official code leans on Python
//! semantics (`str.lower`, `str.split`, the regex `\b`), the Python behaviour is reproduced and
//! the comment says how.

use crate::text::porter;
use crate::text::stop_words::LOCOMO_ARTICLES;

/// Score of one answer under the LoCoMo rules.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LocomoScore {
    /// The official per-question score in [0, 1] (token F1, or 0/1 for category 5), unrounded.
    pub f1: f64,
    /// The score as the official pipeline stores it (`evaluate_qa.py` keeps `round(score, 3)`
    /// per question, and the category means are taken over these stored values). Category 1's
    /// score is a NumPy `float64` (from `np.mean`), so NumPy's rounding applies to it; the other
    /// categories' scores are Python numbers, rounded by Python's `round`. See [`stored_score`].
    pub stored: f64,
    /// Exact match: the *sets* of normalised (unstemmed) tokens are equal; for category 5 the
    /// refusal check.
    pub exact_match: bool,
}

/// The substrings that make a category-5 (adversarial) answer correct, matched in the
/// lowercased prediction.
pub const REFUSAL_MARKERS: [&str; 2] = ["no information available", "not mentioned"];

/// Score one LoCoMo answer. `gold` is ignored for category 5; for categories 1–4 a missing gold
/// scores against the empty string (every such answer gets 0). Categories outside 1–5 get
/// `None`: the official scorer raises on them.
pub fn score_locomo(category: u8, prediction: &str, gold: Option<&str>) -> Option<LocomoScore> {
    let gold = gold.unwrap_or("");
    let (f1, exact_match) = match category {
        1 => (multi_hop_f1(prediction, gold), exact_match(prediction, gold)),
        2 | 4 => (token_f1(prediction, gold), exact_match(prediction, gold)),
        3 => {
            let gold = open_domain_gold(gold);
            (token_f1(prediction, gold), exact_match(prediction, gold))
        }
        5 => {
            let refused = is_refusal(prediction);
            (if refused { 1.0 } else { 0.0 }, refused)
        }
        _ => return None,
    };
    Some(LocomoScore { f1, stored: stored_score(category, f1), exact_match })
}

/// The per-question value the official pipeline stores: `round(score, 3)`. For category 1 the
/// score is a NumPy `float64`, whose `round` scales by 1000, rounds half to even and scales back
/// ([`numpy_round3`]); every other score is a Python `float` or `int`, whose `round` gives the
/// decimal nearest to the exact binary value ([`python_round3`]). The two differ on values
/// such as 0.0125 (Python 0.013, NumPy 0.012).
pub fn stored_score(category: u8, score: f64) -> f64 {
    if category == 1 { numpy_round3(score) } else { python_round3(score) }
}

/// Python's `round(x, 3)` on a float: the 3-decimal number nearest to the exact binary value
/// of `x`, ties to even. Rust's fixed-precision formatting is exact and rounds the same way,
/// and parsing the text back gives the nearest double, as CPython does.
pub fn python_round3(value: f64) -> f64 {
    format!("{value:.3}").parse().unwrap_or(value)
}

/// NumPy's `round(x, 3)` on a `float64`: `rint(x * 1000) / 1000`.
pub fn numpy_round3(value: f64) -> f64 {
    (value * 1000.0).round_ties_even() / 1000.0
}

/// Category 3 gold answers often read "Likely yes; because ...": only the part before the first
/// `;` is scored.
pub fn open_domain_gold(gold: &str) -> &str {
    let head = gold.split(';').next().unwrap_or(gold);
    head.trim_matches(is_python_space)
}

/// Category 5: whether the prediction says the information is not in the conversation.
pub fn is_refusal(prediction: &str) -> bool {
    let lower = prediction.to_lowercase();
    REFUSAL_MARKERS.iter().any(|marker| lower.contains(marker))
}

/// The official normalisation, returned as its whitespace-separated tokens (unstemmed).
///
/// In order: delete commas; lowercase; delete ASCII punctuation (Python's `string.punctuation`);
/// replace the whole words `a`, `an`, `the` and `and` with a space; split on whitespace.
pub fn normalized_tokens(text: &str) -> Vec<String> {
    let lowered = text.replace(',', "").to_lowercase();
    let without_punctuation: String =
        lowered.chars().filter(|c| !c.is_ascii_punctuation()).collect();
    let without_articles = remove_articles(&without_punctuation);
    without_articles
        .split(is_python_space)
        .filter(|token| !token.is_empty())
        .map(str::to_string)
        .collect()
}

/// The official normalisation as one string (tokens joined by single spaces).
pub fn normalize_answer(text: &str) -> String {
    normalized_tokens(text).join(" ")
}

/// Normalised, Porter-stemmed tokens: what token F1 compares.
pub fn stemmed_tokens(text: &str) -> Vec<String> {
    normalized_tokens(text).iter().map(|token| porter::stem(token)).collect()
}

/// Token F1 between two answers over the multiset of stemmed tokens (0 when nothing overlaps,
/// which includes an empty side).
pub fn token_f1(prediction: &str, gold: &str) -> f64 {
    f1_of_tokens(&stemmed_tokens(prediction), &stemmed_tokens(gold))
}

/// Category 1 partial credit: split both answers on `,`; each gold part takes its best F1
/// against any prediction part; the score is the mean over gold parts.
pub fn multi_hop_f1(prediction: &str, gold: &str) -> f64 {
    let prediction_parts: Vec<Vec<String>> = prediction
        .split(',')
        .map(|part| stemmed_tokens(part.trim_matches(is_python_space)))
        .collect();
    let gold_parts: Vec<Vec<String>> =
        gold.split(',').map(|part| stemmed_tokens(part.trim_matches(is_python_space))).collect();
    let best_per_gold = gold_parts.iter().map(|gold_part| {
        prediction_parts
            .iter()
            .map(|prediction_part| f1_of_tokens(prediction_part, gold_part))
            .fold(0.0, f64::max)
    });
    // `str.split` always yields at least one part, so the division is by n ≥ 1.
    let best: Vec<f64> = best_per_gold.collect();
    numpy_sum(&best) / best.len() as f64
}

/// The sum `np.mean` takes: NumPy's pairwise summation. Fewer than 8 values are added in order;
/// up to 128 values go into 8 running sums combined as ((s0+s1)+(s2+s3))+((s4+s5)+(s6+s7)),
/// then the remainder is added in order; longer arrays split in two halves (the first a
/// multiple of 8 long) that are summed the same way and added.
fn numpy_sum(values: &[f64]) -> f64 {
    let n = values.len();
    if n < 8 {
        return values.iter().fold(0.0, |sum, value| sum + value);
    }
    if n <= 128 {
        let mut lanes = [0.0f64; 8];
        lanes.copy_from_slice(&values[..8]);
        let whole = n - n % 8;
        for chunk in values[8..whole].chunks_exact(8) {
            for (lane, value) in lanes.iter_mut().zip(chunk) {
                *lane += value;
            }
        }
        let mut sum = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3]))
            + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
        for value in &values[whole..] {
            sum += value;
        }
        return sum;
    }
    let half = n / 2;
    let half = half - half % 8;
    numpy_sum(&values[..half]) + numpy_sum(&values[half..])
}

/// Exact match as the official `exact_match_score`: equal *sets* of normalised tokens (no
/// stemming).
pub fn exact_match(prediction: &str, gold: &str) -> bool {
    let mut prediction_set = normalized_tokens(prediction);
    let mut gold_set = normalized_tokens(gold);
    prediction_set.sort_unstable();
    prediction_set.dedup();
    gold_set.sort_unstable();
    gold_set.dedup();
    prediction_set == gold_set
}

/// Multiset F1 of two token lists, computed as the official code does:
/// precision = overlap/|prediction|, recall = overlap/|gold|, F1 = 2PR/(P+R).
pub fn f1_of_tokens(prediction: &[String], gold: &[String]) -> f64 {
    let overlap = multiset_overlap(prediction, gold);
    if overlap == 0 {
        return 0.0;
    }
    let precision = overlap as f64 / prediction.len() as f64;
    let recall = overlap as f64 / gold.len() as f64;
    (2.0 * precision * recall) / (precision + recall)
}

/// Size of the multiset intersection (Python's `Counter & Counter`), by sorting and merging.
fn multiset_overlap(left: &[String], right: &[String]) -> usize {
    let mut left: Vec<&str> = left.iter().map(String::as_str).collect();
    let mut right: Vec<&str> = right.iter().map(String::as_str).collect();
    left.sort_unstable();
    right.sort_unstable();
    let (mut i, mut j, mut overlap) = (0, 0, 0);
    while i < left.len() && j < right.len() {
        match left[i].cmp(right[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                overlap += 1;
                i += 1;
                j += 1;
            }
        }
    }
    overlap
}

/// `regex.sub(r'\b(a|an|the|and)\b', ' ', text)` with the Python `regex` module's Unicode
/// word boundary. The `regex` crate's `\b` uses the same Unicode definition of a word character
/// (letters and other alphabetic characters, combining marks, decimal digits, connector
/// punctuation such as `_` or `‿`, and the zero-width joiner and non-joiner), so an article
/// next to any of those is part of a longer word and stays. Leftmost-first alternation and
/// non-overlapping replacement match the Python semantics.
fn remove_articles(text: &str) -> std::borrow::Cow<'_, str> {
    match &*ARTICLES {
        Some(articles) => articles.replace_all(text, " "),
        None => std::borrow::Cow::Borrowed(text),
    }
}

/// The article pattern, `\b(?:a|an|the|and)\b` from [`LOCOMO_ARTICLES`]; compiled once. The
/// words are plain letters, so the pattern is always valid and `None` (a failed compile) cannot
/// happen; the scorer would then leave articles in place rather than panic.
static ARTICLES: std::sync::LazyLock<Option<regex::Regex>> = std::sync::LazyLock::new(|| {
    regex::Regex::new(&format!(r"\b(?:{})\b", LOCOMO_ARTICLES.join("|"))).ok()
});

/// Python's `str.split()` / `str.strip()` whitespace: Unicode White_Space plus the ASCII
/// information separators U+001C–U+001F, which Python also splits on.
fn is_python_space(character: char) -> bool {
    character.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&character)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_normalize(input: &str, expected: &str) {
        assert_eq!(normalize_answer(input), expected, "normalize_answer({input:?})");
    }

    fn check_score(category: u8, prediction: &str, gold: &str, f1: f64, exact: bool) {
        let score = score_locomo(category, prediction, Some(gold)).unwrap();
        assert!(
            (score.f1 - f1).abs() < 1e-12,
            "cat {category} {prediction:?} vs {gold:?}: f1 {} != {f1}",
            score.f1
        );
        assert_eq!(
            score.exact_match, exact,
            "cat {category} {prediction:?} vs {gold:?}: exact match"
        );
    }

    #[test]
    fn normalisation_order_and_rules() {
        // Commas vanish before anything else, so "1,000" is one token.
        check_normalize("1,000 dollars", "1000 dollars");
        // Other punctuation is deleted, not turned into a space.
        check_normalize("Mother's day", "mothers day");
        check_normalize("self-care", "selfcare");
        // Articles and "and" go as whole words only, in any case.
        check_normalize("The Cat AND the Hat", "cat hat");
        check_normalize("Andrew and Anna", "andrew anna");
        check_normalize("a, an, the", "");
        // Punctuation removal can expose an article: "a." becomes "a", then goes.
        check_normalize("Plan a.", "plan");
        // Non-ASCII punctuation stays and separates words for the article rule.
        check_normalize("the—end", "—end");
        check_normalize("café the", "café");
        check_normalize("  lots\tof \n space ", "lots of space");
    }

    #[test]
    fn token_f1_is_multiset_over_stems() {
        check_score(4, "painting", "paintings", 1.0, false);
        // Repeated tokens count once per occurrence on each side.
        check_score(
            4,
            "red red blue",
            "red blue blue",
            2.0 * (2.0 / 3.0) * (2.0 / 3.0) / (4.0 / 3.0),
            true,
        );
        check_score(2, "7 May 2023", "May 7, 2023", 1.0, true);
        check_score(4, "nothing in common", "different words", 0.0, false);
        check_score(4, "", "something", 0.0, false);
        check_score(4, "", "", 0.0, true);
    }

    #[test]
    fn category_1_splits_on_commas_and_averages_over_gold_parts() {
        // Gold parts: "hiking" (1.0 against pred part "hiking"), "swimming" (0).
        check_score(1, "hiking, painting", "hiking, swimming", 0.5, false);
        // A prediction without commas is one part scored against each gold part.
        check_score(1, "hiking and swimming", "hiking, swimming", 2.0 * 0.5 / 1.5, true);
        // A trailing comma makes an empty gold part that scores 0.
        check_score(1, "hiking", "hiking,", 0.5, true);
    }

    #[test]
    fn category_3_cuts_gold_at_first_semicolon() {
        check_score(3, "Likely yes", "Likely yes; because she loves it", 1.0, true);
        check_score(3, "because she loves it", "Likely yes; because she loves it", 0.0, false);
    }

    #[test]
    fn category_5_checks_refusal_case_insensitively() {
        check_score(5, "Not mentioned in the conversation", "", 1.0, true);
        check_score(5, "NO INFORMATION AVAILABLE.", "", 1.0, true);
        check_score(5, "Melanie went to Paris", "", 0.0, false);
        assert_eq!(
            score_locomo(5, "not mentioned", None),
            Some(LocomoScore { f1: 1.0, stored: 1.0, exact_match: true })
        );
    }

    #[test]
    fn article_pattern_compiles() {
        assert!(ARTICLES.is_some());
    }

    #[test]
    fn unicode_word_characters_protect_an_article() {
        // Combining mark, zero-width joiner / non-joiner and connector punctuation are word
        // characters for `\b`: the article is part of a longer word and stays.
        check_normalize("the\u{301} cat", "the\u{301} cat");
        check_normalize("the\u{200d} cat", "the\u{200d} cat");
        check_normalize("\u{200c}an apple", "\u{200c}an apple");
        check_normalize("the\u{203f} end", "the\u{203f} end");
        // A superscript digit (No) and a middle dot are not word characters: the article goes.
        check_normalize("the\u{b2}", "\u{b2}");
        check_normalize("the\u{b7}x", "\u{b7}x");
    }

    #[test]
    fn stored_scores_round_as_python_and_numpy_do() {
        assert_eq!(python_round3(0.0125), 0.013);
        assert_eq!(numpy_round3(0.0125), 0.012);
        assert_eq!(python_round3(0.0625), 0.062);
        assert_eq!(python_round3(2.0 / 3.0), 0.667);
        assert_eq!(stored_score(1, 0.0125), 0.012);
        assert_eq!(stored_score(4, 0.0125), 0.013);
    }

    #[test]
    fn numpy_sum_uses_pairwise_lanes() {
        let values: Vec<f64> = (0..20).map(|i| 0.1 * f64::from(i) + 1e-3).collect();
        let mut lanes = [0.0f64; 8];
        lanes.copy_from_slice(&values[..8]);
        for (lane, value) in lanes.iter_mut().zip(&values[8..16]) {
            *lane += value;
        }
        let mut expected = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3]))
            + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
        for value in &values[16..] {
            expected += value;
        }
        assert_eq!(numpy_sum(&values).to_bits(), expected.to_bits());
        assert_eq!(numpy_sum(&[0.1, 0.2, 0.3]), 0.1 + 0.2 + 0.3);
    }

    #[test]
    fn unknown_category_is_not_scored() {
        assert_eq!(score_locomo(6, "x", Some("x")), None);
    }
}
