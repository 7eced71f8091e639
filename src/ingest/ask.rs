//! One validated model call for a build stage: schema check through
//! `llm::structured::chat_json` (which re-asks on a schema violation), then the stage's
//! semantic check, re-asking with the problems found until the answer passes or the re-ask
//! budget is spent.
//!
//! A semantic re-ask continues the same transcript: the model's previous answer, then a user
//! message (`prompts/stage_reask.md`) listing what was wrong. Every attempt's tokens are counted,
//! including those of a unit that fails in the end.

use serde_json::Value;

use crate::llm::structured::chat_json;
use crate::llm::{self, ChatMessage, ChatModel, ChatRequest, JsonSchemaSpec, Usage};
use crate::prompts;

/// At most this many semantic problems are quoted back to the model in one re-ask.
const MAX_PROBLEMS_QUOTED: usize = 12;

/// Request settings shared by the stages.
#[derive(Debug, Clone)]
pub(crate) struct AskSettings {
    /// Model id sent to the endpoint.
    pub(crate) model: String,
    /// Re-asks allowed after a schema violation (per call) and after a semantic problem.
    pub(crate) max_reasks: u32,
}

/// A checked answer.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Asked<T> {
    /// The checked value.
    pub(crate) value: T,
    /// Tokens of every attempt.
    pub(crate) usage: Usage,
    /// Model calls made.
    pub(crate) attempts: u32,
}

/// Why a unit failed.
#[derive(Debug)]
pub(crate) struct AskFailure {
    /// What went wrong, for the report.
    pub(crate) error: String,
    /// The transport error, when the failure came from the endpoint rather than the answer.
    pub(crate) llm_error: Option<llm::Error>,
    /// Tokens spent before giving up (known attempts only).
    pub(crate) usage: Usage,
    /// Model calls made.
    pub(crate) attempts: u32,
}

/// Ask for `prompt` (one user message), check the answer with `schema` and then `check`.
pub(crate) async fn ask_checked<M, T>(
    chat: &M,
    settings: &AskSettings,
    prompt: String,
    schema: &JsonSchemaSpec,
    check: impl Fn(&Value) -> Result<T, Vec<String>>,
) -> Result<Asked<T>, AskFailure>
where
    M: ChatModel,
{
    let mut messages = vec![ChatMessage::user(prompt)];
    let mut usage = Usage::default();
    let mut attempts = 0;
    let mut round = 0;
    loop {
        let mut request = ChatRequest::new(settings.model.clone(), messages.clone());
        request.temperature = Some(0.0);
        request.for_step(llm::Step::for_schema(&schema.name), chat);
        let response = match chat_json(chat, request, schema, settings.max_reasks).await {
            Ok(response) => response,
            Err(error) => {
                let attempts = attempts + error_attempts(&error);
                return Err(AskFailure {
                    error: error.to_string(),
                    usage: usage + error.usage(),
                    llm_error: Some(error),
                    attempts,
                });
            }
        };
        usage += response.usage;
        attempts += response.attempts;
        let problems = match check(&response.value) {
            Ok(value) => return Ok(Asked { value, usage, attempts }),
            Err(problems) => problems,
        };
        let reason = describe(&problems);
        if round >= settings.max_reasks {
            return Err(AskFailure {
                error: format!(
                    "answer still invalid after {} re-asks: {reason}",
                    settings.max_reasks
                ),
                llm_error: None,
                usage,
                attempts,
            });
        }
        round += 1;
        tracing::debug!(schema = %schema.name, round, reason = %reason, "re-asking after a semantic check failed");
        let reask = prompts::STAGE_REASK.render(&[("reason", &reason)]).map_err(|error| {
            AskFailure { error: error.to_string(), llm_error: None, usage, attempts }
        })?;
        messages.push(ChatMessage::assistant(response.value.to_string()));
        messages.push(ChatMessage::user(reask));
    }
}

/// The calls an error says were made (at least one: the error came from a call).
fn error_attempts(error: &llm::Error) -> u32 {
    match error {
        llm::Error::SchemaInvalid { attempts, .. } => *attempts,
        _ => 1,
    }
}

/// Problems as one sentence-like list, capped at [`MAX_PROBLEMS_QUOTED`].
pub(crate) fn describe(problems: &[String]) -> String {
    let mut text =
        problems.iter().take(MAX_PROBLEMS_QUOTED).cloned().collect::<Vec<_>>().join("; ");
    if problems.len() > MAX_PROBLEMS_QUOTED {
        text.push_str(&format!("; and {} more problems", problems.len() - MAX_PROBLEMS_QUOTED));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_problem_lists_are_capped() {
        let problems: Vec<String> = (0..15).map(|n| format!("p{n}")).collect();
        let text = describe(&problems);
        assert!(text.starts_with("p0; p1;"));
        assert!(text.ends_with("p11; and 3 more problems"), "{text}");
    }
}
