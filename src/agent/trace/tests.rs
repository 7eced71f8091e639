use std::fs::OpenOptions;
use std::io::Write;

use super::*;

#[test]
fn paths_are_safe_and_records_round_trip() -> anyhow::Result<()> {
    let directory = tempfile::tempdir()?;
    let path = trace_path(directory.path(), "locomo", "run1", "conv-26", "conv-26:q7");
    assert!(path.ends_with("log/locomo/run1/conv-26/conv-26_q7.jsonl"));
    let mut writer = TraceWriter::open(path.clone());
    writer.record(TraceEvent::Retrieval {
        step: "route".into(),
        detail: serde_json::json!({"route": "main"}),
    });
    writer.record(TraceEvent::ToolCall {
        call_id: "a".into(),
        name: "query_topic_events".into(),
        arguments: serde_json::json!({"topic": "D1:t1"}),
        result: "{}".into(),
        ms: 1,
    });
    drop(writer);
    let mut file = OpenOptions::new().append(true).open(&path)?;
    file.write_all(b"{\"t_ms\":3,\"event\":\"fin")?;
    let records = read_trace(&path)?;
    assert_eq!(records.len(), 2);
    assert!(
        matches!(&records[1].event, TraceEvent::ToolCall { name, .. } if name == "query_topic_events")
    );
    Ok(())
}

/// The steps of the `Fallback` records of the trace at `path`, in file order.
fn fallback_steps(path: &std::path::Path) -> anyhow::Result<Vec<String>> {
    Ok(read_trace(path)?
        .into_iter()
        .filter_map(|record| match record.event {
            TraceEvent::Fallback { step, .. } => Some(step),
            _ => None,
        })
        .collect())
}

#[test]
fn a_trace_reopened_after_a_torn_write_starts_on_a_line_of_its_own() -> anyhow::Result<()> {
    // A run killed mid-record leaves a line without its newline; the rerun appends a new
    // attempt. Whatever the tear's length, the file reads back whole, with the new attempt.
    let directory = tempfile::tempdir()?;
    let record = |writer: &mut TraceWriter, step: &str| {
        writer.record(TraceEvent::Fallback { step: step.into(), reason: "r".into() });
    };
    for torn in [0, 1, 17, 9000] {
        let path = directory.path().join(format!("q{torn}.jsonl"));
        let mut writer = TraceWriter::open(path.clone());
        record(&mut writer, "first");
        drop(writer);
        let fragment = format!("{{\"t_ms\":3,\"event\":\"{}", "x".repeat(torn));
        OpenOptions::new()
            .append(true)
            .open(&path)?
            .write_all(&fragment.as_bytes()[..torn.min(fragment.len())])?;
        let mut writer = TraceWriter::open(path.clone());
        record(&mut writer, "second");
        record(&mut writer, "third");
        drop(writer);
        let steps = fallback_steps(&path)?;
        assert_eq!(steps, ["first", "second", "third"], "a tear of {torn} bytes");
    }
    // A file that is one torn line and nothing else is emptied.
    let path = directory.path().join("only-torn.jsonl");
    std::fs::write(&path, b"{\"t_ms\":1,\"ev")?;
    let mut writer = TraceWriter::open(path.clone());
    record(&mut writer, "fresh");
    drop(writer);
    assert_eq!(read_trace(&path)?.len(), 1);
    Ok(())
}

#[test]
fn branches_merge_in_call_order_and_count_fallbacks_and_rejections() -> anyhow::Result<()> {
    let directory = tempfile::tempdir()?;
    let path = directory.path().join("q.jsonl");
    let mut writer = TraceWriter::open(path.clone());
    let (mut first, mut second) = (writer.branch(), writer.branch());
    let fallback = |step: &str| TraceEvent::Fallback { step: step.into(), reason: "r".into() };
    second.record(fallback("second"));
    first.record(fallback("first"));
    writer.merge(first);
    writer.merge(second);
    assert_eq!((writer.counts().fallbacks, writer.counts().rejected), (2, 0));
    assert_eq!(fallback_steps(&path)?, ["first", "second"]);
    // A writer that records nothing still counts.
    let mut disabled = TraceWriter::disabled();
    let mut branch = disabled.branch();
    branch.record(fallback("x"));
    branch.record(TraceEvent::Rejected {
        step: "rerank".into(),
        reason: "not JSON".into(),
        reply: "sure".into(),
    });
    disabled.merge(branch);
    assert_eq!((disabled.counts().fallbacks, disabled.counts().rejected), (1, 1));
    Ok(())
}

