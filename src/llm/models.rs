//! Model names: the short aliases users of the Python reference type (`--model gemini`) and an
//! approximate price table so a run can estimate its cost from token usage.
//!
//! Prices are approximate public list prices (USD per million tokens, OpenRouter / provider
//! pages) as of 2025-11; providers change them, so treat estimates as indicative only.

use super::Usage;

/// The date the price table was last checked against public list prices.
pub const PRICES_CHECKED: &str = "2025-11";

/// Aliases and the model ids they stand for (OpenRouter naming).
const ALIASES: &[(&str, &str)] = &[
    ("gemini", "google/gemini-2.5-flash"),
    ("claude", "anthropic/claude-sonnet-4.5"),
    ("gpt4o", "openai/gpt-4o"),
    ("gpt4omini", "openai/gpt-4o-mini"),
    ("gpt4.1mini", "openai/gpt-4.1-mini"),
    ("qwen", "qwen/qwen3-max"),
];

/// Price of a model in USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelPrice {
    /// USD per million prompt (input) tokens.
    pub prompt_per_million: f64,
    /// USD per million completion (output) tokens.
    pub completion_per_million: f64,
}

impl ModelPrice {
    /// Estimated cost in USD of the given usage.
    pub fn cost_usd(&self, usage: Usage) -> f64 {
        (usage.prompt_tokens as f64 * self.prompt_per_million
            + usage.completion_tokens as f64 * self.completion_per_million)
            / 1_000_000.0
    }
}

/// Approximate list prices, keyed by resolved model id (see [`PRICES_CHECKED`]).
const PRICES: &[(&str, ModelPrice)] = &[
    ("google/gemini-2.5-flash", price(0.30, 2.50)),
    ("anthropic/claude-sonnet-4.5", price(3.00, 15.00)),
    ("openai/gpt-4o", price(2.50, 10.00)),
    ("openai/gpt-4o-mini", price(0.15, 0.60)),
    ("openai/gpt-4.1-mini", price(0.40, 1.60)),
    ("qwen/qwen3-max", price(1.20, 6.00)),
    ("openai/text-embedding-3-small", price(0.02, 0.0)),
    ("openai/text-embedding-3-large", price(0.13, 0.0)),
];

const fn price(prompt_per_million: f64, completion_per_million: f64) -> ModelPrice {
    ModelPrice { prompt_per_million, completion_per_million }
}

/// The model id an alias stands for; any other string is returned unchanged (trimmed).
pub fn resolve_model_alias(name: &str) -> String {
    let name = name.trim();
    ALIASES
        .iter()
        .find(|(alias, _)| alias.eq_ignore_ascii_case(name))
        .map_or_else(|| name.to_owned(), |(_, id)| (*id).to_owned())
}

/// The list price of a model (alias or id), when known. Ids without a provider prefix (as a
/// direct OpenAI endpoint names them, e.g. `gpt-4o`) match the `openai/` entry.
pub fn model_price(name: &str) -> Option<ModelPrice> {
    let id = resolve_model_alias(name);
    let lookup = |id: &str| PRICES.iter().find(|(known, _)| *known == id).map(|(_, price)| *price);
    lookup(&id).or_else(|| if id.contains('/') { None } else { lookup(&format!("openai/{id}")) })
}

/// Estimated cost in USD of `usage` on `model`, when its price is known.
pub fn estimate_cost_usd(model: &str, usage: Usage) -> Option<f64> {
    model_price(model).map(|price| price.cost_usd(usage))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_resolve_and_others_pass_through() {
        let check = |input: &str, expected: &str| assert_eq!(resolve_model_alias(input), expected);
        check("gemini", "google/gemini-2.5-flash");
        check("claude", "anthropic/claude-sonnet-4.5");
        check("gpt4o", "openai/gpt-4o");
        check("gpt4omini", "openai/gpt-4o-mini");
        check("gpt4.1mini", "openai/gpt-4.1-mini");
        check("qwen", "qwen/qwen3-max");
        check("meta-llama/llama-3.1-8b-instruct", "meta-llama/llama-3.1-8b-instruct");
        check(" Gemini ", "google/gemini-2.5-flash");
    }

    #[test]
    fn cost_estimate_uses_per_million_prices() {
        let usage = Usage { prompt_tokens: 2_000_000, completion_tokens: 100_000 };
        let cost = estimate_cost_usd("gpt4omini", usage).unwrap();
        assert!((cost - (0.30 + 0.06)).abs() < 1e-9, "{cost}");
        assert_eq!(model_price("gpt-4o"), model_price("openai/gpt-4o"));
        assert!(estimate_cost_usd("some/unknown-model", usage).is_none());
    }
}
