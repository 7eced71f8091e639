//! The run as one pipeline: a conversation's questions are answered while another conversation
//! still builds, and MemGAS costs nothing until the model calls `query_memgas`.

use std::time::Duration;

use mragent::llm::scripted::ScriptedReply;
use serde_json::Value;

use super::mragent_in;
use super::safety::{answer_chat, lines, project, run_args, server};

/// The fixture's conversation twice: `conv-7` as is, and `conv-8` with every "Lena" renamed to
/// "Marguerite" (so that the endpoint can tell its build requests apart).
fn two_conversations(data: &mut Value) {
    let text = serde_json::to_string(&data[0]).unwrap().replace("Lena", "Marguerite");
    let mut second: Value = serde_json::from_str(&text).unwrap();
    second["sample_id"] = Value::from("conv-8");
    data.as_array_mut().unwrap().push(second);
}

#[tokio::test]
async fn a_built_conversation_is_answered_while_another_still_builds() {
    let (dir, data) = project(two_conversations);
    // Every build request of conv-8 takes 1.5 s; conv-7 builds at once.
    let slow = server(|request| {
        (request.is_chat() && !answer_chat(request) && request.transcript().contains("Marguerite"))
            .then(|| ScriptedReply::json(&crate::ingest::good_answer(request)))
            .map(|reply| reply.delayed(Duration::from_millis(1500)))
    })
    .await;
    let output = mragent_in(dir.path(), &run_args(&data, &slow, "t"), &[]).await;
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let requests = slow.requests();
    let first_answer = requests.iter().find(|request| answer_chat(request)).unwrap().index;
    let slow_build: Vec<usize> = requests
        .iter()
        .filter(|r| r.is_chat() && !answer_chat(r) && r.transcript().contains("Marguerite"))
        .map(|request| request.index)
        .collect();
    // conv-8's later build requests (its keywords) wait for its slow rewrites; conv-7's
    // questions must not.
    assert!(slow_build.len() >= 2, "{slow_build:?}");
    let last_slow = *slow_build.last().unwrap();
    assert!(
        first_answer < last_slow,
        "the first answer request ({first_answer}) waited for conv-8's build (last request {last_slow})"
    );
    let answered = lines(&dir.path().join("result/locomo/conv-8_result_local-tiny_t.jsonl"));
    assert_eq!(answered.len(), 9, "conv-8 is answered once built");
}
