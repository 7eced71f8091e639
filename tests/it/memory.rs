//! The graph store on a hand-written fixture (`tests/fixtures/memory_tiny/`: a three-session
//! conversation plus stage-1 and stage-2 outputs): build statistics, every tool query, the
//! timeline window, fuzzy keyword matching and build errors.

use std::path::PathBuf;

use chrono::NaiveDate;
use mragent::dataset::{Conversation, load_locomo};
use mragent::memory::input::{SessionKeywords, SessionRewrite};
use mragent::memory::query::{
    self, EventHit, QueryError, QueryKeyword, edges_by_tag, events_between, key_tags,
    match_keywords, query_conversation_time, query_event_context, query_event_keywords,
    query_personal_aspect, query_personal_information, query_topic_events,
};
use mragent::memory::{self, GraphStats, MemoryGraph, build_graph};

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/memory_tiny")
}

fn inputs() -> (Conversation, Vec<SessionRewrite>, Vec<SessionKeywords>) {
    let dir = fixture_dir();
    let mut conversations = load_locomo(&dir.join("conversation.json")).unwrap();
    let rewrites =
        serde_json::from_str(&std::fs::read_to_string(dir.join("rewrites.json")).unwrap()).unwrap();
    let keywords =
        serde_json::from_str(&std::fs::read_to_string(dir.join("keywords.json")).unwrap()).unwrap();
    (conversations.remove(0), rewrites, keywords)
}

fn fixture() -> MemoryGraph {
    let (conversation, rewrites, keywords) = inputs();
    build_graph(&conversation, &rewrites, &keywords).unwrap()
}

fn date(text: &str) -> NaiveDate {
    text.parse().unwrap()
}

fn event_ids(hits: &[EventHit]) -> Vec<&str> {
    hits.iter().map(|hit| hit.event_id.as_str()).collect()
}

fn keyword(id: &str, alternatives: &[&str]) -> QueryKeyword {
    QueryKeyword {
        id: id.to_string(),
        alternatives: alternatives.iter().map(|a| a.to_string()).collect(),
    }
}

#[test]
fn build_counts_nodes_and_skips() {
    let memory = fixture();
    assert_eq!(memory.sample_id(), "tiny-1");
    let stats = memory.stats();
    assert_eq!(
        *stats,
        GraphStats {
            turns: 14,
            episodes: 18,
            // nora sam "pottery class" "community center" "signed up" start monday puppy biscuit
            // adopted dogs training "city marathon" marathons 2021 sister lily running "4 hours"
            // "pottery teacher" bowls "farmers market" sell paintings chewed sold "trail race"
            // august
            keys: 28,
            topics: 8,
            persons: 2,
            facts: 7,
            dates: 9,
            edges: stats.edges,
            undated_episodes: 0,
            skipped_keyword_sentences: 1,
            skipped_topic_refs: 1,
            skipped_fact_origins: 1,
        }
    );
    assert_eq!(stats.edges, memory.graph().edge_count());
    // Plural/case variants of a keyword are one key; the "ghost" keyword of an unknown sentence
    // created nothing.
    assert!(memory.key("Farmers Markets").is_some());
    let key = memory.key("farmers market").unwrap();
    assert_eq!(
        (key.key.as_str(), key.normalized.as_str(), key.n_episodes),
        ("farmers market", "farmer market", 3)
    );
    assert!(memory.key("ghost").is_none());
    // Episodes list in natural order, with raw turn text and dates.
    let episode = memory.episode_by_id("D1:4-2").unwrap();
    assert_eq!(
        episode.text,
        "Sam: Aww, I love dogs. I've been busy training for the city marathon. and shared a photo of running shoes"
    );
    assert_eq!(episode.sentence, "Sam has been training for the city marathon.");
    assert_eq!(
        episode.date,
        Some(date("2023-03-03")),
        "no sentence date: falls back to the session date"
    );
    let ids: Vec<_> = memory.episodes().map(|e| e.id.as_str()).collect();
    assert_eq!(ids.first(), Some(&"D1:1-1"));
    assert_eq!(ids.last(), Some(&"D3:3-1"));
    assert_eq!(
        memory.topics().map(|t| t.id.as_str()).collect::<Vec<_>>()[..3],
        ["D1:t1", "D1:t2", "D1:t3"]
    );
}

