//! MemGAS's LLM granules (session summary and keywords) end to end through the scripted
//! OpenAI-compatible endpoint over real HTTP on 127.0.0.1, with the real client stack and a
//! responder that answers by request content. Covers a whole run, a rerun that asks nothing,
//! resume after a kill, re-asks, failed sessions, prompt-version invalidation, bounded
//! concurrency, and the granules feeding the retrieval evaluation as summary and keyword units.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mragent::dataset::{Conversation, DatasetKind, load_locomo, load_longmemeval};
use mragent::ingest::{BuildSettings, GranuleSummary, Stage, build_granules, load_granules};
use mragent::llm::scripted::{RecordedRequest, ScriptedReply, ScriptedServer};
use mragent::llm::{Client, build_chat_model};
use mragent::retrieval::{Granularity, Method};
use mragent::tune::{RetrieveSettings, run_retrieval_eval};
use regex::Regex;
use serde_json::{Value, json};
use tokio::sync::Notify;

use crate::support;

fn fixture() -> Vec<Conversation> {
    support::load_fixture("tests/fixtures/granules/six_sessions.json")
}

/// The session number a granule request is about (from the first user message).
fn session_of(request: &RecordedRequest) -> u32 {
    let prompt = request.messages()[0]["content"].as_str().unwrap();
    let header = Regex::new(r"(?m)^Session D(\d+), date: ").unwrap();
    header.captures(prompt).expect("the prompt shows the session header")[1].parse().unwrap()
}

/// A well-behaved answer: the first turn as the summary, the capitalised words as keywords.
fn good_answer(request: &RecordedRequest) -> Value {
    let prompt = request.messages()[0]["content"].as_str().unwrap();
    let turn = Regex::new(r"(?m)^\[D\d+:\d+\] ([^:]+): (.*)$").unwrap();
    let turns: Vec<(String, String)> =
        turn.captures_iter(prompt).map(|c| (c[1].to_string(), c[2].to_string())).collect();
    let (speaker, first) = &turns[0];
    let mut keywords: Vec<&str> = Vec::new();
    for (_, text) in &turns {
        for word in text.split(|c: char| !c.is_alphanumeric()) {
            if word.chars().next().is_some_and(char::is_uppercase) && !keywords.contains(&word) {
                keywords.push(word);
            }
        }
    }
    json!({
        "summary": format!("Session {}: {speaker} opened with \"{first}\"", session_of(request)),
        "keywords": keywords,
    })
}

/// A run environment: a scripted server answering by content, a cache directory, the real
/// client stack.
struct Harness {
    server: ScriptedServer,
    _dir: tempfile::TempDir,
    settings: BuildSettings,
    chat: Client,
}

impl Harness {
    /// `answer` may override the good answer for a request.
    async fn new(
        answer: impl Fn(&RecordedRequest) -> Option<ScriptedReply> + Send + Sync + 'static,
    ) -> Self {
        let server = ScriptedServer::with_responder(move |request| {
            answer(request).unwrap_or_else(|| ScriptedReply::json(&good_answer(request)))
        })
        .await
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let chat = build_chat_model(&support::client_config(&server)).unwrap();
        let mut settings = support::build_settings(dir.path());
        settings.workers = 3;
        settings.max_reasks = 2;
        Self { server, _dir: dir, settings, chat }
    }

    async fn run(&self, conversations: &[Conversation]) -> GranuleSummary {
        build_granules(&self.settings, &self.chat, conversations).await.unwrap()
    }

    fn requests(&self) -> Vec<RecordedRequest> {
        self.server.requests()
    }

    fn cache_path(&self) -> PathBuf {
        self.settings.granules_path("conv-granules")
    }
}

/// Requests per session among `requests`.
fn per_session(requests: &[RecordedRequest]) -> BTreeMap<u32, usize> {
    let mut counts = BTreeMap::new();
    for request in requests {
        *counts.entry(session_of(request)).or_insert(0) += 1;
    }
    counts
}

