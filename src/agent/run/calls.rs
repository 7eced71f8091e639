//! The tool calls of an assistant reply: which run, which are refused, and their tool messages.

use std::collections::BTreeSet;

use super::{AnswerRun, PendingCall, Phase, ToolOutput};
use crate::agent::tools::{Tool, ToolError};
use crate::llm::ChatMessage;

impl AnswerRun {
    /// Appends the assistant message and decides, call by call, what runs.
    pub(super) fn take_tool_calls(&mut self, message: ChatMessage) {
        let limits = self.setup.limits;
        let mut slots = Vec::with_capacity(message.tool_calls.len());
        let mut executed_this_round = 0;
        for call in &message.tool_calls {
            self.tool_calls += 1;
            let refusal = if executed_this_round >= limits.max_calls_per_round {
                Some(format!("at most {} tool calls run per round", limits.max_calls_per_round))
            } else if self.executed_calls >= limits.max_tool_calls {
                Some(format!("the budget of {} tool calls is used up", limits.max_tool_calls))
            } else {
                None
            };
            let slot = match refusal {
                Some(reason) => PendingCall {
                    call_id: call.id.clone(),
                    tool: None,
                    content: Some(ToolError::LimitReached(reason).to_tool_result()),
                },
                None => {
                    executed_this_round += 1;
                    self.executed_calls += 1;
                    match Tool::parse(&call.name, &call.arguments) {
                        Ok(tool) => PendingCall {
                            call_id: call.id.clone(),
                            tool: Some(tool),
                            content: None,
                        },
                        Err(error) => PendingCall {
                            call_id: call.id.clone(),
                            tool: None,
                            content: Some(error.to_tool_result()),
                        },
                    }
                }
            };
            slots.push(slot);
        }
        self.messages.push(message);
        if slots.iter().any(|slot| slot.tool.is_some()) {
            self.phase = Phase::AwaitingTools(slots);
        } else {
            self.append_tool_messages(slots);
        }
    }

    /// Reports the outputs of the last [`NextStep::CallTools`]. Outputs may come in any order; a
    /// call without an output is answered with an error so the transcript stays well formed.
    pub fn tools_finished(&mut self, outputs: Vec<ToolOutput>) {
        let Phase::AwaitingTools(mut slots) = std::mem::replace(&mut self.phase, Phase::Ready)
        else {
            return;
        };
        for output in outputs {
            if let Some(slot) =
                slots.iter_mut().find(|slot| slot.call_id == output.call_id && slot.tool.is_some())
            {
                slot.tool = None;
                slot.content = Some(output.content);
            }
        }
        self.append_tool_messages(slots);
    }

    pub(super) fn append_tool_messages(&mut self, slots: Vec<PendingCall>) {
        for slot in slots {
            let content = slot.content.unwrap_or_else(|| {
                ToolError::NotFound("the tool produced no result".into()).to_tool_result()
            });
            self.messages.push(ChatMessage::tool(slot.call_id, content));
        }
        self.phase = Phase::Ready;
        self.end_tool_round();
    }
}

/// Gives every tool call a non-empty id that is unique within the message (some providers send
/// empty or repeated ids; the tool messages must echo distinct ones).
pub(super) fn normalise_call_ids(message: &mut ChatMessage, round: u32) {
    let mut seen = BTreeSet::new();
    for (index, call) in message.tool_calls.iter_mut().enumerate() {
        if call.id.trim().is_empty() || !seen.insert(call.id.clone()) {
            call.id = format!("call_{round}_{index}");
            seen.insert(call.id.clone());
        }
    }
}
