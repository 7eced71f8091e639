//! Prompt size per question on the scripted workload (issue 14.4): every question of a whole
//! LoCoMo conversation answered by the plausible agent over a mechanical memory, counting what
//! each chat request sends (messages and tool schemas, 4 characters a token).

use super::*;

/// Characters a request sends as prompt: message texts, tool-call arguments and tool schemas.
fn prompt_chars(request: &RecordedRequest) -> usize {
    let messages: usize = request
        .messages()
        .iter()
        .map(|message| {
            message["content"].as_str().map_or(0, str::len)
                + message.get("tool_calls").map_or(0, |calls| calls.to_string().len())
        })
        .sum();
    messages + request.body.get("tools").map_or(0, |tools| tools.to_string().len())
}

/// Prompt characters by part: `[system, tools, first user message, tool results, other]`.
fn parts(request: &RecordedRequest) -> [usize; 5] {
    let mut parts = [0; 5];
    for (index, message) in request.messages().iter().enumerate() {
        let text = message["content"].as_str().map_or(0, str::len)
            + message.get("tool_calls").map_or(0, |calls| calls.to_string().len());
        let part = match (index, message["role"].as_str()) {
            (0, _) => 0,
            (1, _) => 2,
            (_, Some("tool")) => 3,
            _ => 4,
        };
        parts[part] += text;
    }
    parts[1] = request.body.get("tools").map_or(0, |tools| tools.to_string().len());
    parts
}

/// `(questions, chat requests, prompt tokens)` of answering conv-30.
async fn measure() -> (usize, usize, usize) {
    let conversation = locomo("conv-30");
    let bench = Bench::new(AgentScript::default()).await;
    let summary = bench.run(&[mechanical_memory(&conversation, true).unwrap()]).await;
    assert_eq!(summary.errors, 0, "{summary:?}");
    let chat: Vec<RecordedRequest> =
        bench.server.requests().into_iter().filter(RecordedRequest::is_chat).collect();
    let chars: usize = chat.iter().map(prompt_chars).sum();
    // By kind of request (the first line of its system prompt) and part.
    let mut kinds: BTreeMap<String, (usize, [usize; 5])> = BTreeMap::new();
    for request in &chat {
        let system =
            request.messages().first().and_then(|m| m["content"].as_str()).unwrap_or_default();
        let kind: String = system.chars().take(40).collect();
        let entry = kinds.entry(kind).or_default();
        entry.0 += 1;
        for (total, part) in entry.1.iter_mut().zip(parts(request)) {
            *total += part;
        }
    }
    for (kind, (count, parts)) in &kinds {
        let per_question: Vec<usize> =
            parts.iter().map(|part| part / 4 / summary.answered.max(1)).collect();
        eprintln!(
            "  {count:5} requests `{kind}`: tokens per question [system, tools, user, tool results, other] = {per_question:?}"
        );
    }
    (summary.answered, chat.len(), chars.div_ceil(4))
}

#[tokio::test]
async fn prompt_tokens_per_question_on_the_scripted_workload() {
    let (questions, requests, tokens) = measure().await;
    let per_question = tokens / questions.max(1);
    eprintln!(
        "prompt size: {questions} questions, {requests} chat requests ({:.2} per question), {tokens} prompt tokens, {per_question} per question",
        requests as f64 / questions.max(1) as f64
    );
    // Measured before the issue-14 changes: see the closing note; the bound keeps the gain.
    let limit: usize = std::env::var("PROMPT_TOKENS_LIMIT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(usize::MAX);
    assert!(per_question <= limit, "{per_question} prompt tokens per question (limit {limit})");
}
