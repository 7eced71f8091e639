use serde_json::json;

use super::*;

fn index() -> ArchiveIndex {
    ArchiveIndex {
        format: String::new(),
        dataset: "locomo".into(),
        model: "local-tiny".into(),
        file: "t".into(),
        dataset_file: "data/locomo.json".into(),
        meta_rules: None,
        manifest: Value::Null,
        eval: None,
        build: None,
        learn: None,
        compared: None,
        files: Vec::new(),
    }
}

/// One attempt's trace of question `conv-7:q1` in run `tag`, its times from `clock`.
fn trace(tag: &str, clock: u64, result: &str) -> String {
    let lines = [
        json!({"t_ms": 0, "event": "start", "question_id": "conv-7:q1", "sample": "conv-7",
            "dataset": "locomo", "model": "local/tiny", "file": tag,
            "result_file": format!("result/locomo/conv-7_result_local-tiny_{tag}.jsonl"),
            "started_at": format!("2026-11-29T12:50:{clock:02}+00:00")}),
        json!({"t_ms": clock, "event": "tool_call", "call_id": "c1", "name": "query",
            "arguments": {"ms": 5}, "result": result, "ms": clock}),
        json!({"t_ms": clock * 2, "event": "finish", "status": "ok", "prediction": "Pixel",
            "latency_ms": clock * 2, "retries": 1}),
    ];
    lines.iter().map(|line| format!("{line}\n")).collect()
}

#[test]
fn a_replay_with_other_times_and_its_own_tag_is_the_same_trace() {
    let archived = trace("t", 3, "found");
    assert_eq!(compare_trace(&archived, &trace("t-verify", 9, "found"), Some(&index())), Ok(false));
}

#[test]
fn a_substantive_difference_is_named_by_its_line_and_field() {
    let archived = trace("t", 3, "forged");
    let said =
        compare_trace(&archived, &trace("t-verify", 3, "found"), Some(&index())).unwrap_err();
    assert_eq!(said, "line 2 differs from the replay's trace in field(s) result");
}

#[test]
fn only_the_named_fields_at_the_top_level_are_set_aside() {
    // A nested field named like a time is data.
    let archived = trace("t", 3, "found").replace("{\"ms\":5}", "{\"ms\":6}");
    let said =
        compare_trace(&archived, &trace("t-verify", 3, "found"), Some(&index())).unwrap_err();
    assert_eq!(said, "line 2 differs from the replay's trace in field(s) arguments");
    // A retry is what the tape replays, not a time.
    let archived = trace("t", 3, "found").replace("\"retries\":1", "\"retries\":2");
    let said =
        compare_trace(&archived, &trace("t-verify", 3, "found"), Some(&index())).unwrap_err();
    assert_eq!(said, "line 3 differs from the replay's trace in field(s) retries");
}

#[test]
fn the_archived_trace_must_name_its_own_run() {
    // Only the replay's tag is put back: an archived trace naming another run differs.
    let archived = trace("t-verify", 3, "found");
    let said =
        compare_trace(&archived, &trace("t-verify", 3, "found"), Some(&index())).unwrap_err();
    assert_eq!(said, "line 1 differs from the replay's trace in field(s) file, result_file");
}

#[test]
fn a_line_only_one_side_has_differs() {
    let replayed = trace("t-verify", 3, "found");
    let longer = trace("t", 3, "found") + "{\"forged\":true}\n";
    assert_eq!(
        compare_trace(&longer, &replayed, Some(&index())),
        Err("line 4 is not in the replay's trace".into())
    );
    let shorter: String =
        trace("t", 3, "found").lines().take(2).map(|l| format!("{l}\n")).collect();
    assert_eq!(
        compare_trace(&shorter, &replayed, Some(&index())),
        Err("it ends at line 2 where the replay's trace goes on".into())
    );
    let torn = trace("t", 3, "found").replace("\"event\":\"finish\"", "\"event\":\"fin");
    assert_eq!(compare_trace(&torn, &replayed, Some(&index())), Err("line 3 is not JSON".into()));
}

#[test]
fn earlier_attempts_are_carried_and_the_last_one_is_compared() {
    let replayed = trace("t-verify", 3, "found");
    let resumed = trace("t", 1, "an earlier failure") + &trace("t", 4, "found");
    assert_eq!(compare_trace(&resumed, &replayed, Some(&index())), Ok(true));
    let forged = trace("t", 1, "found") + &trace("t", 4, "forged");
    assert_eq!(
        compare_trace(&forged, &replayed, Some(&index())),
        Err("line 5 differs from the replay's trace in field(s) result".into())
    );
}

#[test]
fn a_trace_names_the_question_of_its_last_attempt() {
    let resumed = trace("t", 1, "x") + &trace("t", 4, "x").replace("conv-7:q1", "conv-7:q2");
    assert_eq!(question_of(&resumed).as_deref(), Some("conv-7:q2"));
    assert_eq!(question_of("not json\n"), None);
}

#[test]
fn the_order_of_the_fields_counts() {
    let archived = trace("t", 3, "found")
        .replace("\"call_id\":\"c1\",\"name\":\"query\"", "\"name\":\"query\",\"call_id\":\"c1\"");
    let said =
        compare_trace(&archived, &trace("t-verify", 3, "found"), Some(&index())).unwrap_err();
    assert_eq!(said, "line 2 differs from the replay's trace in the order of its fields");
}
