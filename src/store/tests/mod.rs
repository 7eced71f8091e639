//! The store's test suite, run on both backends: every test below is a function of the
//! backend, and `on_both!` makes a SQLite and a PostgreSQL test of each (the PostgreSQL server
//! is a private one the tests start, `tests/support/private_pg.rs`).

use chrono::TimeDelta;

use super::db::params;
use super::*;
use crate::convo::{DEFAULT_SESSION_GAP, parse};

mod keys;
mod place;
mod vectors;

use keys::{
    a_copy_pages_by_key_through_tables_larger_than_a_page,
    keys_verify_only_whole_unrevoked_unexpired,
};
use vectors::{
    a_vector_blob_that_is_not_whole_rows_stops_the_migration_and_keeps_the_old_version,
    stored_vectors_of_the_previous_schema_become_compact_in_place,
    word_vectors_are_shared_per_embedder_first_write_wins_and_forget_deletes_the_unused,
    word_vectors_of_the_previous_schema_become_one_per_embedder_and_word_in_place,
};

use place::{Kind, TestPlace, count, store};

/// A SQLite and a PostgreSQL test of each function of the backend.
macro_rules! on_both {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(#[test] fn $name() { super::$name(super::Kind::Sqlite) })*
        }
        mod postgres {
            $(#[test] fn $name() { super::$name(super::Kind::Postgres) })*
        }
    };
}

on_both!(
    migrations_bring_an_old_database_to_the_current_version_and_keep_its_rows,
    adding_the_same_messages_twice_is_a_no_op,
    a_late_message_is_placed_by_its_timestamp,
    the_gap_is_configurable,
    unknown_conversations_bad_ids_and_other_embedders_are_errors,
    forget_deletes_everything_of_one_conversation,
    conversation_locks_exclude_each_other,
    revisions_change_with_every_write_and_are_never_reused,
    word_vectors_are_shared_per_embedder_first_write_wins_and_forget_deletes_the_unused,
    word_vectors_of_the_previous_schema_become_one_per_embedder_and_word_in_place,
    stored_vectors_of_the_previous_schema_become_compact_in_place,
    a_vector_blob_that_is_not_whole_rows_stops_the_migration_and_keeps_the_old_version,
    a_store_of_the_previous_schema_is_migrated_in_place_and_takes_scopes_and_facts,
    deleting_a_replacing_fact_hands_the_older_one_on_or_revives_it_everywhere,
    an_undo_refuses_when_what_it_changed_has_changed_since,
    an_empty_database_is_migrated_and_several_openers_migrate_once,
    job_claims_exclude_each_other_until_the_lease_expires,
    keys_verify_only_whole_unrevoked_unexpired,
    a_copy_pages_by_key_through_tables_larger_than_a_page,
);

const WEEK_ONE: &str = r#"[
  {"speaker": "Ann", "text": "I bought a bike", "timestamp": "2024-05-01T10:00:00Z"},
  {"speaker": "Bob", "text": "Which one?", "timestamp": "2024-05-01T10:01:00Z"},
  {"speaker": "Ann", "text": "A red one", "timestamp": "2024-05-01T10:02:00Z"},
  {"speaker": "Ann", "text": "Rode it to work", "timestamp": "2024-05-08T09:00:00Z"}
]"#;

fn migrations_bring_an_old_database_to_the_current_version_and_keep_its_rows(kind: Kind) {
    let place = TestPlace::new(kind);
    place.at_version(
        1,
        "INSERT INTO conversations VALUES ('c', 'local', '2024-01-01T00:00:00Z');
         INSERT INTO sessions VALUES ('c', 1, NULL);
         INSERT INTO messages VALUES ('c', 'h1', 1, 1, 'Ann', 'hello', NULL, NULL);",
    );
    let missing = place.raw().query("SELECT * FROM session_outputs", params![], |_| Ok(()));
    assert!(missing.is_err(), "version 1 has no outputs table");
    let store = place.open().unwrap();
    assert_eq!(place.version(), SCHEMA_VERSION);
    let loaded = store.load("c").unwrap();
    assert_eq!(loaded.sessions.len(), 1);
    assert_eq!(loaded.sessions[0].messages[0].text, "hello");
    assert_eq!(loaded.pending(), vec![1]);
    // Reopening is a no-op; a newer database is refused.
    place.open().unwrap();
    place.set_version(SCHEMA_VERSION + 1);
    assert!(matches!(place.open(), Err(StoreError::TooNew { .. })));
}