#[tokio::test]
async fn a_small_conversation_gets_its_granules_and_a_rerun_asks_nothing() {
    let harness = Harness::new(|_| None).await;
    let conversations = fixture();
    assert_eq!(load_granules(&harness.settings, &conversations[0]).unwrap(), None);

    let summary = harness.run(&conversations).await;
    assert!(summary.is_complete(), "{summary}");
    let sample = &summary.samples[0];
    assert_eq!((sample.sessions, sample.sessions_reused, sample.chat_calls), (6, 0, 6));
    assert!(summary.usage.total() > 0);
    assert!(
        summary.to_string().starts_with(
            "granules of 1 conversations, 6 sessions (0 from cache), 0 failed, 6 calls"
        )
    );

    let requests = harness.requests();
    assert_eq!(per_session(&requests), (1..=6).map(|s| (s, 1)).collect());
    let first = requests.iter().find(|r| session_of(r) == 2).unwrap();
    assert_eq!(first.messages().len(), 1);
    assert_eq!(first.body["temperature"], json!(0.0));
    let prompt = first.messages()[0]["content"].as_str().unwrap();
    assert!(prompt.contains("conversation between Lena and Ravi,"), "{prompt}");
    assert!(
        prompt.contains(
            "Session D2, date: 6:40 pm on 21 January, 2023 (2023-01-21)\n[D2:1] Ravi: I went to the climbing gym"
        ),
        "{prompt}"
    );
    assert!(prompt.contains("[D2:3] Ravi: Only on the easiest wall, my arms were shaking afterwards. and shared a photo of a bouldering wall"));

    let granules = load_granules(&harness.settings, &conversations[0]).unwrap().unwrap();
    assert!(granules.is_complete());
    let ids: Vec<&str> = granules.sessions.iter().map(|s| s.session_id.as_str()).collect();
    assert_eq!(ids, ["D1", "D2", "D3", "D4", "D5", "D6"]);
    let d4 = granules.get("D4").unwrap();
    assert_eq!(
        d4.summary,
        "Session 4: Ravi opened with \"My company is moving me to the Lisbon office for three months.\""
    );
    assert_eq!(d4.keywords, ["My", "Lisbon", "When", "At", "March", "I"]);
    assert_eq!(d4.keyword_text(), "My; Lisbon; When; At; March; I");

    let file: Value =
        serde_json::from_str(&std::fs::read_to_string(harness.cache_path()).unwrap()).unwrap();
    assert!(
        harness.cache_path().ends_with("locomo/memgas_test/conv-granules_granules.json"),
        "{}",
        harness.cache_path().display()
    );
    assert_eq!(file["stage"], "granules");
    assert_eq!(file["model"], "test-model");
    assert_eq!(
        file["versions"]["memgas_granules"],
        json!(mragent::prompts::MEMGAS_GRANULES.version())
    );
    assert_eq!(file["units"][3]["output"]["summary"], json!(d4.summary));

    let again = harness.run(&conversations).await;
    assert!(again.is_complete(), "{again}");
    assert_eq!((again.samples[0].sessions_reused, again.chat_calls()), (6, 0));
    assert_eq!(harness.requests().len(), requests.len(), "finished granules are not asked again");
}

#[tokio::test]
async fn a_killed_run_resumes_without_re_requesting_finished_sessions() {
    let kill = Arc::new(Notify::new());
    let seen = Arc::new(AtomicUsize::new(0));
    let mut harness = {
        let (kill, seen) = (Arc::clone(&kill), Arc::clone(&seen));
        Harness::new(move |_| {
            if seen.fetch_add(1, Ordering::SeqCst) + 1 == 4 {
                kill.notify_one();
            }
            None
        })
        .await
    };
    // Two workers: the fourth request goes out only after two sessions are written.
    harness.settings.workers = 2;
    let conversations = fixture();
    tokio::select! {
        summary = build_granules(&harness.settings, &harness.chat, &conversations) => {
            panic!("the run should have been killed: {}", summary.unwrap());
        }
        () = kill.notified() => {}
    }
    // The dropped run's cache writer (blocking pool) either renamed its file or left the old one.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let first_run = harness.requests();
    let finished = support::done_in_cache(&harness.cache_path());
    assert!(finished.len() >= 2 && finished.len() < 6, "{finished:?}");
    let partial = load_granules(&harness.settings, &conversations[0]).unwrap().unwrap();
    assert_eq!(partial.sessions.len(), finished.len());
    assert_eq!(partial.missing.len(), 6 - finished.len());

    let summary = harness.run(&conversations).await;
    assert!(summary.is_complete(), "{summary}");
    assert_eq!(summary.samples[0].sessions_reused, finished.len());
    let second_run = harness.requests()[first_run.len()..].to_vec();
    let asked_again: BTreeSet<u32> = per_session(&second_run).into_keys().collect();
    assert!(
        asked_again.is_disjoint(&finished),
        "finished {finished:?}, asked again {asked_again:?}"
    );
    assert_eq!(asked_again.len() + finished.len(), 6);
    let all = per_session(&harness.requests());
    for session in &finished {
        assert_eq!(all[session], 1, "session {session} was asked twice");
    }
    assert!(load_granules(&harness.settings, &conversations[0]).unwrap().unwrap().is_complete());
}

