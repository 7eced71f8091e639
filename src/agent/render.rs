//! Rendering traces for `mragent trace <question-id|result-file>`.
//!
//! A target is either a question id (`conv-26:q7`), whose trace is looked up under `log/`, or a
//! result file, whose questions are rendered one after another. The text form is a timeline meant
//! for a terminal (colour optional, long texts shortened); the JSON form prints every record in
//! full for machines. This module only reads files; it never calls a model.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::Context;
use console::Style;
use serde_json::{Value, json};

use crate::agent::trace::{TraceEvent, TraceRecord, read_trace};
use crate::llm::{Message, Role};
use crate::results::{ResultLine, Status};

/// How to render.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RenderOptions {
    /// Print JSON (every record, untruncated) instead of the timeline.
    pub json: bool,
    /// Use ANSI colours (the CLI sets this when stdout is a terminal).
    pub color: bool,
    /// Only look at traces of this dataset (`locomo`, `LM`).
    pub dataset: Option<String>,
    /// Only look at traces of this run tag (`--file`).
    pub file: Option<String>,
    /// Characters kept of long texts in the timeline (0: a default of 400).
    pub max_chars: usize,
}

/// Renders the trace of a question id, or of every question of a result file, under the project
/// `root`.
pub fn render_trace(root: &Path, target: &str, options: &RenderOptions) -> anyhow::Result<String> {
    let as_path = PathBuf::from(target);
    let candidates = [as_path.clone(), root.join(&as_path)];
    let traces = match candidates.iter().find(|path| path.is_file()) {
        Some(result_file) => traces_of_result_file(root, result_file, options)?,
        None => vec![(target.to_string(), find_question_trace(root, target, options)?)],
    };
    if options.json {
        let mut questions = Vec::new();
        for (question_id, path) in &traces {
            let records = match path {
                Some(path) => read_trace(path)?,
                None => Vec::new(),
            };
            questions.push(json!({
                "question_id": question_id,
                "trace_file": path.as_ref().map(|path| path.display().to_string()),
                "records": records,
            }));
        }
        return Ok(serde_json::to_string_pretty(&json!({ "questions": questions }))?);
    }
    let mut out = String::new();
    for (index, (question_id, path)) in traces.iter().enumerate() {
        if index > 0 {
            out.push('\n');
        }
        match path {
            Some(path) => {
                let records = read_trace(path)?;
                render_timeline(&mut out, path, &records, options);
            }
            None => {
                let _ = writeln!(out, "{question_id}: no trace found");
            }
        }
    }
    Ok(out)
}

/// Every trace file of `question_id` under `log/`, newest last.
fn find_question_trace(
    root: &Path,
    question_id: &str,
    options: &RenderOptions,
) -> anyhow::Result<Option<PathBuf>> {
    let file_name = format!("{}.jsonl", crate::fsutil::safe_name(question_id, '_'));
    let mut found = trace_files_named(root, &file_name, options)?;
    if found.is_empty() {
        anyhow::bail!(
            "no trace for question `{question_id}` under {}; pass a question id such as `conv-26:q1` or a result file",
            root.join("log").display()
        );
    }
    found.sort_by_key(|path| fs::metadata(path).and_then(|meta| meta.modified()).ok());
    Ok(found.pop())
}

/// `log/<dataset>/<file>/<sample>/<file_name>` paths that exist, filtered by the options.
fn trace_files_named(
    root: &Path,
    file_name: &str,
    options: &RenderOptions,
) -> anyhow::Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    for dataset in subdirectories(&root.join("log"))? {
        if options.dataset.as_deref().is_some_and(|wanted| !dataset.ends_with(wanted)) {
            continue;
        }
        for run in subdirectories(&dataset)? {
            if options.file.as_deref().is_some_and(|wanted| !run.ends_with(wanted)) {
                continue;
            }
            for sample in subdirectories(&run)? {
                let candidate = sample.join(file_name);
                if candidate.is_file() {
                    found.push(candidate);
                }
            }
        }
    }
    found.sort();
    Ok(found)
}

fn subdirectories(directory: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let entries = match fs::read_dir(directory) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => {
            return Err(error).with_context(|| format!("listing {}", directory.display()));
        }
    };
    let mut directories = Vec::new();
    for entry in entries {
        let path = entry.with_context(|| format!("listing {}", directory.display()))?.path();
        if path.is_dir() {
            directories.push(path);
        }
    }
    directories.sort();
    Ok(directories)
}

