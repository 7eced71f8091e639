//! Command implementations that glue settings, data and the pipeline stages together.
//!
//! Each function here is what one CLI subcommand does after settings are resolved; `main.rs`
//! only dispatches and prints. Orchestration errors are `anyhow` with context.

use std::time::Instant;

use anyhow::Context as _;

use crate::cli::{DataArg, EvalArgs};
use crate::dataset::DatasetKind;
use crate::eval::{EvalSettings, EvalSummary};
use crate::llm::{ChatModel as _, ChatRequest, Client, Message};
use crate::settings::{ModelChoice, ModelSettings, ProjectPaths, path_safe};

/// What `ping` found out.
#[derive(Debug, Clone, PartialEq)]
pub struct PingReport {
    /// Endpoint base URL.
    pub base_url: String,
    /// Model id asked.
    pub model: String,
    /// The model's reply, trimmed.
    pub reply: String,
    /// Round-trip time in milliseconds.
    pub latency_ms: u128,
    /// Tokens of the call.
    pub usage: crate::llm::Usage,
}

impl std::fmt::Display for PingReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} at {}: replied {:?} in {} ms ({} prompt + {} completion tokens)",
            self.model,
            self.base_url,
            self.reply,
            self.latency_ms,
            self.usage.prompt_tokens,
            self.usage.completion_tokens
        )
    }
}

/// Send one tiny request to the answering model through the full client stack.
pub async fn ping(settings: &ModelSettings) -> anyhow::Result<PingReport> {
    let config = settings.llm_config(&settings.answer_model);
    let client = crate::llm::build_chat_model(&config).context("building the model client")?;
    let text = crate::prompts::PING.render(&[]).context("rendering the ping prompt")?;
    let mut request = ChatRequest::new(config.model.clone(), vec![Message::user(text)]);
    request.max_tokens = Some(16);
    request.temperature = Some(0.0);
    let started = Instant::now();
    let response =
        client.chat(&request).await.with_context(|| format!("calling {}", config.model))?;
    Ok(PingReport {
        base_url: settings.base_url.clone(),
        model: config.model,
        reply: response.message.content.unwrap_or_default().trim().to_string(),
        latency_ms: started.elapsed().as_millis(),
        usage: response.usage,
    })
}

/// Score a run's result files, with the LLM judge when a judge model is given.
pub async fn eval(
    paths: &ProjectPaths,
    args: &EvalArgs,
    models: &ModelSettings,
) -> anyhow::Result<EvalSummary> {
    let dataset = match args.data {
        DataArg::Locomo => DatasetKind::Locomo,
        DataArg::Lm => DatasetKind::LongMemEval,
    };
    let mut settings =
        EvalSettings::new(&paths.root, dataset, &models.build_model.alias, &path_safe(&args.file));
    settings.judge_runs = args.judge_runs;
    settings.concurrency = args.judge_workers as usize;
    settings.audit = !args.no_audit;
    let judge: Option<Client> = match &args.judge_model {
        Some(name) => {
            models.require_key()?;
            let choice = ModelChoice::resolve(name);
            settings.judge_model = Some(choice.id.clone());
            Some(
                crate::llm::build_chat_model(&models.llm_config(&choice))
                    .context("building the judge client")?,
            )
        }
        None => None,
    };
    crate::eval::evaluate(&settings, judge.as_ref()).await
}
