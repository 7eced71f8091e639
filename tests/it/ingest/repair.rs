//! Never lose a turn (issue 11, item 3): a model that skips or merges turns, skips keyword
//! items or answers in prose still leaves every turn in memory; the re-asks name only what was
//! missing and the summary counts every repair, also on a rerun from the caches.

use std::collections::{BTreeMap, BTreeSet};

use mragent::ingest::load_memory;
use mragent::llm::Embedder as _;
use mragent::llm::scripted::{RecordedRequest, ScriptedReply};
use regex::Regex;
use serde_json::{Value, json};

use super::{
    Ask, Harness, fixture, good_answer, locomo, parse_ask, rewrite_session, rewrites_per_session,
};

/// The dia_ids of the turn lines (`[D1:2] Bo: ...`) in a re-ask's last message.
fn turns_in_last_message(request: &RecordedRequest) -> Vec<String> {
    let turn = Regex::new(r"(?m)^\[(D\d+:\d+)\] ").unwrap();
    turn.captures_iter(request.last_message_text()).map(|c| c[1].to_string()).collect()
}

/// The sentence ids listed (`{"id":"D1:2-1",...}`) in a keyword re-ask's last message.
fn sentences_in_last_message(request: &RecordedRequest) -> Vec<String> {
    let id = Regex::new(r#""id":"(D\d+:\d+-\d+)""#).unwrap();
    id.captures_iter(request.last_message_text()).map(|c| c[1].to_string()).collect()
}

/// The session of a keyword request (from its first sentence id).
fn keyword_session(request: &RecordedRequest) -> Option<u32> {
    match parse_ask(request) {
        Ask::Keywords(items) => {
            items.first().map(|(id, _)| id[1..id.find(':').unwrap()].parse().unwrap())
        }
        Ask::Rewrite { .. } => None,
    }
}

/// A sloppy model, one first reply in two: odd sessions' rewrites skip turn 2, sessions
/// 2, 6, 10, ... merge turns 3 and 4 into one sentence citing both, even sessions' keyword
/// answers skip their last sentence. Re-asks are answered well.
pub(crate) fn sloppy(request: &RecordedRequest) -> Option<ScriptedReply> {
    if request.messages().len() > 1 {
        return None;
    }
    let mut answer = good_answer(request);
    if let Some(session) = rewrite_session(request) {
        let sentences = answer["sentence"].as_array_mut().unwrap();
        if session % 2 == 1 {
            sentences.remove(1);
        } else if session % 4 == 2 {
            let merged = sentences.remove(3);
            sentences[2]["origin"] =
                json!(format!("D{session}:3, {}", merged["origin"].as_str().unwrap()));
        } else {
            return None;
        }
        return Some(ScriptedReply::json(&answer));
    }
    if keyword_session(request)? % 2 == 0 {
        answer["sentence"].as_array_mut().unwrap().pop();
        return Some(ScriptedReply::json(&answer));
    }
    None
}

#[tokio::test]
async fn a_sloppy_model_loses_no_turn_and_every_repair_is_counted() {
    let harness = Harness::new(sloppy).await;
    let conversation = locomo("conv-30");
    let summary = harness.build(std::slice::from_ref(&conversation)).await;
    assert!(summary.is_complete(), "{summary}");
    let sessions = || conversation.sessions.iter().filter(|s| !s.turns.is_empty());
    let odd_turns: usize = sessions().filter(|s| s.index % 2 == 1).map(|s| s.turns.len()).sum();
    let even_turns: usize = sessions().filter(|s| s.index % 2 == 0).map(|s| s.turns.len()).sum();
    let repairs = summary.samples[0].repairs;
    assert_eq!(repairs.salvaged_turns, odd_turns, "{summary}");
    assert_eq!(repairs.verbatim_turns, 0);
    assert_eq!(repairs.reasked_units, 19, "rewrite re-asks in odd sessions, keywords in even");
    assert_eq!(repairs.salvaged_keyword_sentences, even_turns);
    assert_eq!(repairs.deterministic_keyword_sentences, 0);
    assert_eq!(summary.repairs(), repairs);
    assert!(
        summary.to_string().contains(&format!(
            "repaired: {odd_turns} salvaged turns, 0 verbatim turns, 19 re-asked units"
        )),
        "{summary}"
    );

    // Every turn of every session is in the graph, with a keyword.
    let memory = load_memory(&harness.settings, harness.embedder.name(), &conversation).unwrap();
    assert_eq!(memory.summary.repairs, repairs, "the caches keep the counts");
    for turn in sessions().flat_map(|s| &s.turns) {
        assert!(
            memory.graph.episodes_of_turn(&turn.dia_id).next().is_some(),
            "{} lost",
            turn.dia_id
        );
    }
    let keyworded: BTreeSet<&str> = memory
        .outputs
        .keywords
        .iter()
        .flat_map(|k| &k.sentences)
        .map(|k| k.sentence_id.as_str())
        .collect();
    assert_eq!(keyworded.len(), odd_turns + even_turns);

    // The re-asks name only what was missing.
    let requests = harness.requests();
    let reasks: Vec<&RecordedRequest> =
        requests.iter().filter(|r| r.is_chat() && r.messages().len() == 3).collect();
    assert_eq!(reasks.len(), 19);
    for request in reasks {
        match (rewrite_session(request), keyword_session(request)) {
            (Some(session), _) => {
                assert_eq!(session % 2, 1);
                assert_eq!(turns_in_last_message(request), [format!("D{session}:2")]);
            }
            (None, Some(session)) => {
                let last = sessions().find(|s| s.index == session).unwrap().turns.last().unwrap();
                assert_eq!(sentences_in_last_message(request), [format!("{}-1", last.dia_id)]);
            }
            (None, None) => unreachable!(),
        }
    }

    // A rerun asks nothing and reports the same counts.
    let before = requests.len();
    let again = harness.build(std::slice::from_ref(&conversation)).await;
    assert_eq!(harness.requests().len(), before);
    assert_eq!(again.samples[0].repairs, repairs);
}

#[tokio::test]
async fn prose_replies_enter_verbatim_after_the_re_asks_and_keywords_fall_back() {
    let harness = Harness::new(|request| {
        let prose = rewrite_session(request) == Some(2) || keyword_session(request) == Some(3);
        prose.then(|| {
            ScriptedReply::text(
                "Sure! Here is a summary of the conversation: they chat about pottery.",
            )
        })
    })
    .await;
    let conversations = fixture();
    let summary = harness.build(&conversations).await;
    assert!(summary.is_complete(), "{summary}");
    let repairs = summary.samples[0].repairs;
    assert_eq!((repairs.salvaged_turns, repairs.verbatim_turns), (0, 3), "{summary}");
    assert_eq!(repairs.reasked_units, 2);
    assert_eq!(repairs.deterministic_keyword_sentences, 4);
    assert_eq!(summary.samples[0].events, 11, "every turn is in memory");
    let requests = harness.requests();
    assert_eq!(rewrites_per_session(&requests), BTreeMap::from([(1, 1), (2, 3), (3, 1)]));
    assert_eq!(requests.iter().filter(|r| r.is_chat() && keyword_session(r) == Some(3)).count(), 3);
    for request in requests
        .iter()
        .filter(|r| r.is_chat() && rewrite_session(r) == Some(2) && r.messages().len() > 1)
    {
        assert_eq!(turns_in_last_message(request), ["D2:1", "D2:2", "D2:3"]);
    }

    let cache: Value =
        serde_json::from_str(&std::fs::read_to_string(harness.rewrite_path("conv-tiny")).unwrap())
            .unwrap();
    let unit = &cache["units"][1];
    assert_eq!(
        unit["output"]["repair"],
        json!({"reasks": 2, "fallback": ["D2:1", "D2:2", "D2:3"]})
    );
    let memory =
        load_memory(&harness.settings, harness.embedder.name(), &conversations[0]).unwrap();
    let verbatim = &memory.outputs.rewrites[1].sentences[0];
    let turn = &conversations[0].sessions[1].turns[0];
    assert_eq!(verbatim.text, turn.display());
    assert_eq!(verbatim.tag, turn.speaker);
    assert_eq!(verbatim.date, conversations[0].sessions[1].date);
    let keywords = &memory.outputs.keywords[2].sentences;
    assert_eq!(keywords.len(), 4);
    assert!(
        keywords
            .iter()
            .all(|k| !k.keywords.is_empty() && k.keywords.iter().all(|w| *w == w.to_lowercase()))
    );
    assert_eq!(memory.summary.repairs, repairs);
    assert!(summary.to_string().contains("3 verbatim turns"), "{summary}");
}
