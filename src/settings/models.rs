//! Endpoint, key, models and limits: [`ModelSettings`] from the model arguments and the
//! environment (the key).

use std::time::Duration;

use crate::cli::ModelArgs;

/// OpenRouter's OpenAI-compatible API, the default endpoint.
pub const OPENROUTER_BASE_URL: &str = "https://openrouter.ai/api/v1";

/// A model as named on the command line and as sent to the endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelChoice {
    /// What the user typed (`gemini`); used in cache and result file names.
    pub alias: String,
    /// Model id sent to the endpoint (`google/gemini-2.5-flash`).
    pub id: String,
}

impl ModelChoice {
    /// Resolve an alias (see `llm::models`).
    pub fn resolve(name: &str) -> Self {
        Self {
            alias: crate::fsutil::safe_name(name, '-'),
            id: crate::llm::models::resolve_model_alias(name),
        }
    }
}

/// Endpoint, key, models and limits.
#[derive(Debug, Clone)]
pub struct ModelSettings {
    /// Base URL of the OpenAI-compatible API.
    pub base_url: String,
    /// The key, if one is configured.
    pub api_key: Option<crate::llm::Secret>,
    /// Environment variable the key is read from (for messages).
    pub key_variable: &'static str,
    /// Model for building memory.
    pub build_model: ModelChoice,
    /// Model for answering.
    pub answer_model: ModelChoice,
    /// Requests per minute, all workers together (`None`: no fixed limit).
    pub requests_per_minute: Option<std::num::NonZeroU32>,
    /// Estimated tokens per minute, all workers together (`None`: no fixed limit).
    pub tokens_per_minute: Option<std::num::NonZeroU32>,
    /// Completion token caps per step.
    pub token_budget: crate::llm::TokenBudget,
    /// Per-request timeout.
    pub timeout: Duration,
    /// Send schemas as `response_format`.
    pub structured_output: bool,
    /// Whether slow requests are hedged.
    pub hedge: bool,
}

