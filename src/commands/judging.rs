//! The judge of `eval` and `compare`: its client, on its tape, behind the fatal latch.

use std::sync::Arc;

use anyhow::Context as _;

use crate::llm::Client;
use crate::llm::fatal::{AfterFatal, FatalLatch, Latched};
use crate::llm::tape::TapedChat;
use crate::recorded::tape::recording;
use crate::settings::Scoring;

/// The judge client, when a judge model is given.
pub(super) fn judge_client(scoring: &Scoring) -> anyhow::Result<Option<Client>> {
    let models = &scoring.models;
    match &scoring.judge {
        Some(choice) => {
            models.require_key()?;
            Ok(Some(
                crate::llm::build_chat_model(&models.llm_config(choice))
                    .context("building the judge client")?,
            ))
        }
        None => Ok(None),
    }
}

/// The judge client recording through the call store at `path` (a run's judge tape, a
/// comparison's), when a judge model is given.
pub(super) fn taped<'a>(
    client: Option<&'a Client>,
    path: &std::path::Path,
) -> anyhow::Result<Option<TapedChat<&'a Client>>> {
    client.map(|client| Ok(TapedChat::new(client, recording(path)?))).transpose()
}

/// The judge behind `latch`: the first refused key or unknown model stops the whole
/// evaluation with one message; the judgements already made are on the tape and a rerun keeps
/// them.
pub(super) fn latched<'a, M: crate::llm::ChatModel>(
    client: Option<&'a M>,
    latch: &Arc<FatalLatch>,
    scoring: &Scoring,
) -> Option<Latched<&'a M>> {
    client.map(|client| {
        Latched::sharing(client, latch, scoring.models.key_variable, AfterFatal::Wait)
    })
}
