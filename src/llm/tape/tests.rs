use super::*;
use crate::llm::ChatMessage;

fn request(text: &str) -> ChatRequest {
    let mut request = ChatRequest::new(
        "m",
        vec![ChatMessage::system("You answer."), ChatMessage::user(text.to_string())],
    );
    request.seed = Some(7);
    request
}

fn reply(text: &str) -> ChatResponse {
    ChatResponse::new(
        ChatMessage::assistant(text),
        Some("stop".into()),
        Usage { prompt_tokens: 5, completion_tokens: 2 },
    )
}

fn tape(directory: &std::path::Path, mode: TapeMode) -> Arc<Tape> {
    let store = Arc::new(CallStore::open(&directory.join("calls.sqlite")).unwrap());
    Tape::new(store, mode)
}

#[tokio::test]
async fn a_recorded_reply_is_replayed_without_sending_and_a_new_request_is_refused() {
    let directory = tempfile::tempdir().unwrap();
    let recorder = tape(directory.path(), TapeMode::Record);
    let first = recorder.chat(&request("a"), || async { Ok(reply("A")) }).await.unwrap();
    // Recording: a request already on the tape is not sent again.
    let again = recorder
        .chat(&request("a"), || async { Err(Error::Config("must not be sent".into())) })
        .await
        .unwrap();
    assert_eq!(first, again);
    assert_eq!(recorder.totals(), TapeTotals { recorded: 1, reused: 1, ..TapeTotals::default() });
    drop(recorder);

    let player = tape(directory.path(), TapeMode::Replay { fill: false });
    let played = within(
        "q-1".into(),
        player.chat(&request("a"), || async { Err(Error::Config("must not be sent".into())) }),
    )
    .await
    .unwrap();
    assert_eq!(played, first);
    let missing =
        within("question q-2".into(), player.chat(&request("b"), || async { Ok(reply("B")) }))
            .await
            .unwrap_err();
    let message = missing.to_string();
    assert!(missing.is_fatal());
    assert!(message.contains("question q-2") && message.contains("\"b\""), "{message}");

    let filler = tape(directory.path(), TapeMode::Replay { fill: true });
    filler.chat(&request("b"), || async { Ok(reply("B")) }).await.unwrap();
    assert_eq!(filler.totals().filled, 1);
    let calls = filler.store().calls().unwrap();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].request, serde_json::to_value(request("a")).unwrap());
}

#[tokio::test]
async fn embeddings_are_recorded_per_text_and_only_missing_texts_are_sent() {
    let directory = tempfile::tempdir().unwrap();
    let recorder = tape(directory.path(), TapeMode::Record);
    let texts = vec!["x".to_string(), "y".to_string()];
    let vectors = |texts: Vec<String>| async move {
        let vectors = texts.iter().map(|t| vec![t.len() as f32, 0.25, -1.5]).collect();
        Ok(Embeddings { vectors, usage: Usage::default() })
    };
    let first = recorder.embed("mini", &texts, vectors).await.unwrap();
    let asked = std::sync::Mutex::new(Vec::new());
    let mixed = vec!["y".to_string(), "zz".to_string()];
    let second = recorder
        .embed("mini", &mixed, |texts| {
            asked.lock().unwrap().extend(texts.clone());
            vectors(texts)
        })
        .await
        .unwrap();
    assert_eq!(*asked.lock().unwrap(), vec!["zz".to_string()]);
    assert_eq!(second.vectors[0], first.vectors[1]);
    assert_eq!(second.vectors[1], vec![2.0, 0.25, -1.5]);
    let player = tape(directory.path(), TapeMode::Replay { fill: false });
    let error = player.embed("mini", &["new".to_string()], vectors).await.unwrap_err();
    assert!(matches!(error, Error::Unrecorded { .. }), "{error}");
}

