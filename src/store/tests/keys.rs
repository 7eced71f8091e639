//! API keys and the paged copy, on both backends.

use chrono::{TimeDelta, Utc};

use super::place::{Kind, store};
use crate::convo::{DEFAULT_SESSION_GAP, parse};
use crate::store::{KeyScope, NewKey, StoreError, copy_store};

fn new_key(name: &str, user: Option<&str>, scope: KeyScope) -> NewKey {
    NewKey {
        name: name.into(),
        user: user.map(str::to_string),
        agent: None,
        scope,
        expires_at: None,
    }
}

/// A key is shown once and stored as its hash; it verifies only with its whole secret, until
/// it is revoked or expires; names are unique; admin keys are never bound.
pub(super) fn keys_verify_only_whole_unrevoked_unexpired(kind: Kind) {
    let (_place, store) = store(kind);
    assert!(!store.has_keys().unwrap());
    let created = store.create_key(&new_key("ann-bot", Some("ann"), KeyScope::Read)).unwrap();
    assert!(store.has_keys().unwrap());
    let secret = created.secret.clone();
    let found = store.verify_key(&secret).unwrap().unwrap();
    assert_eq!((found.name.as_str(), found.user.as_deref()), ("ann-bot", Some("ann")));
    assert_eq!(found.scope, KeyScope::Read);
    // Nothing stored holds the secret.
    let (_, tail) = secret.rsplit_once('_').unwrap();
    let rows = super::count(
        &store,
        &format!("SELECT COUNT(*) FROM api_keys WHERE hash LIKE '%{tail}%' OR id LIKE '%{tail}%'"),
    );
    assert_eq!(rows, 0);
    // One changed character, a shorter secret, another id, junk: refused.
    let mut changed = secret.clone().into_bytes();
    let last = changed.len() - 1;
    changed[last] = if changed[last] == b'0' { b'1' } else { b'0' };
    for wrong in [
        String::from_utf8(changed).unwrap(),
        secret[..secret.len() - 1].to_string(),
        secret.replacen(&created.key.id, "000000000000", 1),
        "mrk_".to_string(),
        String::new(),
    ] {
        assert!(store.verify_key(&wrong).unwrap().is_none(), "{wrong}");
    }
    assert!(matches!(
        store.create_key(&new_key("ann-bot", None, KeyScope::Write)),
        Err(StoreError::Keys(_))
    ));
    assert!(matches!(
        store.create_key(&new_key("boss", Some("ann"), KeyScope::Admin)),
        Err(StoreError::Keys(_))
    ));
    assert!(matches!(
        store.create_key(&new_key("bad name", None, KeyScope::Read)),
        Err(StoreError::InvalidName(_))
    ));
    // Revoked: refused at once, listed with the time.
    store.revoke_key("ann-bot").unwrap();
    assert!(store.verify_key(&secret).unwrap().is_none());
    assert!(store.keys().unwrap()[0].revoked_at.is_some());
    assert!(!store.has_keys().unwrap());
    assert!(matches!(store.revoke_key("nobody"), Err(StoreError::Keys(_))));
    // Expired: refused.
    let mut soon = new_key("short", None, KeyScope::Write);
    soon.expires_at = Some(Utc::now() - TimeDelta::seconds(1));
    let expired = store.create_key(&soon).unwrap();
    assert!(store.verify_key(&expired.secret).unwrap().is_none());
    soon.name = "long".into();
    soon.expires_at = Some(Utc::now() + TimeDelta::days(1));
    let valid = store.create_key(&soon).unwrap();
    assert!(store.verify_key(&valid.secret).unwrap().is_some());
}

/// A copy of tables larger than one page (keyset paging) holds every row, keys included.
pub(super) fn a_copy_pages_by_key_through_tables_larger_than_a_page(kind: Kind) {
    let (_from_place, from) = store(Kind::Sqlite);
    let lines: Vec<String> = (0..600)
        .map(|n| {
            format!(
                r#"{{"speaker": "Ann", "text": "line {n}", "timestamp": "2024-05-01T10:{:02}:{:02}Z"}}"#,
                n / 60,
                n % 60
            )
        })
        .collect();
    let messages = parse(&format!("[{}]", lines.join(","))).unwrap();
    for conversation in ["a", "b"] {
        from.add_messages(
            conversation,
            "local",
            &Default::default(),
            &messages,
            DEFAULT_SESSION_GAP,
        )
        .unwrap();
    }
    from.create_key(&new_key("k", None, KeyScope::Read)).unwrap();
    let (_to_place, to) = store(kind);
    let copied = copy_store(&from, &to, |_| {}).unwrap();
    let rows = |table: &str| copied.iter().find(|entry| entry.table == table).unwrap().rows;
    assert_eq!(rows("messages"), 1200);
    assert_eq!(rows("api_keys"), 1);
    assert_eq!(to.load("b").unwrap().sessions[0].messages.len(), 600);
}
