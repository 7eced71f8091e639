//! Command implementations that glue settings, data and the pipeline stages together.
//!
//! Each function here is what one CLI subcommand does after settings are resolved; `main.rs`
//! only dispatches and prints. Orchestration errors are `anyhow` with context.

use std::time::Instant;

use anyhow::Context as _;

use crate::llm::{ChatModel as _, ChatRequest, Message};
use crate::settings::ModelSettings;

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
