//! Category-aware question preparation: the text the model sees and the loop settings that
//! depend on the category.
//!
//! LoCoMo categories (spec §3.1, §9.6): multi-hop (1) asks for facts only; temporal (2) explains
//! how to resolve dates from the conversation time and turns on the time nudge before the last
//! tool round; open-domain (3) allows inferred answers, said in the question's own text (the
//! system prompt is the same for every question so that provider prompt caching applies);
//! adversarial (5) offers two options, "Not mentioned in the conversation" and the distractor, in
//! an order drawn from a seeded coin per question (the reference's coin was unseeded). LongMemEval
//! temporal-reasoning questions get `current_date` from the question date, as in the reference;
//! other question types get none; questions about own conversations always get today's date. Pure functions, no IO.

use sha2::{Digest, Sha256};

use crate::dataset::{Category, DatasetKind, Question};
use crate::prompts;

/// The answer option that says the conversation does not hold the answer. Kept verbatim: the
/// LoCoMo category-5 scorers look for "not mentioned" in the prediction.
pub const NOT_MENTIONED: &str = "Not mentioned in the conversation";

/// The LongMemEval question type that is told today's date.
const TEMPORAL_REASONING: &str = "temporal-reasoning";

/// A question prepared for the loop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreparedQuestion {
    /// The question as the loop's model sees it, category instructions included.
    pub text: String,
    /// The question for retrieval calls (keywords, re-rank, tag scores): without the
    /// instructions, which would only add noise (the temporal instructions even contain a date),
    /// but with the category-5 options, whose words are worth searching for.
    pub search_text: String,
    /// Remind the model to resolve dates before the last tool round.
    pub time_nudge: bool,
    /// Today's date for the model (`YYYY-MM-DD`), LongMemEval only.
    pub current_date: Option<String>,
    /// Category 5: whether "not mentioned" is the first option (recorded in traces).
    pub not_mentioned_first: Option<bool>,
}

/// Prepares `question` of a `dataset` conversation; `seed` fixes the category-5 option order.
pub fn prepare(question: &Question, dataset: DatasetKind, seed: u64) -> PreparedQuestion {
    let base = question.question.trim().to_string();
    let mut prepared = PreparedQuestion {
        text: base.clone(),
        search_text: base.clone(),
        time_nudge: false,
        current_date: None,
        not_mentioned_first: None,
    };
    match (&question.category, dataset) {
        (Category::Locomo(1), _) => prepared.text = join(&base, prompts::ANSWER_MULTI_HOP.text),
        (Category::Locomo(2), _) => {
            prepared.text = join(&base, prompts::ANSWER_TEMPORAL.text);
            prepared.time_nudge = true;
        }
        (Category::Locomo(3), _) => {
            prepared.text = join(&base, prompts::ANSWER_OPEN_DOMAIN.text);
        }
        (Category::Locomo(5), _) => {
            let distractor = question
                .adversarial_answer
                .as_deref()
                .or(question.answer.as_deref())
                .unwrap_or("")
                .trim();
            if !distractor.is_empty() {
                let first = coin(seed, &question.id);
                let (a, b) =
                    if first { (NOT_MENTIONED, distractor) } else { (distractor, NOT_MENTIONED) };
                let options = prompts::ANSWER_ADVERSARIAL
                    .render(&[("first", a), ("second", b)])
                    .unwrap_or_else(|_| format!("Choose \"{a}\" or \"{b}\"."));
                prepared.text = join(&base, &options);
                prepared.search_text = prepared.text.clone();
                prepared.not_mentioned_first = Some(first);
            }
        }
        _ => {}
    }
    // The reference gives today's date to temporal-reasoning questions only; a question about
    // an own conversation is asked now, so it always gets today's date.
    if dataset == DatasetKind::Own
        || (dataset == DatasetKind::LongMemEval
            && question.category == Category::LongMemEval(TEMPORAL_REASONING.into()))
    {
        prepared.current_date = question.question_date.as_deref().and_then(date_of);
    }
    prepared
}