fn an_empty_database_is_migrated_and_several_openers_migrate_once(kind: Kind) {
    let place = TestPlace::new(kind);
    let openers: Vec<_> = (0..4)
        .map(|_| {
            let place =
                TestPlace { _dir: None, sqlite: place.sqlite.clone(), url: place.url.clone() };
            std::thread::spawn(move || place.open().map(|_| ()))
        })
        .collect();
    for opener in openers {
        opener.join().unwrap().unwrap();
    }
    assert_eq!(place.version(), SCHEMA_VERSION);
    let store = place.open().unwrap();
    assert!(store.list().unwrap().is_empty());
    assert_eq!(count(&store, "SELECT COUNT(*) FROM counters"), 1, "migration 3 ran once");
}

fn job_claims_exclude_each_other_until_the_lease_expires(kind: Kind) {
    let (_place, store) = store(kind);
    let messages = parse(WEEK_ONE).unwrap();
    let gap = DEFAULT_SESSION_GAP;
    let (_, first) =
        store.queue_messages("c1", "local", &AddScope::default(), &messages, gap).unwrap();
    let (_, second) =
        store.queue_messages("c2", "local", &AddScope::default(), &messages, gap).unwrap();
    let long = std::time::Duration::from_secs(60);
    let a = store.claim_jobs("a", long, 1).unwrap();
    assert_eq!(a, vec![(first.id, "c1".to_string())], "oldest first, at most the limit");
    let b = store.claim_jobs("b", long, 8).unwrap();
    assert_eq!(b, vec![(second.id, "c2".to_string())], "a claimed job is not claimed again");
    assert!(store.claim_jobs("c", long, 8).unwrap().is_empty());
    // Released: claimable at once. Renewed by its owner only.
    store.release_job(first.id, "a").unwrap();
    assert!(!store.renew_job(first.id, "a", long).unwrap());
    assert_eq!(store.claim_jobs("c", long, 8).unwrap(), vec![(first.id, "c1".to_string())]);
    assert!(store.renew_job(first.id, "c", long).unwrap());
    // A running job whose runner stopped renewing is taken over once its lease expires.
    store.start_job(second.id, 2).unwrap().unwrap();
    assert!(store.renew_job(second.id, "b", std::time::Duration::from_millis(1)).unwrap());
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(store.claim_jobs("d", long, 8).unwrap(), vec![(second.id, "c2".to_string())]);
    assert!(!store.renew_job(second.id, "b", long).unwrap(), "b lost it");
    assert_eq!(store.job_lease(second.id).unwrap().0.as_deref(), Some("d"));
    // An ended job is nobody's.
    store.finish_job(second.id, None).unwrap();
    assert_eq!(store.job_lease(second.id).unwrap(), (None, None));
    assert!(store.claim_jobs("e", long, 8).unwrap().is_empty());
}

fn adding_the_same_messages_twice_is_a_no_op(kind: Kind) {
    let (_place, store) = store(kind);
    let messages = parse(WEEK_ONE).unwrap();
    let first = store
        .add_messages("c1", "local", &Default::default(), &messages, DEFAULT_SESSION_GAP)
        .unwrap();
    assert!(first.created);
    assert_eq!((first.new_messages, first.duplicates), (4, 0));
    assert_eq!(first.new_sessions, vec![1, 2]);
    let before = store.load("c1").unwrap();
    let again = store
        .add_messages("c1", "local", &Default::default(), &messages, DEFAULT_SESSION_GAP)
        .unwrap();
    assert_eq!((again.created, again.new_messages, again.duplicates), (false, 0, 4));
    assert!(again.new_sessions.is_empty() && again.changed_sessions.is_empty());
    assert_eq!(store.load("c1").unwrap(), before);
}

