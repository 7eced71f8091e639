//! The build stages end to end through the scripted OpenAI-compatible endpoint over real HTTP
//! on 127.0.0.1: the real client stack, a responder that answers by request content (a valid
//! rewrite generated mechanically from the dialogue in the prompt, keywords from the sentences
//! in the prompt), hashed embeddings. Covers a whole build, resume after a kill or failures,
//! re-asks, failed units and cache invalidation by prompt version.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mragent::dataset::load_longmemeval;
use mragent::dataset::{Conversation, DatasetKind};
use mragent::ingest::{BuildSettings, BuildSummary, Stage, build, build_memory, load_memory};
use mragent::llm::scripted::{RecordedRequest, ScriptedReply, ScriptedServer};
use mragent::llm::{Client, EmbedClient, Embedder as _, build_chat_model};
use regex::Regex;
use serde_json::{Value, json};
use tokio::sync::Notify;

use crate::support::{self, locomo};

pub(crate) mod repair;

fn fixture() -> Vec<Conversation> {
    support::load_fixture("tests/fixtures/ingest/tiny_conversation.json")
}

/// What the responder sees in a chat request.
enum Ask {
    /// A rewrite request: the sessions' dates and turns as rendered in the prompt.
    Rewrite { sessions: Vec<(u32, Option<String>)>, turns: Vec<(String, String, String)> },
    /// A keyword request: the sentences' ids and texts.
    Keywords(Vec<(String, String)>),
}

/// Parse the first user message of a chat request.
fn parse_ask(request: &RecordedRequest) -> Ask {
    let prompt = request
        .messages()
        .first()
        .and_then(|message| message["content"].as_str())
        .unwrap_or_default()
        .to_string();
    parse_prompt(&prompt)
}

/// Parse a prompt as a model would, never failing: a turn line is `[D<n>:<m>] speaker: text`,
/// split at the first `: ` (a speaker holding `: ` is cut there; a line without one is all
/// speaker); a prompt with no turn line is a keyword request, its sentences those of the first
/// line that parses as a JSON list of `{id, text}` (none when there is no such line).
fn parse_prompt(prompt: &str) -> Ask {
    let turn = Regex::new(r"(?m)^\[(D\d+:\d+)\] (.*)$").unwrap();
    let session =
        Regex::new(r"(?m)^Session D(\d+), date: .*?(?:\((\d{4}-\d{2}-\d{2})\))?$").unwrap();
    let turns: Vec<(String, String, String)> = turn
        .captures_iter(prompt)
        .map(|c| {
            let (speaker, text) = c[2].split_once(": ").unwrap_or((&c[2], ""));
            (c[1].to_string(), speaker.to_string(), text.to_string())
        })
        .collect();
    if !turns.is_empty() {
        let sessions = session
            .captures_iter(prompt)
            .filter_map(|c| Some((c[1].parse().ok()?, c.get(2).map(|m| m.as_str().to_string()))))
            .collect();
        return Ask::Rewrite { sessions, turns };
    }
    let items = prompt
        .lines()
        .filter(|line| line.starts_with("[{\"id\""))
        .find_map(|line| serde_json::from_str::<Vec<Value>>(line).ok())
        .unwrap_or_default();
    Ask::Keywords(
        items
            .iter()
            .filter_map(|item| {
                Some((item["id"].as_str()?.to_string(), item["text"].as_str()?.to_string()))
            })
            .collect(),
    )
}

