//! Stored vectors on both backends: word vectors shared per embedder (schema version 10), and
//! version 12's compact rows (the migration rewrites a version-11 store's plain f32 rows in
//! place, and a blob it cannot read stops it whole).

use super::super::db::params;
use super::super::{SCHEMA_VERSION, StoreError};
use super::WEEK_ONE;
use super::place::{Kind, TestPlace, count, store};
use crate::convo::{DEFAULT_SESSION_GAP, parse};

/// A version-11 store (plain f32 vectors) with one conversation, a session's output rows of
/// `dims` dimensions (`sentences` sentence and topic rows, `units` unit rows) and one word.
fn version_11_with_vectors(
    place: &TestPlace,
    dims: usize,
    sentences: &[Vec<f32>],
    units: &[Vec<f32>],
) {
    use super::super::vectors::tests::f32_blob;
    place.at_version(
        11,
        "INSERT INTO conversations (id, embedder, created_at, revision)
           VALUES ('v', 'e', '2024-01-01T00:00:00Z', 1);
         UPDATE counters SET value = 1 WHERE name = 'revision';
         INSERT INTO sessions VALUES ('v', 1, 's1');",
    );
    let raw = place.raw();
    raw.execute(
        "INSERT INTO session_outputs VALUES ('v', 1, 'h', 'm', '{}', '{}', ?1, ?2, ?3)",
        params![dims as i64, f32_blob(sentences), f32_blob(units)],
    )
    .unwrap();
    raw.execute(
        "INSERT INTO embedder_words (embedder, word, dims, vector) VALUES ('e', 'bike', ?1, ?2)",
        params![dims as i64, f32_blob(&units[..1])],
    )
    .unwrap();
    raw.execute("INSERT INTO conversation_words VALUES ('v', 'bike')", params![]).unwrap();
}

pub(super) fn stored_vectors_of_the_previous_schema_become_compact_in_place(kind: Kind) {
    use rand::{Rng as _, SeedableRng as _};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1536);
    let dims = 1536;
    let mut row = || (0..dims).map(|_| rng.random_range(-0.1f32..0.1)).collect::<Vec<f32>>();
    let sentences: Vec<Vec<f32>> = (0..3).map(|_| row()).collect();
    let units: Vec<Vec<f32>> = (0..4).map(|_| row()).collect();
    let place = TestPlace::new(kind);
    version_11_with_vectors(&place, dims, &sentences, &units);
    let store = place.open().unwrap();
    assert_eq!(place.version(), SCHEMA_VERSION);
    let blobs: (Vec<u8>, Vec<u8>) = store
        .connect()
        .unwrap()
        .query_row("SELECT vectors, units FROM session_outputs", params![], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })
        .unwrap();
    // A quarter of the bytes plus a scale per row, each row the codec's own encoding.
    assert_eq!(blobs.0.len(), 3 * (dims + 4));
    assert_eq!(blobs.1.len(), 4 * (dims + 4));
    assert_eq!(blobs.0, super::super::vectors::encode_vectors(sentences.iter(), dims).unwrap());
    assert_eq!(blobs.1, super::super::vectors::encode_vectors(units.iter(), dims).unwrap());
    let words = store.word_vectors("v", &["bike".to_string()]).unwrap();
    assert_eq!(
        words,
        vec![("bike".to_string(), super::super::vectors::round_trip(&units[0]).unwrap())]
    );
    // Opening again converts nothing twice.
    drop(store);
    let again = place.open().unwrap();
    let units_again: Vec<u8> = again
        .connect()
        .unwrap()
        .query_row("SELECT units FROM session_outputs", params![], |row| row.get(0))
        .unwrap();
    assert_eq!(units_again, blobs.1);
}

pub(super) fn a_vector_blob_that_is_not_whole_rows_stops_the_migration_and_keeps_the_old_version(
    kind: Kind,
) {
    let place = TestPlace::new(kind);
    version_11_with_vectors(&place, 4, &[vec![0.5; 4]], &[vec![0.25; 4]]);
    place.raw().execute("UPDATE session_outputs SET units = ?1", params![vec![0u8; 15]]).unwrap();
    let refused = place.open();
    assert!(
        matches!(&refused, Err(StoreError::Corrupt(why)) if why.contains("15 bytes")),
        "{:?}",
        refused.err()
    );
    assert_eq!(place.version(), 11, "the step rolled back whole");
    let untouched: Vec<u8> = place
        .raw()
        .query_row("SELECT vectors FROM session_outputs", params![], |row| row.get(0))
        .unwrap();
    assert_eq!(untouched, super::super::vectors::tests::f32_blob(&[vec![0.5; 4]]));
}