#[tokio::test]
async fn invalid_answers_are_re_asked_with_the_reason() {
    let harness = Harness::new(|request| {
        let first_try = request.messages().len() == 1;
        match session_of(request) {
            // Schema-invalid: no `keywords`.
            1 if first_try => Some(ScriptedReply::json(&json!({"summary": "Lena talked."}))),
            // Schema-valid but blank once trimmed: re-asked by the semantic check.
            2 if first_try => {
                Some(ScriptedReply::json(&json!({"summary": "  ", "keywords": [" ", " ; "]})))
            }
            _ => None,
        }
    })
    .await;
    let summary = harness.run(&fixture()).await;
    assert!(summary.is_complete(), "{summary}");
    assert_eq!(summary.chat_calls(), 8);
    let requests = harness.requests();
    assert_eq!(
        per_session(&requests),
        BTreeMap::from([(1, 2), (2, 2), (3, 1), (4, 1), (5, 1), (6, 1)])
    );
    let reask = |session| {
        requests
            .iter()
            .find(|r| session_of(r) == session && r.messages().len() == 3)
            .map(|r| r.last_message_text().to_string())
            .unwrap()
    };
    assert!(reask(1).contains("keywords"), "{}", reask(1));
    assert!(reask(2).contains("`summary` is blank"), "{}", reask(2));
    assert!(reask(2).contains("`keywords` has no keyword"), "{}", reask(2));
    let granules = load_granules(&harness.settings, &fixture()[0]).unwrap().unwrap();
    assert!(granules.get("D1").unwrap().summary.starts_with("Session 1: Lena opened with"));
    assert!(granules.get("D2").unwrap().summary.starts_with("Session 2: Ravi opened with"));
}

#[tokio::test]
async fn a_session_that_stays_invalid_is_reported_failed_and_never_stored() {
    let harness = Harness::new(|request| {
        (session_of(request) == 3)
            .then(|| ScriptedReply::json(&json!({"summary": "fine", "keywords": ["  "]})))
    })
    .await;
    let conversations = fixture();
    let summary = harness.run(&conversations).await;
    let failed: Vec<_> = summary.failed().collect();
    assert_eq!(failed.len(), 1, "{summary}");
    assert_eq!(
        (
            failed[0].unit.as_str(),
            failed[0].stage,
            failed[0].attempts,
            failed[0].sessions.as_slice()
        ),
        ("session_3", Stage::Granules, 3, &[3][..])
    );
    assert!(failed[0].error.contains("still invalid after 2 re-asks"), "{}", failed[0].error);
    assert!(
        summary.to_string().contains("failed: conv-granules session_3 (granules):"),
        "{summary}"
    );
    let cache = std::fs::read_to_string(harness.cache_path()).unwrap();
    assert_eq!(cache.matches("\"status\": \"failed\"").count(), 1, "{cache}");
    let granules = load_granules(&harness.settings, &conversations[0]).unwrap().unwrap();
    assert_eq!(granules.missing, ["D3"]);
    assert!(granules.get("D3").is_none());
    assert_eq!(granules.sessions.len(), 5);
}

#[tokio::test]
async fn failed_sessions_are_reported_and_the_next_run_retries_only_those() {
    let healthy = Arc::new(AtomicBool::new(false));
    let harness = {
        let healthy = Arc::clone(&healthy);
        Harness::new(move |request| {
            let failing = !healthy.load(Ordering::SeqCst) && matches!(session_of(request), 2 | 5);
            failing.then(|| ScriptedReply::Status {
                status: 400,
                message: "provider rejected the request".into(),
            })
        })
        .await
    };
    let conversations = fixture();
    let summary = harness.run(&conversations).await;
    assert!(!summary.is_complete());
    let failed: Vec<&str> = summary.failed().map(|unit| unit.unit.as_str()).collect();
    assert_eq!(failed, ["session_2", "session_5"]);
    assert!(summary.failed().all(|unit| unit.error.contains("400")), "{summary}");
    assert_eq!(support::done_in_cache(&harness.cache_path()), BTreeSet::from([1, 3, 4, 6]));
    let granules = load_granules(&harness.settings, &conversations[0]).unwrap().unwrap();
    assert_eq!(granules.missing, ["D2", "D5"]);

    let before = harness.requests().len();
    healthy.store(true, Ordering::SeqCst);
    let summary = harness.run(&conversations).await;
    assert!(summary.is_complete(), "{summary}");
    assert_eq!(summary.samples[0].sessions_reused, 4);
    let rerun = harness.requests()[before..].to_vec();
    assert_eq!(per_session(&rerun), BTreeMap::from([(2, 1), (5, 1)]));
    assert!(load_granules(&harness.settings, &conversations[0]).unwrap().unwrap().is_complete());
}

