//! The answer engine against replies shaped like a real model's, failing steps, and
//! concurrency within a question (issues 11 and 14).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use mragent::prompts;

use super::*;

/// The system prompt of a chat request.
fn system_of(request: &RecordedRequest) -> String {
    request
        .messages()
        .first()
        .and_then(|message| message["content"].as_str())
        .unwrap_or_default()
        .to_string()
}

/// Requests of one retrieval prompt (question keywords, re-rank, tag scores), by system prompt.
fn retrieval_requests(server: &ScriptedServer, prompt: &str) -> Vec<RecordedRequest> {
    let head = prompt.lines().next().unwrap_or_default().to_string();
    server
        .requests()
        .into_iter()
        .filter(|request| request.is_chat() && system_of(request).starts_with(&head))
        .collect()
}

/// What a real model makes of a JSON reply: prose and a code fence around it, optional keys
/// left out, an extra key, lists as strings, numbers as strings, `null` for "no date".
fn real_model_shape(value: &Value) -> String {
    let mut value = value.clone();
    if let Some(object) = value.as_object_mut() {
        if object.get("question_time").and_then(Value::as_str) == Some("") {
            object.insert("question_time".into(), Value::Null);
        }
        if let Some(Value::Array(keywords)) = object.get_mut("keywords") {
            for keyword in keywords.iter_mut() {
                let first = keyword["alternatives"][0].clone();
                keyword["alternatives"] = first;
            }
        }
        object.remove("mode");
        if let Some(Value::Object(keys)) = object.get_mut("tag_scores") {
            for scores in keys.values_mut().filter_map(Value::as_object_mut) {
                for score in scores.values_mut() {
                    *score = Value::String(score.to_string());
                }
            }
        }
        if let Some(Value::Array(supports)) = object.get("supports").cloned() {
            let ids: Vec<&str> = supports.iter().filter_map(Value::as_str).collect();
            object.insert("supports".into(), Value::String(ids.join(", ")));
            object.remove("confidence");
        }
        object.insert("reasoning".into(), Value::String("as the memory shows".into()));
    }
    let pretty = serde_json::to_string_pretty(&value).unwrap();
    format!(
        "Sure, here is the JSON you asked for:\n```json\n{pretty}\n```\nLet me know if you need more."
    )
}

#[tokio::test]
async fn replies_shaped_like_a_real_models_are_read_without_reasks() {
    let agent = plausible_agent(AgentScript::default());
    let reshaped = Arc::new(AtomicUsize::new(0));
    let counter = Arc::new(AtomicUsize::new(0));
    let reshaped_by_responder = Arc::clone(&reshaped);
    let mut bench = Bench::with_responder(move |request: &RecordedRequest| {
        let reply = agent(request);
        let ScriptedReply::Text(text) = &reply else { return reply };
        let Ok(value) = serde_json::from_str::<Value>(text) else { return reply };
        // One reply in two.
        if counter.fetch_add(1, Ordering::SeqCst) % 2 == 1 {
            return reply;
        }
        reshaped_by_responder.fetch_add(1, Ordering::SeqCst);
        ScriptedReply::text(real_model_shape(&value))
    })
    .await;
    bench.settings.retrieval.k2 = 2;
    bench.settings.retrieval.tag_max = 1;
    let summary = bench.run(&[mechanical_memory(&fixture(), true).unwrap()]).await;
    assert_eq!((summary.answered, summary.errors), (9, 0), "{summary:?}");
    assert_eq!(summary.counts.fallbacks, 0, "{summary:?}");
    assert!(
        reshaped.load(Ordering::SeqCst) >= 15,
        "{} replies reshaped",
        reshaped.load(Ordering::SeqCst)
    );
    // No re-ask anywhere: every retrieval request is the first ask (system + user) ...
    for prompt in [&prompts::QUESTION_KEYWORDS, &prompts::RERANK, &prompts::ANSWER_TAG_SCORES] {
        let requests = retrieval_requests(&bench.server, prompt.text);
        assert!(!requests.is_empty(), "{} was asked", prompt.name);
        assert!(
            requests.iter().all(|request| request.messages().len() == 2),
            "{} re-asked",
            prompt.name
        );
    }
    // ... and no loop reply was rejected.
    for line in bench.lines("conv-7") {
        assert_eq!(line.status, Status::Ok, "{line:?}");
        let records = read_trace(&bench.settings.trace_path("conv-7", &line.question_id)).unwrap();
        assert!(
            !records.iter().any(|record| matches!(
                record.event,
                TraceEvent::Rejected { .. } | TraceEvent::Fallback { .. }
            )),
            "{}",
            line.question_id
        );
    }
}