#[test]
fn edges_by_tag_finds_episodes_by_key_and_tag() {
    let memory = fixture();
    let check = |key: &str, tag: &str, expected: &[&str]| {
        let hits = edges_by_tag(&memory, key, tag).unwrap();
        assert_eq!(event_ids(&hits), expected, "{key} / {tag}");
    };
    // Key and tag are matched after normalisation (case, plural).
    check("Farmers Markets", "farmers market", &["D2:3-1", "D2:4-1", "D3:1-1"]);
    check("farmer's markets", "FARMERS MARKETS", &["D2:3-1", "D2:4-1", "D3:1-1"]);
    // A speaker key reaches the speaker's turns and the sentences naming them.
    check("nora", "Pets", &["D2:4-2", "D3:3-1"]);
    check("Sam", "running", &["D1:5-1", "D1:6-1"]);
    check("pottery class", "Pottery Class", &["D1:1-1", "D1:2-1", "D1:3-1"]);

    let hits = edges_by_tag(&memory, "paintings", "pets").unwrap();
    assert_eq!(
        hits[0].to_string(),
        "D2:4-2:Nora: Maybe! Biscuit chewed one of my paintings though."
    );
    assert_eq!(
        serde_json::to_value(&hits).unwrap(),
        serde_json::json!([{"event_id": "D2:4-2", "text": "Nora: Maybe! Biscuit chewed one of my paintings though."}])
    );

    assert_eq!(
        edges_by_tag(&memory, "ghost", "Pets").unwrap_err(),
        QueryError::UnknownKey("ghost".into())
    );
    let error = edges_by_tag(&memory, "biscuit", "Marathon").unwrap_err();
    assert_eq!(
        error,
        QueryError::UnknownTag {
            key: "biscuit".into(),
            tag: "Marathon".into(),
            tags: vec!["Pet Adoption".into(), "Pets".into()]
        }
    );
    assert_eq!(
        error.to_string(),
        "key \"biscuit\" has no tag \"Marathon\"; its tags: Pet Adoption, Pets"
    );
    assert_eq!(key_tags(&memory, "Bowls").unwrap().tags, ["Pottery", "Farmers Market"]);
}

#[test]
fn conversation_time_is_the_session_date() {
    let memory = fixture();
    let time = query_conversation_time(&memory, "D2:3").unwrap();
    assert_eq!(time.date, date("2023-04-20"));
    assert_eq!(time.to_string(), "Conversation_time:D2:3:2023-04-20");
    // The event itself happened earlier; the conversation time is still the session's.
    assert_eq!(query_conversation_time(&memory, "D2:1-1").unwrap().date, date("2023-04-20"));
    assert_eq!(query_conversation_time(&memory, " D3:2-1 ").unwrap().date, date("2023-06-02"));
    assert!(matches!(query_conversation_time(&memory, "D9:1"), Err(QueryError::UnknownEvent(_))));
}

#[test]
fn event_keywords_list_keys_with_their_tags() {
    let memory = fixture();
    let keys = query_event_keywords(&memory, "D2:3").unwrap();
    let names: Vec<_> = keys.iter().map(|k| k.key.as_str()).collect();
    assert_eq!(names, ["sam", "nora", "bowls", "farmers market", "sell"]);
    assert_eq!(keys[3].tags, ["Farmers Market"]);
    assert_eq!(keys[2].tags, ["Pottery", "Farmers Market"]);
    // A dia_id covers all sentences of the turn; a sentence id only itself.
    let turn: Vec<_> =
        query_event_keywords(&memory, "D1:3").unwrap().into_iter().map(|k| k.key).collect();
    assert_eq!(turn, ["nora", "pottery class", "monday", "puppy", "biscuit", "adopted"]);
    let sentence: Vec<_> =
        query_event_keywords(&memory, "D1:3-2").unwrap().into_iter().map(|k| k.key).collect();
    assert_eq!(sentence, ["nora", "puppy", "biscuit", "adopted"]);
    assert!(query_event_keywords(&memory, "D1:9").is_err());
}

#[test]
fn event_context_shows_neighbouring_turns() {
    let memory = fixture();
    let check = |id: &str, expected: &[&str]| {
        let turns = query_event_context(&memory, id).unwrap();
        let ids: Vec<_> = turns.iter().map(|t| t.dia_id.as_str()).collect();
        assert_eq!(ids, expected, "{id}");
    };
    check("D2:4-2", &["D2:3", "D2:4", "D2:5"]);
    check("D2:4", &["D2:3", "D2:4", "D2:5"]);
    check("D1:1", &["D1:1", "D1:2"]);
    check("D3:3-1", &["D3:2", "D3:3"]);
    let turns = query_event_context(&memory, "D2:3").unwrap();
    assert_eq!(turns[1].to_string(), "D2:3:Sam: You should sell your bowls at the farmers market.");
    assert!(matches!(query_event_context(&memory, "D4:1"), Err(QueryError::UnknownEvent(_))));
}

