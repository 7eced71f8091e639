//! Issue 11's "done when" over real HTTP: every retry and hedge of a question shows in its
//! trace; a seeded 5% fault mix (429, 500, hung replies, truncated bodies) over the whole of
//! conv-26 (build and answers) ends with no ERROR row and no question idling behind a hung
//! request; a build whose replies skip or merge turns and skip keyword items still puts every
//! turn into memory and answers no question over an incomplete one.

use std::sync::Mutex;
use std::time::Instant;

use mragent::agent::scripted::Fault;
use mragent::llm::hedge::HedgePolicy;
use mragent::llm::scripted::{FaultMix, InjectedFault};
use mragent::prompts;

use super::*;

/// Hedging after a fixed `deadline` (the latency samples never reach `min_samples`).
fn fixed_hedge(deadline: Duration) -> HedgePolicy {
    HedgePolicy {
        initial: deadline,
        floor: deadline,
        min_samples: usize::MAX,
        ..HedgePolicy::default()
    }
}

fn finish_counts(records: &[mragent::agent::trace::TraceRecord]) -> (u64, u64) {
    records
        .iter()
        .find_map(|record| match &record.event {
            TraceEvent::Finish { counts, .. } => Some((counts.retries, counts.hedges)),
            _ => None,
        })
        .unwrap()
}

