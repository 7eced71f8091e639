//! What a `learn` run will send, estimated before anything is sent, from the fold sizes and
//! the settings, and priced with the known model prices.
//!
//! Per-call figures (an upper bound: it assumes every batch question has mixed outcomes, so
//! every attempt is reviewed and every question proposes):
//! - one answered question: 5 requests, 10,605 prompt and 420 completion tokens (the measured
//!   scripted conv-30 workload of `docs/benchmarks.md`: 10,272 requests for 1,986 questions and
//!   their build; completion at the 4 % of prompt tokens a real llama.cpp run measured);
//! - one judgement: 1 request, 450 prompt + 60 completion tokens (the judge prompt with a
//!   question, gold and answer);
//! - one attempt review: 1 request, 3,000 + 250 (the condensed trajectory is cut to 8,000
//!   characters);
//! - one proposal: 1 request, 2,500 + 250 (the review of each attempt and the rules);
//! - one consolidation per step: 1 request, 4,000 + 600.

use serde::Serialize;

use crate::llm::Usage;
use crate::llm::models::estimate_cost_usd;

/// Calls and tokens of one kind of work.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Work {
    /// Requests.
    pub requests: u64,
    /// Tokens.
    pub usage: Usage,
}

impl Work {
    const fn per(requests: u64, prompt: u64, completion: u64) -> Self {
        Self { requests, usage: Usage { prompt_tokens: prompt, completion_tokens: completion } }
    }

    fn times(self, n: u64) -> Self {
        Self {
            requests: self.requests * n,
            usage: Usage {
                prompt_tokens: self.usage.prompt_tokens * n,
                completion_tokens: self.usage.completion_tokens * n,
            },
        }
    }

    fn plus(self, other: Self) -> Self {
        let mut usage = self.usage;
        usage += other.usage;
        Self { requests: self.requests + other.requests, usage }
    }
}

const QUESTION: Work = Work::per(5, 10_605, 420);
const JUDGEMENT: Work = Work::per(1, 450, 60);
const REVIEW: Work = Work::per(1, 3_000, 250);
const PROPOSAL: Work = Work::per(1, 2_500, 250);
const CONSOLIDATION: Work = Work::per(1, 4_000, 600);

/// The sizes an estimate is made from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Folds that will run.
    pub folds: u64,
    /// Learning steps per fold.
    pub steps: u64,
    /// Questions per batch.
    pub batch: u64,
    /// Attempts per question.
    pub samples: u64,
    /// Validation questions per fold.
    pub validation: u64,
    /// Held-out questions over the folds that run (answered twice: with and without rules).
    pub test: u64,
}

/// The estimate, by kind of work.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Estimate {
    /// Rollouts (answer model).
    pub rollouts: Work,
    /// Judgements of rollouts and validation answers (judge model).
    pub judgements: Work,
    /// Reviews, proposals and consolidations (answer model).
    pub learning: Work,
    /// Validation answers (answer model).
    pub validation: Work,
    /// Test answers with and without the rules (answer model).
    pub test: Work,
    /// All answer-model work.
    pub answer_model: Work,
    /// Estimated USD for the answer model, when its price is known.
    pub answer_cost_usd: Option<f64>,
    /// Estimated USD for the judge, when its price is known.
    pub judge_cost_usd: Option<f64>,
}

impl Estimate {
    /// The estimate for `shape`, priced for these models.
    pub fn new(shape: Shape, answer_model: &str, judge_model: &str) -> Self {
        let attempts = shape.folds * shape.steps * shape.batch * shape.samples;
        // Step 0 (no rules) is validated too.
        let validations = shape.folds * (shape.steps + 1) * shape.validation;
        let rollouts = QUESTION.times(attempts);
        let judgements = JUDGEMENT.times(attempts + validations);
        let learning = REVIEW
            .times(attempts)
            .plus(PROPOSAL.times(shape.folds * shape.steps * shape.batch))
            .plus(CONSOLIDATION.times(shape.folds * shape.steps));
        let validation = QUESTION.times(validations);
        let test = QUESTION.times(2 * shape.test);
        let answer = rollouts.plus(learning).plus(validation).plus(test);
        Self {
            rollouts,
            judgements,
            learning,
            validation,
            test,
            answer_model: answer,
            answer_cost_usd: estimate_cost_usd(answer_model, answer.usage),
            judge_cost_usd: estimate_cost_usd(judge_model, judgements.usage),
        }
    }

    /// Every request and token, both models.
    pub fn total(&self) -> Work {
        self.answer_model.plus(self.judgements)
    }

    /// The priced total, when both prices are known.
    pub fn cost_usd(&self) -> Option<f64> {
        Some(self.answer_cost_usd? + self.judge_cost_usd?)
    }

    /// The estimate as a table for the terminal.
    pub fn table(&self) -> String {
        let mut out =
            String::from("work                 requests   prompt tokens   completion tokens\n");
        for (name, work) in [
            ("rollouts", self.rollouts),
            ("reviews+proposals", self.learning),
            ("validation answers", self.validation),
            ("test answers", self.test),
            ("judgements", self.judgements),
            ("total", self.total()),
        ] {
            out.push_str(&format!(
                "{name:<20} {:>9} {:>15} {:>19}\n",
                work.requests, work.usage.prompt_tokens, work.usage.completion_tokens
            ));
        }
        let price = |cost: Option<f64>| cost.map_or("unknown".to_string(), |c| format!("${c:.2}"));
        out.push_str(&format!(
            "estimated cost: {} (answer model {}, judge {}); an upper bound: it assumes every question has mixed outcomes",
            price(self.cost_usd()),
            price(self.answer_cost_usd),
            price(self.judge_cost_usd)
        ));
        if self.cost_usd().is_none() {
            out.push_str("\nno price is known for a model: bound the run with --max-tokens-total");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_estimate_counts_every_kind_of_call() {
        let shape = Shape { folds: 1, steps: 2, batch: 10, samples: 3, validation: 5, test: 20 };
        let estimate = Estimate::new(shape, "unknown-model", "unknown-judge");
        // 60 attempts, 15 validation answers (3 rule sets × 5), 40 test answers.
        assert_eq!(estimate.rollouts.requests, 60 * 5);
        assert_eq!(estimate.judgements.requests, 60 + 15);
        assert_eq!(estimate.learning.requests, 60 + 20 + 2);
        assert_eq!(estimate.validation.requests, 15 * 5);
        assert_eq!(estimate.test.requests, 40 * 5);
        assert_eq!(estimate.total().requests, 300 + 75 + 82 + 75 + 200);
        assert_eq!(estimate.cost_usd(), None);
        assert!(estimate.table().contains("--max-tokens-total"));
    }
}