#[tokio::test]
async fn a_changed_prompt_or_model_invalidates_the_cache_with_a_message() {
    let mut harness = Harness::new(|_| None).await;
    let conversations = fixture();
    harness.run(&conversations).await;

    // Simulate granules made with an older prompt text.
    let path = harness.cache_path();
    let mut file: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    file["versions"]["memgas_granules"] = json!("000000000000");
    std::fs::write(&path, serde_json::to_string_pretty(&file).unwrap()).unwrap();
    assert_eq!(
        load_granules(&harness.settings, &conversations[0]).unwrap(),
        None,
        "stale granules are never handed out"
    );
    let before = harness.requests().len();
    let summary = harness.run(&conversations).await;
    assert!(summary.is_complete(), "{summary}");
    assert_eq!(summary.notices.len(), 1, "{:?}", summary.notices);
    assert!(
        summary.notices[0].contains(
            "made with prompt `memgas_granules` version 000000000000, the current version is"
        ),
        "{}",
        summary.notices[0]
    );
    assert!(summary.notices[0].contains("conv-granules_granules.json"), "{}", summary.notices[0]);
    assert!(summary.to_string().contains("note: granules cache"), "{summary}");
    assert_eq!(harness.requests().len() - before, 6, "every session is asked again");

    // Another model id: the same.
    harness.settings.model = "other-model".into();
    let before = harness.requests().len();
    let summary = harness.run(&conversations).await;
    assert!(
        summary.notices[0].contains("made with model test-model, the build now uses other-model")
    );
    assert_eq!(harness.requests().len() - before, 6);
    assert_eq!(harness.requests().last().unwrap().body["model"], "other-model");
}

#[tokio::test]
async fn a_changed_session_is_asked_again_and_the_others_are_kept() {
    let harness = Harness::new(|_| None).await;
    let mut conversations = fixture();
    harness.run(&conversations).await;
    conversations[0].sessions[4].turns[0].text = "I found a violin teacher in Porto.".into();
    let before = harness.requests().len();
    let summary = harness.run(&conversations).await;
    assert!(summary.is_complete() && summary.notices.is_empty(), "{summary}");
    assert_eq!(per_session(&harness.requests()[before..]), BTreeMap::from([(5, 1)]));
    let granules = load_granules(&harness.settings, &conversations[0]).unwrap().unwrap();
    assert!(granules.get("D5").unwrap().keywords.contains(&"Porto".to_string()));
}

#[tokio::test]
async fn longmemeval_sessions_are_framed_as_user_and_assistant() {
    let mut harness = Harness::new(|_| None).await;
    harness.settings.dataset = DatasetKind::LongMemEval;
    harness.settings.lm_batch = 2;
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/longmemeval_tiny.json");
    let conversations = load_longmemeval(&path).unwrap();
    let summary = harness.run(&conversations).await;
    assert!(summary.is_complete(), "{summary}");
    let sessions: usize = conversations.iter().map(|c| c.sessions.len()).sum();
    assert_eq!(harness.requests().len(), sessions, "one call per session, whatever the batch");
    assert!(harness.requests().iter().all(|r| {
        r.messages()[0]["content"].as_str().unwrap().contains("between a user and an AI assistant")
    }));
    let sample = &conversations[0].sample_id;
    assert!(
        harness.settings.granules_path(sample).starts_with(harness.settings.data_dir.join("LM"))
    );
    let granules = load_granules(&harness.settings, &conversations[0]).unwrap().unwrap();
    assert_eq!(granules.sessions.len(), conversations[0].sessions.len());
}

/// Sessions of several conversations run concurrently, never more than `workers` at once (a
/// multi-thread runtime, so the responder's blocking sleep does not stall the client).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sessions_run_concurrently_up_to_the_worker_limit() {
    let in_flight = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(Mutex::new(0usize));
    let harness = {
        let (in_flight, peak) = (Arc::clone(&in_flight), Arc::clone(&peak));
        Harness::new(move |_| {
            let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            {
                let mut peak = peak.lock().unwrap();
                *peak = (*peak).max(now);
            }
            std::thread::sleep(Duration::from_millis(30));
            in_flight.fetch_sub(1, Ordering::SeqCst);
            None
        })
        .await
    };
    let mut second = fixture().remove(0);
    second.sample_id = "conv-granules-2".into();
    let conversations = vec![fixture().remove(0), second];
    let summary = harness.run(&conversations).await;
    assert!(summary.is_complete(), "{summary}");
    assert_eq!(harness.requests().len(), 12);
    let peak = *peak.lock().unwrap();
    assert!(peak >= 2 && peak <= harness.settings.workers, "peak {peak}");
}