fn a_late_message_is_placed_by_its_timestamp(kind: Kind) {
    let (_place, store) = store(kind);
    store
        .add_messages(
            "c1",
            "local",
            &Default::default(),
            &parse(WEEK_ONE).unwrap(),
            DEFAULT_SESSION_GAP,
        )
        .unwrap();
    let late = parse(
        r#"[{"speaker": "Bob", "text": "Nice colour", "timestamp": "2024-05-01T10:01:30Z"}]"#,
    )
    .unwrap();
    let added =
        store.add_messages("c1", "local", &Default::default(), &late, DEFAULT_SESSION_GAP).unwrap();
    assert_eq!(added.changed_sessions, vec![1]);
    assert!(added.new_sessions.is_empty());
    let conversation = store.load("c1").unwrap().to_conversation();
    let texts: Vec<&str> =
        conversation.sessions[0].turns.iter().map(|turn| turn.text.as_str()).collect();
    assert_eq!(texts, ["I bought a bike", "Which one?", "Nice colour", "A red one"]);
    assert_eq!(conversation.sessions[0].turns[2].dia_id, "D1:3");
    assert_eq!(conversation.sessions[0].date_time.as_deref(), Some("2024-05-01 10:00 UTC"));
    // An earlier whole session sorts first but keeps its new number.
    let earlier =
        parse(r#"[{"speaker": "Ann", "text": "Shopping tomorrow", "timestamp": "2024-04-20"}]"#)
            .unwrap();
    store.add_messages("c1", "local", &Default::default(), &earlier, DEFAULT_SESSION_GAP).unwrap();
    let numbers: Vec<u32> =
        store.load("c1").unwrap().sessions.iter().map(|session| session.number).collect();
    assert_eq!(numbers, vec![3, 1, 2]);
}

fn the_gap_is_configurable(kind: Kind) {
    let (_place, store) = store(kind);
    let added = store
        .add_messages(
            "c1",
            "local",
            &Default::default(),
            &parse(WEEK_ONE).unwrap(),
            TimeDelta::days(30),
        )
        .unwrap();
    assert_eq!(added.new_sessions, vec![1]);
}

fn unknown_conversations_bad_ids_and_other_embedders_are_errors(kind: Kind) {
    let (_place, store) = store(kind);
    assert!(matches!(store.load("nope"), Err(StoreError::UnknownConversation(_))));
    assert!(matches!(store.forget("nope"), Err(StoreError::UnknownConversation(_))));
    let messages = parse(WEEK_ONE).unwrap();
    assert!(matches!(
        store.add_messages("", "local", &Default::default(), &messages, DEFAULT_SESSION_GAP),
        Err(StoreError::InvalidName(_))
    ));
    store.add_messages("c1", "local", &Default::default(), &messages, DEFAULT_SESSION_GAP).unwrap();
    let error = store
        .add_messages("c1", "openai/x", &Default::default(), &messages, DEFAULT_SESSION_GAP)
        .unwrap_err();
    assert!(matches!(error, StoreError::EmbedderMismatch { .. }), "{error}");
    assert!(store.list().unwrap().iter().all(|info| info.id == "c1"));
}

fn forget_deletes_everything_of_one_conversation(kind: Kind) {
    let (_place, store) = store(kind);
    let messages = parse(WEEK_ONE).unwrap();
    store.add_messages("c1", "local", &Default::default(), &messages, DEFAULT_SESSION_GAP).unwrap();
    store.add_messages("c2", "local", &Default::default(), &messages, DEFAULT_SESSION_GAP).unwrap();
    let forgotten = store.forget("c1").unwrap();
    assert_eq!((forgotten.messages, forgotten.sessions), (4, 2));
    let ids: Vec<String> = store.list().unwrap().into_iter().map(|info| info.id).collect();
    assert_eq!(ids, ["c2"]);
    assert_eq!(count(&store, "SELECT COUNT(*) FROM messages WHERE conversation_id = 'c1'"), 0);
}

fn conversation_locks_exclude_each_other(kind: Kind) {
    let (_place, store) = store(kind);
    let held = store.lock_conversation("c1").unwrap();
    let other = store.lock_conversation("c2").unwrap();
    if let Some(path) = store.path() {
        let files = std::fs::read_dir(path.with_extension("locks")).unwrap().count();
        assert_eq!(files, 2);
    }
    assert!(store.try_lock_conversation("c1").unwrap().is_none(), "held");
    let clone = store.clone();
    let (sender, receiver) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let _lock = clone.lock_conversation("c1").unwrap();
        sender.send(()).unwrap();
    });
    assert!(receiver.recv_timeout(std::time::Duration::from_millis(200)).is_err());
    drop(held);
    receiver.recv_timeout(std::time::Duration::from_secs(5)).unwrap();
    waiter.join().unwrap();
    drop(other);
}