#[test]
fn bodies_are_stored_once_and_requests_come_back_whole() {
    let directory = tempfile::tempdir().unwrap();
    let store = CallStore::open(&directory.path().join("c.sqlite")).unwrap();
    for round in 0..5 {
        let mut messages = vec![ChatMessage::system("S".repeat(2000))];
        messages.extend((0..round).map(|i| ChatMessage::user(format!("turn {i}"))));
        let request = serde_json::to_value(ChatRequest::new("m", messages)).unwrap();
        let key = chat_key(&request);
        let new = NewCall {
            key: &key,
            kind: "chat",
            model: "m",
            context: "",
            request: &request,
            reply: b"{}",
        };
        assert!(store.put(&new).unwrap());
        assert!(!store.put(&new).unwrap(), "a second record of a key is ignored");
    }
    let size = store.size().unwrap();
    // One system prompt and four distinct user turns.
    assert_eq!((size.calls, size.bodies), (5, 5));
    let calls = store.calls().unwrap();
    assert_eq!(calls[4].request["messages"][4]["content"], "turn 3");
    assert_eq!(calls[4].request["messages"][0]["content"].as_str().unwrap().len(), 2000);
}

#[test]
fn a_file_that_is_not_a_call_store_is_refused() {
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("other.sqlite");
    let connection = rusqlite::Connection::open(&path).unwrap();
    connection
        .execute_batch(
            "CREATE TABLE meta(key TEXT, value TEXT); INSERT INTO meta VALUES ('format','x');",
        )
        .unwrap();
    drop(connection);
    assert!(matches!(CallStore::open_read_only(&path), Err(TapeError::Format { .. })));
}

#[tokio::test]
async fn a_work_item_inside_another_is_recorded_with_both_labels() {
    let directory = tempfile::tempdir().unwrap();
    let recorder = tape(directory.path(), TapeMode::Record);
    let asked = request("a");
    let inner = within("question q-1".into(), recorder.chat(&asked, || async { Ok(reply("A")) }));
    within("learn fold 0 step 1 attempt 2".into(), inner).await.unwrap();
    within("question q-2".into(), recorder.chat(&request("b"), || async { Ok(reply("B")) }))
        .await
        .unwrap();
    let contexts: Vec<String> =
        recorder.store().calls().unwrap().into_iter().map(|call| call.context).collect();
    assert_eq!(contexts, ["learn fold 0 step 1 attempt 2: question q-1", "question q-2"]);
}

#[tokio::test]
async fn an_identical_chat_request_in_flight_is_waited_for_and_not_sent_twice() {
    let directory = tempfile::tempdir().unwrap();
    let recorder = tape(directory.path(), TapeMode::Record);
    let sent = std::sync::atomic::AtomicUsize::new(0);
    let asked = request("a");
    let ask = |text: &'static str| {
        recorder.chat(&asked, || async {
            sent.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::time::sleep(std::time::Duration::from_millis(30)).await;
            Ok(reply(text))
        })
    };
    let (first, second) = tokio::join!(ask("A"), ask("other"));
    assert_eq!(sent.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!(first.unwrap(), second.unwrap(), "one key, one reply");
    assert_eq!(recorder.totals(), TapeTotals { recorded: 1, reused: 1, ..TapeTotals::default() });
    assert!(recorder.inflight.lock().unwrap().is_empty(), "no gate is left behind");
}

/// A call dropped while it waits or while it sends (a stopped learn drops its calls) leaves no
/// gate behind, and the next identical request is sent.
#[tokio::test]
async fn a_cancelled_call_leaves_no_gate_behind() {
    let directory = tempfile::tempdir().unwrap();
    let recorder = tape(directory.path(), TapeMode::Record);
    let asked = request("a");
    let never = || recorder.chat(&asked, std::future::pending::<Result<ChatResponse, Error>>);
    let (sending, waiting) = tokio::join!(
        tokio::time::timeout(std::time::Duration::from_millis(20), never()),
        tokio::time::timeout(std::time::Duration::from_millis(40), never()),
    );
    assert!(sending.is_err() && waiting.is_err(), "both were cancelled");
    assert!(recorder.inflight.lock().unwrap().is_empty(), "no gate is left behind");
    let answered = recorder.chat(&asked, || async { Ok(reply("A")) }).await.unwrap();
    assert_eq!(answered, reply("A"));
    assert!(recorder.inflight.lock().unwrap().is_empty());
}

