//! The tool loop's progress as it happens, for callers that show it live (the HTTP `ask` stream):
//! one [`LoopEvent`] when the model has answered a round, one when that round's tool calls are
//! done. Summaries only; the trace keeps everything.

use serde::Serialize;

/// Characters of a result (or of unparsable arguments) an event carries.
pub const EXCERPT_CHARS: usize = 240;

/// One step of a question's tool loop.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum LoopEvent {
    /// The model answered round `round`: with tool calls, with its final reply, or not at all.
    Model {
        /// Model request number, from 1.
        round: u32,
        /// The calls it asked for, in order (empty for a final reply).
        tool_calls: Vec<CallSummary>,
        /// Whether the reply had no tool calls (the loop's answer, if it is valid).
        final_reply: bool,
        /// Why the request failed, if it did.
        error: Option<String>,
        /// Time of the request in milliseconds.
        ms: u64,
    },
    /// The tool calls of round `round` finished; results in call order.
    Tools {
        /// Model request number whose calls these are.
        round: u32,
        /// One per call.
        results: Vec<ResultSummary>,
        /// Time of the whole round's tool work in milliseconds.
        ms: u64,
    },
}

/// A tool call the model asked for.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CallSummary {
    /// The call's id.
    pub call_id: String,
    /// Tool name.
    pub name: String,
    /// Arguments as the model sent them (JSON when they parse, else the raw text).
    pub arguments: serde_json::Value,
}

/// What one tool call returned to the model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ResultSummary {
    /// The call's id.
    pub call_id: String,
    /// Tool name.
    pub name: String,
    /// Characters of the result the model gets.
    pub chars: usize,
    /// Its first [`EXCERPT_CHARS`] characters (`…` marks a cut).
    pub excerpt: String,
}

impl CallSummary {
    /// The summary of a call as the model sent it.
    pub(crate) fn of(call: &crate::llm::ToolCall) -> Self {
        let arguments = serde_json::from_str(&call.arguments)
            .unwrap_or_else(|_| serde_json::Value::String(excerpt(&call.arguments)));
        CallSummary { call_id: call.id.clone(), name: call.name.clone(), arguments }
    }
}

impl ResultSummary {
    /// The summary of a result.
    pub(crate) fn of(call_id: &str, name: &str, content: &str) -> Self {
        ResultSummary {
            call_id: call_id.to_string(),
            name: name.to_string(),
            chars: content.chars().count(),
            excerpt: excerpt(content),
        }
    }
}

fn excerpt(text: &str) -> String {
    match text.char_indices().nth(EXCERPT_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

/// Where a loop sends its [`LoopEvent`]s (set in [`crate::agent::AnswerPass::events`]).
/// Sending never blocks or fails: events for a receiver that is gone are dropped.
#[derive(Clone)]
pub struct LoopEvents(futures::channel::mpsc::UnboundedSender<LoopEvent>);

impl LoopEvents {
    /// A sender and the stream of what it sends; the stream ends when every sender is dropped.
    pub fn channel() -> (Self, futures::channel::mpsc::UnboundedReceiver<LoopEvent>) {
        let (sender, receiver) = futures::channel::mpsc::unbounded();
        (LoopEvents(sender), receiver)
    }

    pub(crate) fn send(&self, event: LoopEvent) {
        // An error only means the receiver is gone (the client went away): nothing to do.
        let _ = self.0.unbounded_send(event);
    }
}

impl std::fmt::Debug for LoopEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LoopEvents")
    }
}

impl PartialEq for LoopEvents {
    fn eq(&self, other: &Self) -> bool {
        self.0.same_receiver(&other.0)
    }
}