/// A valid rewrite of the parsed dialogue: one sentence per turn dated with its session,
/// one topic per session, one personal fact per speaker.
fn mechanical_rewrite(
    sessions: &[(u32, Option<String>)],
    turns: &[(String, String, String)],
) -> Value {
    // `D<n>:<m>` (the turn pattern) gives `n`.
    let number = |dia_id: &str| -> Option<u32> { dia_id.get(1..)?.split(':').next()?.parse().ok() };
    let date_of = |dia_id: &str| {
        let number = number(dia_id)?;
        sessions.iter().find(|(index, _)| *index == number).and_then(|(_, date)| date.clone())
    };
    let topic_of = |dia_id: &str| format!("t{}", number(dia_id).unwrap_or(0));
    let sentences: Vec<Value> = turns
        .iter()
        .map(|(dia_id, speaker, text)| {
            json!({"id": format!("{dia_id}-1"), "origin": dia_id, "text": format!("{speaker} said: {text}"),
                   "tag": "Chat", "time": date_of(dia_id), "topic": [topic_of(dia_id)]})
        })
        .collect();
    let topics: serde_json::Map<String, Value> = sessions
        .iter()
        .map(|(index, _)| (format!("t{index}"), json!(format!("What was said in session {index}"))))
        .collect();
    let mut speakers: Vec<(&str, &str)> = Vec::new();
    for (dia_id, speaker, _) in turns {
        if !speakers.iter().any(|(known, _)| known == speaker) {
            speakers.push((speaker, dia_id));
        }
    }
    let personal: Vec<Value> = speakers
        .iter()
        .enumerate()
        .map(|(n, (speaker, dia_id))| {
            json!({"id": format!("p{}", n + 1), "person": speaker, "tag": "Talk", "text": format!("{speaker} likes to talk"), "origin": dia_id})
        })
        .collect();
    json!({"conversation_time": sessions.first().and_then(|(_, date)| date.clone()), "sentence": sentences, "topics": topics, "personal_sentences": personal})
}

/// Keywords for sentences: the capitalised words of each text.
fn mechanical_keywords(sentences: &[(String, String)]) -> Value {
    let items: Vec<Value> = sentences
        .iter()
        .map(|(id, text)| {
            let words: Vec<&str> = text
                .split(|c: char| !c.is_alphanumeric())
                .filter(|word| word.chars().next().is_some_and(char::is_uppercase))
                .collect();
            json!({"sentence_id": id, "keyword": words})
        })
        .collect();
    json!({"sentence": items})
}

/// The session a rewrite request is about (its first session), if it is one.
fn rewrite_session(request: &RecordedRequest) -> Option<u32> {
    match parse_ask(request) {
        Ask::Rewrite { sessions, .. } => sessions.first().map(|(index, _)| *index),
        Ask::Keywords(_) => None,
    }
}

fn is_rewrite(request: &RecordedRequest) -> bool {
    request.is_chat() && rewrite_session(request).is_some()
}

fn is_keywords(request: &RecordedRequest) -> bool {
    request.is_chat() && rewrite_session(request).is_none()
}

/// The answer a well-behaved model gives.
pub(crate) fn good_answer(request: &RecordedRequest) -> Value {
    match parse_ask(request) {
        Ask::Rewrite { sessions, turns } => mechanical_rewrite(&sessions, &turns),
        Ask::Keywords(sentences) => mechanical_keywords(&sentences),
    }
}

/// A responder: embeddings hashed, chat answered by `answer` (which may return `None` for
/// the good answer).
pub(crate) fn responder(
    answer: impl Fn(&RecordedRequest) -> Option<ScriptedReply> + Send + Sync + 'static,
) -> impl Fn(&RecordedRequest) -> ScriptedReply + Send + Sync + 'static {
    move |request| {
        if request.is_embeddings() {
            return ScriptedReply::HashEmbeddings;
        }
        answer(request).unwrap_or_else(|| ScriptedReply::json(&good_answer(request)))
    }
}

/// A build environment: a scripted server, a cache directory, the real client stack.
struct Harness {
    server: ScriptedServer,
    _dir: tempfile::TempDir,
    settings: BuildSettings,
    chat: Client,
    embedder: EmbedClient,
}

impl Harness {
    async fn new(
        answer: impl Fn(&RecordedRequest) -> Option<ScriptedReply> + Send + Sync + 'static,
    ) -> Self {
        let server = ScriptedServer::with_responder(responder(answer)).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let config = support::client_config(&server);
        let chat = build_chat_model(&config).unwrap();
        let embedder = support::embedder(&config, 64);
        let mut settings = support::build_settings(dir.path());
        settings.workers = 4;
        settings.max_reasks = 2;
        Self { server, _dir: dir, settings, chat, embedder }
    }