#[test]
fn personal_information_and_aspects() {
    let memory = fixture();
    let nora = query_personal_information(&memory, "nora").unwrap();
    assert_eq!(nora.person, "Nora");
    assert_eq!(nora.aspects, ["hobby", "pets", "art"]);
    assert_eq!(query_personal_information(&memory, "Sam").unwrap().aspects, ["hobby", "family"]);

    let facts = query_personal_aspect(&memory, "Sam", "Hobbies").unwrap();
    let shown: Vec<_> = facts.iter().map(ToString::to_string).collect();
    assert_eq!(
        shown,
        ["D1:4,D1:6:Sam runs marathons", "D2:1:Sam finished the city marathon in 4 hours"]
    );
    let art: Vec<_> = query_personal_aspect(&memory, "NORA", "art")
        .unwrap()
        .into_iter()
        .map(|f| (f.fact_id, f.origins))
        .collect();
    // The unknown origin D9:9 was dropped at build time.
    assert_eq!(
        art,
        [
            ("D2:p2".to_string(), vec!["D2:2".to_string()]),
            ("D3:p1".to_string(), vec!["D3:1".to_string()])
        ]
    );

    let error = query_personal_information(&memory, "Lily").unwrap_err();
    assert_eq!(error.to_string(), "unknown person \"Lily\"; known persons: Nora, Sam");
    let error = query_personal_aspect(&memory, "Sam", "job").unwrap_err();
    assert_eq!(error.to_string(), "Sam has no aspect \"job\"; aspects: hobby, family");
    // An aspect that exists for someone else is still unknown for this person.
    assert!(matches!(
        query_personal_aspect(&memory, "Sam", "pets"),
        Err(QueryError::UnknownAspect { .. })
    ));
}

#[test]
fn an_earlier_value_comes_after_the_current_facts_with_its_date() {
    let mut memory = fixture();
    // Sam's first hobby fact was replaced (own memory marks it from the store's facts).
    memory.mark_earlier("D1:p3", Some("2023-03-03".into()), "2024-02-01".into());
    memory.mark_earlier("no-such-fact", None, "2024-02-01".into());
    let shown: Vec<_> = query_personal_aspect(&memory, "Sam", "hobby")
        .unwrap()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        shown,
        [
            "D2:1:Sam finished the city marathon in 4 hours",
            "D1:4,D1:6:Sam runs marathons (earlier value, held from 2023-03-03, replaced on 2024-02-01)"
        ]
    );
}

#[test]
fn topic_events_are_deduplicated_by_origin() {
    let memory = fixture();
    // D1:6-1 and D1:6-2 both belong to D1:t3 and come from one turn: shown once.
    assert_eq!(
        event_ids(&query_topic_events(&memory, "D1:t3").unwrap()),
        ["D1:4-2", "D1:5-1", "D1:6-1"]
    );
    assert_eq!(
        event_ids(&query_topic_events(&memory, "D2:t2").unwrap()),
        ["D2:2-1", "D2:3-1", "D2:4-1"]
    );
    assert_eq!(
        query_topic_events(&memory, "D1:t9").unwrap_err(),
        QueryError::UnknownTopic("D1:t9".into())
    );
}

#[test]
fn timeline_window() {
    let memory = fixture();
    let events = events_between(&memory, date("2023-04-01"), date("2023-06-01"));
    let shown: Vec<_> = events.iter().map(|e| format!("{} {}", e.date, e.event_id)).collect();
    assert_eq!(
        shown,
        [
            "2023-04-16 D2:1-1",
            "2023-04-20 D2:2-1",
            "2023-04-20 D2:3-1",
            "2023-04-20 D2:4-1",
            "2023-04-20 D2:5-1",
            "2023-06-01 D3:1-1"
        ]
    );
    let old = events_between(&memory, date("2021-01-01"), date("2021-12-31"));
    assert_eq!(old.iter().map(|e| e.event_id.as_str()).collect::<Vec<_>>(), ["D1:6-1"]);
    assert!(events_between(&memory, date("2023-06-03"), date("2023-06-01")).is_empty());
}

#[test]
fn keyword_matching_scores_coverage() {
    let memory = fixture();
    let matches =
        match_keywords(&memory, &[keyword("farmers market", &["market"]), keyword("bowls", &[])]);
    assert_eq!(matches.keys[0].keys, ["farmers market"]);
    assert_eq!(matches.keys[1].keys, ["bowls"]);
    let full: Vec<_> = matches.full.iter().map(|m| m.event_id.as_str()).collect();
    assert_eq!(full, ["D2:3-1", "D2:4-1", "D3:1-1"]);
    assert!(matches.full.iter().all(|m| m.coverage == 1.0 && m.total_keywords == 2));
    let partial: Vec<_> =
        matches.partial.iter().map(|m| (m.event_id.as_str(), m.coverage)).collect();
    assert_eq!(partial, [("D2:2-1", 0.5)]);
    assert_eq!(matches.partial[0].matched_keywords, ["bowls"]);
    assert_eq!(matches.full[0].matched_keys, ["bowls", "farmers market"]);
}

