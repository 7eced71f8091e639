//! Per-step completion budgets: every request the pipeline sends carries a `max_tokens` sized
//! to its step, so a rambling model stops at a bound instead of running to the end of its
//! context (and past the timeout, while the server keeps generating for an abandoned request).
//!
//! The defaults leave room for models that think before they answer; override them with
//! `--max-tokens STEP=N,STEP=N` (or `MRAGENT_MAX_TOKENS`), where `N` is a token count or `none`
//! for no cap. Callers read the budget from the model they call
//! ([`ChatModel::max_tokens`](super::ChatModel::max_tokens)), so it needs no plumbing.

use std::fmt;
use std::str::FromStr;

/// A kind of model call, each with its own completion budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Step {
    /// Ingest stage 1: dialogue turns rewritten into dated sentences, topics and facts.
    Rewrite,
    /// Ingest stage 2: cue words per sentence.
    Keywords,
    /// MemGAS summary and keyword granules per session.
    Granules,
    /// Keywords and date window of a question.
    QuestionKeywords,
    /// LLM re-ranking of retrieved sentences.
    Rerank,
    /// Scoring a key's tags.
    TagScores,
    /// Every round of the answering loop (tool calls and the final answer).
    Answer,
    /// The LLM judge.
    Judge,
    /// `mragent learn`'s attempt reviews, rule proposals and consolidations.
    Learn,
    /// `mragent ping`.
    Ping,
    /// Whether new personal facts replace older ones (own memory).
    Facts,
}

impl Step {
    /// Every step, in a fixed order.
    pub const ALL: [Step; 11] = [
        Step::Rewrite,
        Step::Keywords,
        Step::Granules,
        Step::QuestionKeywords,
        Step::Rerank,
        Step::TagScores,
        Step::Answer,
        Step::Judge,
        Step::Learn,
        Step::Ping,
        Step::Facts,
    ];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Step::Rewrite => "rewrite",
            Step::Keywords => "keywords",
            Step::Granules => "granules",
            Step::QuestionKeywords => "question_keywords",
            Step::Rerank => "rerank",
            Step::TagScores => "tag_scores",
            Step::Answer => "answer",
            Step::Judge => "judge",
            Step::Learn => "learn",
            Step::Ping => "ping",
            Step::Facts => "facts",
        }
    }

    /// The default budget of this step.
    pub fn default_budget(self) -> u32 {
        match self {
            Step::Rewrite => 8192,
            Step::Keywords | Step::Granules => 4096,
            Step::QuestionKeywords | Step::TagScores | Step::Judge => 512,
            Step::Rerank | Step::Facts => 1024,
            Step::Answer | Step::Learn => 2048,
            Step::Ping => 64,
        }
    }

    /// The step a structured call belongs to, by its schema's name: the step's own name, or
    /// `memgas_granules` (granules) and `judge_verdict` (judge). Lets a helper shared by
    /// several steps size each request with one line.
    pub fn for_schema(schema_name: &str) -> Option<Step> {
        match schema_name {
            "memgas_granules" => Some(Step::Granules),
            "judge_verdict" => Some(Step::Judge),
            other => Step::ALL.into_iter().find(|step| step.name() == other),
        }
    }

    pub(crate) fn index(self) -> usize {
        Step::ALL.iter().position(|step| *step == self).unwrap_or(0)
    }
}

impl FromStr for Step {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let wanted = text.trim().to_ascii_lowercase().replace('-', "_");
        Step::ALL.into_iter().find(|step| step.name() == wanted).ok_or_else(|| {
            let names: Vec<&str> = Step::ALL.iter().map(|step| step.name()).collect();
            format!("unknown step `{}` (steps: {})", text.trim(), names.join(", "))
        })
    }
}

/// The `max_tokens` of every step (`None`: no cap for that step).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenBudget {
    caps: [Option<u32>; Step::ALL.len()],
}