/// A fair coin per (seed, question): the first bit of SHA-256 over both. Deterministic across
/// runs, machines and worker interleavings.
fn coin(seed: u64, question_id: &str) -> bool {
    let digest = Sha256::digest(format!("{seed}:{question_id}").as_bytes());
    digest[0] & 1 == 1
}

fn join(question: &str, suffix: &str) -> String {
    format!("{question} {}", suffix.split_whitespace().collect::<Vec<_>>().join(" "))
}

/// `2023/05/20 (Sat) 02:21` (LongMemEval) or `2023-05-20…` → `2023-05-20`.
pub fn date_of(text: &str) -> Option<String> {
    let first = text.split_whitespace().next()?.replace('/', "-");
    chrono::NaiveDate::parse_from_str(&first, "%Y-%m-%d").ok().map(|date| date.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn question(id: &str, category: Category) -> Question {
        Question {
            id: id.into(),
            sample_id: "conv-1".into(),
            question: "What did Caroline paint?".into(),
            answer: None,
            adversarial_answer: Some("A sunset".into()),
            category,
            evidence: Vec::new(),
            question_date: Some("2023/05/20 (Sat) 02:21".into()),
        }
    }

    #[test]
    fn categories_shape_the_question() {
        let temporal = prepare(&question("q", Category::Locomo(2)), DatasetKind::Locomo, 1);
        assert!(temporal.time_nudge && temporal.text.contains("query_conversation_time"));
        assert_eq!(temporal.search_text, "What did Caroline paint?");
        let adversarial = prepare(&question("q", Category::Locomo(5)), DatasetKind::Locomo, 1);
        assert_eq!(adversarial.search_text, adversarial.text);
        let open = prepare(&question("q", Category::Locomo(3)), DatasetKind::Locomo, 1);
        assert!(open.text.contains("inference"), "{}", open.text);
        let single = prepare(&question("q", Category::Locomo(4)), DatasetKind::Locomo, 1);
        assert_eq!(single.text, "What did Caroline paint?");
        assert_eq!(single.current_date, None);
        let lm = prepare(
            &question("q", Category::LongMemEval("temporal-reasoning".into())),
            DatasetKind::LongMemEval,
            1,
        );
        assert_eq!(lm.current_date.as_deref(), Some("2023-05-20"));
        // Only temporal-reasoning questions are told the date, as in the reference.
        for other in ["single-session-user", "multi-session", "knowledge-update"] {
            let lm = prepare(
                &question("q", Category::LongMemEval(other.into())),
                DatasetKind::LongMemEval,
                1,
            );
            assert_eq!(lm.current_date, None, "{other}");
        }
    }

    #[test]
    fn adversarial_options_follow_a_seeded_coin() {
        let orders: Vec<bool> = (0..40)
            .map(|index| {
                let prepared = prepare(
                    &question(&format!("conv-1:q{index}"), Category::Locomo(5)),
                    DatasetKind::Locomo,
                    66,
                );
                assert!(
                    prepared.text.contains(NOT_MENTIONED) && prepared.text.contains("A sunset")
                );
                let first = prepared.text.find(NOT_MENTIONED) < prepared.text.find("A sunset");
                assert_eq!(prepared.not_mentioned_first, Some(first));
                first
            })
            .collect();
        // Both orders occur, and the same seed gives the same orders.
        assert!(orders.iter().any(|&first| first) && orders.iter().any(|&first| !first));
        let again: Vec<bool> = (0..40)
            .map(|index| {
                prepare(
                    &question(&format!("conv-1:q{index}"), Category::Locomo(5)),
                    DatasetKind::Locomo,
                    66,
                )
                .not_mentioned_first
                .unwrap_or_default()
            })
            .collect();
        assert_eq!(orders, again);
    }
}