fn revisions_change_with_every_write_and_are_never_reused(kind: Kind) {
    let (_place, store) = store(kind);
    let messages = parse(WEEK_ONE).unwrap();
    store
        .add_messages("c1", "local", &Default::default(), &messages[..2], DEFAULT_SESSION_GAP)
        .unwrap();
    let first = store.revision("c1").unwrap();
    assert_eq!(store.load("c1").unwrap().revision, first);
    store
        .add_messages("c1", "local", &Default::default(), &messages[..2], DEFAULT_SESSION_GAP)
        .unwrap();
    assert_eq!(store.revision("c1").unwrap(), first, "a no-op add keeps the revision");
    store.add_messages("c1", "local", &Default::default(), &messages, DEFAULT_SESSION_GAP).unwrap();
    let second = store.revision("c1").unwrap();
    assert!(second > first);
    store.add_messages("c2", "local", &Default::default(), &messages, DEFAULT_SESSION_GAP).unwrap();
    store.forget("c1").unwrap();
    assert!(matches!(store.revision("c1"), Err(StoreError::UnknownConversation(_))));
    store.add_messages("c1", "local", &Default::default(), &messages, DEFAULT_SESSION_GAP).unwrap();
    assert!(store.revision("c1").unwrap() > store.revision("c2").unwrap());
    assert!(store.revision("c2").unwrap() > second);
}