/// A judgement that fails on every reply: asks `text` through `tape`, counting sends.
async fn failing_unit(
    tape: &Tape,
    text: &str,
    sent: &AtomicU64,
) -> (Result<(), String>, UnitCalls) {
    afresh_on_failure(|| async {
        tape.chat(&request(text), || async {
            sent.fetch_add(1, Ordering::SeqCst);
            Ok(reply("unreadable"))
        })
        .await
        .map_err(|error| error.to_string())?;
        Err("the reply is no verdict".to_string())
    })
    .await
}

#[tokio::test]
async fn a_failure_this_run_recorded_is_kept_and_an_earlier_run_s_is_asked_afresh_once() {
    let directory = tempfile::tempdir().unwrap();
    let sent = AtomicU64::new(0);
    let run = tape(directory.path(), TapeMode::Record);
    // Two units of one run share a request: the second replays the first's call and keeps its
    // failure rather than taking it off the tape and asking again.
    let (first, _) = failing_unit(&run, "a", &sent).await;
    let (second, calls) = failing_unit(&run, "a", &sent).await;
    assert!(first.is_err() && second.is_err());
    assert_eq!(sent.load(Ordering::SeqCst), 1, "one run asked one request twice");
    assert!(calls.from_tape());
    assert_eq!(run.store().calls().unwrap().len(), 1);
    drop(run);
    // The next run meets the earlier run's failure on the tape: it takes it off and asks once.
    let next = tape(directory.path(), TapeMode::Record);
    let (third, calls) = failing_unit(&next, "a", &sent).await;
    assert!(third.is_err());
    assert_eq!(sent.load(Ordering::SeqCst), 2);
    assert_eq!(calls.sent, 1);
    assert_eq!(next.store().calls().unwrap().len(), 1, "the new reply replaces the old one");
}

#[test]
fn a_call_is_forgotten_only_while_its_reply_is_the_one_replayed() {
    let directory = tempfile::tempdir().unwrap();
    let store = CallStore::open(&directory.path().join("calls.sqlite")).unwrap();
    let value = serde_json::to_value(request("a")).unwrap();
    let key = chat_key(&value);
    let (old, new) = (b"{\"old\":1}".to_vec(), b"{\"new\":2}".to_vec());
    let call = |reply: &'static [u8]| NewCall {
        key: &key,
        kind: "chat",
        model: "m",
        context: "",
        request: &value,
        reply,
    };
    store.put(&call(b"{\"new\":2}")).unwrap();
    // Another unit already asked afresh: the reply replayed (`old`) is no longer there.
    assert!(!store.forget_reply(&key, &old).unwrap());
    assert_eq!(store.reply(&key).unwrap(), Some(new.clone()));
    assert!(store.forget_reply(&key, &new).unwrap());
    assert_eq!(store.reply(&key).unwrap(), None);
}

#[tokio::test]
async fn reading_an_archived_store_leaves_no_file_beside_it() {
    let directory = tempfile::tempdir().unwrap();
    let folder = directory.path().join("odd ?#% name");
    std::fs::create_dir_all(&folder).unwrap();
    let recorder = tape(&folder, TapeMode::Record);
    recorder.chat(&request("a"), || async { Ok(reply("A")) }).await.unwrap();
    drop(recorder);
    let before: Vec<_> =
        std::fs::read_dir(&folder).unwrap().flatten().map(|e| e.file_name()).collect();
    let reader = CallStore::open_archived(&folder.join("calls.sqlite")).unwrap();
    assert_eq!(reader.calls().unwrap().len(), 1);
    drop(reader);
    let after: Vec<_> =
        std::fs::read_dir(&folder).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(after, before, "reading the store wrote beside it");
}