#[tokio::test]
async fn every_retry_and_hedge_shows_in_the_trace() {
    let hang = Duration::from_secs(20);
    let agent = plausible_agent(AgentScript {
        faults: vec![
            ("name of Lena's kitten".into(), Fault::StatusOnce(500)),
            ("marathon did Omar".into(), Fault::SlowOnce(hang)),
        ],
        latency: Duration::ZERO,
    });
    // The question-keyword call of the violin question gets a 500 once.
    let failed_once = Mutex::new(false);
    let responder = move |request: &RecordedRequest| {
        let system =
            request.messages().first().and_then(|m| m["content"].as_str()).unwrap_or_default();
        if system == prompts::QUESTION_KEYWORDS.text
            && request.transcript().contains("violin teacher")
            && !std::mem::replace(&mut *failed_once.lock().unwrap(), true)
        {
            return ScriptedReply::server_error(500);
        }
        agent(request)
    };
    let bench = Bench::with_config(responder, |config| {
        config.timeout = Duration::from_secs(30);
        config.hedge = fixed_hedge(Duration::from_millis(500));
    })
    .await;
    let started = Instant::now();
    let summary = bench.run(&[mechanical_memory(&fixture(), true).unwrap()]).await;
    let elapsed = started.elapsed();
    assert_eq!((summary.answered, summary.errors), (9, 0), "{summary:?}");
    assert!(elapsed < hang / 4, "the hung reply held the run: {elapsed:?}");
    let trace = |id: &str| read_trace(&bench.settings.trace_path("conv-7", id)).unwrap();

    // A loop request answered 500, then retried.
    let retried = trace("conv-7:q1");
    let calls = retried
        .iter()
        .find_map(|record| match &record.event {
            TraceEvent::Response { round: 1, calls, .. } => Some(calls.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(calls.attempts, 2, "{calls:?}");
    assert!(calls.retries[0].reason.contains("500"), "{calls:?}");
    assert!(finish_counts(&retried).0 >= 1);

    // A hung loop request raced by a hedge, which answered.
    let hedged = trace("conv-7:q3");
    let calls = hedged
        .iter()
        .find_map(|record| match &record.event {
            TraceEvent::Response { round: 1, calls, .. } => Some(calls.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!((calls.attempts, calls.hedges, calls.hedge_won), (1, 1, true), "{calls:?}");
    assert!(finish_counts(&hedged).1 >= 1);

    // A retried retrieval call keeps its retries in its `llm` record.
    let keywords = trace("conv-7:q5");
    assert!(
        keywords.iter().any(|record| matches!(&record.event,
            TraceEvent::Llm { purpose, calls, .. } if purpose == "question_keywords"
                && calls.first().is_some_and(|call| call.retries.len() == 1
                    && call.retries[0].reason.contains("500")))),
        "{keywords:?}"
    );

    // `mragent trace` shows them.
    let options = RenderOptions::default();
    let shown = render_trace(bench.root(), "conv-7:q1", &options).unwrap();
    assert!(shown.contains("attempt 1 failed") && shown.contains("1 retries"), "{shown}");
    let shown = render_trace(bench.root(), "conv-7:q3", &options).unwrap();
    assert!(shown.contains("hedged") && shown.contains("the hedge answered"), "{shown}");
    let shown = render_trace(bench.root(), "conv-7:q5", &options).unwrap();
    assert!(shown.contains("attempt 1 failed"), "{shown}");
    eprintln!("trace: 500 retried, {hang:?} hang hedged at 500 ms; run took {elapsed:?}");
}

/// Longest stretch without a request arriving at the server.
fn longest_idle(server: &ScriptedServer) -> Duration {
    let mut arrivals: Vec<Instant> = server.requests().iter().map(|r| r.received_at).collect();
    arrivals.sort();
    arrivals.windows(2).map(|pair| pair[1] - pair[0]).max().unwrap_or_default()
}

#[tokio::test]
async fn a_five_percent_fault_mix_over_conv_26_ends_with_no_error_row_and_no_idle_wait() {
    let conversation = locomo("conv-26");
    let hang = Duration::from_secs(30);
    let timeout = Duration::from_secs(5);
    let (responder, faults) = FaultMix::new(26, 0.05, hang).wrap(build_and_answer(|_| None));
    let mut bench = Bench::with_config(responder, |config| {
        config.timeout = timeout;
        config.retry = RetryPolicy {
            max_attempts: 6,
            base_delay: Duration::from_millis(10),
            max_delay: Duration::from_millis(50),
            max_retry_after: Duration::from_secs(2),
        };
        config.hedge = HedgePolicy {
            initial: Duration::from_millis(500),
            floor: Duration::from_millis(500),
            ..HedgePolicy::default()
        };
    })
    .await;
    bench.settings.workers = 16;
    let mut build_settings = crate::support::build_settings(bench.root());
    build_settings.workers = 8;

    let started = Instant::now();
    let built =
        build_memory(&build_settings, &bench.chat, &bench.embedder, &conversation).await.unwrap();
    assert!(built.summary.failed.is_empty(), "{:?}", built.summary);
    let build_wall = started.elapsed();
    let build_hangs = faults.count(InjectedFault::Hang);
    let memory = Snapshot::from_built(conversation.clone(), built);
    let summary = bench.run(&[memory]).await;
    let wall = started.elapsed();

    // Exit 0: every question answered, none failed, none pending, nothing left to resume.
    let total = conversation.questions.len();
    assert_eq!(total, 199);
    assert_eq!((summary.answered, summary.errors, summary.pending), (total, 0, 0), "{summary:?}");
    assert!(summary.resume_hint().is_none(), "{summary:?}");
    let lines = bench.lines("conv-26");
    assert_eq!(lines.len(), total);
    assert!(lines.iter().all(|line| line.status == Status::Ok));
    for kind in [
        InjectedFault::RateLimited,
        InjectedFault::ServerError,
        InjectedFault::Hang,
        InjectedFault::Truncated,
    ] {
        assert!(faults.count(kind) > 0, "no {kind:?} injected: {faults}");
    }

    // No question waited for a hang: the slowest question took far less than one hang, the
    // endpoint never went quiet for long, and every hang was raced by a hedge.
    let slowest = lines.iter().map(|line| line.latency_ms).max().unwrap();
    assert!(Duration::from_millis(slowest) < hang / 3, "a question took {slowest} ms");
    let idle = longest_idle(&bench.server);
    // A third of a hang, as for the slowest question: a hang waited out would be quiet for all
    // of it, while a loaded 2-core machine running the rest of the suite can stall the run for
    // a few seconds (seen once: 4.9 s).
    assert!(idle < hang / 3, "no request for {idle:?}");
    assert!(wall < hang, "took {wall:?}");
    let hedges = bench.chat.usage().hedges;
    // A hedge drawn a hang of its own (its request hung less than a timeout after the one it
    // raced) cannot be raced in turn: the attempt times out and is retried.
    let hung_hedges = faults.hung_behind_a_hang(timeout);
    let raceable = faults.count(InjectedFault::Hang) - hung_hedges;
    assert!(
        hedges >= raceable as u64,
        "{hedges} hedges for {raceable} raceable hangs ({hung_hedges} hung hedges), {faults}"
    );
    // The answer phase's hedges and retries are in the question traces.
    let (mut traced_retries, mut traced_hedges) = (0, 0);
    for line in &lines {
        let records = read_trace(&bench.settings.trace_path("conv-26", &line.question_id)).unwrap();
        let (retries, hedges) = finish_counts(&records);
        traced_retries += retries;
        traced_hedges += hedges;
    }
    let answer_hangs = faults.count(InjectedFault::Hang) - build_hangs;
    assert!(traced_retries > 0, "no retry in any trace ({faults})");
    assert!(answer_hangs == 0 || traced_hedges > 0, "{answer_hangs} hangs, no hedge traced");
    eprintln!(
        "fault mix over conv-26: {faults}; build {build_wall:?}, total {wall:?}; slowest question {slowest} ms; longest idle {idle:?}; {hedges} hedges; traced {traced_retries} retries, {traced_hedges} hedges; 0 ERROR rows"
    );
}

#[tokio::test]
async fn a_build_that_skips_and_merges_turns_still_answers_every_question_over_full_memory() {
    let conversation = locomo("conv-30");
    let mut bench = Bench::with_responder(build_and_answer(crate::ingest::repair::sloppy)).await;
    bench.settings.workers = 10;
    let build_settings = crate::support::build_settings(bench.root());
    let built =
        build_memory(&build_settings, &bench.chat, &bench.embedder, &conversation).await.unwrap();
    assert!(built.summary.failed.is_empty(), "{:?}", built.summary);
    let repairs = built.summary.repairs;
    assert!(repairs.salvaged_turns > 0 && repairs.salvaged_keyword_sentences > 0, "{repairs:?}");
    let memory = Snapshot::from_built(conversation.clone(), built);
    for turn in conversation.sessions.iter().flat_map(|session| &session.turns) {
        assert!(memory.graph.episodes_of_turn(&turn.dia_id).next().is_some(), "{}", turn.dia_id);
    }
    let summary = bench.run(&[memory]).await;
    let total = conversation.questions.len();
    assert_eq!((summary.answered, summary.errors, summary.pending), (total, 0, 0), "{summary:?}");
    assert!(bench.lines("conv-30").iter().all(|line| line.status == Status::Ok));
}
