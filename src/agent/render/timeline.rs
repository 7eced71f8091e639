//! The text timeline of one trace: one line per event, long texts shortened, colour optional.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;

use console::Style;
use serde_json::Value;

use super::RenderOptions;
use crate::agent::trace::{TraceEvent, TraceRecord};
use crate::llm::{CallLog, ChatMessage, Role};
use crate::results::Status;

/// Styles of the timeline.
struct Palette {
    heading: Style,
    dim: Style,
    model: Style,
    tool: Style,
    good: Style,
    bad: Style,
}

impl Palette {
    fn new(color: bool) -> Self {
        let make = |style: Style| style.force_styling(color);
        Self {
            heading: make(Style::new().bold()),
            dim: make(Style::new().dim()),
            model: make(Style::new().cyan()),
            tool: make(Style::new().yellow()),
            good: make(Style::new().green().bold()),
            bad: make(Style::new().red().bold()),
        }
    }
}

/// Renders the records of one trace file into `out`.
pub(super) fn render_timeline(
    out: &mut String,
    path: &Path,
    records: &[TraceRecord],
    options: &RenderOptions,
) {
    let mut timeline = Timeline {
        out,
        path,
        palette: Palette::new(options.color),
        limit: if options.max_chars == 0 { 400 } else { options.max_chars },
        attempt: 0,
        executed_calls: BTreeSet::new(),
        shown_messages: 0,
    };
    for record in records {
        timeline.event(record);
    }
}

/// The state of a timeline being written.
struct Timeline<'a> {
    out: &'a mut String,
    path: &'a Path,
    palette: Palette,
    /// Characters kept of long texts.
    limit: usize,
    /// Attempts (`start` events) seen so far.
    attempt: u32,
    /// Tool calls shown by `tool_call` events of the current attempt.
    executed_calls: BTreeSet<String>,
    /// Transcript messages already shown: a request that re-sends the transcript (the final
    /// round replaces the system prompt) shows only what is new.
    shown_messages: usize,
}

