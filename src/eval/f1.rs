//! The official LoCoMo answer scorer (snap-research/LoCoMo `task_eval/evaluation.py`),
//! re-implemented rule for rule: normalisation, Porter-stemmed multiset token F1, exact match,
//! and the per-category rules (1: comma-split partial credit, 3: gold cut at `;`, 5: refusal
//! check).
//!
//! Pure and synchronous: strings in, numbers out. Where the official code leans on Python
//! semantics (`str.lower`, `str.split`, the regex `\b`), the Python behaviour is reproduced and
//! the comment says how.

use super::porter;

/// Score of one answer under the LoCoMo rules.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LocomoScore {
    /// The official per-question score in [0, 1] (token F1, or 0/1 for category 5).
    pub f1: f64,
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
    let score = match category {
        1 => LocomoScore {
            f1: multi_hop_f1(prediction, gold),
            exact_match: exact_match(prediction, gold),
        },
        2 | 4 => LocomoScore {
            f1: token_f1(prediction, gold),
            exact_match: exact_match(prediction, gold),
        },
        3 => {
            let gold = open_domain_gold(gold);
            LocomoScore {
                f1: token_f1(prediction, gold),
                exact_match: exact_match(prediction, gold),
            }
        }
        5 => {
            let refused = is_refusal(prediction);
            LocomoScore { f1: if refused { 1.0 } else { 0.0 }, exact_match: refused }
        }
        _ => return None,
    };
    Some(score)
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
    best_per_gold.sum::<f64>() / gold_parts.len() as f64
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

/// `re.sub(r'\b(a|an|the|and)\b', ' ', text)`: the four words are all word characters, so a
/// match is exactly a maximal run of word characters equal to one of them.
fn remove_articles(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut run_start: Option<usize> = None;
    for (index, character) in text.char_indices() {
        if is_python_word_char(character) {
            run_start.get_or_insert(index);
        } else {
            if let Some(start) = run_start.take() {
                push_word(&mut out, &text[start..index]);
            }
            out.push(character);
        }
    }
    if let Some(start) = run_start {
        push_word(&mut out, &text[start..]);
    }
    out
}

fn push_word(out: &mut String, word: &str) {
    if matches!(word, "a" | "an" | "the" | "and") {
        out.push(' ');
    } else {
        out.push_str(word);
    }
}

/// Python's regex `\w` on `str`: alphanumeric (letters and numbers) or `_`. Rust's
/// `is_alphanumeric` also counts the few combining marks with the Other_Alphabetic property;
/// that can only matter for such a mark written directly against an article.
fn is_python_word_char(character: char) -> bool {
    character.is_alphanumeric() || character == '_'
}

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
            Some(LocomoScore { f1: 1.0, exact_match: true })
        );
    }

    #[test]
    fn unknown_category_is_not_scored() {
        assert_eq!(score_locomo(6, "x", Some("x")), None);
    }
}