#[test]
fn keyword_matching_does_not_let_speaker_names_match_everything() {
    let memory = fixture();
    // "Nora's puppy" contains the speaker token "nora": the one-token key "nora" must not match
    // it (it would pull in every episode of Nora's); "puppy" still matches by containment.
    let matches = match_keywords(&memory, &[keyword("Nora's puppy", &[])]);
    assert_eq!(matches.keys[0].keys, ["puppy"]);
    assert_eq!(matches.full.iter().map(|m| m.event_id.as_str()).collect::<Vec<_>>(), ["D1:3-2"]);
    assert!(matches.partial.is_empty());

    // The speaker name on its own still matches its key exactly.
    let matches = match_keywords(&memory, &[keyword("Nora", &[]), keyword("marathon", &[])]);
    assert_eq!(matches.keys[1].keys, ["city marathon", "marathons"]);
    assert_eq!(matches.full.iter().map(|m| m.event_id.as_str()).collect::<Vec<_>>(), ["D1:5-1"]);
    // Ties (coverage 0.5) are in natural id order.
    let partial: Vec<_> = matches.partial.iter().map(|m| m.event_id.as_str()).collect();
    assert_eq!(&partial[..5], ["D1:1-1", "D1:2-1", "D1:3-1", "D1:3-2", "D1:4-2"]);
    assert!(partial.contains(&"D2:1-1"));
    assert!(matches.partial.iter().all(|m| m.coverage == 0.5));
}

#[test]
fn keyword_matching_folds_case_and_plurals() {
    let memory = fixture();
    for phrase in ["Paintings", "painting", "PAINTING"] {
        let matches = match_keywords(&memory, &[keyword(phrase, &[])]);
        assert_eq!(
            matches.full.iter().map(|m| m.event_id.as_str()).collect::<Vec<_>>(),
            ["D2:4-2"],
            "{phrase}"
        );
    }
    let matches = match_keywords(&memory, &[keyword("puppies", &["dog"])]);
    assert_eq!(matches.keys[0].keys, ["dogs", "puppy"]);
    // No usable keyword: nothing matches.
    let matches = match_keywords(&memory, &[keyword("  ", &["!!"])]);
    assert!(matches.keys.is_empty() && matches.full.is_empty() && matches.partial.is_empty());
}

#[test]
fn building_twice_gives_identical_results() {
    let first = fixture();
    let second = fixture();
    let keywords = [keyword("Sam", &[]), keyword("race", &["marathon"])];
    let a = serde_json::to_string(&match_keywords(&first, &keywords)).unwrap();
    let b = serde_json::to_string(&match_keywords(&second, &keywords)).unwrap();
    assert_eq!(a, b);
    assert_eq!(
        serde_json::to_string(&query::events_between(
            &first,
            date("2020-01-01"),
            date("2024-01-01")
        ))
        .unwrap(),
        serde_json::to_string(&query::events_between(
            &second,
            date("2020-01-01"),
            date("2024-01-01")
        ))
        .unwrap()
    );
}

#[test]
fn build_rejects_unknown_origins_and_duplicate_ids() {
    let (conversation, rewrites, keywords) = inputs();

    let mut broken = rewrites.clone();
    broken[1].sentences[0].origin = "D7:1".into();
    let error = build_graph(&conversation, &broken, &keywords).unwrap_err();
    assert!(matches!(error, memory::Error::UnknownOrigin { .. }));
    assert_eq!(
        error.to_string(),
        "tiny-1: sentence D2:1-1: origin D7:1 is not a turn of the conversation"
    );

    let mut broken = rewrites.clone();
    broken[2].sentences[0].id = "D1:1-1".into();
    let error = build_graph(&conversation, &broken, &keywords).unwrap_err();
    assert_eq!(error.to_string(), "tiny-1: duplicate sentence id: D1:1-1");

    let mut broken = rewrites;
    broken[2].topics[0].id = "D1:t1".into();
    let error = build_graph(&conversation, &broken, &keywords).unwrap_err();
    assert_eq!(error.to_string(), "tiny-1: duplicate topic id: D1:t1");
}

#[test]
fn missing_keyword_file_still_links_speakers() {
    let (conversation, rewrites, _) = inputs();
    let memory = build_graph(&conversation, &rewrites, &[]).unwrap();
    assert_eq!(memory.stats().keys, 2);
    assert_eq!(event_ids(&edges_by_tag(&memory, "Sam", "Pets").unwrap()), ["D2:5-1"]);
}
