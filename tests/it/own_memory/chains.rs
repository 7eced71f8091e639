//! Facts whose validity is a function of their own times (issue 38), over real HTTP against the
//! scripted endpoint: history that arrives out of order, builds that finish out of order,
//! corrections across rebuilds, and a job that counts the calls of its facts' settling.

use std::time::Duration;

use mragent::llm::scripted::{RecordedRequest, ScriptedServer};
use reqwest::StatusCode;
use serde_json::{Value, json};

use super::{conflict_requests, facts_responder, facts_server, is_conflict_request};
use crate::serve::{Api, TOKEN};
use crate::support::build_and_answer;

/// One message of Carol's saying where she lives, at `at`.
fn home(at: &str, text: &str) -> Value {
    json!([{"speaker": "Carol", "timestamp": at, "text": text}])
}

/// A fact of a chain: its value, valid_from, valid_to, and its successor's value.
type Link = (String, Value, Value, Value);

/// The `home` facts of a history listing, in time order.
fn chain(reply: &Value) -> Vec<Link> {
    let mut facts: Vec<(String, Value, Value, Value, Value)> = reply["facts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|fact| fact["aspect"] == "home")
        .map(|fact| {
            (
                fact["valid_from"].as_str().unwrap_or_default().to_string(),
                fact["value"].clone(),
                fact["valid_to"].clone(),
                fact["superseded_by"].clone(),
                fact["id"].clone(),
            )
        })
        .collect();
    facts.sort_by(|a, b| a.0.cmp(&b.0));
    // Successor ids as the successor's value, so two stores compare.
    let value_of = |id: &Value| {
        facts.iter().find(|fact| fact.4 == *id).map_or(Value::Null, |fact| fact.1.clone())
    };
    facts
        .iter()
        .map(|(from, value, to, by, _)| {
            (value.as_str().unwrap().to_string(), json!(from), to.clone(), value_of(by))
        })
        .collect()
}

/// Asserts that `chain` is one chain: each fact ends when the next begins and names it as its
/// successor, and only the last is current.
fn assert_one_chain(chain: &[Link]) {
    for pair in chain.windows(2) {
        assert_eq!(pair[0].2, pair[1].1, "valid_to is the successor's valid_from: {chain:?}");
        assert_eq!(pair[0].3, json!(pair[1].0), "superseded by the next: {chain:?}");
    }
    let last = chain.last().unwrap();
    assert_eq!((&last.2, &last.3), (&Value::Null, &Value::Null), "{chain:?}");
}

#[tokio::test]
async fn history_added_out_of_order_forms_one_chain_in_time_order() {
    let server = facts_server(Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    let api = Api::start(&server, dir.path()).await;
    // May first, then January, then March: the late facts go where their time puts them.
    for (at, text) in [
        ("2024-05-02T10:00:00Z", "Big day, I moved to Vienna"),
        ("2024-01-05T10:00:00Z", "These days I live in Paris"),
        ("2024-03-10T10:00:00Z", "Last week I moved to Berlin"),
    ] {
        let body = json!({"user": "carol", "messages": home(at, text)});
        let (status, added) = api.post("/v1/conversations/life/messages", body).await;
        assert_eq!(status, StatusCode::OK, "{added}");
    }
    let (_, all) = api.get("/v1/users/carol/facts?aspect=home&history=true").await;
    let found = chain(&all);
    let values: Vec<&str> = found.iter().map(|fact| fact.0.as_str()).collect();
    assert_eq!(
        values,
        ["Carol lives in Paris", "Carol lives in Berlin", "Carol lives in Vienna"],
        "{all}"
    );
    assert_one_chain(&found);
    for (at, expected) in [
        ("2024-02-01", "Carol lives in Paris"),
        ("2024-04-01", "Carol lives in Berlin"),
        ("2024-06-01", "Carol lives in Vienna"),
    ] {
        let (_, then) = api.get(&format!("/v1/users/carol/facts?aspect=home&as_of={at}")).await;
        let current: Vec<&str> = then["facts"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|fact| fact["current"] == true)
            .map(|fact| fact["value"].as_str().unwrap())
            .collect();
        assert_eq!(current, [expected], "exactly one current on {at}: {then}");
    }
}

const CITIES: [&str; 6] = ["Paris", "Berlin", "Vienna", "Rome", "Oslo", "Porto"];

/// Carol's homes over six months, one session each; with `slow_first`, the scripted model
/// answers the earlier sessions' rewrites later, so builds finish in reverse time order.
async fn six_moves(slow_first: bool) -> (ScriptedServer, tempfile::TempDir, Api, Value) {
    let respond = build_and_answer(facts_responder);
    let server = ScriptedServer::with_responder(move |request: &RecordedRequest| {
        let reply = respond(request);
        let text = request.body.to_string();
        let month = CITIES.iter().position(|city| text.contains(&format!("moved to {city}")));
        match month {
            Some(month) if slow_first && request.is_chat() && !is_conflict_request(request) => {
                reply.delayed(Duration::from_millis(40 * (6 - month as u64)))
            }
            _ => reply,
        }
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let api = Api::start(&server, dir.path()).await;
    let messages: Vec<Value> = CITIES
        .iter()
        .enumerate()
        .map(|(index, city)| {
            json!({"speaker": "Carol", "timestamp": format!("2024-0{}-03T10:00:00Z", index + 1),
                   "text": format!("This month I moved to {city}")})
        })
        .collect();
    let body = json!({"user": "carol", "messages": messages});
    let (status, added) = api.post("/v1/conversations/year/messages", body).await;
    assert_eq!(status, StatusCode::OK, "{added}");
    (server, dir, api, added)
}

#[tokio::test]
async fn builds_finishing_in_any_order_settle_the_same_chain_and_verdicts() {
    let (slow, _dir, api, added) = six_moves(true).await;
    let (_, all) = api.get("/v1/users/carol/facts?aspect=home&history=true").await;
    let found = chain(&all);
    assert_eq!(found.len(), 6, "{all}");
    assert_one_chain(&found);
    assert_eq!(found[0].0, "Carol lives in Paris");
    let (fast, _dir2, api2, added2) = six_moves(false).await;
    let (_, all2) = api2.get("/v1/users/carol/facts?aspect=home&history=true").await;
    assert_eq!(chain(&all2), found, "the same chain whatever order builds finished in");
    // The same verdicts were asked: the same pairs, in the same calls.
    let pairs = |server: &ScriptedServer| -> Vec<String> {
        server
            .requests()
            .iter()
            .filter(|request| is_conflict_request(request))
            .map(|request| request.messages()[0]["content"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(pairs(&slow), pairs(&fast));
    assert_eq!(conflict_requests(&slow), 1, "one batched call");
    assert_eq!(added["facts"], added2["facts"], "{added} / {added2}");
    assert_eq!(added["facts"]["pairs"], 5, "{added}");
    assert_eq!(added["facts"]["superseded"], 5, "{added}");
}

/// The value memory holds for Carol's current home.
async fn held(api: &Api) -> String {
    let (_, now) = api.get("/v1/users/carol/facts?aspect=home").await;
    now["facts"][0]["value"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn a_correction_survives_rebuilds_and_lapses_on_the_record_when_its_message_goes() {
    let (_server, dir, api, _) = super::carol_moved(Vec::new()).await;
    let (_, now) = api.get("/v1/users/carol/facts?aspect=home").await;
    let berlin = now["facts"][0]["id"].clone();
    let (status, corrected) = api
        .post(&format!("/v1/facts/{berlin}/correct"), json!({"value": "Carol lives in Munich"}))
        .await;
    assert_eq!(status, StatusCode::OK, "{corrected}");
    // A message added to the session (before its fact's message: the fact's key changes)
    // rebuilds it: the correction follows the fact by its message and aspect.
    let earlier = json!([{"speaker": "Dan", "timestamp": "2024-03-10T08:59:00Z", "text": "Morning! Any news?"}]);
    let (status, added) = api
        .post("/v1/conversations/moving/messages", json!({"user": "carol", "messages": earlier}))
        .await;
    assert_eq!(status, StatusCode::OK, "{added}");
    assert_eq!(added["lapsed_corrections"], json!([]), "{added}");
    assert_eq!(held(&api).await, "Carol lives in Munich", "kept across an add");
    // Forgetting another message of the session rebuilds it again.
    let store =
        mragent::store::Store::open(mragent::store::Store::default_path(dir.path())).unwrap();
    let stored = store.load("moving").unwrap();
    assert_eq!(stored.sessions.len(), 2, "the added message joined the session");
    let id_of = |text: &str| {
        let mut messages = stored.sessions.iter().flat_map(|session| &session.messages);
        messages.find(|m| m.text.contains(text)).unwrap().id.clone()
    };
    let (status, forgot) = api
        .call(
            "DELETE",
            &format!("/v1/conversations/moving/messages/{}", id_of("great city")),
            None,
            Some(TOKEN),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{forgot}");
    assert_eq!(held(&api).await, "Carol lives in Munich", "kept across a forget: {forgot}");
    let (_, log) = api.get("/v1/edits?conversation=moving").await;
    let correction = log["edits"]
        .as_array()
        .unwrap()
        .iter()
        .find(|edit| edit["kind"] == "correct_fact")
        .unwrap()
        .clone();
    assert_eq!(correction["lapsed_by"], Value::Null, "{log}");
    // Forgetting the fact's own message: the correction cannot be carried, and says so.
    let (status, forgot) = api
        .call(
            "DELETE",
            &format!("/v1/conversations/moving/messages/{}", id_of("moved to Berlin")),
            None,
            Some(TOKEN),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{forgot}");
    assert_eq!(forgot["forgotten"]["lapsed_corrections"], json!([correction["id"]]), "{forgot}");
    let (_, log) = api.get("/v1/edits?conversation=moving").await;
    let edits = log["edits"].as_array().unwrap();
    let lapse = edits.iter().find(|edit| edit["kind"] == "correction_lapsed").unwrap();
    assert_eq!(lapse["target"], correction["id"].to_string(), "{log}");
    assert_eq!(lapse["before"]["value"], "Carol lives in Munich", "{log}");
    let again = edits.iter().find(|edit| edit["id"] == correction["id"]).unwrap();
    assert_eq!(again["lapsed_by"], lapse["id"], "{log}");
    let (status, refused) =
        api.post(&format!("/v1/edits/{}/undo", correction["id"]), json!({})).await;
    assert_eq!(
        (status, &refused["error"]["code"]),
        (StatusCode::CONFLICT, &json!("not_undoable")),
        "{refused}"
    );
}

#[tokio::test]
async fn a_job_counts_the_calls_of_its_facts_settling() {
    // Every chat reply reports 100 prompt and 10 completion tokens, so the job's tokens must be
    // exactly those of the calls the endpoint received.
    let respond = build_and_answer(facts_responder);
    let server = ScriptedServer::with_responder(move |request: &RecordedRequest| {
        let reply = respond(request);
        if request.is_chat() { reply.with_usage(100, 10) } else { reply }
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let api = Api::start(&server, dir.path()).await;
    let body = json!({"user": "carol", "wait": false, "messages": super::moving_messages()});
    let (status, queued) = api.post("/v1/conversations/moving/messages", body).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{queued}");
    let job = queued["job"]["id"].as_i64().unwrap();
    let mut done = Value::Null;
    for _ in 0..600 {
        let (_, reply) = api.get(&format!("/v1/jobs/{job}")).await;
        if crate::jobs::ended(&reply) {
            done = reply;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(done["state"], "done", "{done}");
    assert_eq!(conflict_requests(&server), 1, "the settling made a call");
    let chat = server.requests().iter().filter(|request| request.is_chat()).count() as u64;
    assert_eq!(done["chat_calls"], chat, "every call the endpoint received: {done}");
    assert_eq!(done["tokens"], json!({"prompt": 100 * chat, "completion": 10 * chat}), "{done}");
}

#[tokio::test]
async fn an_ask_without_a_built_session_names_the_reason() {
    let (server, _dir, api, _) = super::carol_moved(Vec::new()).await;
    let body = json!({"question": "Where does Carol live?", "as_of": "2023-06-01"});
    let (status, reply) = api.post("/v1/users/carol/ask", body).await;
    assert_eq!((status, &reply["error"]["code"]), (StatusCode::CONFLICT, &json!("not_built")));
    let message = reply["error"]["message"].as_str().unwrap();
    assert!(message.contains("nothing was said before 2023-06-01"), "{message}");
    assert!(!message.contains("failed"), "{message}");
    drop(server);

    // A conversation whose job is still building: its job is named.
    let slow = facts_server(Duration::from_millis(300)).await;
    let dir = tempfile::tempdir().unwrap();
    let api = Api::start(&slow, dir.path()).await;
    let body = json!({"wait": false, "messages": super::moving_messages()});
    let (status, queued) = api.post("/v1/conversations/fresh/messages", body).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{queued}");
    let (status, found) =
        api.post("/v1/conversations/fresh/search", json!({"query": "Paris"})).await;
    assert_eq!(status, StatusCode::OK, "a search before any build answers: {found}");
    assert_eq!(found["hits"], json!([]), "{found}");
    let (status, reply) =
        api.post("/v1/conversations/fresh/ask", json!({"question": "Where?"})).await;
    assert_eq!(status, StatusCode::CONFLICT, "{reply}");
    let message = reply["error"]["message"].as_str().unwrap();
    let job = queued["job"]["id"].as_i64().unwrap();
    assert!(message.contains(&format!("still being built (job {job})")), "{message}");
}

#[tokio::test]
async fn a_replaced_fact_reaches_the_model_with_its_mark_though_its_turn_was_shown_first() {
    // Home is Carol's only aspect, so the agent's aspect lookup is of `home`.
    let server = ScriptedServer::with_responder(build_and_answer(super::homes_only_responder))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let api = Api::start(&server, dir.path()).await;
    let body = json!({"user": "carol", "messages": super::moving_messages()});
    let (status, added) = api.post("/v1/conversations/moving/messages", body).await;
    assert_eq!(status, StatusCode::OK, "{added}");
    let before = server.request_count();
    let (status, reply) =
        api.post("/v1/users/carol/ask", json!({"question": "Where does Carol live?"})).await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    // The last loop request carries every tool result the model was sent.
    let requests = server.requests();
    let last = requests[before..]
        .iter()
        .rev()
        .find(|request| request.body.get("tools").is_some())
        .unwrap();
    let messages = last.messages();
    let text = |message: &Value| message["content"].as_str().unwrap_or_default().to_string();
    let position = messages
        .iter()
        .position(|message| {
            message["role"] == "tool"
                && text(message).contains("Carol lives in Berlin")
                && text(message).contains("earlier")
        })
        .unwrap_or_else(|| panic!("no aspect result with its earlier value: {messages:#?}"));
    let aspect = text(&messages[position]);
    assert!(aspect.contains("Carol lives in Paris"), "the earlier value itself: {aspect}");
    let shown_first =
        messages[..position].iter().any(|message| text(message).contains("I live in Paris"));
    assert!(shown_first, "the turn was shown before the tool result: {messages:#?}");
}

/// The API over a service whose model takes 250 ms a reply and whose adds wait at most 200 ms
/// (the scripted server is returned to keep it running).
async fn slow_api(root: &std::path::Path) -> (ScriptedServer, Api) {
    let slow = facts_server(Duration::from_millis(250)).await;
    let service = crate::own::service_with(&slow, root, |settings| {
        settings.add_wait = Duration::from_millis(200);
    });
    (slow, Api::start_over(service, Vec::new()).await)
}

/// Job `job` once it has ended (polled for up to 10 s; `null` if it has not).
async fn job_ended(api: &Api, job: i64) -> Value {
    for _ in 0..200 {
        let (_, now) = api.get(&format!("/v1/jobs/{job}")).await;
        if crate::jobs::ended(&now) {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Value::Null
}

#[tokio::test]
async fn an_add_that_outlasts_its_bounded_wait_answers_202_with_its_job_and_the_build_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let (_slow, api) = slow_api(dir.path()).await;
    let started = std::time::Instant::now();
    let body = json!({"user": "carol", "messages": super::moving_messages()});
    let (status, reply) = api.post("/v1/conversations/moving/messages", body).await;
    assert!(started.elapsed() < Duration::from_millis(900), "the request did not wait long");
    assert_eq!(status, StatusCode::ACCEPTED, "{reply}");
    assert_eq!(reply["new_messages"], 4, "{reply}");
    let job = reply["job"]["id"].as_i64().unwrap();
    let batch = json!({"conversations": [
        {"conversation": "other", "user": "carol", "messages": [
            {"speaker": "Carol", "timestamp": "2024-06-01T10:00:00Z", "text": "I moved to Rome now"}]}]});
    let (status, batched) = api.post("/v1/conversations", batch).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{batched}");
    let other = batched["results"][0]["queued"]["job"]["id"].as_i64().unwrap();
    for job in [job, other] {
        let done = job_ended(&api, job).await;
        assert_eq!(done["state"], "done", "the build went on: {done}");
    }
    let (_, all) = api.get("/v1/users/carol/facts?aspect=home&history=true").await;
    assert_one_chain(&chain(&all));
    assert_eq!(chain(&all).len(), 3, "{all}");
}

#[tokio::test]
async fn an_mcp_add_that_outlasts_its_bounded_wait_returns_its_job_and_the_build_goes_on() {
    // `add_messages` waits like the HTTP add: at most `MRAGENT_ADD_WAIT`, then what was stored
    // and the job, never a tool call held for minutes.
    let dir = tempfile::tempdir().unwrap();
    let (_slow, api) = slow_api(dir.path()).await;
    let started = std::time::Instant::now();
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "add_messages",
        "arguments": {"conversation": "moving", "user": "carol", "messages": super::moving_messages()}}});
    let (status, reply) = api.post("/mcp", call).await;
    assert!(started.elapsed() < Duration::from_millis(900), "the call did not wait long");
    assert_eq!(status, StatusCode::OK, "{reply}");
    let result = &reply["result"];
    assert_ne!(result["isError"], true, "{reply}");
    let text = result["content"][0]["text"].as_str().unwrap();
    let queued: Value = serde_json::from_str(text).unwrap();
    assert_eq!(queued["new_messages"], 4, "{queued}");
    let job = queued["job"]["id"].as_i64().expect("the reply names the job");
    let done = job_ended(&api, job).await;
    assert_eq!(done["state"], "done", "the build went on: {done}");
    let (_, all) = api.get("/v1/users/carol/facts?aspect=home&history=true").await;
    assert_one_chain(&chain(&all));
    assert_eq!(chain(&all).len(), 2, "Paris, then Berlin: {all}");
}
