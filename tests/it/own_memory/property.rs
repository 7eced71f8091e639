//! The property test of the whole chain (issue 38), on SQLite and PostgreSQL alike: seeded
//! histories in which two people move several times across two conversations of one user are
//! added in random orders (several adds, and one add with many workers), with corrections and
//! forgets at random points, then a forget of a corrected fact's own message and its undo, and
//! the undo of a correction. After each step that matters: one current fact per person at every
//! instant, chains equal to those of the time-ordered add, every correction in force or on
//! record as undone, replaced or lapsed.

use std::collections::BTreeMap;

use mragent::convo::{Message, parse_values};
use mragent::llm::build_chat_model;
use mragent::llm::scripted::ScriptedServer;
use mragent::service::FactEntry;
use mragent::service::{FactQuery, MemoryService, OwnEmbedder, ServiceSettings};
use mragent::store::{AddScope, Edit, Store};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{Value, json};

use crate::support::{self, EMBEDDER};

/// The generator's seed; each case uses `SEED + case`.
const SEED: u64 = 38;
/// Histories per backend.
const CASES: u64 = 6;
/// Add orders tried per history (beside the time-ordered reference).
const ORDERS: usize = 2;

type Service = MemoryService<mragent::llm::Client, OwnEmbedder>;

/// One link of a chain: the extracted value, from, to, and the successor's extracted value.
type Link = (String, String, Option<String>, Option<String>);

/// One move: a person says where they moved, in a conversation, at a time; a friend answers a
/// minute later (the filler message that a forget may take).
#[derive(Debug, Clone)]
struct Move {
    person: &'static str,
    city: &'static str,
    conversation: &'static str,
    day: u32,
}

impl Move {
    /// The friend's message before the move: forgetting it moves the fact to another place
    /// (key) in its session's rewrite, not to another source message.
    fn greeting(&self) -> String {
        format!("Hi {}, any news on day {}", self.person, self.day)
    }

    fn messages(&self) -> Vec<Value> {
        let at = |minute: u32| {
            let date = chrono::NaiveDate::from_ymd_opt(2024, 1, 1).unwrap()
                + chrono::Days::new(u64::from(self.day));
            format!("{date}T10:{minute:02}:00Z")
        };
        vec![
            json!({"speaker": "Zed", "timestamp": at(0), "text": self.greeting()}),
            json!({"speaker": self.person, "timestamp": at(1), "text": format!("I moved to {} this week", self.city)}),
            json!({"speaker": "Zed", "timestamp": at(2), "text": format!("Good luck on day {}", self.day)}),
        ]
    }
}

fn history(rng: &mut ChaCha8Rng) -> Vec<Move> {
    let mut cities = vec![
        "Paris", "Berlin", "Vienna", "Rome", "Oslo", "Porto", "Lyon", "Graz", "Bern", "Riga",
        "Turin", "Kiel",
    ];
    cities.shuffle(rng);
    let mut days: Vec<u32> = (0..120).step_by(3).collect();
    days.shuffle(rng);
    let mut moves = Vec::new();
    for (person, count) in [("Ann", rng.random_range(2..=4)), ("Ben", rng.random_range(2..=3))] {
        for _ in 0..count {
            moves.push(Move {
                person,
                city: cities.pop().unwrap(),
                conversation: if rng.random_bool(0.5) { "c1" } else { "c2" },
                day: days.pop().unwrap(),
            });
        }
    }
    moves
}

fn service(
    server: &ScriptedServer,
    root: &std::path::Path,
    store: Store,
    workers: usize,
) -> Service {
    let config = support::client_config(server);
    let chat = build_chat_model(&config).unwrap();
    let embedder = support::embedder(&config, 64);
    let mut settings = ServiceSettings::new(root, EMBEDDER, "test-model", "test-model");
    settings.workers = workers;
    MemoryService::new(store, settings, chat, OwnEmbedder::Api(Box::new(embedder)))
}

/// A new store: SQLite under `root`, or a fresh PostgreSQL database.
async fn new_store(postgres: bool, root: &std::path::Path) -> Store {
    if postgres {
        tokio::task::spawn_blocking(|| {
            let url = crate::private_pg::shared().fresh_database();
            Store::open_url(&url).unwrap()
        })
        .await
        .unwrap()
    } else {
        Store::open(Store::default_path(root)).unwrap()
    }
}

/// Adds `moves`: one add per conversation, in the order the moves come.
async fn add(service: &Service, moves: &[&Move]) {
    let mut by_conversation: BTreeMap<&str, Vec<Value>> = BTreeMap::new();
    let mut order: Vec<&str> = Vec::new();
    for one in moves {
        if !order.contains(&one.conversation) {
            order.push(one.conversation);
        }
        by_conversation.entry(one.conversation).or_default().extend(one.messages());
    }
    for conversation in order {
        let messages: Vec<Message> =
            parse_values(by_conversation.remove(conversation).unwrap()).unwrap();
        let scope = AddScope { user: Some("u".into()), ..AddScope::default() };
        let report = service.add_scoped(conversation, scope, messages).await.unwrap();
        assert!(report.failed_sessions.is_empty(), "{report}");
        assert_eq!(report.facts.undecided, 0, "{report}");
    }
}