fn a_store_of_the_previous_schema_is_migrated_in_place_and_takes_scopes_and_facts(kind: Kind) {
    let place = TestPlace::new(kind);
    // A store as an earlier release (schema version 5) left it.
    let blob = place.empty_blob();
    place.at_version(
        5,
        &format!(
            r#"INSERT INTO conversations (id, embedder, created_at, revision)
                   VALUES ('old', 'local', '2024-01-01T00:00:00Z', 3);
                 UPDATE counters SET value = 3 WHERE name = 'revision';
                 INSERT INTO sessions VALUES ('old', 1, 's1');
                 INSERT INTO messages VALUES ('old', 'h1', 1, 1, 'Ann', 'I live in Paris',
                   '2024-01-05T10:00:00Z', '2024-01-05T10:00:00Z');
                 INSERT INTO session_outputs VALUES ('old', 1, 'stale', 'm',
                   '{{"session": "D1", "sentences": [], "personal_facts": [{{"id": "D1:p1",
                     "person": "Ann", "aspect": "home", "fact": "Ann lives in Paris",
                     "origins": ["D1:1"]}}]}}', '{{}}', 0, {blob}, {blob});"#
        ),
    );
    let missing = place.raw().query("SELECT * FROM facts", params![], |_| Ok(()));
    assert!(missing.is_err(), "version 5 has no facts");
    let store = place.open().unwrap();
    assert_eq!(place.version(), SCHEMA_VERSION);
    let loaded = store.load("old").unwrap();
    assert_eq!((loaded.info.user.as_deref(), loaded.revision), (None, 3));
    assert_eq!(loaded.sessions[0].messages[0].text, "I live in Paris");
    assert!(loaded.sessions[0].messages[0].tags.is_empty());
    // The facts of the stored rewrites became rows, valid from their session's first message.
    let facts = store.facts(None, Some("old")).unwrap();
    assert_eq!(facts.len(), 1);
    assert_eq!(
        (facts[0].value.as_str(), facts[0].origins.as_slice()),
        ("Ann lives in Paris", &["D1:1".to_string()][..])
    );
    assert_eq!(facts[0].valid_from.as_deref(), Some("2024-01-05T10:00:00Z"));
    assert_eq!(
        store.chain_plan("old", "m", &Default::default()).unwrap().new_facts,
        1,
        "the next add decides them"
    );
    assert!(store.history(None, None).unwrap().is_empty());
    // The old conversation takes the first user an add names, then keeps it.
    let scope = AddScope { user: Some("ann".into()), ..AddScope::default() };
    let later =
        parse(r#"[{"speaker": "Ann", "text": "Moved", "timestamp": "2024-03-01"}]"#).unwrap();
    store.add_messages("old", "local", &scope, &later, DEFAULT_SESSION_GAP).unwrap();
    assert_eq!(store.list_of(Some("ann")).unwrap()[0].id, "old");
    let other = AddScope { user: Some("bob".into()), ..AddScope::default() };
    let refused = store.add_messages("old", "local", &other, &later, DEFAULT_SESSION_GAP);
    assert!(matches!(refused, Err(StoreError::ScopeMismatch { field: "user", .. })), "{refused:?}");
    // A forget is logged, and the log refuses rewrites.
    let forgotten = store.forget_message("old", "h1", "cli").unwrap();
    let log = store.history(Some("ann"), None).unwrap();
    assert_eq!((log.len(), log[0].id, log[0].actor.as_str()), (1, forgotten.edit, "cli"));
    assert!(place.raw().execute("DELETE FROM edits", params![]).is_err());
    let undo = store.undo(forgotten.edit, "cli").unwrap();
    assert_eq!(undo.undoes, Some(forgotten.edit));
    assert_eq!(store.load("old").unwrap().sessions[0].messages[0].id, "h1");
    assert!(matches!(store.undo(forgotten.edit, "cli"), Err(StoreError::NotUndoable { .. })));
}

/// A fact row: id, conversation, session, value, valid from, valid to, superseded by.
type FactRow<'a> = (i64, &'a str, u32, &'a str, &'a str, Option<&'a str>, Option<i64>);

/// Two conversations of user `ann`, one session each, and facts `rows` (id, conversation,
/// session, value, valid_from, valid_to, superseded_by) about Ann's home.
fn facts_store(kind: Kind, rows: &[FactRow]) -> (TestPlace, Store) {
    let (place, store) = store(kind);
    let scope = AddScope { user: Some("ann".into()), ..AddScope::default() };
    // c1: one session; c2: D1 (1 May) and D2 (8 May).
    for (conversation, gap) in [("c1", TimeDelta::days(30)), ("c2", DEFAULT_SESSION_GAP)] {
        let messages = parse(WEEK_ONE).unwrap();
        store.add_messages(conversation, "local", &scope, &messages, gap).unwrap();
    }
    let connection = store.connect().unwrap();
    for (id, conversation, session, value, from, to, by) in rows {
        connection
            .execute(
                "INSERT INTO facts (id, conversation_id, session_number, key, person, aspect,
                   value, extracted, origins, valid_from, valid_to, superseded_by, checked)
                 VALUES (?1, ?2, ?3, ?4, 'Ann', 'home', ?5, ?5, '[]', ?6, ?7, ?8, 1)",
                params![
                    id,
                    conversation,
                    session,
                    format!("D{session}:p{id}"),
                    value,
                    from,
                    to,
                    by
                ],
            )
            .unwrap();
    }
    if store.is_postgres() {
        // Rows inserted with their ids: the identity goes on after them.
        connection
            .execute_batch(
                "SELECT setval(pg_get_serial_sequence('facts', 'id'), (SELECT MAX(id) FROM facts))",
            )
            .unwrap();
    }
    (place, store)
}

