//! API keys (`api_keys`, schema migration 9): what `mragent keys create|list|revoke` manages
//! and what `serve` checks on every request.
//!
//! A key is `mrk_<id>_<secret>`: `id` (12 hex digits) names the row, `secret` (64 hex digits,
//! 256 bits from the operating system's generator) is shown once and stored only as its
//! SHA-256. A fast hash suffices here: the secret is random and 256 bits long, so there is
//! nothing to guess from the hash (a slow password hash guards low-entropy passwords). The
//! stored hash is compared with the given secret's in constant time (`subtle`).
//!
//! Every request reads the key's row: a revoked or expired key is refused at its next request
//! by every process sharing the store, with no cache to expire.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq as _;

use super::db::{Row, params};
use super::{Store, StoreError};
use crate::names::{NameKind, check_name};

/// What a key may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyScope {
    /// Search, ask, list, show, facts, history, jobs.
    Read,
    /// Read, and add, forget, correct, undo.
    Write,
    /// Everything, every user's (never bound to a user).
    Admin,
}

impl KeyScope {
    /// The scope's name as stored and shown.
    pub fn name(self) -> &'static str {
        match self {
            KeyScope::Read => "read",
            KeyScope::Write => "write",
            KeyScope::Admin => "admin",
        }
    }

    /// The scope named `text`.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "read" => Some(KeyScope::Read),
            "write" => Some(KeyScope::Write),
            "admin" => Some(KeyScope::Admin),
            _ => None,
        }
    }
}

/// A key as stored (without its secret).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ApiKey {
    /// The public part of the key (`mrk_<id>_…`).
    pub id: String,
    /// Its name (the audit log shows it).
    pub name: String,
    /// The only user it reaches, if bound.
    pub user: Option<String>,
    /// The only agent it reaches, if bound.
    pub agent: Option<String>,
    /// What it may do.
    pub scope: KeyScope,
    /// When it was made (RFC 3339 UTC).
    pub created_at: String,
    /// When it stops working, if ever.
    pub expires_at: Option<String>,
    /// When it was revoked, if it was.
    pub revoked_at: Option<String>,
}

impl ApiKey {
    /// Whether it works at `now`: not revoked, not expired.
    pub fn usable_at(&self, now: DateTime<Utc>) -> bool {
        let expired = self.expires_at.as_deref().is_some_and(|at| {
            DateTime::parse_from_rfc3339(at).map_or(true, |at| at.with_timezone(&Utc) <= now)
        });
        self.revoked_at.is_none() && !expired
    }
}

/// What `keys create` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewKey {
    /// Its name (the id rule; unique).
    pub name: String,
    /// Bind it to one user.
    pub user: Option<String>,
    /// Bind it to one agent.
    pub agent: Option<String>,
    /// What it may do.
    pub scope: KeyScope,
    /// When it stops working.
    pub expires_at: Option<DateTime<Utc>>,
}

/// A key just made: its row and the whole key, shown once.
#[derive(Debug, Clone, Serialize)]
pub struct CreatedKey {
    /// The row.
    #[serde(flatten)]
    pub key: ApiKey,
    /// The key to give the client (`Authorization: Bearer …`); never stored.
    pub secret: String,
}

/// The prefix of every key.
pub const KEY_PREFIX: &str = "mrk_";

const KEY_COLUMNS: &str =
    "id, name, user_id, agent_id, scope, created_at, expires_at, revoked_at, hash";

fn key_of_row(row: &Row) -> Result<(ApiKey, String), StoreError> {
    let scope: String = row.get(4)?;
    let key = ApiKey {
        id: row.get(0)?,
        name: row.get(1)?,
        user: row.get(2)?,
        agent: row.get(3)?,
        scope: KeyScope::parse(&scope)
            .ok_or_else(|| StoreError::Corrupt(format!("key scope {scope:?}")))?,
        created_at: row.get(5)?,
        expires_at: row.get(6)?,
        revoked_at: row.get(7)?,
    };
    Ok((key, row.get(8)?))
}

