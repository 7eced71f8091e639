//! `mragent ping`: one tiny request to the answering model through the full client stack.

use std::time::Instant;

use anyhow::Context as _;

use super::Outcome;
use super::output::outln;
use crate::llm::{ChatMessage, ChatModel as _, ChatRequest};
use crate::settings::ModelSettings;

/// Pings the endpoint (a key is required for the default one) and prints what came back.
pub async fn execute(settings: &ModelSettings) -> anyhow::Result<Outcome> {
    settings.require_key()?;
    let report = ping(settings).await.context("ping failed")?;
    outln!("{report}")?;
    Ok(Outcome::Success)
}

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

/// What the ping prompt asks the model to answer: "forty-two" in digits. The digits are not
/// in the prompt, so a server that echoes the prompt (or answers without a chat model) fails.
pub const PING_ANSWER: &str = "42";

/// Send one tiny request to the answering model through the full client stack and check that
/// the reply says what the prompt asked for.
pub async fn ping(settings: &ModelSettings) -> anyhow::Result<PingReport> {
    let config = settings.llm_config(&settings.answer_model);
    let client = crate::llm::build_chat_model(&config).context("building the model client")?;
    let text = crate::prompts::PING.render(&[]).context("rendering the ping prompt")?;
    let mut request = ChatRequest::new(config.model.clone(), vec![ChatMessage::user(text)]);
    request.for_step(Some(crate::llm::Step::Ping), &client);
    request.temperature = Some(0.0);
    let started = Instant::now();
    let response =
        client.chat(&request).await.with_context(|| format!("calling {}", config.model))?;
    let reply = response.message.content.unwrap_or_default().trim().to_string();
    check_ping_reply(&reply).map_err(|problem| {
        anyhow::anyhow!(
            "{} at {} answered, but not as asked: {problem}; check --model (MRAGENT_MODEL) and that the server runs an instruction-following chat model",
            config.model,
            settings.base_url
        )
    })?;
    Ok(PingReport {
        base_url: settings.base_url.clone(),
        model: config.model,
        reply,
        latency_ms: started.elapsed().as_millis(),
        usage: response.usage,
    })
}

/// Whether a ping reply is the asked-for [`PING_ANSWER`]: a short reply holding it as a word
/// of its own (`42`, `42.`, `"42"`, `The answer is 42`), not an echo of the prompt.
pub fn check_ping_reply(reply: &str) -> Result<(), String> {
    const MAX_WORDS: usize = 8;
    let prompt_words = ["connectivity", "mragent", "forty-two", "digits"];
    let lower = reply.to_lowercase();
    if prompt_words.iter().any(|word| lower.contains(word)) {
        return Err(format!("the reply {reply:?} repeats the prompt instead of answering it"));
    }
    let words: Vec<&str> =
        reply.split(|c: char| !c.is_alphanumeric()).filter(|word| !word.is_empty()).collect();
    if words.len() > MAX_WORDS || !words.contains(&PING_ANSWER) {
        return Err(format!("expected the reply {PING_ANSWER:?}, got {reply:?}"));
    }
    Ok(())
}