fn deleting_a_replacing_fact_hands_the_older_one_on_or_revives_it_everywhere(kind: Kind) {
    // Paris (c1) was replaced by Berlin (c2 D1), Berlin by Rome (c2 D2).
    let (_place, store) = facts_store(
        kind,
        &[
            (1, "c1", 1, "Paris", "2024-01-01T00:00:00Z", Some("2024-02-01T00:00:00Z"), Some(2)),
            (2, "c2", 1, "Berlin", "2024-02-01T00:00:00Z", Some("2024-03-01T00:00:00Z"), Some(3)),
            (3, "c2", 2, "Rome", "2024-03-01T00:00:00Z", None, None),
        ],
    );
    // A message added to c2's D1: its facts go until the rebuild.
    let before = store.revision("c1").unwrap();
    let more =
        parse(r#"[{"speaker": "Ann", "text": "Also", "timestamp": "2024-05-01T10:05:00Z"}]"#);
    let added = store.add_messages(
        "c2",
        "local",
        &AddScope::default(),
        &more.unwrap(),
        DEFAULT_SESSION_GAP,
    );
    assert_eq!(added.unwrap().changed_sessions, [1]);
    assert!(matches!(store.fact(2), Err(StoreError::UnknownFact(2))));
    let paris = store.fact(1).unwrap();
    assert_eq!(paris.superseded_by, Some(3), "handed on to Berlin's successor");
    assert_eq!(paris.valid_to.as_deref(), Some("2024-03-01T00:00:00Z"));
    assert!(store.revision("c1").unwrap() > before, "the other conversation's views are stale");
    // c2 forgotten, Rome with it: Paris is current again, and to be decided anew.
    let before = store.revision("c1").unwrap();
    store.forget("c2").unwrap();
    let paris = store.fact(1).unwrap();
    assert_eq!((paris.valid_to, paris.superseded_by), (None, None));
    assert_eq!(store.chain_plan("c1", "m", &Default::default()).unwrap().new_facts, 1);
    assert!(store.revision("c1").unwrap() > before);
}

fn an_undo_refuses_when_what_it_changed_has_changed_since(kind: Kind) {
    let (_place, store) =
        facts_store(kind, &[(1, "c1", 1, "Paris", "2024-01-01T00:00:00Z", None, None)]);
    let first = store.correct_fact(1, "Lyon", "cli").unwrap();
    store.correct_fact(1, "Nice", "cli").unwrap();
    let refused = store.undo(first.id, "cli");
    assert!(matches!(refused, Err(StoreError::NotUndoable { .. })), "{refused:?}");
    assert_eq!(store.fact(1).unwrap().value, "Nice");
    // A forget that removed its session, whose number a later add took.
    let stored = store.load("c2").unwrap();
    let last = stored.sessions.last().unwrap();
    let only = last.messages[0].id.clone();
    assert_eq!(last.messages.len(), 1, "the fixture's last session holds one message");
    let forgotten = store.forget_message("c2", &only, "cli").unwrap();
    assert!(forgotten.session_removed);
    let later =
        parse(r#"[{"speaker": "Bob", "text": "Hi again", "timestamp": "2024-07-01T10:00:00Z"}]"#);
    store
        .add_messages("c2", "local", &AddScope::default(), &later.unwrap(), DEFAULT_SESSION_GAP)
        .unwrap();
    assert_eq!(store.load("c2").unwrap().sessions.last().unwrap().number, last.number);
    let refused = store.undo(forgotten.edit, "cli");
    assert!(matches!(refused, Err(StoreError::NotUndoable { .. })), "{refused:?}");
}