    async fn build(&self, conversations: &[Conversation]) -> BuildSummary {
        build(&self.settings, &self.chat, &self.embedder, conversations).await.unwrap()
    }

    fn requests(&self) -> Vec<RecordedRequest> {
        self.server.requests()
    }

    fn rewrite_path(&self, sample: &str) -> PathBuf {
        self.settings.rewrite_path(sample)
    }
}

/// Rewrite requests per session among `requests`.
fn rewrites_per_session(requests: &[RecordedRequest]) -> BTreeMap<u32, usize> {
    let mut counts = BTreeMap::new();
    for request in requests.iter().filter(|request| request.is_chat()) {
        if let Some(session) = rewrite_session(request) {
            *counts.entry(session).or_insert(0) += 1;
        }
    }
    counts
}

#[test]
fn the_scripted_model_reads_any_speaker_without_panicking() {
    let prompt = "Session D1, date: 2024-05-03 (2024-05-03)\n[D1:1] a:b: hi: there\n\
        [D1:2] x: y: z\n[D1:3] ]:[{\"id\": \n[D1:4] no separator\n[D1:5] \u{1F600}\u{0}: \u{202E}text\n\
        Session D99999999999, date: unknown\n[D99999999999:1] big: session\n";
    let Ask::Rewrite { sessions, turns } = parse_prompt(prompt) else {
        panic!("a prompt with turn lines is a rewrite request");
    };
    let speakers: Vec<&str> = turns.iter().map(|(_, speaker, _)| speaker.as_str()).collect();
    assert_eq!(speakers, ["a:b", "x", "]:[{\"id\"", "no separator", "\u{1F600}\u{0}", "big"]);
    assert_eq!(turns[0].2, "hi: there");
    assert_eq!(sessions, [(1, Some("2024-05-03".to_string()))], "D99999999999 is no u32");
    let rewrite = mechanical_rewrite(&sessions, &turns);
    assert_eq!(rewrite["sentence"].as_array().unwrap().len(), 6, "{rewrite}");
    assert_eq!(rewrite["conversation_time"], "2024-05-03");
    assert!(mechanical_rewrite(&[], &turns)["conversation_time"].is_null());
    for prompt in ["", "[{\"id\": broken", "[{\"id\": 1, \"text\": 2}]", "no sentences"] {
        assert!(
            matches!(parse_prompt(prompt), Ask::Keywords(items) if items.is_empty()),
            "{prompt}"
        );
    }
    let Ask::Keywords(items) = parse_prompt("x\n[{\"id\": \"s:1\", \"text\": \"A: B\"}]\n") else {
        panic!("a sentence list is a keyword request");
    };
    assert_eq!(items, [("s:1".to_string(), "A: B".to_string())]);
}