/// The retrieval evaluation picks the granules up as summary and keyword units, and says so;
/// with a session missing it falls back to session and turn units and names the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retrieval_uses_the_granules_as_summary_and_keyword_units() {
    let broken = Arc::new(AtomicBool::new(true));
    let harness = {
        let broken = Arc::clone(&broken);
        Harness::new(move |request| {
            (broken.load(Ordering::SeqCst) && session_of(request) == 4).then(|| {
                ScriptedReply::Status { status: 400, message: "provider rejected it".into() }
            })
        })
        .await
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let data_path = root.join("tests/fixtures/embedding/locomo_retrieval.json");
    let conversations = load_locomo(&data_path).unwrap();
    let model_dir = mragent::settings::model_source(&root.join("data")).resolve().unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let mut settings = RetrieveSettings::new(root, DatasetKind::Locomo);
    settings.data_path = data_path;
    settings.data_dir = scratch.path().join("data");
    settings.eval_dir = scratch.path().join("eval");
    settings.embed_model_dir = Some(model_dir);
    settings.methods = vec![Method::Summary, Method::Keyword, Method::Memgas];
    settings.granules = Some(harness.settings.clone());
    let settings_dir = settings.output_dir();
    let evaluate = |settings: RetrieveSettings| async move {
        tokio::task::spawn_blocking(move || run_retrieval_eval(&settings).unwrap()).await.unwrap()
    };

    let report = evaluate(settings.clone()).await;
    assert_eq!(report.granularities, [Granularity::Session, Granularity::Turn]);
    assert!(report.notes.iter().any(|n| n.contains("no LLM granules in")), "{:?}", report.notes);
    let memgas_of = |report: &mragent::tune::RetrieveReport| {
        report.methods.iter().find(|m| m.method == Method::Memgas).unwrap().overall.clone()
    };
    let without_granules = memgas_of(&report);
    assert!(report.methods.iter().find(|m| m.method == Method::Summary).unwrap().skipped.is_some());

    let summary = harness.run(&conversations).await;
    assert_eq!(summary.failed().count(), 1, "{summary}");
    let report = evaluate(settings.clone()).await;
    assert_eq!(report.granularities, [Granularity::Session, Granularity::Turn]);
    assert!(
        report.notes.iter().any(|n| n == "tiny-retrieval: no LLM granules for D4."),
        "{:?}",
        report.notes
    );
    assert!(report.notes.iter().any(|n| n.contains("7 of 8 sessions")), "{:?}", report.notes);

    broken.store(false, Ordering::SeqCst);
    assert!(harness.run(&conversations).await.is_complete());
    let report = evaluate(settings).await;
    assert_eq!(
        report.granularities,
        [Granularity::Session, Granularity::Turn, Granularity::Summary, Granularity::Keyword]
    );
    // 8 sessions × (session + summary + keyword) + 49 turns.
    assert_eq!(report.graph_nodes, 73);
    assert!(report.methods.iter().all(|m| m.skipped.is_none()), "{:?}", report.notes);
    assert!(
        report.notes.iter().any(|n| n == "LLM granules of model `test-model`: 8 of 8 sessions."),
        "{:?}",
        report.notes
    );
    assert!(report.markdown.contains("granularities: session, turn, summary, keyword"));
    // MemGAS with the summary and keyword units ranks at least as well as without them, and
    // its router weighs all four granularities, differently from question to question.
    let with_granules = memgas_of(&report);
    for k in [1, 3, 5] {
        let at = |table: &mragent::tune::metrics::MetricTable| {
            table.session_at("recall_all", k).unwrap()
        };
        assert!(at(&with_granules) >= at(&without_granules), "@{k}: {with_granules:?}");
    }
    let lines = std::fs::read_to_string(settings_dir.join("memgas.jsonl")).unwrap();
    let weights: BTreeSet<String> = lines
        .lines()
        .map(|line| {
            let value: Value = serde_json::from_str(line).unwrap();
            let pairs = value["router_weights"].as_array().unwrap().clone();
            assert_eq!(pairs.len(), 4);
            format!("{:.3}", pairs[0][1].as_f64().unwrap())
        })
        .collect();
    assert!(weights.len() > 1, "{weights:?}");
}