async fn facts(service: &Service) -> Vec<FactEntry> {
    let query = FactQuery { user: Some("u".into()), history: true, ..FactQuery::default() };
    service.facts(&query).await.unwrap().into_iter().map(|listed| listed.fact).collect()
}

/// Each person's chain: (extracted value, from, to, the successor's extracted value), in time
/// order. Asserts that it is one chain: one current fact at every instant.
fn chains(facts: &[FactEntry]) -> BTreeMap<String, Vec<Link>> {
    let mut chains: BTreeMap<String, Vec<&FactEntry>> = BTreeMap::new();
    for fact in facts.iter().filter(|fact| fact.aspect == "home") {
        chains.entry(fact.person.clone()).or_default().push(fact);
    }
    let mut out = BTreeMap::new();
    for (person, mut chain) in chains {
        chain.sort_by(|a, b| a.valid_from.cmp(&b.valid_from));
        for pair in chain.windows(2) {
            assert_eq!(pair[0].valid_to, pair[1].valid_from, "{person}: {chain:#?}");
            assert_eq!(pair[0].superseded_by, Some(pair[1].id), "{person}: {chain:#?}");
        }
        let last = chain.last().unwrap();
        assert_eq!((&last.valid_to, last.superseded_by), (&None, None), "{person}: {chain:#?}");
        let by_id: BTreeMap<i64, &str> =
            chain.iter().map(|fact| (fact.id, fact.extracted.as_str())).collect();
        let listed = chain
            .iter()
            .map(|fact| {
                (
                    fact.extracted.clone(),
                    fact.valid_from.clone().unwrap(),
                    fact.valid_to.clone(),
                    fact.superseded_by.map(|id| by_id[&id].to_string()),
                )
            })
            .collect();
        out.insert(person, listed);
    }
    out
}

/// Every correction is in force (its fact, found by source message and aspect, holds its
/// value), or on record as undone, lapsed, or replaced by a later correction of the same fact.
/// The fact identity a correction names: its source message and aspect.
fn identity(edit: &Edit) -> (String, String) {
    let fact = &edit.after.as_ref().unwrap()["fact"];
    (fact["source"].as_str().unwrap().to_string(), fact["aspect"].as_str().unwrap().to_lowercase())
}

/// The corrections in force, oldest first: neither undone nor lapsed, and not replaced by a
/// later correction of the same fact that is not undone (a later one that lapsed takes the
/// earlier ones with it).
fn in_force(log: &[Edit]) -> Vec<&Edit> {
    let corrections: Vec<&Edit> = log.iter().filter(|edit| edit.kind == "correct_fact").collect();
    corrections
        .iter()
        .filter(|edit| {
            edit.undone_by.is_none()
                && edit.lapsed_by.is_none()
                && !corrections.iter().any(|later| {
                    later.id > edit.id
                        && later.undone_by.is_none()
                        && identity(later) == identity(edit)
                })
        })
        .copied()
        .collect()
}

fn assert_corrections(log: &[Edit], facts: &[FactEntry]) {
    for edit in in_force(log) {
        let (source, aspect) = identity(edit);
        let fact = facts
            .iter()
            .find(|fact| {
                fact.source.as_deref() == Some(&source) && fact.aspect.to_lowercase() == aspect
            })
            .unwrap_or_else(|| panic!("correction {} lost its fact without a record", edit.id));
        assert_eq!(
            Some(fact.value.as_str()),
            edit.after.as_ref().unwrap()["value"].as_str(),
            "{edit:?}"
        );
    }
}

/// The id of the message of `conversation` whose text contains `text`.
fn message_id(store: &Store, conversation: &str, text: &str) -> String {
    let stored = store.load(conversation).unwrap();
    let mut messages = stored.sessions.iter().flat_map(|session| &session.messages);
    messages.find(|message| message.text.contains(text)).unwrap().id.clone()
}