#[tokio::test]
async fn a_small_conversation_builds_end_to_end_and_a_rerun_asks_nothing() {
    let harness = Harness::new(|_| None).await;
    let conversations = fixture();
    let summary = harness.build(&conversations).await;
    assert!(summary.is_complete(), "{summary}");
    let sample = &summary.samples[0];
    assert_eq!((sample.sessions, sample.sessions_reused), (3, 0));
    assert_eq!(sample.events, 11);
    assert_eq!(sample.topics, 3);
    assert_eq!(sample.persons, 2);
    assert_eq!(sample.dates, 3);
    assert!(sample.keys > 5, "{summary}");
    assert!(summary.usage.total() > 0);

    let requests = harness.requests();
    assert_eq!(rewrites_per_session(&requests), BTreeMap::from([(1, 1), (2, 1), (3, 1)]));
    assert_eq!(requests.iter().filter(|r| is_keywords(r)).count(), 3);
    assert_eq!(
        requests.iter().filter(|r| r.is_embeddings()).count(),
        4,
        "three units and the questions"
    );

    let memory =
        load_memory(&harness.settings, harness.embedder.name(), &conversations[0]).unwrap();
    assert!(memory.summary.failed.is_empty());
    let outputs = &memory.outputs;
    let sentences: Vec<_> = outputs.rewrites.iter().flat_map(|record| &record.sentences).collect();
    let first = sentences[0];
    assert_eq!((first.id.as_str(), first.origin.as_str()), ("D1:1-1", "D1:1"));
    assert_eq!(first.date.unwrap().to_string(), "2023-03-12");
    assert_eq!(first.topic_ids, ["D1:t1"]);
    assert!(sentences[2].text.contains("and shared a photo of a pottery wheel"));
    let topics: Vec<&str> =
        outputs.rewrites.iter().flat_map(|r| r.topics.iter().map(|t| t.id.as_str())).collect();
    assert_eq!(topics, ["D1:t1", "D2:t2", "D3:t3"]);
    assert_eq!(outputs.rewrites[1].session, "D2");
    assert_eq!(outputs.rewrites[0].personal_facts[0].id, "D1:p1");
    let keywords: Vec<_> = outputs.keywords.iter().flat_map(|record| &record.sentences).collect();
    assert_eq!(keywords.len(), 11);
    assert_eq!(keywords[0].keywords, ["Maya", "Hi", "Tomas", "I"]);
    // The graph is built from those outputs: episodes show the raw turn, keys link to them.
    let graph = &memory.graph;
    assert_eq!(graph.stats().episodes, 11);
    let episode = graph.episode_by_id("D1:4-1").unwrap();
    assert_eq!(
        episode.text,
        "Tomas: I will be in Lisbon for work that week, but tell me how it goes."
    );
    assert_eq!(episode.date.unwrap().to_string(), "2023-03-12");
    let lisbon = graph.key("Lisbon").unwrap();
    assert_eq!((lisbon.n_episodes, lisbon.tags.as_slice()), (2, &["Chat".to_string()][..]));
    assert_eq!(memory.embeddings.sentences.len(), 11);
    assert_eq!(memory.embeddings.topics.len(), 3);
    assert_eq!(memory.embeddings.questions.len(), 3);
    assert!(memory.embeddings.dims > 0);

    let again = harness.build(&conversations).await;
    assert!(again.is_complete());
    assert_eq!(again.samples[0].sessions_reused, 3);
    assert_eq!(again.samples[0].events, 11);
    assert_eq!(harness.requests().len(), requests.len(), "a finished build is not asked again");
}

#[tokio::test]
async fn a_whole_locomo_conversation_builds_end_to_end() {
    let harness = Harness::new(|_| None).await;
    let conversation = locomo("conv-30");
    let turns: usize = conversation.sessions.iter().map(|s| s.turns.len()).sum();
    let memory = build_memory(&harness.settings, &harness.chat, &harness.embedder, &conversation)
        .await
        .unwrap();
    let summary = &memory.summary;
    assert!(summary.failed.is_empty(), "{:?}", summary.failed);
    assert_eq!(summary.sessions, 19);
    assert_eq!(summary.events, turns);
    assert_eq!(summary.topics, 19);
    assert_eq!(summary.dates, 19);
    let per_session = rewrites_per_session(&harness.requests());
    assert_eq!(per_session.len(), 19);
    assert!(per_session.values().all(|count| *count == 1));
    assert_eq!(memory.embeddings.sentences.len(), turns);
    assert_eq!(memory.embeddings.questions.len(), conversation.questions.len());
    // Every turn is covered and every sentence is dated.
    let sentences: Vec<_> =
        memory.outputs.rewrites.iter().flat_map(|record| &record.sentences).collect();
    let origins: BTreeSet<&str> = sentences.iter().map(|s| s.origin.as_str()).collect();
    assert_eq!(origins.len(), turns);
    assert!(sentences.iter().all(|s| s.date.is_some()));
}