impl Timeline<'_> {
    fn short(&self, text: &str) -> String {
        shorten(text, self.limit)
    }

    fn event(&mut self, record: &TraceRecord) {
        let time = self.palette.dim.apply_to(format!("{:>8}", format_ms(record.t_ms))).to_string();
        let event = &record.event;
        match event {
            TraceEvent::Start { .. } => self.start(event),
            TraceEvent::Llm { .. } => self.llm(&time, event),
            TraceEvent::Retrieval { step, detail } => {
                let _ = writeln!(
                    self.out,
                    "{time}  {} {}",
                    self.palette.dim.apply_to(format!("retrieval {step}:")),
                    self.short(&detail.to_string())
                );
            }
            TraceEvent::Fallback { step, reason } => {
                let _ = writeln!(
                    self.out,
                    "{time}  {} {}",
                    self.palette.bad.apply_to(format!("fallback {step}:")),
                    self.short(reason)
                );
            }
            TraceEvent::Skipped { step, reason } => {
                let _ = writeln!(
                    self.out,
                    "{time}  {} {}",
                    self.palette.dim.apply_to(format!("skipped {step}:")),
                    self.short(reason)
                );
            }
            TraceEvent::Rejected { step, reason, reply } => {
                let _ = writeln!(
                    self.out,
                    "{time}  {} {}",
                    self.palette.bad.apply_to(format!("rejected {step}:")),
                    self.short(reason)
                );
                let _ = writeln!(self.out, "            < {}", self.short(reply));
            }
            TraceEvent::Request { .. } => self.request(&time, event),
            TraceEvent::Response { .. } => self.response(&time, event),
            TraceEvent::ToolCall { call_id, name, arguments, result, ms } => {
                self.executed_calls.insert(call_id.clone());
                let _ = writeln!(
                    self.out,
                    "{time}  {} {} {}",
                    self.palette.tool.apply_to(format!("tool {name}")),
                    compact_arguments(arguments),
                    self.palette.dim.apply_to(format!("({})", format_ms(*ms)))
                );
                let _ = writeln!(self.out, "            = {}", self.short(result));
            }
            TraceEvent::Finish { .. } => self.finish(&time, event),
        }
    }

    /// A `start` event: the question's heading (first attempt only) and the attempt line.
    fn start(&mut self, event: &TraceEvent) {
        let TraceEvent::Start {
            question_id,
            sample,
            dataset,
            model,
            file,
            category,
            question,
            formatted_question,
            started_at,
            ..
        } = event
        else {
            return;
        };
        self.attempt += 1;
        self.executed_calls.clear();
        self.shown_messages = 0;
        let attempt = self.attempt;
        let path = self.path;
        let palette = &self.palette;
        let out = &mut *self.out;
        let limit = self.limit;
        let short = |text: &str| shorten(text, limit);
        if attempt == 1 {
            let _ = writeln!(
                out,
                "{} {}",
                palette.heading.apply_to(question_id),
                palette.dim.apply_to(format!(
                    "· {dataset} {sample} · category {category} ({}) · {model} · run {file}",
                    category.name()
                ))
            );
            let _ = writeln!(out, "{} {}", palette.heading.apply_to("Q:"), question);
            if formatted_question != question {
                let _ = writeln!(
                    out,
                    "{}",
                    palette.dim.apply_to(format!("   as asked: {}", short(formatted_question)))
                );
            }
            let _ =
                writeln!(out, "{}", palette.dim.apply_to(format!("   trace: {}", path.display())));
        }
        let _ = writeln!(
            out,
            "{}",
            palette.heading.apply_to(format!("attempt {attempt} · {started_at}"))
        );
    }

    /// A structured retrieval call.
    fn llm(&mut self, time: &str, event: &TraceEvent) {
        let TraceEvent::Llm { purpose, value, error, attempts, calls, usage, ms, .. } = event
        else {
            return;
        };
        let palette = &self.palette;
        let out = &mut *self.out;
        let limit = self.limit;
        let short = |text: &str| shorten(text, limit);
        let summary = match (value, error) {
            (_, Some(error)) => {
                palette.bad.apply_to(format!("failed: {}", short(error))).to_string()
            }
            (Some(value), None) => short(&value.to_string()),
            (None, None) => String::new(),
        };
        let retries = if *attempts > 1 { format!(", {attempts} attempts") } else { String::new() };
        let _ = writeln!(
            out,
            "{time}  {} {}  {}",
            palette.model.apply_to(format!("llm {purpose}")),
            palette.dim.apply_to(format!("({} tok, {}{retries})", usage.total(), format_ms(*ms))),
            summary
        );
        for (index, call) in calls.iter().enumerate() {
            let request = (calls.len() > 1).then(|| format!("request {}: ", index + 1));
            render_calls(out, call, request.as_deref().unwrap_or(""), palette, limit);
        }
    }

    /// A loop request: its messages not shown yet.
    fn request(&mut self, time: &str, event: &TraceEvent) {
        let TraceEvent::Request { round, messages, tool_choice, structured, messages_from, .. } =
            event
        else {
            return;
        };
        let palette = &self.palette;
        let out = &mut *self.out;
        let limit = self.limit;
        let executed_calls = &self.executed_calls;
        let shown_messages = self.shown_messages;
        let structured = if *structured { ", answer schema" } else { "" };
        let _ = writeln!(
            out,
            "{time}  {} {}",
            palette.model.apply_to(format!("→ request {round}")),
            palette.dim.apply_to(format!(
                "(tools {tool_choice}{structured}, {} messages)",
                messages_from + messages.len()
            ))
        );
        for (offset, message) in messages.iter().enumerate() {
            let index = messages_from + offset;
            if index < shown_messages && message.role != Role::System {
                continue;
            }
            render_sent_message(out, message, executed_calls, palette, limit);
        }
        self.shown_messages = shown_messages.max(messages_from + messages.len());
    }

    /// A loop response: its text and the tool calls it makes.
    fn response(&mut self, time: &str, event: &TraceEvent) {
        let TraceEvent::Response { round, message, error, calls, usage, ms, .. } = event else {
            return;
        };
        let palette = &self.palette;
        let out = &mut *self.out;
        let limit = self.limit;
        let short = |text: &str| shorten(text, limit);
        let stats = palette.dim.apply_to(format!(
            "({}+{} tok, {})",
            usage.prompt_tokens,
            usage.completion_tokens,
            format_ms(*ms)
        ));
        let _ = writeln!(
            out,
            "{time}  {} {stats}",
            palette.model.apply_to(format!("← response {round}"))
        );
        render_calls(out, calls, "", palette, limit);
        if let Some(error) = error {
            let _ = writeln!(out, "            {}", palette.bad.apply_to(short(error)));
        }
        if let Some(message) = message {
            if let Some(text) = message.content.as_deref().filter(|text| !text.trim().is_empty()) {
                let _ = writeln!(out, "            {}", short(text));
            }
            for call in &message.tool_calls {
                let _ = writeln!(
                    out,
                    "            {} {}",
                    palette.tool.apply_to(format!("calls {}", call.name)),
                    short(&call.arguments)
                );
            }
        }
    }

    /// The question's outcome.
    fn finish(&mut self, time: &str, event: &TraceEvent) {
        let TraceEvent::Finish {
            status,
            prediction,
            prediction_context,
            error,
            rounds,
            tool_calls,
            usage,
            latency_ms,
            path,
            counts,
        } = event
        else {
            return;
        };
        let palette = &self.palette;
        let out = &mut *self.out;
        let limit = self.limit;
        let short = |text: &str| shorten(text, limit);
        let counted = |(count, what): (u64, &str)| {
            if count > 0 { format!(", {count} {what}") } else { String::new() }
        };
        let fallbacks = counts.labelled().map(counted).concat();
        let path = path.map(|path| format!("{} path, ", path.as_str())).unwrap_or_default();
        let stats = palette.dim.apply_to(format!(
            "({path}{rounds} rounds, {tool_calls} tool calls, {}+{} tok, {}{fallbacks})",
            usage.prompt_tokens,
            usage.completion_tokens,
            format_ms(*latency_ms)
        ));
        match status {
            Status::Ok => {
                let _ = writeln!(
                    out,
                    "{time}  {} {} {} {stats}",
                    palette.good.apply_to("answer"),
                    short(prediction),
                    palette.dim.apply_to(format!("[{}]", prediction_context.join(", ")))
                );
            }
            Status::Error => {
                let _ = writeln!(
                    out,
                    "{time}  {} {} {stats}",
                    palette.bad.apply_to("error"),
                    short(error.as_deref().unwrap_or(""))
                );
            }
        }
    }
}

