//! Splitting text into words, and the content words of fusion's word channel.

use super::stop_words::{CHAT_STOP_WORDS, ENGLISH_STOP_WORDS};

/// The non-empty runs of letters and digits of `text`, as written, in order.
pub fn alphanumeric_runs(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !c.is_alphanumeric()).filter(|run| !run.is_empty())
}

/// The lowercase words of `text`: its [`alphanumeric_runs`] lowercased, in order, with repeats.
pub fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    alphanumeric_runs(text).map(str::to_lowercase)
}

/// The runs of letters, digits and apostrophes of `text`, apostrophes trimmed from both ends
/// (`Mel's` stays whole, `'cause'` becomes `cause`), as written and non-empty, in order.
pub fn apostrophe_words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '\''))
        .map(|word| word.trim_matches('\''))
        .filter(|word| !word.is_empty())
}

/// The distinct content words of `text`, sorted: its [`apostrophe_words`] lowercased, at least
/// three characters with a letter, minus [`ENGLISH_STOP_WORDS`] and [`CHAT_STOP_WORDS`]. What
/// fusion's word channel gives a vector and matches by (`retrieval::index::words`).
pub fn content_words(text: &str) -> Vec<String> {
    let mut words: Vec<String> = apostrophe_words(text)
        .map(str::to_lowercase)
        .filter(|word| {
            word.chars().count() >= 3
                && word.chars().any(char::is_alphabetic)
                && !ENGLISH_STOP_WORDS.contains(&word.as_str())
                && !CHAT_STOP_WORDS.contains(&word.as_str())
        })
        .collect();
    words.sort_unstable();
    words.dedup();
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_words_are_lowercase_distinct_and_skip_fillers_and_numbers() {
        assert_eq!(
            content_words("Yeah, I play VIOLIN & violin; Mel's 2 cats, 2023!"),
            vec!["cats", "mel's", "play", "violin"]
        );
        assert!(content_words("wow, thanks so much").is_empty());
    }

    #[test]
    fn words_split_on_anything_but_letters_and_digits() {
        assert_eq!(
            alphanumeric_runs("Mel's  café, 2023!").collect::<Vec<_>>(),
            ["Mel", "s", "café", "2023"]
        );
        assert_eq!(words("PAINT-ed").collect::<Vec<_>>(), ["paint", "ed"]);
        assert_eq!(apostrophe_words("'Mel's' -- cats'").collect::<Vec<_>>(), ["Mel's", "cats"]);
    }
}