#[tokio::test]
async fn a_tape_that_keeps_failures_never_asks_an_earlier_failure_again() {
    let directory = tempfile::tempdir().unwrap();
    let sent = AtomicU64::new(0);
    let run = tape(directory.path(), TapeMode::Record);
    let _ = failing_unit(&run, "a", &sent).await;
    drop(run);
    let resumed = tape(directory.path(), TapeMode::Record);
    resumed.keep_failures();
    let (again, calls) = failing_unit(&resumed, "a", &sent).await;
    assert!(again.is_err());
    assert_eq!(sent.load(Ordering::SeqCst), 1, "the recorded failure was asked again");
    assert!(calls.from_tape());
}

/// A failure at the endpoint is recorded with its error: a replay meets the same error, kind
/// and fields; the same run asking it again meets it without sending; a later recording run
/// asks it afresh for the work item that recorded it, and its reply replaces the failure,
/// while another work item meets the failure; a failure never replaces a reply, and a refused
/// key is never recorded.
#[tokio::test]
async fn an_endpoint_failure_is_replayed_as_itself_and_asked_afresh_by_a_later_run() {
    let directory = tempfile::tempdir().unwrap();
    let timeout =
        || Error::Timeout { attempts: 4, timeout: std::time::Duration::from_millis(1500) };
    let recorder = tape(directory.path(), TapeMode::Record);
    let failed =
        within("question q-1".into(), recorder.chat(&request("a"), || async { Err(timeout()) }))
            .await
            .unwrap_err();
    let again = recorder
        .chat(&request("a"), || async { Ok(reply("must not be sent in this run")) })
        .await
        .unwrap_err();
    assert_eq!(format!("{again:?}"), format!("{failed:?}"));
    let refused = Error::Auth { status: 401, body: String::new(), key_variable: "K".into() };
    let auth = recorder.chat(&request("k"), || async { Err(refused) }).await.unwrap_err();
    assert!(matches!(auth, Error::Auth { .. }));
    let totals = TapeTotals { recorded: 1, reused: 1, failed: 1, ..TapeTotals::default() };
    assert_eq!(recorder.totals(), totals);
    let calls = recorder.store().calls().unwrap();
    assert_eq!(calls.len(), 1, "a refused key is not recorded");
    assert_eq!((calls[0].kind.as_str(), calls[0].context.as_str()), (FAILED_CHAT, "question q-1"));
    drop(recorder);

    let player = tape(directory.path(), TapeMode::Replay { fill: false });
    let played = player.chat(&request("a"), || async { Ok(reply("not sent")) }).await.unwrap_err();
    assert_eq!(format!("{played:?}"), format!("{:?}", timeout()));
    assert_eq!(player.first_unrecorded(), None);
    assert_eq!(player.totals().replayed, 1);

    // A later run: another work item meets the failure its recorder's files rest on; the
    // work item that recorded it asks it afresh, and the reply replaces it.
    let later = tape(directory.path(), TapeMode::Record);
    let other = within(
        "question q-2".into(),
        later.chat(&request("a"), || async { Ok(reply("must not be sent for another work item")) }),
    )
    .await
    .unwrap_err();
    assert_eq!(format!("{other:?}"), format!("{:?}", timeout()));
    let answered =
        within("question q-1".into(), later.chat(&request("a"), || async { Ok(reply("A")) }))
            .await
            .unwrap();
    assert_eq!(answered, reply("A"));
    let kept = later.chat(&request("a"), || async { Err(timeout()) }).await.unwrap();
    assert_eq!(kept, answered);
    drop(later);
    let store = CallStore::open(&directory.path().join("calls.sqlite")).unwrap();
    let key = chat_key(&serde_json::to_value(request("a")).unwrap());
    let value = serde_json::to_value(request("a")).unwrap();
    let failure = serde_json::to_vec(&timeout()).unwrap();
    let call = NewCall {
        key: &key,
        kind: FAILED_CHAT,
        model: "m",
        context: "",
        request: &value,
        reply: &failure,
    };
    assert!(!store.put(&call).unwrap(), "a failure never replaces a reply");
    let calls = store.calls().unwrap();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].kind, "chat");
    assert_eq!(serde_json::from_slice::<ChatResponse>(&calls[0].reply).unwrap(), answered);
}