/// The retries and hedges of one model call, one line each (nothing for a first-attempt reply
/// without a hedge). `prefix` names the request of a call with re-asks.
fn render_calls(out: &mut String, calls: &CallLog, prefix: &str, palette: &Palette, limit: usize) {
    for retry in &calls.retries {
        let _ = writeln!(
            out,
            "            {} {} {}",
            palette.bad.apply_to(format!("{prefix}attempt {} failed:", retry.attempt)),
            shorten(&retry.reason, limit),
            palette.dim.apply_to(format!("(retried after {})", format_ms(retry.wait_ms)))
        );
    }
    if calls.retries.is_empty() && calls.attempts > 1 {
        let _ = writeln!(
            out,
            "            {}",
            palette.bad.apply_to(format!("{prefix}{} attempts, all failed", calls.attempts))
        );
    }
    if calls.hedges > 0 {
        let winner = if calls.hedge_won { "the hedge" } else { "the first request" };
        let _ = writeln!(
            out,
            "            {}",
            palette.dim.apply_to(format!(
                "{prefix}hedged: {} slow request raced by a second one; {winner} answered",
                calls.hedges
            ))
        );
    }
}

/// One message of a request: user text and tool results not already shown by a `tool_call`
/// event. Assistant messages were shown as responses and the system prompt is a template.
fn render_sent_message(
    out: &mut String,
    message: &ChatMessage,
    executed_calls: &std::collections::BTreeSet<String>,
    palette: &Palette,
    limit: usize,
) {
    let text = message.content.as_deref().unwrap_or("");
    match message.role {
        Role::User => {
            let _ = writeln!(
                out,
                "            {} {}",
                palette.dim.apply_to("user:"),
                shorten(text, limit)
            );
        }
        Role::Tool => {
            let id = message.tool_call_id.as_deref().unwrap_or("");
            if !executed_calls.contains(id) {
                let _ = writeln!(
                    out,
                    "            {} {}",
                    palette.tool.apply_to(format!("tool result {id}:")),
                    shorten(text, limit)
                );
            }
        }
        Role::System => {
            let _ = writeln!(
                out,
                "            {}",
                palette.dim.apply_to(format!("system: {} chars", text.chars().count()))
            );
        }
        Role::Assistant => {}
    }
}

fn compact_arguments(arguments: &Value) -> String {
    match arguments.as_object() {
        Some(object) => {
            let parts: Vec<String> = object
                .iter()
                .map(|(key, value)| match value.as_str() {
                    Some(text) => format!("{key}={text:?}"),
                    None => format!("{key}={value}"),
                })
                .collect();
            format!("({})", parts.join(", "))
        }
        None => arguments.to_string(),
    }
}

fn format_ms(ms: u64) -> String {
    if ms < 1000 { format!("{ms}ms") } else { format!("{:.1}s", ms as f64 / 1000.0) }
}

/// First `limit` characters on one line, with an ellipsis when cut.
fn shorten(text: &str, limit: usize) -> String {
    let single: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if single.chars().count() <= limit {
        single
    } else {
        let kept: String = single.chars().take(limit).collect();
        format!("{kept}…")
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn shortens_on_one_line() {
        assert_eq!(shorten("a\n  b   c", 10), "a b c");
        assert_eq!(shorten("abcdefghij", 4), "abcd…");
        assert_eq!(format_ms(1500), "1.5s");
        assert_eq!(compact_arguments(&json!({"topic": "D1:t1"})), "(topic=\"D1:t1\")");
    }
}