/// A loop reply that is no usable answer is rejected and re-asked: the run counts it once, in
/// its summary and in its question's `finish` record.
#[tokio::test]
async fn a_rejected_then_reasked_reply_is_counted_once_per_run() {
    let agent = plausible_agent(AgentScript::default());
    let sloppy_sent = AtomicBool::new(false);
    let bench = Bench::with_responder(move |request: &RecordedRequest| {
        let loop_request = request.is_chat() && request.body.get("tools").is_some();
        if loop_request && !sloppy_sent.swap(true, Ordering::SeqCst) {
            return ScriptedReply::text(r#"{"answer": null}"#);
        }
        agent(request)
    })
    .await;
    let summary = bench.run(&[mechanical_memory(&fixture(), true).unwrap()]).await;
    assert_eq!((summary.answered, summary.errors), (9, 0), "{summary:?}");
    assert_eq!(summary.counts.rejected, 1, "{summary:?}");
    assert!(summary.to_string().contains("; 1 model replies rejected"), "{summary}");
    let mut traced = 0;
    for line in bench.lines("conv-7") {
        let records = read_trace(&bench.settings.trace_path("conv-7", &line.question_id)).unwrap();
        let rejected = records.iter().filter(|r| matches!(r.event, TraceEvent::Rejected { .. }));
        let finished = records.iter().find_map(|record| match record.event {
            TraceEvent::Finish { counts, .. } => Some(counts.rejected),
            _ => None,
        });
        assert_eq!(finished, Some(rejected.count() as u64), "{}", line.question_id);
        traced += finished.unwrap_or_default();
    }
    assert_eq!(traced, 1);
}

#[tokio::test]
async fn a_failing_keyword_step_falls_back_and_still_answers() {
    let agent = plausible_agent(AgentScript::default());
    let bench = Bench::with_responder(move |request: &RecordedRequest| {
        if system_of(request) == prompts::QUESTION_KEYWORDS.text {
            return ScriptedReply::text("The keywords are kitten and Lena.\u{1b}[0m");
        }
        agent(request)
    })
    .await;
    let summary = bench.run(&[mechanical_memory(&fixture(), true).unwrap()]).await;
    assert_eq!((summary.answered, summary.errors), (9, 0), "{summary:?}");
    assert!(summary.counts.fallbacks >= 9, "{summary:?}");
    assert!(summary.counts.rejected >= 27, "three rejected replies per question: {summary:?}");
    assert!(summary.to_string().contains("retrieval fallbacks"), "{summary}");
    let records = read_trace(&bench.settings.trace_path("conv-7", "conv-7:q1")).unwrap();
    let rejected: Vec<(&String, &String)> = records
        .iter()
        .filter_map(|record| match &record.event {
            TraceEvent::Rejected { step, reply, .. } if step == "question_keywords" => {
                Some((step, reply))
            }
            _ => None,
        })
        .collect();
    // The first ask and every re-ask, each kept with the reply escaped.
    assert_eq!(rejected.len(), 3, "{rejected:?}");
    assert!(rejected.iter().all(|(_, reply)| reply.contains("kitten and Lena")
        && reply.contains("\\u{1b}")
        && !reply.contains('\u{1b}')));
    assert!(records.iter().any(|record| matches!(&record.event,
        TraceEvent::Fallback { step, reason } if step == "question_keywords" && reason.contains("content words"))));
    // The deterministic keywords still reached the memory's keys.
    assert!(
        records.iter().any(|record| matches!(&record.event,
            TraceEvent::Retrieval { step, detail } if step == "keywords"
                && detail["matched_keys"].as_array().is_some_and(|keys| !keys.is_empty()))),
        "no key matched"
    );
    let rendered = render_trace(bench.root(), "conv-7:q1", &RenderOptions::default()).unwrap();
    assert!(
        rendered.contains("fallback question_keywords")
            && rendered.contains("rejected question_keywords"),
        "{rendered}"
    );
}

#[tokio::test]
async fn work_within_a_question_overlaps_and_keeps_call_order() {
    let latency = Duration::from_millis(150);
    let mut bench = Bench::new(AgentScript { latency, ..AgentScript::default() }).await;
    // One question at a time: any overlap is within a question.
    bench.settings.workers = 1;
    // Every key's tags get scored, and few candidates pass the cut, so every question has a
    // re-rank beside its tag scoring, and `query_event_keywords` scores several keys.
    bench.settings.retrieval.tag_max = 0;
    bench.settings.retrieval.k2 = 1;
    let summary = bench.run(&[mechanical_memory(&fixture(), true).unwrap()]).await;
    assert_eq!((summary.answered, summary.errors), (9, 0), "{summary:?}");
    let tags = retrieval_requests(&bench.server, prompts::ANSWER_TAG_SCORES.text);
    let reranks = retrieval_requests(&bench.server, prompts::RERANK.text);
    let close = |a: &RecordedRequest, b: &RecordedRequest| {
        let gap = if a.received_at > b.received_at {
            a.received_at - b.received_at
        } else {
            b.received_at - a.received_at
        };
        gap < latency / 2
    };
    // Tag scoring of several keys goes out in one request, not one after another ...
    let keywords_of = |request: &RecordedRequest| {
        let user: Value = serde_json::from_str(
            request.messages().get(1).and_then(|m| m["content"].as_str()).unwrap_or_default(),
        )
        .unwrap_or_default();
        user["keywords"].as_object().map_or(0, serde_json::Map::len)
    };
    let several = tags.iter().filter(|request| keywords_of(request) >= 2).count();
    assert!(several >= 5, "{several} of {} tag-score requests carry several keys", tags.len());
    // ... and beside the re-rank.
    let beside_rerank =
        reranks.iter().filter(|rerank| tags.iter().any(|tag| close(rerank, tag))).count();
    assert!(
        beside_rerank >= 5,
        "{beside_rerank} of {} re-ranks overlap tag scoring",
        reranks.len()
    );
    // Tool results come back in call order, and the trace keeps the call order.
    for request in bench.loop_requests() {
        assert_transcript_well_formed(&request);
    }
    for line in bench.lines("conv-7") {
        let records = read_trace(&bench.settings.trace_path("conv-7", &line.question_id)).unwrap();
        let mut calls_in_trace = Vec::new();
        let mut calls_asked = Vec::new();
        for record in &records {
            match &record.event {
                TraceEvent::ToolCall { call_id, .. } => calls_in_trace.push(call_id.clone()),
                TraceEvent::Response { message: Some(message), .. } => {
                    calls_asked.extend(message.tool_calls.iter().map(|call| call.id.clone()));
                }
                _ => {}
            }
        }
        let executed: Vec<&String> =
            calls_asked.iter().filter(|id| calls_in_trace.contains(id)).collect();
        assert_eq!(executed, calls_in_trace.iter().collect::<Vec<_>>(), "{}", line.question_id);
    }
}