#[test]
fn rejected_replies_are_cut_and_escaped() {
    assert_eq!(rejected_excerpt("a\u{1b}[0m\nb"), "a\\u{1b}[0m\nb");
    let long = "x".repeat(REJECTED_REPLY_CHARS + 5);
    let kept = rejected_excerpt(&long);
    assert_eq!(kept.chars().count(), REJECTED_REPLY_CHARS + 1);
    assert!(kept.ends_with('…'));
}

#[test]
fn retries_and_hedges_are_counted_and_plain_calls_left_out() -> anyhow::Result<()> {
    use crate::llm::RetryRecord;
    let directory = tempfile::tempdir()?;
    let path = directory.path().join("q.jsonl");
    let mut writer = TraceWriter::open(path.clone());
    let retried = CallLog {
        attempts: 2,
        retries: vec![RetryRecord { attempt: 1, reason: "status 500".into(), wait_ms: 12 }],
        hedges: 1,
        hedge_won: true,
    };
    let response = |calls: CallLog| TraceEvent::Response {
        round: 1,
        message: None,
        finish_reason: None,
        error: None,
        calls,
        usage: Usage::default(),
        ms: 1,
    };
    writer.record(response(retried.clone()));
    writer.record(response(CallLog { attempts: 1, ..CallLog::default() }));
    let mut branch = writer.branch();
    branch.record(TraceEvent::Llm {
        purpose: "rerank".into(),
        messages: Vec::new(),
        value: None,
        error: Some("timed out".into()),
        attempts: 3,
        calls: vec![CallLog { attempts: 3, ..CallLog::default() }],
        usage: Usage::default(),
        ms: 1,
    });
    writer.merge(branch);
    assert_eq!(writer.counts(), Counts { retries: 3, hedges: 1, ..Counts::default() });
    let text = std::fs::read_to_string(&path)?;
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].contains("\"calls\"") && lines[0].contains("status 500"), "{}", lines[0]);
    assert!(!lines[1].contains("\"calls\""), "a plain call adds nothing: {}", lines[1]);
    let records = read_trace(&path)?;
    assert!(matches!(&records[0].event, TraceEvent::Response { calls, .. } if *calls == retried));
    Ok(())
}

#[test]
fn a_finish_record_writes_its_counts_after_the_latency() -> anyhow::Result<()> {
    let record = TraceRecord {
        t_ms: 7,
        event: TraceEvent::Finish {
            status: Status::Ok,
            prediction: "Paris".into(),
            prediction_context: vec!["D1:2".into()],
            error: None,
            rounds: 2,
            tool_calls: 1,
            usage: Usage { prompt_tokens: 3, completion_tokens: 4 },
            latency_ms: 9,
            path: None,
            counts: Counts { skipped: 1, hedges: 2, ..Counts::default() },
        },
    };
    let text = serde_json::to_string(&record)?;
    assert_eq!(
        text,
        concat!(
            r#"{"t_ms":7,"event":"finish","status":"ok","prediction":"Paris","#,
            r#""prediction_context":["D1:2"],"rounds":2,"tool_calls":1,"#,
            r#""usage":{"prompt_tokens":3,"completion_tokens":4},"latency_ms":9,"#,
            r#""fallbacks":0,"skipped":1,"hedges":2}"#
        )
    );
    assert_eq!(serde_json::from_str::<TraceRecord>(&text)?, record);
    // A finish record written before the counts existed reads as zero counts.
    let old = text.replace(r#","fallbacks":0,"skipped":1,"hedges":2"#, "");
    let read = serde_json::from_str::<TraceRecord>(&old)?;
    assert!(matches!(read.event, TraceEvent::Finish { counts, .. } if counts == Counts::default()));
    Ok(())
}
