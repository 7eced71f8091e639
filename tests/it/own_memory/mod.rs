//! Own memory that changes its mind, over real HTTP on 127.0.0.1 against the scripted
//! endpoint: users whose conversations stay apart, facts that supersede older facts (decided
//! by a sloppy model, cached), answers as of a date, single edits with their audit log and
//! undo, and (`kill`) a kill -9 during an edit.

mod chains;
mod cli;
pub(crate) mod kill;
mod property;

use std::time::Duration;

use mragent::llm::scripted::{RecordedRequest, ScriptedReply, ScriptedServer};
use regex::Regex;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::serve::{Api, TOKEN};
use crate::support::build_and_answer;

/// The first line of the conflict prompt, by which the scripted model knows it.
fn is_conflict_request(request: &RecordedRequest) -> bool {
    let first = mragent::prompts::FACT_CONFLICTS.text.lines().next().unwrap_or_default();
    request.is_chat()
        && request
            .messages()
            .first()
            .and_then(|message| message["content"].as_str())
            .is_some_and(|text| text.starts_with(first))
}

/// The build's rewrite with a `home` fact for every turn saying where its speaker lives or
/// moved; the conflict verdicts as a sloppy model gives them: in prose, numbers as strings,
/// booleans as text, every newer home replacing the older.
pub(crate) fn facts_responder(request: &RecordedRequest) -> Option<ScriptedReply> {
    facts_reply(request, true)
}

/// As [`facts_responder`], with the `home` facts as the only personal facts (so an agent that
/// looks up the first aspect it is shown looks up `home`).
pub(crate) fn homes_only_responder(request: &RecordedRequest) -> Option<ScriptedReply> {
    facts_reply(request, false)
}

fn facts_reply(request: &RecordedRequest, other_facts: bool) -> Option<ScriptedReply> {
    if is_conflict_request(request) {
        let prompt = request.messages()[0]["content"].as_str().unwrap_or_default();
        let pairs = Regex::new(r"(?m)^(\d+)\. person:").unwrap();
        let verdicts: Vec<Value> = pairs
            .captures_iter(prompt)
            .map(|c| json!({"pair": c[1].to_string(), "replaces": "true"}))
            .collect();
        let body = json!({ "verdicts": verdicts });
        return Some(ScriptedReply::text(format!(
            "Sure! Here are my verdicts:\n{body}\nHope it helps."
        )));
    }
    let mut reply = crate::ingest::good_answer(request);
    let home = Regex::new(r"^(\w+) said: .*(?:live in|moved to) (\w+)").unwrap();
    let sentences = reply.get("sentence").and_then(Value::as_array).cloned()?;
    let facts = reply.get_mut("personal_sentences").and_then(Value::as_array_mut)?;
    if !other_facts {
        facts.clear();
    }
    for (n, sentence) in sentences.iter().enumerate() {
        let text = sentence["text"].as_str().unwrap_or_default();
        if let Some(c) = home.captures(text) {
            facts.push(json!({"id": format!("p{}", 50 + n), "person": &c[1], "tag": "home",
                "text": format!("{} lives in {}", &c[1], &c[2]), "origin": sentence["origin"]}));
        }
    }
    Some(ScriptedReply::json(&reply))
}

pub(crate) async fn facts_server(delay: Duration) -> ScriptedServer {
    let respond = build_and_answer(facts_responder);
    ScriptedServer::with_responder(move |request: &RecordedRequest| {
        let reply = respond(request);
        if delay.is_zero() || !request.is_chat() { reply } else { reply.delayed(delay) }
    })
    .await
    .unwrap()
}

/// Carol's home over two sessions two months apart.
pub(crate) fn moving_messages() -> Value {
    json!([
        {"speaker": "Carol", "timestamp": "2024-01-05T10:00:00Z", "text": "I live in Paris with my cat"},
        {"speaker": "Dan", "timestamp": "2024-01-05T10:01:00Z", "text": "Paris sounds lovely for a cat"},
        {"speaker": "Carol", "timestamp": "2024-03-10T09:00:00Z", "text": "Big news, I moved to Berlin last week"},
        {"speaker": "Dan", "timestamp": "2024-03-10T09:02:00Z", "text": "Berlin is a great city to move to"},
    ])
}