#[tokio::test]
async fn a_killed_build_resumes_without_re_requesting_finished_sessions() {
    let kill = Arc::new(Notify::new());
    let rewrites = Arc::new(AtomicUsize::new(0));
    let harness = {
        let (kill, rewrites) = (Arc::clone(&kill), Arc::clone(&rewrites));
        Harness::new(move |request| {
            if is_rewrite(request) && rewrites.fetch_add(1, Ordering::SeqCst) + 1 == 8 {
                kill.notify_one();
            }
            None
        })
        .await
    };
    let conversations = vec![locomo("conv-30")];
    tokio::select! {
        summary = build(&harness.settings, &harness.chat, &harness.embedder, &conversations) => {
            panic!("the build should have been killed: {}", summary.unwrap());
        }
        () = kill.notified() => {}
    }
    // Give the dropped build's cache writer (on the blocking pool) a moment; it either finished
    // renaming or left the old file.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let first_run = harness.requests();
    let finished = support::done_in_cache(&harness.rewrite_path("conv-30"));
    assert!(!finished.is_empty() && finished.len() < 19, "{finished:?}");

    let summary = harness.build(&conversations).await;
    assert!(summary.is_complete(), "{summary}");
    let second_run = harness.requests()[first_run.len()..].to_vec();
    let asked_again: BTreeSet<u32> = rewrites_per_session(&second_run).into_keys().collect();
    assert!(
        asked_again.is_disjoint(&finished),
        "finished {finished:?}, asked again {asked_again:?}"
    );
    assert_eq!(asked_again.len() + finished.len(), 19);
    assert!(summary.samples[0].sessions_reused > 0);
    let all = rewrites_per_session(&harness.requests());
    for session in &finished {
        assert_eq!(all[session], 1, "session {session} was asked twice");
    }
}

#[tokio::test]
async fn failed_sessions_are_reported_and_a_rerun_does_only_those() {
    let healthy = Arc::new(AtomicBool::new(false));
    let harness = {
        let healthy = Arc::clone(&healthy);
        Harness::new(move |request| {
            let failing =
                !healthy.load(Ordering::SeqCst) && rewrite_session(request).is_some_and(|s| s >= 2);
            failing.then(|| ScriptedReply::Status {
                status: 400,
                message: "provider rejected the request".into(),
            })
        })
        .await
    };
    let conversations = fixture();
    let summary = harness.build(&conversations).await;
    assert!(!summary.is_complete());
    let failed: Vec<(&str, Stage)> =
        summary.failed().map(|unit| (unit.unit.as_str(), unit.stage)).collect();
    assert_eq!(failed, [("session_2", Stage::Rewrite), ("session_3", Stage::Rewrite)]);
    assert!(summary.failed().all(|unit| unit.error.contains("400")), "{summary}");
    assert!(summary.to_string().contains("failed: conv-tiny session_2 (rewrite)"), "{summary}");
    assert_eq!(summary.samples[0].events, 4, "session 1 is built");
    let cache = std::fs::read_to_string(harness.rewrite_path("conv-tiny")).unwrap();
    assert_eq!(cache.matches("\"status\": \"failed\"").count(), 2, "{cache}");

    let before = harness.requests().len();
    healthy.store(true, Ordering::SeqCst);
    let summary = harness.build(&conversations).await;
    assert!(summary.is_complete(), "{summary}");
    let rerun = harness.requests()[before..].to_vec();
    assert_eq!(rewrites_per_session(&rerun), BTreeMap::from([(2, 1), (3, 1)]));
    assert_eq!(summary.samples[0].sessions_reused, 1);
}