/// The trace of every question of a result file: the trace whose `start` event names this
/// result file (so runs with other models or tags are not mixed in).
fn traces_of_result_file(
    root: &Path,
    result_file: &Path,
    options: &RenderOptions,
) -> anyhow::Result<Vec<(String, Option<PathBuf>)>> {
    let text = fs::read_to_string(result_file)
        .with_context(|| format!("reading {}", result_file.display()))?;
    let result_name =
        result_file.file_name().map(|name| name.to_string_lossy().to_string()).unwrap_or_default();
    let mut traces = Vec::new();
    for line in text.lines().filter(|line| !line.trim().is_empty()) {
        let Ok(result) = serde_json::from_str::<ResultLine>(line) else { continue };
        let file_name = format!("{}.jsonl", crate::fsutil::safe_name(&result.question_id, '_'));
        let mut chosen = None;
        for path in trace_files_named(root, &file_name, options)? {
            let records = read_trace(&path).unwrap_or_default();
            let matches = records.iter().any(|record| {
                matches!(&record.event, TraceEvent::Start { result_file, .. }
                    if Path::new(result_file).file_name().is_some_and(|name| name.to_string_lossy() == result_name))
            });
            if matches {
                chosen = Some(path);
            }
        }
        traces.push((result.question_id, chosen));
    }
    if traces.is_empty() {
        anyhow::bail!("{} holds no result lines", result_file.display());
    }
    Ok(traces)
}

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

fn render_timeline(
    out: &mut String,
    path: &Path,
    records: &[TraceRecord],
    options: &RenderOptions,
) {
    let palette = Palette::new(options.color);
    let limit = if options.max_chars == 0 { 400 } else { options.max_chars };
    let short = |text: &str| shorten(text, limit);
    let mut attempt = 0;
    let mut executed_calls = std::collections::BTreeSet::new();
    // Transcript messages already shown: a request that re-sends the transcript (the final
    // round replaces the system prompt) shows only what is new.
    let mut shown_messages = 0usize;
    for record in records {
        let time = palette.dim.apply_to(format!("{:>8}", format_ms(record.t_ms)));
        match &record.event {
            TraceEvent::Start {
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
            } => {
                attempt += 1;
                executed_calls.clear();
                shown_messages = 0;
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
                            palette
                                .dim
                                .apply_to(format!("   as asked: {}", short(formatted_question)))
                        );
                    }
                    let _ = writeln!(
                        out,
                        "{}",
                        palette.dim.apply_to(format!("   trace: {}", path.display()))
                    );
                }
                let _ = writeln!(
                    out,
                    "{}",
                    palette.heading.apply_to(format!("attempt {attempt} · {started_at}"))
                );
            }
            TraceEvent::Llm { purpose, value, error, attempts, usage, ms, .. } => {
                let summary = match (value, error) {
                    (_, Some(error)) => {
                        palette.bad.apply_to(format!("failed: {}", short(error))).to_string()
                    }
                    (Some(value), None) => short(&value.to_string()),
                    (None, None) => String::new(),
                };
                let retries =
                    if *attempts > 1 { format!(", {attempts} attempts") } else { String::new() };
                let _ = writeln!(
                    out,
                    "{time}  {} {}  {}",
                    palette.model.apply_to(format!("llm {purpose}")),
                    palette.dim.apply_to(format!(
                        "({} tok, {}{retries})",
                        usage.total(),
                        format_ms(*ms)
                    )),
                    summary
                );
            }
            TraceEvent::Retrieval { step, detail } => {
                let _ = writeln!(
                    out,
                    "{time}  {} {}",
                    palette.dim.apply_to(format!("retrieval {step}:")),
                    short(&detail.to_string())
                );
            }
            TraceEvent::Request {
                round, messages, tool_choice, structured, messages_from, ..
            } => {
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
                    render_sent_message(out, message, &executed_calls, &palette, limit);
                }
                shown_messages = shown_messages.max(messages_from + messages.len());
            }
            TraceEvent::Response { round, message, error, usage, ms, .. } => {
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
                if let Some(error) = error {
                    let _ = writeln!(out, "            {}", palette.bad.apply_to(short(error)));
                }
                if let Some(message) = message {
                    if let Some(text) =
                        message.content.as_deref().filter(|text| !text.trim().is_empty())
                    {
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
            TraceEvent::ToolCall { call_id, name, arguments, result, ms } => {
                executed_calls.insert(call_id.clone());
                let _ = writeln!(
                    out,
                    "{time}  {} {} {}",
                    palette.tool.apply_to(format!("tool {name}")),
                    compact_arguments(arguments),
                    palette.dim.apply_to(format!("({})", format_ms(*ms)))
                );
                let _ = writeln!(out, "            = {}", short(result));
            }
            TraceEvent::Finish {
                status,
                prediction,
                prediction_context,
                error,
                rounds,
                tool_calls,
                usage,
                latency_ms,
            } => {
                let stats = palette.dim.apply_to(format!(
                    "({rounds} rounds, {tool_calls} tool calls, {}+{} tok, {})",
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
    }
}

/// One message of a request: user text and tool results not already shown by a `tool_call`
/// event. Assistant messages were shown as responses and the system prompt is a template.
fn render_sent_message(
    out: &mut String,
    message: &Message,
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
    use super::*;

    #[test]
    fn shortens_on_one_line() {
        assert_eq!(shorten("a\n  b   c", 10), "a b c");
        assert_eq!(shorten("abcdefghij", 4), "abcd…");
        assert_eq!(format_ms(1500), "1.5s");
        assert_eq!(compact_arguments(&json!({"topic": "D1:t1"})), "(topic=\"D1:t1\")");
    }
}