fn hash_of(secret: &str) -> String {
    let digest = Sha256::digest(secret.as_bytes());
    digest.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn random_hex(bytes: usize) -> String {
    use rand::RngCore as _;
    let mut buffer = vec![0u8; bytes];
    // The thread's cryptographically secure generator (ChaCha seeded and reseeded from the
    // operating system), never a seeded one: these are secrets.
    rand::rng().fill_bytes(&mut buffer);
    buffer.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Splits `mrk_<id>_<secret>` into its id and secret, when it has that shape.
pub fn split_key(token: &str) -> Option<(&str, &str)> {
    let (id, secret) = token.strip_prefix(KEY_PREFIX)?.split_once('_')?;
    let hex = |text: &str, len: usize| {
        text.len() == len && text.bytes().all(|byte| byte.is_ascii_hexdigit())
    };
    (hex(id, 12) && hex(secret, 64)).then_some((id, secret))
}

fn now_text() -> String {
    Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true)
}

impl Store {
    /// Makes a key; the secret is in the result only.
    pub fn create_key(&self, new: &NewKey) -> Result<CreatedKey, StoreError> {
        check_name(NameKind::User, &new.name)?;
        for bound in [&new.user, &new.agent].into_iter().flatten() {
            check_name(NameKind::User, bound)?;
        }
        if new.scope == KeyScope::Admin && (new.user.is_some() || new.agent.is_some()) {
            return Err(StoreError::Keys(
                "an admin key reaches every user; it cannot be bound to a user or agent".into(),
            ));
        }
        let (id, secret) = (random_hex(6), random_hex(32));
        let key = ApiKey {
            id: id.clone(),
            name: new.name.clone(),
            user: new.user.clone(),
            agent: new.agent.clone(),
            scope: new.scope,
            created_at: now_text(),
            expires_at: new.expires_at.map(|at| at.to_rfc3339_opts(SecondsFormat::Secs, true)),
            revoked_at: None,
        };
        let mut connection = self.connect()?;
        let transaction = connection.write()?;
        let taken: Option<String> = transaction.query_opt(
            "SELECT id FROM api_keys WHERE name = ?1",
            params![key.name],
            |row| row.get(0),
        )?;
        if taken.is_some() {
            return Err(StoreError::Keys(format!("a key named {:?} exists already", key.name)));
        }
        transaction.execute(
            "INSERT INTO api_keys (id, name, hash, user_id, agent_id, scope, created_at,
             expires_at, revoked_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, NULL)",
            params![
                key.id,
                key.name,
                hash_of(&secret),
                key.user,
                key.agent,
                key.scope.name(),
                key.created_at,
                key.expires_at
            ],
        )?;
        transaction.commit()?;
        Ok(CreatedKey { secret: format!("{KEY_PREFIX}{id}_{secret}"), key })
    }

    /// Every key, by name.
    pub fn keys(&self) -> Result<Vec<ApiKey>, StoreError> {
        let rows = self.connect()?.query(
            &format!("SELECT {KEY_COLUMNS} FROM api_keys ORDER BY name"),
            params![],
            key_of_row,
        )?;
        Ok(rows.into_iter().map(|(key, _)| key).collect())
    }

    /// Revokes the key with this name or id (revoking twice keeps the first time).
    pub fn revoke_key(&self, name_or_id: &str) -> Result<ApiKey, StoreError> {
        let mut connection = self.connect()?;
        let transaction = connection.write()?;
        transaction.execute(
            "UPDATE api_keys SET revoked_at = ?2
             WHERE (name = ?1 OR id = ?1) AND revoked_at IS NULL",
            params![name_or_id, now_text()],
        )?;
        let found = transaction.query_opt(
            &format!("SELECT {KEY_COLUMNS} FROM api_keys WHERE name = ?1 OR id = ?1"),
            params![name_or_id],
            key_of_row,
        )?;
        transaction.commit()?;
        found
            .map(|(key, _)| key)
            .ok_or_else(|| StoreError::Keys(format!("no key named {name_or_id:?}")))
    }

    /// Whether any key is neither revoked nor expired (then `serve` asks every request for a
    /// token or key).
    pub fn has_keys(&self) -> Result<bool, StoreError> {
        let now = Utc::now();
        Ok(self.keys()?.iter().any(|key| key.usable_at(now)))
    }

    /// The key `token` is, when it is one of this store's, its secret matches, and it is
    /// neither revoked nor expired.
    pub fn verify_key(&self, token: &str) -> Result<Option<ApiKey>, StoreError> {
        let Some((id, secret)) = split_key(token) else { return Ok(None) };
        let found = self.connect()?.query_opt(
            &format!("SELECT {KEY_COLUMNS} FROM api_keys WHERE id = ?1"),
            params![id],
            key_of_row,
        )?;
        let Some((key, stored)) = found else { return Ok(None) };
        let matches: bool = hash_of(secret).as_bytes().ct_eq(stored.as_bytes()).into();
        Ok((matches && key.usable_at(Utc::now())).then_some(key))
    }
}

/// `30d`, `12h`, `90m`, `3600s` (or `2w`) as a duration.
pub fn parse_lifetime(text: &str) -> Result<chrono::TimeDelta, String> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: i64 = number.parse().map_err(|_| format!("{text:?}: expected like 30d"))?;
    let seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        "w" => 7 * 86_400,
        _ => return Err(format!("{text:?}: the unit is one of s, m, h, d, w")),
    };
    if number <= 0 || number > 100 * 365 * 86_400 / seconds {
        return Err(format!("{text:?}: expected from 1 second to 100 years"));
    }
    Ok(chrono::TimeDelta::seconds(number * seconds))
}