#[tokio::test]
async fn unknown_keyword_ids_are_dropped_with_a_warning() {
    let harness = Harness::new(|request| {
        if !is_keywords(request) {
            return None;
        }
        let mut answer = good_answer(request);
        answer["sentence"]
            .as_array_mut()
            .unwrap()
            .push(json!({"sentence_id": "D99:1-1", "keyword": ["ghost"]}));
        Some(ScriptedReply::json(&answer))
    })
    .await;
    let conversations = fixture();
    let summary = harness.build(&conversations).await;
    assert!(summary.is_complete(), "{summary}");
    assert_eq!(summary.samples[0].dropped_keyword_ids, 3);
    let memory =
        load_memory(&harness.settings, harness.embedder.name(), &conversations[0]).unwrap();
    let keywords: Vec<_> =
        memory.outputs.keywords.iter().flat_map(|record| &record.sentences).collect();
    assert!(keywords.iter().all(|k| !k.keywords.contains(&"ghost".to_string())));
    assert_eq!(keywords.len(), 11);
}

/// Rewrite a cache file's recorded version of `prompt` to simulate a build made with an
/// older prompt text. The embedding cache is binary: magic, header length, JSON header, floats.
fn age_prompt(path: &Path, prompt: &str) {
    let bytes = std::fs::read(path).unwrap();
    let aged = |header: &mut Value| header["versions"][prompt] = json!("000000000000");
    if bytes.starts_with(b"MRAGEMB1") {
        let length = u64::from_le_bytes(bytes[8..16].try_into().unwrap()) as usize;
        let mut header: Value = serde_json::from_slice(&bytes[16..16 + length]).unwrap();
        aged(&mut header);
        let header = serde_json::to_vec(&header).unwrap();
        let mut out = b"MRAGEMB1".to_vec();
        out.extend_from_slice(&(header.len() as u64).to_le_bytes());
        out.extend_from_slice(&header);
        out.extend_from_slice(&bytes[16 + length..]);
        std::fs::write(path, out).unwrap();
    } else {
        let mut file: Value = serde_json::from_slice(&bytes).unwrap();
        aged(&mut file);
        std::fs::write(path, serde_json::to_string_pretty(&file).unwrap()).unwrap();
    }
}

#[tokio::test]
async fn a_changed_prompt_invalidates_its_stage_and_the_later_ones_with_a_message() {
    let harness = Harness::new(|_| None).await;
    let conversations = fixture();
    harness.build(&conversations).await;
    let count = |requests: &[RecordedRequest]| {
        (
            requests.iter().filter(|r| is_rewrite(r)).count(),
            requests.iter().filter(|r| is_keywords(r)).count(),
            requests.iter().filter(|r| r.is_embeddings()).count(),
        )
    };

    // A changed keyword prompt: keywords are redone, the rewrite and embeddings are kept.
    age_prompt(&harness.settings.keyword_path("conv-tiny"), "keywords");
    let before = harness.requests().len();
    let summary = harness.build(&conversations).await;
    assert!(summary.is_complete(), "{summary}");
    assert_eq!(summary.notices.len(), 1, "{:?}", summary.notices);
    assert!(
        summary.notices[0]
            .contains("made with prompt `keywords` version 000000000000, the current version is"),
        "{}",
        summary.notices[0]
    );
    assert!(summary.notices[0].contains("rebuilding the keywords stage and the stages after it"));
    assert_eq!(count(&harness.requests()[before..]), (0, 3, 0));

    // A changed rewrite prompt: every cache records the rewrite prompt's version, so all three
    // are stale, each says so, and everything is redone.
    let embedding_path = harness.settings.embedding_path(harness.embedder.name(), "conv-tiny");
    for path in [
        harness.rewrite_path("conv-tiny"),
        harness.settings.keyword_path("conv-tiny"),
        embedding_path,
    ] {
        age_prompt(&path, "rewrite");
    }
    let before = harness.requests().len();
    let summary = harness.build(&conversations).await;
    assert!(summary.is_complete(), "{summary}");
    assert_eq!(summary.notices.len(), 3, "{:?}", summary.notices);
    assert!(
        summary
            .notices
            .iter()
            .all(|notice| notice.contains("prompt `rewrite` version 000000000000")),
        "{:?}",
        summary.notices
    );
    assert!(
        summary.notices[0].contains("rebuilding the rewrite stage and the stages after it"),
        "{}",
        summary.notices[0]
    );
    assert_eq!(
        count(&harness.requests()[before..]),
        (3, 3, 4),
        "three units and the questions are embedded again"
    );
    let rewrite: Value =
        serde_json::from_str(&std::fs::read_to_string(harness.rewrite_path("conv-tiny")).unwrap())
            .unwrap();
    assert_eq!(rewrite["versions"]["rewrite"], json!(mragent::prompts::REWRITE.version()));
    assert_eq!(support::done_in_cache(&harness.rewrite_path("conv-tiny")).len(), 3);
}

