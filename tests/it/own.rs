//! Own conversations end to end through the scripted endpoint over real HTTP on 127.0.0.1: the
//! memory service (incremental adds that count requests, search, ask, out-of-order messages),
//! the binary (`memory add/search/list/show/forget`, `ask`, bad input, kill -9 during an add)
//! and the HTTP API (`serve`: every endpoint and every error).

use std::path::{Path, PathBuf};
use std::time::Duration;

use mragent::agent::{AnswerGate, AnswerMode};
use mragent::convo::{Message, parse};
use mragent::llm::build_chat_model;
use mragent::llm::scripted::{
    HASH_EMBEDDING_DIM, RecordedRequest, ScriptedReply, ScriptedServer, hashed_embedding,
};
use mragent::service::{IndexStats, MemoryService, OwnEmbedder, ServiceSettings};
use mragent::store::Store;
use serde_json::{Value, json};

use crate::support::{self, EMBEDDER, mragent_command};

/// The example conversation shipped in the repository.
pub(crate) fn example_file() -> PathBuf {
    support::repo_path("data/examples/conversation.jsonl")
}

/// A server that plays the build stages (mechanically valid answers) and the answering agent;
/// every reply delayed by `delay`.
pub(crate) async fn server(delay: Duration) -> ScriptedServer {
    let respond = support::build_and_answer(|_| None);
    ScriptedServer::with_responder(move |request: &RecordedRequest| {
        let reply = respond(request);
        if delay.is_zero() { reply } else { reply.delayed(delay) }
    })
    .await
    .unwrap()
}

pub(crate) fn service(
    server: &ScriptedServer,
    root: &Path,
) -> MemoryService<mragent::llm::Client, OwnEmbedder> {
    service_with(server, root, |_| {})
}

/// [`service`] with its settings adjusted by `adjust` first.
pub(crate) fn service_with(
    server: &ScriptedServer,
    root: &Path,
    adjust: impl FnOnce(&mut ServiceSettings),
) -> MemoryService<mragent::llm::Client, OwnEmbedder> {
    let config = support::client_config(server);
    let chat = build_chat_model(&config).unwrap();
    let embedder = support::embedder(&config, 64);
    let store = Store::open(Store::default_path(root)).unwrap();
    let mut settings = ServiceSettings::new(root, EMBEDDER, "test-model", "test-model");
    // These tests watch the tool loop; own memory's default (`adaptive`) has its own test.
    settings.answer = AnswerGate::with_mode(AnswerMode::Loop);
    adjust(&mut settings);
    MemoryService::new(store, settings, chat, OwnEmbedder::Api(Box::new(embedder)))
}

/// `sessions` sessions of four messages, one day apart, each with a session id.
pub(crate) fn long_conversation(sessions: u32) -> Vec<Message> {
    let mut lines = Vec::new();
    for session in 1..=sessions {
        for turn in 0..4 {
            let speaker = if turn % 2 == 0 { "Ann" } else { "Bob" };
            lines.push(json!({
                "speaker": speaker,
                "session": format!("s{session}"),
                "timestamp": format!("2024-01-{:02}T10:{:02}:00Z", (session - 1) % 28 + 1, turn),
                "text": format!("Day {session} note {turn}: Ann talked about Project{session} with Bob"),
            }));
        }
    }
    parse(&Value::Array(lines).to_string()).unwrap()
}

fn rewrite_sessions(requests: &[RecordedRequest]) -> Vec<String> {
    let session = regex::Regex::new(r"(?m)^Session (D\d+), date").unwrap();
    requests
        .iter()
        .filter(|request| request.is_chat())
        .filter_map(|request| {
            let prompt = request.messages()[0]["content"].as_str()?.to_string();
            session.captures(&prompt).map(|c| c[1].to_string())
        })
        .collect()
}