async fn run(postgres: bool) {
    let server = super::facts_server(std::time::Duration::ZERO).await;
    for case in 0..CASES {
        let seed = SEED + case;
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let moves = history(&mut rng);
        // The reference: every move added alone, in time order.
        let dir = tempfile::tempdir().unwrap();
        let store = new_store(postgres, dir.path()).await;
        let reference = service(&server, dir.path(), store, 1);
        let mut in_time: Vec<&Move> = moves.iter().collect();
        in_time.sort_by_key(|one| one.day);
        for one in &in_time {
            add(&reference, &[one]).await;
        }
        let expected = chains(&facts(&reference).await);
        assert_eq!(expected.values().map(Vec::len).sum::<usize>(), moves.len(), "seed {seed}");

        for _ in 0..ORDERS {
            let dir = tempfile::tempdir().unwrap();
            let store = new_store(postgres, dir.path()).await;
            let many = service(&server, dir.path(), store.clone(), 8);
            let one_by_one = service(&server, dir.path(), store.clone(), 1);
            let mut order: Vec<&Move> = moves.iter().collect();
            order.shuffle(&mut rng);
            // The first add carries several moves with many workers; the rest come in 1–3 adds.
            let first = rng.random_range(2..=order.len().min(4));
            let mut chunks = vec![order[..first].to_vec()];
            let mut rest = &order[first..];
            while !rest.is_empty() {
                let take = rng.random_range(1..=rest.len().min(3));
                chunks.push(rest[..take].to_vec());
                rest = &rest[take..];
            }
            let mut added: Vec<&Move> = Vec::new();
            for (index, chunk) in chunks.iter().enumerate() {
                add(if index == 0 { &many } else { &one_by_one }, chunk).await;
                added.extend(chunk);
                if rng.random_bool(0.5) {
                    // Correct a random fact.
                    let now = facts(&one_by_one).await;
                    let fact = &now[rng.random_range(0..now.len())];
                    let value = format!("{} (corrected {index})", fact.extracted);
                    one_by_one.correct_fact(fact.id, &value, "cli").await.unwrap();
                }
                if rng.random_bool(0.5) {
                    // Forget a friend's message: the session is rebuilt, corrections follow.
                    let gone = added[rng.random_range(0..added.len())];
                    let stored = store.load(gone.conversation).unwrap();
                    let found = stored
                        .sessions
                        .iter()
                        .flat_map(|session| &session.messages)
                        .find(|message| message.text == gone.greeting());
                    if let Some(message) = found {
                        let (_, report) = one_by_one
                            .forget_message(gone.conversation, &message.id, "cli")
                            .await
                            .unwrap();
                        assert!(report.lapsed_corrections.is_empty(), "seed {seed}: {report}");
                    }
                }
                let now = facts(&one_by_one).await;
                chains(&now);
                assert_corrections(&one_by_one.history(Some("u"), None).await.unwrap(), &now);
            }
            let now = facts(&one_by_one).await;
            assert_eq!(
                chains(&now),
                expected,
                "seed {seed}: order {:?}",
                order.iter().map(|one| one.city).collect::<Vec<_>>()
            );

            // A corrected fact's own message forgotten: its correction lapses on the record;
            // the undo of the forget brings the fact (not the correction) back.
            let target = &order[0];
            let fact =
                now.iter().find(|fact| fact.extracted.contains(target.city)).unwrap().clone();
            let corrected =
                one_by_one.correct_fact(fact.id, "somewhere else", "cli").await.unwrap();
            let id = message_id(&store, target.conversation, &format!("moved to {}", target.city));
            // Every correction in force of a fact from that message lapses: this one, and one
            // made earlier of another aspect drawn from the same message (its "Talk" fact).
            let log = one_by_one.history(Some("u"), None).await.unwrap();
            let mut of_message: Vec<i64> = in_force(&log)
                .into_iter()
                .filter(|edit| identity(edit).0 == id)
                .map(|edit| edit.id)
                .collect();
            of_message.sort_unstable();
            assert!(of_message.contains(&corrected.id), "seed {seed}");
            let (forgotten, _) =
                one_by_one.forget_message(target.conversation, &id, "cli").await.unwrap();
            let mut lapsed = forgotten.lapsed_corrections.clone();
            lapsed.sort_unstable();
            assert_eq!(lapsed, of_message, "seed {seed}");
            let log = one_by_one.history(Some("u"), None).await.unwrap();
            assert!(
                log.iter().any(|edit| edit.kind == "correction_lapsed"
                    && edit.target == corrected.id.to_string())
            );
            let now = facts(&one_by_one).await;
            chains(&now);
            assert_corrections(&log, &now);
            one_by_one.undo(forgotten.edit, "cli").await.unwrap();
            let now = facts(&one_by_one).await;
            assert_eq!(chains(&now), expected, "seed {seed}: after the undo of a forget");
            assert_corrections(&one_by_one.history(Some("u"), None).await.unwrap(), &now);

            // The undo of the last correction in force puts back the value before it.
            let log = one_by_one.history(Some("u"), None).await.unwrap();
            if let Some(last) = in_force(&log).last() {
                one_by_one.undo(last.id, "cli").await.unwrap();
                let now = facts(&one_by_one).await;
                assert_eq!(chains(&now), expected, "seed {seed}: after the undo of a correction");
                let log = one_by_one.history(Some("u"), None).await.unwrap();
                assert_corrections(&log, &now);
            }
        }
    }
}

#[tokio::test]
async fn the_chain_is_the_same_whatever_the_order_on_sqlite() {
    run(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chain_is_the_same_whatever_the_order_on_postgres() {
    run(true).await;
}