impl ModelSettings {
    /// Resolve model arguments. The key comes from `OPENROUTER_API_KEY` for the default
    /// endpoint and from `OPENAI_API_KEY` for any other base URL (where it may be absent:
    /// local servers usually need none).
    pub fn resolve(args: &ModelArgs, env: impl Fn(&str) -> Option<String>) -> anyhow::Result<Self> {
        let base_url = args.base_url.clone().filter(|url| !url.trim().is_empty());
        let (base_url, key_variable) = match base_url {
            Some(url) => {
                let url = url.trim().trim_end_matches('/').to_string();
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    anyhow::bail!("--base-url must start with http:// or https://: {url}");
                }
                (url, "OPENAI_API_KEY")
            }
            None => (OPENROUTER_BASE_URL.to_string(), "OPENROUTER_API_KEY"),
        };
        let api_key =
            env(key_variable).filter(|key| !key.trim().is_empty()).map(crate::llm::Secret::new);
        let positive = |value: Option<u32>, flag: &str| match value {
            None => Ok(None),
            Some(value) => std::num::NonZeroU32::new(value).map(Some).ok_or_else(|| {
                anyhow::anyhow!("{flag} must be positive (leave it unset for no limit)")
            }),
        };
        let requests_per_minute = positive(args.rpm, "--rpm")?;
        let tokens_per_minute = positive(args.tpm, "--tpm")?;
        let token_budget =
            crate::llm::TokenBudget::with_overrides(args.max_tokens.as_deref().unwrap_or_default())
                .map_err(anyhow::Error::msg)?;
        let build_model = ModelChoice::resolve(&args.model);
        let answer_model = match &args.re_model {
            Some(name) if !name.trim().is_empty() => ModelChoice::resolve(name),
            _ => build_model.clone(),
        };
        Ok(Self {
            base_url,
            api_key,
            key_variable,
            build_model,
            answer_model,
            requests_per_minute,
            tokens_per_minute,
            token_budget,
            timeout: Duration::from_secs(args.timeout.max(1)),
            structured_output: args.structured_output,
            hedge: !args.no_hedge,
        })
    }

    /// The LLM-layer configuration for one of the two models.
    pub fn llm_config(&self, model: &ModelChoice) -> crate::llm::LlmConfig {
        let mut config = crate::llm::LlmConfig::new(
            self.base_url.clone(),
            self.api_key.clone().unwrap_or_default(),
            model.id.clone(),
        );
        config.requests_per_minute = self.requests_per_minute;
        config.tokens_per_minute = self.tokens_per_minute;
        config.budget = self.token_budget;
        config.key_variable = self.key_variable.to_owned();
        config.timeout = self.timeout;
        config.structured_output = self.structured_output;
        if !self.hedge {
            config.hedge = crate::llm::hedge::HedgePolicy::disabled();
        }
        if self.base_url == OPENROUTER_BASE_URL {
            // OpenRouter attributes traffic by these optional headers.
            config.extra_headers.push(("X-Title".to_string(), "mragent".to_string()));
        }
        config
    }

    /// Fail early, before any work, when the default endpoint has no key.
    pub fn require_key(&self) -> anyhow::Result<()> {
        if self.api_key.is_none() && self.base_url == OPENROUTER_BASE_URL {
            anyhow::bail!(
                "no API key: set OPENROUTER_API_KEY in the environment or in .env (see .env.example), \
                 or point --base-url (MRAGENT_BASE_URL) at a local OpenAI-compatible server such as \
                 vLLM, Ollama or llama.cpp, e.g. --base-url http://127.0.0.1:11434/v1"
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    fn model_args(extra: &[&str]) -> ModelArgs {
        #[derive(clap::Parser)]
        struct Wrapper {
            #[command(flatten)]
            model: ModelArgs,
        }
        let mut argv = vec!["x"];
        argv.extend_from_slice(extra);
        Wrapper::parse_from(argv).model
    }

    #[test]
    fn default_endpoint_needs_an_openrouter_key() {
        let settings = ModelSettings::resolve(&model_args(&[]), |_| None).unwrap();
        assert_eq!(settings.base_url, OPENROUTER_BASE_URL);
        let message = settings.require_key().unwrap_err().to_string();
        assert!(
            message.contains("OPENROUTER_API_KEY") && message.contains("--base-url"),
            "{message}"
        );
    }

    #[test]
    fn other_endpoints_read_openai_key_and_may_go_without() {
        let args = model_args(&["--base-url", "http://127.0.0.1:8000/v1/"]);
        let settings = ModelSettings::resolve(&args, |_| None).unwrap();
        assert_eq!(settings.base_url, "http://127.0.0.1:8000/v1");
        assert!(settings.require_key().is_ok());
        let with_key = ModelSettings::resolve(&args, |name| {
            (name == "OPENAI_API_KEY").then(|| "k".to_string())
        })
        .unwrap();
        assert!(with_key.api_key.is_some());
    }

    #[test]
    fn aliases_resolve_and_re_model_defaults_to_model() {
        let settings =
            ModelSettings::resolve(&model_args(&["--model", "gemini"]), |_| None).unwrap();
        assert_eq!(settings.build_model.id, "google/gemini-2.5-flash");
        assert_eq!(settings.answer_model, settings.build_model);
        let split =
            ModelSettings::resolve(&model_args(&["--re-model", "claude"]), |_| None).unwrap();
        assert_eq!(split.answer_model.id, "anthropic/claude-sonnet-4.5");
        let raw =
            ModelSettings::resolve(&model_args(&["--model", "meta/llama-3"]), |_| None).unwrap();
        assert_eq!(raw.build_model.id, "meta/llama-3");
        assert_eq!(raw.build_model.alias, "meta-llama-3");
    }

    #[test]
    fn no_fixed_rate_limit_by_default_and_budgets_reach_the_config() {
        let settings = ModelSettings::resolve(&model_args(&[]), |_| None).unwrap();
        assert_eq!((settings.requests_per_minute, settings.tokens_per_minute), (None, None));
        let config = settings.llm_config(&settings.build_model);
        assert_eq!((config.requests_per_minute, config.tokens_per_minute), (None, None));
        assert!(config.concurrency.is_some(), "concurrency adapts instead");
        assert_eq!(config.key_variable, "OPENROUTER_API_KEY");
        let args = model_args(&["--rpm", "60", "--max-tokens", "answer=300,judge=none"]);
        let limited = ModelSettings::resolve(&args, |_| None).unwrap();
        let config = limited.llm_config(&limited.answer_model);
        assert_eq!(config.requests_per_minute.map(std::num::NonZeroU32::get), Some(60));
        assert_eq!(config.budget.get(crate::llm::Step::Answer), Some(300));
        assert_eq!(config.budget.get(crate::llm::Step::Judge), None);
        assert!(ModelSettings::resolve(&model_args(&["--rpm", "0"]), |_| None).is_err());
        let bad = ModelSettings::resolve(&model_args(&["--max-tokens", "answr=3"]), |_| None);
        assert!(bad.unwrap_err().to_string().contains("unknown step `answr`"));
        let local = model_args(&["--base-url", "http://127.0.0.1:8000/v1"]);
        let local = ModelSettings::resolve(&local, |_| None).unwrap();
        assert_eq!(local.llm_config(&local.build_model).key_variable, "OPENAI_API_KEY");
    }

    #[test]
    fn bad_base_url_is_rejected() {
        let args = model_args(&["--base-url", "localhost:8000"]);
        assert!(ModelSettings::resolve(&args, |_| None).is_err());
    }
}