pub(super) fn word_vectors_are_shared_per_embedder_first_write_wins_and_forget_deletes_the_unused(
    kind: Kind,
) {
    let (_place, store) = store(kind);
    let messages = parse(WEEK_ONE).unwrap();
    for (conversation, embedder) in [("c1", "local"), ("c2", "local"), ("c3", "other")] {
        store
            .add_messages(
                conversation,
                embedder,
                &Default::default(),
                &messages,
                DEFAULT_SESSION_GAP,
            )
            .unwrap();
    }
    let revision = store.revision("c1").unwrap();
    let words = |names: &[&str]| names.iter().map(|w| w.to_string()).collect::<Vec<_>>();
    assert!(store.word_vectors("c1", &words(&["bike"])).unwrap().is_empty());

    let first = vec![("bike".to_string(), vec![1.0, 0.0]), ("red".to_string(), vec![0.0, 1.0])];
    assert!(store.save_word_vectors("c1", &[], &first).unwrap());
    // A word stored already keeps its first vector (two queries may race to store it).
    assert!(store.save_word_vectors("c1", &[], &[("bike".to_string(), vec![0.5, 0.5])]).unwrap());
    let found = store.word_vectors("c1", &words(&["red", "work", "bike"])).unwrap();
    assert_eq!(found, vec![first[1].clone(), first[0].clone()]);
    // Another conversation of the same embedder finds them; one of another embedder does not.
    assert_eq!(store.word_vectors("c2", &words(&["bike"])).unwrap(), vec![first[0].clone()]);
    assert!(store.word_vectors("c3", &words(&["bike"])).unwrap().is_empty());
    assert!(store.save_word_vectors("c3", &[], &[("bike".to_string(), vec![9.0, 9.0])]).unwrap());
    assert_eq!(count(&store, "SELECT COUNT(*) FROM embedder_words"), 3, "one row per word");
    assert_eq!(store.revision("c1").unwrap(), revision, "derived data: the revision stays");

    assert!(matches!(
        store.save_word_vectors("c1", &[], &[("empty".to_string(), Vec::new())]),
        Err(StoreError::Corrupt(_))
    ));
    // c2 uses "bike" (found, not stored by it): forgetting c1 keeps bike and drops red.
    assert!(store.save_word_vectors("c2", &words(&["bike"]), &[]).unwrap());
    store.forget("c1").unwrap();
    assert!(!store.save_word_vectors("c1", &[], &first).unwrap(), "a forgotten conversation");
    assert_eq!(store.word_vectors("c2", &words(&["bike", "red"])).unwrap(), vec![first[0].clone()]);
    store.forget("c2").unwrap();
    assert!(store.word_vectors("c3", &words(&["bike"])).unwrap().len() == 1, "another embedder's");
    assert_eq!(count(&store, "SELECT COUNT(*) FROM embedder_words"), 1);
    store.forget("c3").unwrap();
    assert_eq!(count(&store, "SELECT COUNT(*) FROM embedder_words"), 0);
    assert_eq!(count(&store, "SELECT COUNT(*) FROM conversation_words"), 0);
}

pub(super) fn word_vectors_of_the_previous_schema_become_one_per_embedder_and_word_in_place(
    kind: Kind,
) {
    let place = TestPlace::new(kind);
    // A store as the previous release (schema version 8) left it: one row per conversation.
    place.at_version(
        8,
        "INSERT INTO conversations (id, embedder, created_at, revision) VALUES
           ('a', 'e1', '2024-01-01T00:00:00Z', 1),
           ('b', 'e1', '2024-01-01T00:00:00Z', 2),
           ('c', 'e2', '2024-01-01T00:00:00Z', 3);
         UPDATE counters SET value = 3 WHERE name = 'revision';",
    );
    let raw = place.raw();
    // Plain f32 rows, as every store before version 12 held them.
    let vector = |x: f32| super::super::vectors::tests::f32_blob(&[vec![x, 1.0]]);
    // What they read back as once the migrations ran (version 12 stores them compact).
    let stored = |x: f32| super::super::vectors::round_trip(&[x, 1.0]).unwrap();
    for (conversation, word, x) in
        [("b", "bike", 2.0), ("a", "bike", 1.0), ("b", "red", 3.0), ("c", "bike", 4.0)]
    {
        raw.execute(
            "INSERT INTO word_vectors (conversation_id, word, dims, vector) VALUES (?1, ?2, 2, ?3)",
            params![conversation, word, vector(x)],
        )
        .unwrap();
    }
    let store = place.open().unwrap();
    assert_eq!(place.version(), SCHEMA_VERSION);
    assert!(place.raw().query("SELECT * FROM word_vectors", params![], |_| Ok(())).is_err());
    assert_eq!(count(&store, "SELECT COUNT(*) FROM embedder_words"), 3);
    assert_eq!(count(&store, "SELECT COUNT(*) FROM conversation_words"), 4);
    let words = |names: &[&str]| names.iter().map(|w| w.to_string()).collect::<Vec<_>>();
    // Of two vectors of one (embedder, word), the first conversation's (by id) is kept.
    assert_eq!(
        store.word_vectors("b", &words(&["bike", "red"])).unwrap(),
        vec![("bike".to_string(), stored(1.0)), ("red".to_string(), stored(3.0))]
    );
    assert_eq!(
        store.word_vectors("c", &words(&["bike"])).unwrap(),
        vec![("bike".to_string(), stored(4.0))]
    );
    // The uses moved over too: forgetting `a` keeps what `b` uses; forgetting `b`, e1's words.
    store.forget("a").unwrap();
    assert_eq!(count(&store, "SELECT COUNT(*) FROM embedder_words"), 3);
    store.forget("b").unwrap();
    assert_eq!(count(&store, "SELECT COUNT(*) FROM embedder_words"), 1);
}