/// The API (accepting `named` tokens too) over a new store holding Carol's move, as user
/// `carol`, and the add's report.
async fn carol_moved(
    named: Vec<(String, String)>,
) -> (ScriptedServer, tempfile::TempDir, Api, Value) {
    let server = facts_server(Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    let api = Api::start_with(&server, dir.path(), named).await;
    let body = json!({"user": "carol", "messages": moving_messages()});
    let (status, added) = api.post("/v1/conversations/moving/messages", body).await;
    assert_eq!(status, StatusCode::OK, "{added}");
    (server, dir, api, added)
}

fn conflict_requests(server: &ScriptedServer) -> usize {
    server.requests().iter().filter(|request| is_conflict_request(request)).count()
}

fn facts_of(reply: &Value) -> Vec<(String, bool)> {
    reply["facts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|fact| fact["aspect"] == "home")
        .map(|fact| (fact["value"].as_str().unwrap().to_string(), fact["current"] == true))
        .collect()
}

#[tokio::test]
async fn users_never_see_each_others_lines_and_filters_narrow_a_search() {
    let server = facts_server(Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    let api = Api::start(&server, dir.path()).await;
    let adds = [
        ("u1-chat", "u1", "work", "I adore hiking in the Alps with my dog Rex"),
        ("u1-notes", "u1", "home", "Hiking plans: adore the Alps trail again in June"),
        ("u2-chat", "u2", "work", "I adore hiking in the Andes with my cat Tom"),
    ];
    for (conversation, user, tag, text) in adds {
        let body = json!({"user": user, "tags": {"place": tag}, "messages": [
            {"speaker": "Eve", "timestamp": "2024-02-01T10:00:00Z", "text": text},
            {"speaker": "Sam", "timestamp": "2024-02-01T10:05:00Z", "text": "adore hiking too"}]});
        let (status, reply) =
            api.post(&format!("/v1/conversations/{conversation}/messages"), body).await;
        assert_eq!(status, StatusCode::OK, "{reply}");
    }
    let (status, reply) =
        api.post("/v1/users/u1/search", json!({"query": "adore hiking", "k": 50})).await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    let hits = reply["hits"].as_array().unwrap();
    let conversations: std::collections::BTreeSet<&str> =
        hits.iter().map(|hit| hit["conversation"].as_str().unwrap()).collect();
    assert_eq!(conversations, ["u1-chat", "u1-notes"].into(), "{reply}");
    assert!(hits.iter().all(|hit| !hit["text"].as_str().unwrap().contains("Andes")), "{reply}");
    // The query is embedded once for all the user's conversations (their indices are warm now).
    let before = server.request_count();
    let (status, _) = api.post("/v1/users/u1/search", json!({"query": "Rex trail June"})).await;
    assert_eq!(status, StatusCode::OK);
    let embeddings = server.requests()[before..].iter().filter(|r| r.is_embeddings()).count();
    assert_eq!(embeddings, 1, "one embedding request for two conversations");
    let (_, other) =
        api.post("/v1/users/u2/search", json!({"query": "adore hiking Alps", "k": 50})).await;
    assert!(
        other["hits"].as_array().unwrap().iter().all(|hit| hit["conversation"] == "u2-chat"),
        "{other}"
    );

    let narrow = |filters: Value| {
        let mut body = json!({"query": "adore hiking", "k": 50});
        body.as_object_mut().unwrap().extend(filters.as_object().unwrap().clone());
        api.post("/v1/users/u1/search", body)
    };
    let (_, by_speaker) = narrow(json!({"speaker": "sam"})).await;
    assert!(by_speaker["hits"].as_array().unwrap().iter().all(|hit| hit["speaker"] == "Sam"));
    assert_eq!(by_speaker["hits"].as_array().unwrap().len(), 2, "{by_speaker}");
    let (_, by_tag) = narrow(json!({"tags": {"place": "home"}})).await;
    assert!(by_tag["hits"].as_array().unwrap().iter().all(|hit| hit["conversation"] == "u1-notes"));
    let (_, by_time) = narrow(json!({"from": "2024-02-01T10:01:00Z", "to": "2024-02-01"})).await;
    assert_eq!(by_time["hits"].as_array().unwrap().len(), 2, "{by_time}");
    let (_, one) = narrow(json!({"conversation": "u1-chat"})).await;
    assert!(one["hits"].as_array().unwrap().iter().all(|hit| hit["conversation"] == "u1-chat"));
    let (status, reply) = narrow(json!({"conversation": "u2-chat"})).await;
    let code = &reply["error"]["code"];
    assert_eq!((status, code), (StatusCode::NOT_FOUND, &json!("unknown_conversation")));

    let (status, asked) =
        api.post("/v1/users/u1/ask", json!({"question": "Where does Eve adore hiking?"})).await;
    assert_eq!(status, StatusCode::OK, "{asked}");
    assert_eq!(asked["conversation"], "user:u1", "{asked}");
    let supporting = asked["supporting"].as_array().unwrap();
    assert!(
        supporting.iter().all(|hit| hit["conversation"].as_str().unwrap().starts_with("u1-")),
        "{asked}"
    );
    // A conversation that does not exist is unknown, whatever the filter names.
    let body = json!({"query": "x", "conversation": "u1-chat"});
    let (status, reply) = api.post("/v1/conversations/ghost/search", body).await;
    assert_eq!(
        (status, &reply["error"]["code"]),
        (StatusCode::NOT_FOUND, &json!("unknown_conversation"))
    );
    let (status, reply) = api.post("/v1/users/nobody/search", json!({"query": "x"})).await;
    assert_eq!((status, &reply["error"]["code"]), (StatusCode::NOT_FOUND, &json!("unknown_user")));
    let (status, reply) = api
        .post(
            "/v1/conversations/u1-chat/messages",
            json!({"user": "u2", "messages": [{"speaker": "A", "text": "hi"}]}),
        )
        .await;
    assert_eq!((status, &reply["error"]["code"]), (StatusCode::CONFLICT, &json!("scope_mismatch")));
    let (_, listed) = api.get("/v1/conversations").await;
    assert_eq!(listed["conversations"][0]["user"], "u1", "{listed}");
}

#[tokio::test]
async fn a_new_fact_supersedes_the_old_one_which_keeps_its_history_and_verdicts_are_cached() {
    let (server, dir, api, added) = carol_moved(Vec::new()).await;
    assert_eq!(added["facts"]["superseded"], 1, "{added}");
    assert_eq!(added["facts"]["undecided"], 0, "{added}");
    assert_eq!(conflict_requests(&server), 1, "one batched call for the session with a rival");

    let (_, now) = api.get("/v1/users/carol/facts?aspect=home").await;
    assert_eq!(facts_of(&now), [("Carol lives in Berlin".to_string(), true)], "{now}");
    let (_, all) = api.get("/v1/users/carol/facts?aspect=HOME&history=true").await;
    assert_eq!(
        facts_of(&all),
        [("Carol lives in Berlin".to_string(), true), ("Carol lives in Paris".to_string(), false)],
        "{all}"
    );
    let (berlin, paris) = (&all["facts"][0], &all["facts"][1]);
    assert_eq!(paris["valid_to"], berlin["valid_from"], "{all}");
    assert_eq!(paris["superseded_by"], berlin["id"], "{all}");
    assert_eq!(paris["valid_from"], "2024-01-05T10:00:00Z");
    let (_, then) = api.get("/v1/users/carol/facts?aspect=home&as_of=2024-02-01").await;
    assert_eq!(facts_of(&then), [("Carol lives in Paris".to_string(), true)], "{then}");
    let (_, by_conversation) = api.get("/v1/conversations/moving/facts?aspect=home").await;
    assert_eq!(facts_of(&by_conversation), facts_of(&now));

    // A second conversation of the same user moves her again: the chain ends with one current.
    let later = json!([{"speaker": "Carol", "timestamp": "2024-06-01T09:00:00Z", "text": "Now I moved to Rome for work"}]);
    let (status, added) = api
        .post("/v1/conversations/moving-2/messages", json!({"user": "carol", "messages": later}))
        .await;
    assert_eq!(status, StatusCode::OK, "{added}");
    let (_, all) = api.get("/v1/users/carol/facts?aspect=home&history=true").await;
    let current: Vec<_> = facts_of(&all).into_iter().filter(|(_, current)| *current).collect();
    assert_eq!(current, [("Carol lives in Rome".to_string(), true)], "{all}");
    assert_eq!(all["facts"].as_array().unwrap().len(), 3);
    // Another user's facts are not the same person's history.
    let (_, other) = api.get("/v1/conversations/moving/facts?aspect=home&history=true").await;
    assert_eq!(other["facts"].as_array().unwrap().len(), 2, "{other}");

    // Rebuilding the updating session asks nothing again: its verdicts are cached.
    let calls = conflict_requests(&server);
    let store =
        mragent::store::Store::open(mragent::store::Store::default_path(dir.path())).unwrap();
    let stored = store.load("moving").unwrap();
    let reply = stored.sessions[1].messages[1].id.clone();
    let (status, _) = api
        .call("DELETE", &format!("/v1/conversations/moving/messages/{reply}"), None, Some(TOKEN))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(conflict_requests(&server), calls, "a cached verdict is not asked again");
    let (_, all) = api.get("/v1/users/carol/facts?aspect=home&history=true").await;
    assert_eq!(facts_of(&all).iter().filter(|(_, current)| *current).count(), 1, "{all}");
}

#[tokio::test]
async fn an_answer_as_of_a_date_never_sees_what_came_after() {
    let (server, _dir, api, _) = carol_moved(Vec::new()).await;
    let mentions_berlin = |from: usize| {
        server.requests()[from..].iter().any(|request| request.body.to_string().contains("Berlin"))
    };
    let before = server.request_count();
    let (status, now) = api
        .post("/v1/conversations/moving/ask", json!({"question": "Where does Carol live?"}))
        .await;
    assert_eq!(status, StatusCode::OK, "{now}");
    assert!(mentions_berlin(before), "the answer now reads the move");

    let before = server.request_count();
    let body = json!({"question": "Where does Carol live?", "as_of": "2024-02-01"});
    let (status, then) = api.post("/v1/conversations/moving/ask", body.clone()).await;
    assert_eq!(status, StatusCode::OK, "{then}");
    assert_eq!(then["as_of"], "2024-02-01T23:59:59Z", "{then}");
    assert!(!mentions_berlin(before), "nothing after the date reaches the model");
    assert!(
        server.requests()[before..]
            .iter()
            .any(|request| request.body.to_string().contains("Paris"))
    );
    assert!(
        then["supporting"].as_array().unwrap().iter().all(|hit| hit["date"] == "2024-01-05"),
        "{then}"
    );
    let before = server.request_count();
    let (status, user) = api.post("/v1/users/carol/ask", body).await;
    assert_eq!(status, StatusCode::OK, "{user}");
    assert!(!mentions_berlin(before));
    let (status, reply) =
        api.post("/v1/conversations/moving/ask", json!({"question": "x", "as_of": "soon"})).await;
    assert_eq!((status, &reply["error"]["field"]), (StatusCode::BAD_REQUEST, &json!("as_of")));
}

#[tokio::test]
async fn forget_correct_and_undo_are_logged_by_token_name_and_reverted() {
    let named = vec![("alice".to_string(), "alice-secret".to_string())];
    let (server, dir, api, _) = carol_moved(named).await;
    let store =
        mragent::store::Store::open(mragent::store::Store::default_path(dir.path())).unwrap();
    let moved = store.load("moving").unwrap().sessions[1].messages[0].id.clone();
    let path = format!("/v1/conversations/moving/messages/{moved}");
    let (status, forgot) = api.call("DELETE", &path, None, Some("alice-secret")).await;
    assert_eq!(status, StatusCode::OK, "{forgot}");
    let (_, facts) = api.get("/v1/users/carol/facts?aspect=home").await;
    assert_eq!(
        facts_of(&facts),
        [("Carol lives in Paris".to_string(), true)],
        "forgotten: {facts}"
    );

    let (_, log) = api.get("/v1/edits?user=carol").await;
    let edit = &log["edits"][0];
    assert_eq!(
        (edit["kind"].as_str(), edit["actor"].as_str()),
        (Some("forget_message"), Some("alice"))
    );
    assert_eq!(edit["before"]["text"], "Big news, I moved to Berlin last week", "{log}");
    assert_eq!(edit["id"], forgot["forgotten"]["edit"]);
    let calls = conflict_requests(&server);
    let (status, undone) = api.post(&format!("/v1/edits/{}/undo", edit["id"]), json!({})).await;
    assert_eq!(status, StatusCode::OK, "{undone}");
    assert_eq!(undone["undo"]["actor"], "token");
    assert_eq!(undone["rebuilt"]["built_sessions"], json!(["D2"]), "{undone}");
    assert_eq!(conflict_requests(&server), calls, "the restored fact's verdict is cached");
    assert!(store.load("moving").unwrap().sessions[1].messages.iter().any(|m| m.id == moved));
    let (_, facts) = api.get("/v1/users/carol/facts?aspect=home").await;
    assert_eq!(facts_of(&facts), [("Carol lives in Berlin".to_string(), true)], "{facts}");
    let again = api.post(&format!("/v1/edits/{}/undo", edit["id"]), json!({})).await;
    assert_eq!(
        (again.0, &again.1["error"]["code"]),
        (StatusCode::CONFLICT, &json!("not_undoable"))
    );

    let berlin = facts["facts"][0]["id"].clone();
    let (status, corrected) = api
        .post(&format!("/v1/facts/{berlin}/correct"), json!({"value": "Carol lives in Munich"}))
        .await;
    assert_eq!(status, StatusCode::OK, "{corrected}");
    assert_eq!(
        (corrected["before"]["value"].as_str(), corrected["after"]["value"].as_str()),
        (Some("Carol lives in Berlin"), Some("Carol lives in Munich"))
    );
    let (_, facts) = api.get("/v1/users/carol/facts?aspect=home").await;
    assert_eq!(facts["facts"][0]["value"], "Carol lives in Munich");
    assert_eq!(facts["facts"][0]["extracted"], "Carol lives in Berlin");
    let (status, _) = api.post(&format!("/v1/edits/{}/undo", corrected["id"]), json!({})).await;
    assert_eq!(status, StatusCode::OK);
    let (_, facts) = api.get("/v1/users/carol/facts?aspect=home").await;
    assert_eq!(facts["facts"][0]["value"], "Carol lives in Berlin");

    let (_, log) = api.get("/v1/edits?conversation=moving").await;
    let kinds: Vec<&str> =
        log["edits"].as_array().unwrap().iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["forget_message", "undo", "correct_fact", "undo"], "{log}");
    let connection =
        rusqlite::Connection::open(mragent::store::Store::default_path(dir.path())).unwrap();
    assert!(connection.execute("UPDATE edits SET actor = 'mallory'", []).is_err(), "append-only");
    assert!(connection.execute("DELETE FROM edits", []).is_err(), "append-only");
    for (path, status, code) in [
        ("/v1/facts/999999/correct", StatusCode::NOT_FOUND, "unknown_fact"),
        ("/v1/edits/999999/undo", StatusCode::NOT_FOUND, "unknown_edit"),
        ("/v1/edits/abc/undo", StatusCode::BAD_REQUEST, "invalid"),
    ] {
        let (got, reply) = api.post(path, json!({"value": "x"})).await;
        assert_eq!((got, reply["error"]["code"].as_str()), (status, Some(code)), "{path}: {reply}");
    }
    let (status, reply) =
        api.post(&format!("/v1/facts/{berlin}/correct"), json!({"value": "  "})).await;
    assert_eq!((status, &reply["error"]["field"]), (StatusCode::BAD_REQUEST, &json!("value")));
}

#[tokio::test]
async fn a_fact_replaced_later_in_its_own_session_holds_until_the_replacing_message() {
    let server = facts_server(Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    let api = Api::start(&server, dir.path()).await;
    let messages = json!([
        {"speaker": "Carol", "timestamp": "2024-05-01T10:00:00Z", "text": "I live in Lyon these days"},
        {"speaker": "Carol", "timestamp": "2024-05-01T10:30:00Z", "text": "Well, I moved to Nice this morning"},
    ]);
    let body = json!({"user": "carol", "messages": messages});
    let (status, added) = api.post("/v1/conversations/sameday/messages", body).await;
    assert_eq!((status, &added["facts"]["superseded"]), (StatusCode::OK, &json!(1)), "{added}");
    let (_, all) = api.get("/v1/users/carol/facts?aspect=home&history=true").await;
    let (nice, lyon) = (&all["facts"][0], &all["facts"][1]);
    assert_eq!(
        (nice["value"].as_str(), nice["valid_from"].as_str()),
        (Some("Carol lives in Nice"), Some("2024-05-01T10:30:00Z"))
    );
    assert_eq!(lyon["valid_to"], "2024-05-01T10:30:00Z", "{all}");
    let (_, then) = api.get("/v1/users/carol/facts?aspect=home&as_of=2024-05-01T10:15:00Z").await;
    assert_eq!(facts_of(&then), [("Carol lives in Lyon".to_string(), true)], "{then}");
    let before = server.request_count();
    let ask = json!({"question": "Where does Carol live?", "as_of": "2024-05-01T10:15:00Z"});
    let (status, reply) = api.post("/v1/users/carol/ask", ask).await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    let asked = &server.requests()[before..];
    assert!(asked.iter().all(|request| !request.body.to_string().contains("Nice")));
    assert!(asked.iter().any(|request| request.body.to_string().contains("Lyon")));
}
