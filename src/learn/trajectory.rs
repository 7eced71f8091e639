//! One attempt, condensed from its trace for the reviewer: the question as the model saw it,
//! the retrieval payload's size, every tool call with its arguments and a shortened result, the
//! model's own words between calls, and the final answer. Only the last attempt in a trace file
//! counts (a rerun appends a new one).

use std::fmt::Write as _;
use std::path::Path;

use crate::agent::trace::{TraceEvent, TraceRecord, read_trace};

/// Characters kept of each tool result.
const RESULT_CHARS: usize = 400;

/// Characters kept of the whole condensed attempt.
const TOTAL_CHARS: usize = 8_000;

/// The attempt in `path`, condensed (see the module documentation).
pub fn condense_file(path: &Path) -> anyhow::Result<String> {
    Ok(condense(&read_trace(path)?))
}

/// [`condense_file`] over records already read.
pub fn condense(records: &[TraceRecord]) -> String {
    let last_start = records
        .iter()
        .rposition(|record| matches!(record.event, TraceEvent::Start { .. }))
        .unwrap_or(0);
    let mut out = String::new();
    for record in &records[last_start..] {
        // Writing to a String cannot fail.
        let _ = match &record.event {
            TraceEvent::Start { formatted_question, .. } => {
                writeln!(out, "question as asked: {formatted_question}")
            }
            TraceEvent::Retrieval { step, detail } => {
                writeln!(out, "retrieval {step}: {}", cut(&detail.to_string(), RESULT_CHARS))
            }
            TraceEvent::Fallback { step, reason } => writeln!(out, "fallback in {step}: {reason}"),
            TraceEvent::Response { round, message: Some(message), .. } => {
                let text = message.content.as_deref().unwrap_or("").trim();
                if text.is_empty() {
                    Ok(())
                } else {
                    writeln!(out, "model (round {round}): {}", cut(text, RESULT_CHARS))
                }
            }
            TraceEvent::Response { round, error: Some(error), .. } => {
                writeln!(out, "model (round {round}) failed: {error}")
            }
            TraceEvent::ToolCall { name, arguments, result, .. } => {
                writeln!(out, "tool {name}({arguments}) -> {}", cut(result, RESULT_CHARS))
            }
            TraceEvent::Rejected { step, reason, .. } => {
                writeln!(out, "reply rejected in {step}: {reason}")
            }
            TraceEvent::Finish {
                prediction,
                prediction_context,
                error,
                rounds,
                tool_calls,
                ..
            } => match error {
                Some(error) => writeln!(out, "no answer after {rounds} rounds: {error}"),
                None => writeln!(
                    out,
                    "final answer after {rounds} rounds and {tool_calls} tool calls: {prediction} (cited {})",
                    prediction_context.join(", ")
                ),
            },
            _ => Ok(()),
        };
    }
    cut(&out, TOTAL_CHARS)
}

/// `text` cut to `limit` characters, marked when cut.
fn cut(text: &str, limit: usize) -> String {
    if text.chars().count() <= limit {
        return text.to_string();
    }
    let kept: String = text.chars().take(limit).collect();
    format!("{kept} …[cut]")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::Counts;
    use crate::dataset::Category;
    use crate::llm::Usage;
    use crate::results::Status;

    fn record(event: TraceEvent) -> TraceRecord {
        TraceRecord { t_ms: 0, event }
    }

    fn start(question: &str) -> TraceRecord {
        record(TraceEvent::Start {
            question_id: "q".into(),
            sample: "s".into(),
            dataset: "locomo".into(),
            model: "m".into(),
            file: "f".into(),
            result_file: "r".into(),
            category: Category::Locomo(2),
            question: question.into(),
            formatted_question: question.into(),
            started_at: String::new(),
        })
    }

    #[test]
    fn the_last_attempt_is_condensed_with_its_tools_and_answer() {
        let records = vec![
            start("old attempt"),
            start("When did she move?"),
            record(TraceEvent::ToolCall {
                call_id: "c1".into(),
                name: "query_conversation_time".into(),
                arguments: serde_json::json!({"event_ids": ["D1:3-1"]}),
                result: "x".repeat(1_000),
                ms: 1,
            }),
            record(TraceEvent::Finish {
                status: Status::Ok,
                prediction: "May 2023".into(),
                prediction_context: vec!["D1:3".into()],
                error: None,
                rounds: 2,
                tool_calls: 1,
                usage: Usage::default(),
                latency_ms: 5,
                path: None,
                counts: Counts::default(),
            }),
        ];
        let text = condense(&records);
        assert!(!text.contains("old attempt"));
        assert!(text.contains("question as asked: When did she move?"));
        assert!(text.contains("tool query_conversation_time({\"event_ids\":[\"D1:3-1\"]})"));
        assert!(text.contains("…[cut]"), "long results are shortened");
        assert!(
            text.contains("final answer after 2 rounds and 1 tool calls: May 2023 (cited D1:3)")
        );
    }
}