#[tokio::test]
async fn adding_one_session_to_thirty_makes_only_that_sessions_calls() {
    let server = server(Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    let service = service(&server, dir.path());
    let messages = long_conversation(30);
    let first = service.add("long", messages[..29 * 4].to_vec()).await.unwrap();
    assert_eq!(first.built_sessions.len(), 29, "{first}");
    assert!(first.is_complete(), "{first}");
    let before = server.request_count();

    let second = service.add("long", messages.clone()).await.unwrap();
    assert_eq!((second.new_messages, second.duplicates), (4, 116));
    assert_eq!(second.built_sessions, ["D30"]);
    let requests: Vec<RecordedRequest> = server.requests()[before..].to_vec();
    let chats = requests.iter().filter(|request| request.is_chat()).count();
    let embeddings = requests.iter().filter(|request| request.is_embeddings()).count();
    assert_eq!(chats, 2, "one rewrite and one keyword call");
    assert_eq!(rewrite_sessions(&requests), ["D30"]);
    assert_eq!(embeddings, 2, "the session's sentences and its MemGAS units");
    assert_eq!(second.chat_calls, 2);

    // The same messages again: nothing to do, no request.
    let count = server.request_count();
    let third = service.add("long", messages).await.unwrap();
    assert_eq!((third.new_messages, third.built_sessions.len()), (0, 0));
    assert_eq!(server.request_count(), count);
}

#[tokio::test]
async fn own_memory_answers_adaptively_by_default_and_says_which_path_answered() {
    // `ServiceSettings::new` (what `ask`, `serve` and `mcp` start from) answers `adaptive`:
    // each question's gate decides, the trace records it, and the reply names the path.
    let server = server(Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    let config = support::client_config(&server);
    let store = Store::open(Store::default_path(dir.path())).unwrap();
    let settings = ServiceSettings::new(dir.path(), EMBEDDER, "test-model", "test-model");
    assert_eq!(settings.answer.mode, AnswerMode::Adaptive);
    let embedder = OwnEmbedder::Api(Box::new(support::embedder(&config, 64)));
    let service = MemoryService::new(store, settings, build_chat_model(&config).unwrap(), embedder);
    let text = std::fs::read_to_string(example_file()).unwrap();
    service.add("demo", parse(&text).unwrap()).await.unwrap();
    let questions =
        ["What is the name of Sam's dog?", "Who is Pepper?", "What did they talk about?"];
    for question in questions {
        let asked = service.ask("demo", question).await.unwrap();
        assert!(asked.ok, "{asked:?}");
        let path = asked.path.expect("the reply names its path");
        let records = mragent::agent::trace::read_trace(&asked.trace).unwrap();
        let gate = records
            .iter()
            .find_map(|record| match &record.event {
                mragent::agent::trace::TraceEvent::Retrieval { step, detail } if step == "gate" => {
                    Some(detail.clone())
                }
                _ => None,
            })
            .expect("a gate record");
        assert_eq!(gate["mode"], "adaptive", "{gate}");
        let confidence = gate["confidence"].as_f64().expect("a confidence");
        let single = confidence >= gate["threshold"].as_f64().unwrap();
        let expected = if single { ["single", "escalated"] } else { ["loop", "loop"] };
        let named = serde_json::to_value(path).unwrap();
        assert!(expected.contains(&named.as_str().unwrap()), "{question}: {named} for {gate}");
    }
}

#[tokio::test]
async fn a_late_message_rebuilds_only_its_session_and_search_and_ask_answer() {
    let server = server(Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    let service = service(&server, dir.path());
    let text = std::fs::read_to_string(example_file()).unwrap();
    let report = service.add("demo", parse(&text).unwrap()).await.unwrap();
    assert_eq!((report.new_messages, report.sessions), (11, 3), "{report}");
    assert_eq!(report.built_sessions, ["D1", "D2", "D3"]);

    let late = parse(r#"{"speaker": "Sam", "text": "Pepper loves the beach too", "timestamp": "2024-03-16T18:46:00Z"}"#)
        .unwrap();
    let before = server.request_count();
    let report = service.add("demo", late).await.unwrap();
    assert_eq!(report.built_sessions, ["D2"]);
    assert_eq!(rewrite_sessions(&server.requests()[before..]), ["D2"]);
    let stored = service.store().load("demo").unwrap();
    let texts: Vec<&str> = stored.sessions[1].messages.iter().map(|m| m.text.as_str()).collect();
    assert_eq!(texts[2], "Pepper loves the beach too", "placed by its timestamp: {texts:?}");

    let hits = service.search("demo", "greyhound dog Pepper", 3).await.unwrap();
    assert_eq!(hits.len(), 3);
    assert!(hits[0].text.contains("Pepper"), "{hits:?}");
    assert!(hits.iter().all(|hit| hit.date.is_some() && hit.id.len() == 32), "{hits:?}");
    assert!(hits.windows(2).all(|pair| pair[0].score >= pair[1].score));

    let asked = service.ask("demo", "What is the name of Sam's dog?").await.unwrap();
    assert!(asked.ok, "{asked:?}");
    assert!(!asked.answer.is_empty());
    assert!(asked.trace.is_file(), "{}", asked.trace.display());
    assert!(server.requests().iter().any(|request| request.body.get("tools").is_some()));

    let unknown = service.search("nobody", "x", 3).await.unwrap_err();
    assert!(unknown.to_string().contains("unknown conversation"), "{unknown}");
}

pub(crate) async fn run(dir: &Path, args: &[&str]) -> (bool, String, String) {
    let output = mragent_command(dir, args).output().await.unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// The endpoint, model and embedder flags of a command that reaches the scripted endpoint.
pub(crate) fn model_args(base_url: &str) -> [&str; 6] {
    ["--base-url", base_url, "--model", "local/tiny", "--embedder", EMBEDDER]
}

pub(crate) fn add_args<'a>(
    base_url: &'a str,
    conversation: &'a str,
    file: &'a str,
) -> Vec<&'a str> {
    vec![
        "memory",
        "add",
        "--conversation",
        conversation,
        file,
        "--base-url",
        base_url,
        "--model",
        "local/tiny",
        "--embedder",
        EMBEDDER,
        "-q",
    ]
}

#[tokio::test]
async fn the_binary_adds_searches_asks_lists_shows_and_forgets() {
    let server = server(Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    let file = example_file();
    let url = server.base_url();
    let (ok, stdout, stderr) =
        run(dir.path(), &add_args(url, "demo", file.to_str().unwrap())).await;
    assert!(ok, "{stdout}\n{stderr}");
    assert!(stdout.contains("11 new messages"), "{stdout}");

    let (ok, stdout, stderr) = run(
        dir.path(),
        &[
            "memory",
            "search",
            "--conversation",
            "demo",
            "half marathon Lisbon",
            "--json",
            "--base-url",
            url,
            "-q",
        ],
    )
    .await;
    assert!(ok, "{stderr}");
    let hits: Vec<Value> = serde_json::from_str(&stdout).unwrap();
    assert!(!hits.is_empty() && hits[0]["dia_id"].as_str().unwrap().starts_with('D'));
    assert!(hits.iter().any(|hit| hit["text"].as_str().unwrap().contains("Lisbon")));

    let (ok, stdout, stderr) = run(
        dir.path(),
        &[
            "ask",
            "--conversation",
            "demo",
            "Which race did Maya sign up for?",
            "--base-url",
            url,
            "--model",
            "local/tiny",
            "-q",
        ],
    )
    .await;
    assert!(ok, "{stdout}\n{stderr}");
    assert!(stdout.contains("trace: "), "{stdout}");

    let (ok, stdout, _) = run(dir.path(), &["memory", "list", "--json"]).await;
    assert!(ok);
    let listed: Vec<Value> = serde_json::from_str(&stdout).unwrap();
    assert_eq!(listed[0]["id"], "demo");
    assert_eq!(
        (listed[0]["messages"].as_i64(), listed[0]["built_sessions"].as_i64()),
        (Some(11), Some(3))
    );
    let (ok, stdout, _) = run(dir.path(), &["memory", "show", "--conversation", "demo"]).await;
    assert!(ok && stdout.contains("D2:4 Sam:"), "{stdout}");

    // Bad input: a clear error, exit ≠ 0, the store unchanged.
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(&bad, "{\"speaker\": \"A\", \"text\": \"fine\"}\n{\"speaker\": \"A\", \"text\": \"x\", \"timestamp\": \"soon\"}\n").unwrap();
    let (ok, _, stderr) = run(dir.path(), &add_args(url, "demo", bad.to_str().unwrap())).await;
    assert!(!ok);
    assert!(stderr.contains("line 2: field `timestamp`: malformed timestamp"), "{stderr}");
    let empty = dir.path().join("empty.json");
    std::fs::write(&empty, r#"[{"speaker": "A", "text": ""}]"#).unwrap();
    let (ok, _, stderr) = run(dir.path(), &add_args(url, "demo", empty.to_str().unwrap())).await;
    assert!(!ok && stderr.contains("empty message"), "{stderr}");
    let (ok, _, stderr) =
        run(dir.path(), &["memory", "search", "--conversation", "nobody", "x"]).await;
    assert!(!ok && stderr.contains("unknown conversation \"nobody\""), "{stderr}");
    let (ok, _, stderr) =
        run(dir.path(), &["ask", "--conversation", "nobody", "x", "--base-url", url]).await;
    assert!(!ok && stderr.contains("unknown conversation"), "{stderr}");
    let (_, after, _) = run(dir.path(), &["memory", "list", "--json"]).await;
    assert_eq!(serde_json::from_str::<Vec<Value>>(&after).unwrap(), listed);

    let (ok, stdout, _) = run(dir.path(), &["memory", "forget", "--conversation", "demo"]).await;
    assert!(ok && stdout.contains("forgot demo"), "{stdout}");
    let (ok, _, stderr) = run(dir.path(), &["memory", "forget", "--conversation", "demo"]).await;
    assert!(!ok && stderr.contains("unknown conversation"), "{stderr}");
}

/// Every row of the store that an add writes, in a canonical order (creation times aside).
fn dump(root: &Path) -> Vec<String> {
    let connection = rusqlite::Connection::open(Store::default_path(root)).unwrap();
    let mut rows = Vec::new();
    for query in [
        "SELECT id || '|' || embedder FROM conversations ORDER BY id",
        "SELECT conversation_id || '|' || number || '|' || COALESCE(key, '') FROM sessions ORDER BY 1",
        "SELECT conversation_id || '|' || hash || '|' || session_number || '|' || seq || '|' || speaker || '|' || text || '|' || COALESCE(timestamp, '') || '|' || COALESCE(sort_time, '') FROM messages ORDER BY 1",
        "SELECT conversation_id || '|' || session_number || '|' || content_hash || '|' || model || '|' || rewrite || '|' || keywords || '|' || dims || '|' || hex(vectors) || '|' || hex(units) FROM session_outputs ORDER BY 1",
    ] {
        let mut statement = connection.prepare(query).unwrap();
        let values = statement.query_map([], |row| row.get::<_, String>(0)).unwrap();
        rows.extend(values.map(Result::unwrap));
    }
    rows
}

#[tokio::test]
async fn kill_during_an_add_then_the_same_add_gives_the_uninterrupted_store() {
    let server = server(Duration::from_millis(150)).await;
    let url = server.base_url();
    let input = tempfile::tempdir().unwrap();
    let file = input.path().join("long.json");
    let lines: Vec<Value> = long_conversation(6)
        .iter()
        .map(|m| json!({"speaker": m.speaker, "text": m.text, "session": m.session, "timestamp": m.timestamp.unwrap().canonical()}))
        .collect();
    std::fs::write(&file, Value::Array(lines).to_string()).unwrap();
    let mut args = add_args(url, "long", file.to_str().unwrap());
    args.extend(["--workers", "1"]);

    let killed = tempfile::tempdir().unwrap();
    let mut child = mragent_command(killed.path(), &args).spawn().unwrap();
    let database = Store::default_path(killed.path());
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        assert!(std::time::Instant::now() < deadline, "the add never got going");
        let built = rusqlite::Connection::open(&database)
            .and_then(|c| {
                c.query_row("SELECT COUNT(*) FROM session_outputs", [], |row| row.get::<_, i64>(0))
            })
            .unwrap_or(0);
        if built >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    child.start_kill().unwrap(); // SIGKILL
    let status = child.wait().await.unwrap();
    assert!(!status.success());
    let partial = dump(killed.path());
    let (ok, stdout, stderr) = run(killed.path(), &args).await;
    assert!(ok, "{stdout}\n{stderr}");
    assert!(stdout.contains("0 new messages (24 already stored)"), "{stdout}");
    let resumed = dump(killed.path());
    assert!(resumed.len() > partial.len(), "the rerun finished the interrupted sessions");

    let clean = tempfile::tempdir().unwrap();
    let (ok, _, stderr) = run(clean.path(), &args).await;
    assert!(ok, "{stderr}");
    assert_eq!(resumed, dump(clean.path()));
}

#[tokio::test]
async fn queries_reuse_the_cached_index_which_adds_extend_and_forget_drops() {
    let server = server(Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    let service = service(&server, dir.path());
    let messages = long_conversation(7);
    service.add("c", messages[..5 * 4].to_vec()).await.unwrap();
    assert_eq!(service.index_stats(), IndexStats::default(), "an add alone builds no index");
    let first = service.search("c", "Project3", 3).await.unwrap();
    assert_eq!(service.index_stats(), IndexStats { hits: 0, builds: 1, extensions: 0 });
    let second = service.search("c", "Project3", 3).await.unwrap();
    assert_eq!(first, second);
    assert_eq!(service.index_stats(), IndexStats { hits: 1, builds: 1, extensions: 0 });

    // An add through this service extends the cached index with its new session only.
    service.add("c", messages[..6 * 4].to_vec()).await.unwrap();
    assert_eq!(service.index_stats(), IndexStats { hits: 1, builds: 1, extensions: 1 });
    let extended = service.search("c", "Project6", 3).await.unwrap();
    assert_eq!(service.index_stats(), IndexStats { hits: 2, builds: 1, extensions: 1 });
    assert!(extended.iter().any(|hit| hit.text.contains("Project6")), "{extended:?}");
    // It answers exactly as an index built from scratch (another service on the same store).
    let other = self::service(&server, dir.path());
    assert_eq!(other.search("c", "Project6", 3).await.unwrap(), extended);
    assert_eq!(other.index_stats(), IndexStats { hits: 0, builds: 1, extensions: 0 });

    // A write by another service (another process) shows in the revision: extended, not rebuilt.
    other.add("c", messages.clone()).await.unwrap();
    let seventh = service.search("c", "Project7", 3).await.unwrap();
    assert_eq!(service.index_stats(), IndexStats { hits: 2, builds: 1, extensions: 2 });
    assert_eq!(other.search("c", "Project7", 3).await.unwrap(), seventh);

    // Forget drops the entry; the same id added again is indexed from scratch.
    service.forget("c").await.unwrap();
    assert!(service.search("c", "Project7", 3).await.is_err());
    service.add("c", messages[..4].to_vec()).await.unwrap();
    let again = service.search("c", "Project1", 3).await.unwrap();
    assert!(again.iter().all(|hit| hit.text.contains("Project1")), "{again:?}");
    assert_eq!(service.index_stats(), IndexStats { hits: 2, builds: 2, extensions: 2 });
}

/// The words of `conversation` with a vector in the store (`conversation_words` joined with
/// the vectors shared by its embedder, `embedder_words`).
fn stored_words(root: &Path, conversation: &str) -> Vec<String> {
    let connection = rusqlite::Connection::open(Store::default_path(root)).unwrap();
    let mut statement = connection
        .prepare(
            "SELECT u.word FROM conversation_words u
             JOIN conversations c ON c.id = u.conversation_id
             JOIN embedder_words e ON e.embedder = c.embedder AND e.word = u.word
             WHERE u.conversation_id = ?1 ORDER BY u.word",
        )
        .unwrap();
    let words = statement.query_map([conversation], |row| row.get::<_, String>(0)).unwrap();
    words.map(Result::unwrap).collect()
}

#[tokio::test]
async fn search_matches_related_words_through_word_vectors_kept_in_the_store() {
    // Hashed bag-of-words embeddings (a word's vector is one of 64 signed buckets; "cello" and
    // "trumpets" share theirs with no other word here), except that the bare word "instruments"
    // gets the vector of "cello" (the endpoint plays an embedder that knows they are related) and the query
    // text itself a zero vector, as far from every line as from any other (so the dense
    // channels cannot rank, and the test shows what the words do).
    let respond = support::build_and_answer(|_| None);
    let server = ScriptedServer::with_responder(move |request: &RecordedRequest| {
        if !request.is_embeddings() {
            return respond(request);
        }
        let vectors = request
            .embedding_inputs()
            .iter()
            .map(|text| match text.as_str() {
                "which instruments" | "which trumpets" => vec![0.0; HASH_EMBEDDING_DIM],
                "instruments" => hashed_embedding("cello", HASH_EMBEDDING_DIM),
                other => hashed_embedding(other, HASH_EMBEDDING_DIM),
            })
            .collect();
        ScriptedReply::Embeddings(vectors)
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let service = service(&server, dir.path());
    let lines = [
        "I spent the evening playing my cello after dinner.",
        "We drove to the coast and ate fish by the harbour.",
        "Work was busy: three meetings and a long report.",
        "The garden needs rain; the tomatoes look tired.",
        "My sister called about the wedding plans again.",
        "We watched a film about sailors and whales.",
    ];
    let messages: Vec<Value> = lines
        .iter()
        .enumerate()
        .map(|(i, text)| {
            json!({
                "speaker": if i % 2 == 0 { "Ann" } else { "Bob" },
                "timestamp": format!("2024-03-01T10:0{i}:00Z"),
                "text": text,
            })
        })
        .collect();
    service.add("c", parse(&Value::Array(messages).to_string()).unwrap()).await.unwrap();
    // The add embedded the memory's words with the session's units and stored them.
    let words = stored_words(dir.path(), "c");
    for word in ["cello", "harbour", "tomatoes", "wedding", "whales"] {
        assert!(words.contains(&word.to_string()), "{word} not stored: {words:?}");
    }
    let add_inputs: Vec<String> = server
        .requests()
        .iter()
        .filter(|request| request.is_embeddings())
        .flat_map(RecordedRequest::embedding_inputs)
        .collect();
    assert!(words.iter().all(|word| add_inputs.contains(word)), "{add_inputs:?}");
    let after_add = server.requests().len();

    // BM25 cannot match "instruments" (nor "trumpets", which no line relates to); the word
    // channel credits the cello line through its vector, and only that line.
    let scores = |hits: &[mragent::service::SearchHit]| -> Vec<(String, f64)> {
        let mut scores: Vec<_> = hits.iter().map(|hit| (hit.text.clone(), hit.score)).collect();
        scores.sort_by(|a, b| a.0.cmp(&b.0));
        scores
    };
    let hits = service.search("c", "which instruments", 10).await.unwrap();
    let control = service.search("c", "which trumpets", 10).await.unwrap();
    assert_eq!(hits.len(), lines.len());
    for ((text, with), (_, without)) in scores(&hits).into_iter().zip(scores(&control)) {
        if text.contains("cello") {
            assert!(with > without + 0.4, "{text}: {with} vs {without}");
        } else {
            assert!((with - without).abs() < 1e-9, "{text}: {with} vs {without}");
        }
    }
    // Searches read the words from the store: each embeds only its query and the query's own
    // missing word (one request), and query words are not stored as memory words.
    let embedded_since = |start: usize| -> Vec<Vec<String>> {
        server.requests()[start..]
            .iter()
            .filter(|request| request.is_embeddings())
            .map(RecordedRequest::embedding_inputs)
            .collect()
    };
    let query = |text: &str| vec![text.to_string(), text.split(' ').nth(1).unwrap().to_string()];
    assert_eq!(
        embedded_since(after_add),
        vec![query("which instruments"), query("which trumpets")]
    );
    assert_eq!(stored_words(dir.path(), "c"), words);

    // Another service (another process) ranks the same from the stored words.
    let before = server.requests().len();
    let other = self::service(&server, dir.path());
    assert_eq!(other.search("c", "which instruments", 10).await.unwrap(), hits);
    assert_eq!(embedded_since(before), vec![query("which instruments")]);

    // A store whose words were never kept (made before schema 4, then migrated): the first
    // query embeds them all in one request, stores them and ranks the same.
    let connection = rusqlite::Connection::open(Store::default_path(dir.path())).unwrap();
    connection.execute_batch("DELETE FROM conversation_words; DELETE FROM embedder_words").unwrap();
    let before = server.requests().len();
    let migrated = self::service(&server, dir.path());
    assert_eq!(migrated.search("c", "which instruments", 10).await.unwrap(), hits);
    let mut embedded = embedded_since(before);
    embedded[0].sort();
    assert_eq!(embedded, vec![words.clone(), query("which instruments")]);
    assert_eq!(stored_words(dir.path(), "c"), words);

    // Forget deletes them with the conversation.
    other.forget("c").await.unwrap();
    assert!(stored_words(dir.path(), "c").is_empty());
}