#[tokio::test]
async fn longmemeval_batches_several_sessions_into_one_rewrite() {
    let mut harness = Harness::new(|_| None).await;
    harness.settings.dataset = DatasetKind::LongMemEval;
    harness.settings.lm_batch = 2;
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/longmemeval_tiny.json");
    let conversations = load_longmemeval(&path).unwrap();
    let summary = harness.build(&conversations).await;
    assert!(summary.is_complete(), "{summary}");
    let rewrites: Vec<RecordedRequest> =
        harness.requests().into_iter().filter(is_rewrite).collect();
    // Two sessions per call: samples of 2 sessions take one call, samples of 3 take two.
    let expected: usize = conversations.iter().map(|c| c.sessions.len().div_ceil(2)).sum();
    assert_eq!(rewrites.len(), expected);
    assert!(rewrites.iter().all(|r| r.messages().len() == 1), "no re-asks");
    let batches: BTreeSet<Vec<u32>> = rewrites
        .iter()
        .map(|request| match parse_ask(request) {
            Ask::Rewrite { sessions, .. } => sessions.iter().map(|(index, _)| *index).collect(),
            Ask::Keywords(_) => unreachable!(),
        })
        .collect();
    assert_eq!(batches, BTreeSet::from([vec![1, 2], vec![3]]));
    let sample = &conversations[0].sample_id;
    let cache: Value = serde_json::from_str(
        &std::fs::read_to_string(harness.settings.rewrite_path(sample)).unwrap(),
    )
    .unwrap();
    assert!(
        harness.settings.rewrite_path(sample).starts_with(harness.settings.data_dir.join("LM"))
    );
    assert_eq!(cache["units"][0]["unit"], "session_1-session_2");
    assert_eq!(cache["units"][0]["output"]["session"], "D1-D2");
    let topics: Vec<&str> = cache["units"][0]["output"]["topics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(topics, ["D1:t1", "D1:t2"]);
}

/// Concurrency: with several workers, several rewrites are in flight at once (a multi-thread
/// runtime, so the responder's blocking sleep does not stall the client).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn units_run_concurrently_across_conversations() {
    let in_flight = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(Mutex::new(0usize));
    let harness = {
        let (in_flight, peak) = (Arc::clone(&in_flight), Arc::clone(&peak));
        Harness::new(move |request| {
            if !is_rewrite(request) {
                return None;
            }
            let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            let mut peak = peak.lock().unwrap();
            *peak = (*peak).max(now);
            drop(peak);
            // Hold the reply a little so overlapping requests are visible.
            std::thread::sleep(Duration::from_millis(30));
            in_flight.fetch_sub(1, Ordering::SeqCst);
            None
        })
        .await
    };
    let mut second = fixture().remove(0);
    second.sample_id = "conv-tiny-2".into();
    let conversations = vec![fixture().remove(0), second];
    let summary = harness.build(&conversations).await;
    assert!(summary.is_complete(), "{summary}");
    assert_eq!(
        summary.samples.iter().map(|s| s.sample_id.as_str()).collect::<Vec<_>>(),
        ["conv-tiny", "conv-tiny-2"]
    );
    let peak = *peak.lock().unwrap();
    assert!(peak >= 2 && peak <= harness.settings.workers, "peak {peak}");
}