impl Default for TokenBudget {
    fn default() -> Self {
        let mut caps = [None; Step::ALL.len()];
        for step in Step::ALL {
            caps[step.index()] = Some(step.default_budget());
        }
        Self { caps }
    }
}

impl TokenBudget {
    /// The cap for `step`.
    pub fn get(&self, step: Step) -> Option<u32> {
        self.caps[step.index()]
    }

    /// Set the cap for `step` (`None`: no cap).
    pub fn set(&mut self, step: Step, cap: Option<u32>) {
        self.caps[step.index()] = cap;
    }

    /// The defaults with `overrides` applied: `STEP=N` pairs separated by commas, `N` a
    /// positive token count or `none`. An empty string changes nothing.
    pub fn with_overrides(overrides: &str) -> Result<Self, String> {
        let mut budget = Self::default();
        for pair in overrides.split(',').map(str::trim).filter(|pair| !pair.is_empty()) {
            let (step, value) = pair
                .split_once('=')
                .ok_or_else(|| format!("expected STEP=N in --max-tokens, got `{pair}`"))?;
            let step: Step = step.parse()?;
            let value = value.trim();
            let cap = if value.eq_ignore_ascii_case("none") {
                None
            } else {
                match value.parse::<u32>() {
                    Ok(tokens) if tokens > 0 => Some(tokens),
                    _ => {
                        return Err(format!(
                            "--max-tokens {}: expected a positive token count or `none`, got `{value}`",
                            step.name()
                        ));
                    }
                }
            };
            budget.set(step, cap);
        }
        Ok(budget)
    }
}

impl FromStr for TokenBudget {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        Self::with_overrides(text)
    }
}

impl fmt::Display for TokenBudget {
    /// `rewrite=8192,keywords=4096,…` (`none` for an uncapped step): parses back to itself.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pairs: Vec<String> = Step::ALL
            .iter()
            .map(|step| match self.get(*step) {
                Some(cap) => format!("{}={cap}", step.name()),
                None => format!("{}=none", step.name()),
            })
            .collect();
        f.write_str(&pairs.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_cover_every_step() {
        let budget = TokenBudget::default();
        for step in Step::ALL {
            assert_eq!(budget.get(step), Some(step.default_budget()), "{step:?}");
            assert_eq!(step.name().parse::<Step>(), Ok(step));
        }
        assert_eq!(budget.to_string().parse::<TokenBudget>(), Ok(budget));
        assert_eq!(Step::for_schema("rewrite"), Some(Step::Rewrite));
        assert_eq!(Step::for_schema("memgas_granules"), Some(Step::Granules));
        assert_eq!(Step::for_schema("judge_verdict"), Some(Step::Judge));
        assert_eq!(Step::for_schema("tag_scores"), Some(Step::TagScores));
        assert_eq!(Step::for_schema("something_else"), None);
    }

    #[test]
    fn overrides_apply_and_bad_ones_say_why() {
        let budget =
            TokenBudget::with_overrides(" rewrite=4000, answer=none,tag-scores=99").unwrap();
        assert_eq!(budget.get(Step::Rewrite), Some(4000));
        assert_eq!(budget.get(Step::Answer), None);
        assert_eq!(budget.get(Step::TagScores), Some(99));
        assert_eq!(budget.get(Step::Judge), Some(Step::Judge.default_budget()));
        assert_eq!(TokenBudget::with_overrides(""), Ok(TokenBudget::default()));
        let unknown = TokenBudget::with_overrides("rewrit=5").unwrap_err();
        assert!(
            unknown.contains("unknown step `rewrit`") && unknown.contains("rerank"),
            "{unknown}"
        );
        assert!(TokenBudget::with_overrides("answer").unwrap_err().contains("STEP=N"));
        assert!(TokenBudget::with_overrides("answer=0").unwrap_err().contains("positive"));
        assert!(TokenBudget::with_overrides("answer=-3").is_err());
    }
}
