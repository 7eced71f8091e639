//! The PostgreSQL side of [`super::Conn`]: a pool of `postgres` clients (the blocking client of
//! the tokio-postgres project; the store is synchronous and runs in `spawn_blocking`), each
//! with its own prepared-statement cache, advisory locks, and the conversion of [`Value`]s.
//!
//! Connection failures (the server down, restarting or refusing connections) are
//! [`StoreError::Unavailable`], which the service answers with 503; the pool tests a connection
//! before lending it, so after a database restart the next request connects afresh.

use std::collections::HashMap;
use std::error::Error as _;
use std::time::Duration;

use bytes::BytesMut;
use postgres::types::{IsNull, ToSql, Type, to_sql_checked};
use postgres::{Client, NoTls, Statement};
use sha2::{Digest as _, Sha256};

use super::{Row, Value};
use crate::store::StoreError;

/// How long a request waits for a pooled connection before it is refused with
/// [`StoreError::Unavailable`] (a 503): under a second, so a request, `/ready` included, is
/// answered within a readiness probe's timeout during an outage. A live pool lends a
/// connection in microseconds; only a pool with every connection busy makes a request wait.
const POOL_TIMEOUT: Duration = Duration::from_millis(700);

/// How long one attempt to connect to the server may take (a host that drops packets).
const CONNECT_TIMEOUT: Duration = Duration::from_millis(600);

/// Connections per process: the server's request concurrency plus the job runner's builds
/// (advisory locks hold their own connections, outside the pool).
const POOL_SIZE: u32 = 24;

/// The advisory lock every write transaction takes (the store's writers are serialised, as
/// with SQLite's `BEGIN IMMEDIATE`); an arbitrary constant ("mragent" and 1).
const WRITE_LOCK: i64 = 0x6d72_6167_656e_7401;

/// The advisory lock migrations run under.
pub(crate) const MIGRATE_LOCK: i64 = 0x6d72_6167_656e_7402;

/// Runs blocking client work from wherever the store is called. The `postgres` client drives
/// its connection with a runtime of its own, which cannot start on a thread that is running
/// async tasks: on a worker of a multi-threaded runtime (a CLI command calling the store from
/// its async body) the work moves off the executor first (`block_in_place`); on any other
/// thread (`spawn_blocking`, plain threads) it runs as is.
fn off_runtime<T>(work: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(work)
        }
        _ => work(),
    }
}

/// A client with its prepared statements (by the store's SQL text).
pub(crate) struct PgConn {
    /// Always `Some` until dropped (taken only by `Drop`).
    client: Option<Client>,
    statements: HashMap<String, Statement>,
}

impl PgConn {
    // Invariant: `client` is `Some` from construction until `Drop` takes it.
    #[expect(clippy::expect_used, reason = "the client is only taken by Drop")]
    fn client(&mut self) -> &mut Client {
        self.client.as_mut().expect("a connection's client lives until it is dropped")
    }
}

impl Drop for PgConn {
    fn drop(&mut self) {
        // Closing a client blocks on its runtime (see `off_runtime`).
        if let Some(client) = self.client.take() {
            off_runtime(move || drop(client));
        }
    }
}

/// A pooled connection.
pub(crate) type Pooled = r2d2::PooledConnection<Manager>;

/// Makes and checks the pool's connections.
#[derive(Debug)]
pub(crate) struct Manager {
    config: postgres::Config,
    /// The TLS connector (`sslmode`, `sslrootcert`; `None`: plain TCP).
    tls: Option<super::pg_tls::PgTls>,
    /// Why the last attempt to connect failed (the pool keeps only "timed out"): an
    /// authentication failure is then reported as one, not as an outage.
    last_failure: std::sync::Arc<std::sync::Mutex<Option<ClassifiedError>>>,
}

impl r2d2::ManageConnection for Manager {
    type Connection = PgConn;
    type Error = postgres::Error;

    fn connect(&self) -> Result<PgConn, postgres::Error> {
        let connected = connect(&self.config, self.tls.as_ref());
        if let Ok(mut last) = self.last_failure.lock() {
            *last = connected.as_ref().err().map(clone_error);
        }
        Ok(PgConn { client: Some(connected?), statements: HashMap::new() })
    }

    fn is_valid(&self, connection: &mut PgConn) -> Result<(), postgres::Error> {
        connection.client().simple_query("").map(|_| ())
    }

    fn has_broken(&self, connection: &mut PgConn) -> bool {
        connection.client.as_ref().is_none_or(Client::is_closed)
    }
}

/// A new client of `config`, over TLS when `tls` is given.
fn connect(
    config: &postgres::Config,
    tls: Option<&super::pg_tls::PgTls>,
) -> Result<Client, postgres::Error> {
    match tls {
        Some(tls) => config.connect(tls.clone()),
        None => config.connect(NoTls),
    }
}

/// What a failed connection attempt said, as a store error would classify it (a
/// `postgres::Error` cannot be cloned; its code and words are what matter).
fn clone_error(error: &postgres::Error) -> ClassifiedError {
    ClassifiedError {
        code: error.code().map(|code| code.code().to_string()),
        text: match error.as_db_error() {
            Some(db) => format!("{}: {}", db.code().code(), db.message()),
            // The driver's message names the step ("error performing TLS handshake"); its
            // sources say why (an unknown issuer, a name the certificate does not hold).
            None => {
                let mut text = error.to_string();
                let mut source = error.source();
                while let Some(cause) = source {
                    text.push_str(&format!(": {cause}"));
                    source = cause.source();
                }
                text
            }
        },
        io: error.is_closed() || error.source().is_some_and(|source| source.is::<std::io::Error>()),
    }
}

/// A connection failure's code and message.
#[derive(Debug, Clone)]
pub(crate) struct ClassifiedError {
    code: Option<String>,
    text: String,
    io: bool,
}

impl From<ClassifiedError> for StoreError {
    fn from(error: ClassifiedError) -> Self {
        classify(error.code.as_deref(), error.io, error.text)
    }
}

/// A PostgreSQL store's pool and settings. Cheap to clone.
#[derive(Clone)]
pub(crate) struct PgStore {
    pool: r2d2::Pool<Manager>,
    config: postgres::Config,
    tls: Option<super::pg_tls::PgTls>,
    shown: String,
    last_failure: std::sync::Arc<std::sync::Mutex<Option<ClassifiedError>>>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore").field("url", &self.shown).finish()
    }
}

impl PgStore {
    /// A pool for the server at `url` (`postgres://user:password@host:port/database`); no
    /// connection is made yet.
    pub(crate) fn new(url: &str) -> Result<Self, StoreError> {
        let (client_url, tls) = super::pg_tls::split_url(url)?;
        let mut config: postgres::Config =
            client_url.parse().map_err(|error: postgres::Error| {
                StoreError::Postgres(format!("store URL {}: {error}", shown(url)))
            })?;
        config.ssl_mode(tls.mode);
        let tls = tls.tls;
        config.connect_timeout(CONNECT_TIMEOUT);
        config.application_name("mragent");
        let last_failure = std::sync::Arc::default();
        let manager = Manager {
            config: config.clone(),
            tls: tls.clone(),
            last_failure: std::sync::Arc::clone(&last_failure),
        };
        let pool = r2d2::Pool::builder()
            .max_size(POOL_SIZE)
            .min_idle(Some(0))
            .connection_timeout(POOL_TIMEOUT)
            .test_on_check_out(true)
            .error_handler(Box::new(r2d2::NopErrorHandler))
            .build_unchecked(manager);
        Ok(Self { pool, config, tls, shown: shown(url), last_failure })
    }

    /// The URL without its password.
    pub(crate) fn shown(&self) -> &str {
        &self.shown
    }

    /// A pooled connection.
    pub(crate) fn get(&self) -> Result<Pooled, StoreError> {
        off_runtime(|| self.pool.get()).map_err(|error| {
            let last = self.last_failure.lock().ok().and_then(|last| last.clone());
            match last.map(StoreError::from) {
                Some(StoreError::Authentication(why)) => StoreError::Authentication(format!(
                    "PostgreSQL at {} refused the user and password: {why}",
                    self.shown
                )),
                Some(other) => StoreError::Unavailable(format!(
                    "no connection to PostgreSQL at {}: {other}",
                    self.shown
                )),
                None => StoreError::Unavailable(format!(
                    "no connection to PostgreSQL at {}: {error}",
                    self.shown
                )),
            }
        })
    }

    /// The session-level advisory lock `key` on a connection of its own (outside the pool), so
    /// that it is released when the lock is dropped or, if this process dies, when the server
    /// sees the connection close. `wait: false` returns `None` while another session holds it.
    pub(crate) fn lock(&self, key: i64, wait: bool) -> Result<Option<PgLock>, StoreError> {
        off_runtime(|| self.lock_here(key, wait))
    }

    fn lock_here(&self, key: i64, wait: bool) -> Result<Option<PgLock>, StoreError> {
        let mut client = connect(&self.config, self.tls.as_ref())?;
        if wait {
            client.execute("SELECT pg_advisory_lock($1)", &[&key])?;
        } else {
            let row = client.query_one("SELECT pg_try_advisory_lock($1)", &[&key])?;
            if !row.try_get::<_, bool>(0)? {
                return Ok(None);
            }
        }
        Ok(Some(PgLock { client: Some(client) }))
    }
}

/// A held advisory lock (see [`PgStore::lock`]).
pub(crate) struct PgLock {
    client: Option<Client>,
}

impl Drop for PgLock {
    fn drop(&mut self) {
        if let Some(mut client) = self.client.take() {
            // Closing the connection releases the lock too; unlocking first makes the release
            // immediate rather than whenever the server notices the close.
            off_runtime(move || {
                let _ = client.simple_query("SELECT pg_advisory_unlock_all()");
            });
        }
    }
}

/// The advisory-lock key of a name (the first 8 bytes of its SHA-256).
pub(crate) fn lock_key(name: &str) -> i64 {
    let digest = Sha256::digest(name.as_bytes());
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(bytes)
}

/// A URL with its password replaced by `***`, wherever it is: after the user
/// (`user:password@`) or as a parameter (`?password=…`, `&password=…`, also `sslpassword`).
pub fn shown(url: &str) -> String {
    let masked = mask_authority(url);
    match masked.split_once('?') {
        Some((base, query)) => {
            let query: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((key, _)) if key.to_ascii_lowercase().ends_with("password") => {
                        format!("{key}=***")
                    }
                    _ => pair.to_string(),
                })
                .collect();
            format!("{base}?{}", query.join("&"))
        }
        None => masked,
    }
}

/// The URL with the password of its `user:password@` replaced by `***`.
fn mask_authority(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_string() };
    let (authority, tail) = rest.split_once('/').map_or((rest, ""), |(a, t)| (a, t));
    let Some((credentials, host)) = authority.rsplit_once('@') else { return url.to_string() };
    // Only a password is hidden: a user alone is shown as it is.
    let Some((user, _password)) = credentials.split_once(':') else { return url.to_string() };
    let slash = if rest.contains('/') { "/" } else { "" };
    format!("{scheme}://{user}:***@{host}{slash}{tail}")
}

/// `?N` placeholders to PostgreSQL's `$N` (outside quoted text and identifiers).
pub(crate) fn placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut quote: Option<char> = None;
    for c in sql.chars() {
        match (quote, c) {
            (Some(open), c) if c == open => quote = None,
            (None, '\'' | '"') => quote = Some(c),
            (None, '?') => {
                out.push('$');
                continue;
            }
            _ => {}
        }
        out.push(c);
    }
    out
}

fn statement(connection: &mut PgConn, sql: &str) -> Result<Statement, StoreError> {
    if let Some(statement) = connection.statements.get(sql) {
        return Ok(statement.clone());
    }
    let statement = connection.client().prepare(&placeholders(sql))?;
    connection.statements.insert(sql.to_string(), statement.clone());
    Ok(statement)
}

fn bound(params: &[Value]) -> Vec<&(dyn ToSql + Sync)> {
    params.iter().map(|value| value as &(dyn ToSql + Sync)).collect()
}

/// Runs one statement; returns the rows it changed.
pub(super) fn execute(
    connection: &mut PgConn,
    sql: &str,
    params: &[Value],
) -> Result<u64, StoreError> {
    off_runtime(|| {
        let statement = statement(connection, sql)?;
        Ok(connection.client().execute(&statement, &bound(params))?)
    })
}

/// Runs statements without parameters (the simple query protocol).
pub(super) fn execute_batch(connection: &mut PgConn, sql: &str) -> Result<(), StoreError> {
    Ok(off_runtime(|| connection.client().batch_execute(sql))?)
}

/// Opens a write transaction: every writer of the store takes one advisory lock.
pub(super) fn begin_write(connection: &mut PgConn) -> Result<(), StoreError> {
    execute_batch(connection, &format!("BEGIN; SELECT pg_advisory_xact_lock({WRITE_LOCK})"))
}

/// Every row of a query.
pub(super) fn query(
    connection: &mut PgConn,
    sql: &str,
    params: &[Value],
) -> Result<Vec<Row>, StoreError> {
    let rows = off_runtime(|| {
        let statement = statement(connection, sql)?;
        Ok::<_, StoreError>(connection.client().query(&statement, &bound(params))?)
    })?;
    rows.iter()
        .map(|row| (0..row.len()).map(|index| value_of(row, index)).collect::<Result<_, _>>())
        .map(|values| values.map(Row))
        .collect()
}

fn value_of(row: &postgres::Row, index: usize) -> Result<Value, StoreError> {
    let kind = row.columns()[index].type_().clone();
    let value = match kind {
        Type::INT8 => row.try_get::<_, Option<i64>>(index)?.map(Value::Int),
        Type::INT4 => row.try_get::<_, Option<i32>>(index)?.map(|n| Value::Int(n.into())),
        Type::INT2 => row.try_get::<_, Option<i16>>(index)?.map(|n| Value::Int(n.into())),
        Type::BOOL => row.try_get::<_, Option<bool>>(index)?.map(|b| Value::Int(b.into())),
        Type::FLOAT8 => row.try_get::<_, Option<f64>>(index)?.map(Value::Real),
        Type::FLOAT4 => row.try_get::<_, Option<f32>>(index)?.map(|n| Value::Real(n.into())),
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME => {
            row.try_get::<_, Option<String>>(index)?.map(Value::Text)
        }
        Type::BYTEA => row.try_get::<_, Option<Vec<u8>>>(index)?.map(Value::Blob),
        other => {
            return Err(StoreError::Corrupt(format!("column {index} has the type {other}")));
        }
    };
    Ok(value.unwrap_or(Value::Null))
}

impl ToSql for Value {
    fn to_sql(
        &self,
        kind: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match (self, kind.clone()) {
            (Value::Null, _) => Ok(IsNull::Yes),
            (Value::Int(n), Type::INT4) => i32::try_from(*n)?.to_sql(kind, out),
            (Value::Int(n), Type::INT2) => i16::try_from(*n)?.to_sql(kind, out),
            (Value::Int(n), Type::BOOL) => (*n != 0).to_sql(kind, out),
            (Value::Int(n), Type::FLOAT8) => (*n as f64).to_sql(kind, out),
            (Value::Int(n), Type::TEXT | Type::VARCHAR) => n.to_string().to_sql(kind, out),
            (Value::Int(n), _) => n.to_sql(kind, out),
            (Value::Real(n), Type::FLOAT4) => (*n as f32).to_sql(kind, out),
            (Value::Real(n), _) => n.to_sql(kind, out),
            (Value::Text(text), _) => text.as_str().to_sql(kind, out),
            (Value::Blob(bytes), _) => bytes.as_slice().to_sql(kind, out),
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

impl From<postgres::Error> for StoreError {
    fn from(error: postgres::Error) -> Self {
        clone_error(&error).into()
    }
}

/// A PostgreSQL failure by its SQLSTATE: class 28 (invalid authorization: a wrong password or
/// user) is [`StoreError::Authentication`], not worth a retry; connection failures, shutdowns
/// and too many connections are [`StoreError::Unavailable`]; the rest [`StoreError::Postgres`].
fn classify(code: Option<&str>, io: bool, message: String) -> StoreError {
    let authentication = code.is_some_and(|code| code.starts_with("28"));
    let unavailable = match code {
        Some(code) => code.starts_with("08") || code.starts_with("57P") || code == "53300",
        None => io || message.contains("connect"),
    };
    if authentication {
        StoreError::Authentication(format!("PostgreSQL: {message}"))
    } else if unavailable {
        StoreError::Unavailable(format!("PostgreSQL: {message}"))
    } else {
        StoreError::Postgres(message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_become_dollars_outside_quotes() {
        assert_eq!(
            placeholders("SELECT '?1', \"a?\" FROM t WHERE a = ?1 AND b = ?12"),
            "SELECT '?1', \"a?\" FROM t WHERE a = $1 AND b = $12"
        );
    }

    #[test]
    fn shown_urls_hide_the_password() {
        assert_eq!(shown("postgres://ann:secret@db:5432/m"), "postgres://ann:***@db:5432/m");
        assert_eq!(shown("postgres://db/m"), "postgres://db/m");
        assert!(!shown("postgresql://u:p%40ss@h/d?sslmode=disable").contains("p%40ss"));
        for url in [
            "postgres://ann@db/m?password=hunter2",
            "postgres://ann@db/m?sslmode=require&password=hunter2&connect_timeout=3",
            "postgres://ann@db/m?PASSWORD=hunter2",
            "postgres://ann:hunter2@db/m?password=hunter2",
            "postgres://ann@db/m?sslpassword=hunter2",
            "postgres://ann:hunter2@db",
        ] {
            let masked = shown(url);
            assert!(!masked.contains("hunter2"), "{url} -> {masked}");
            assert!(masked.contains("***"), "{masked}");
        }
        assert_eq!(
            shown("postgres://ann@db/m?sslmode=require&password=x"),
            "postgres://ann@db/m?sslmode=require&password=***"
        );
    }

    #[test]
    fn lock_keys_are_stable_and_distinct() {
        assert_eq!(lock_key("conversation c1"), lock_key("conversation c1"));
        assert_ne!(lock_key("conversation c1"), lock_key("conversation c2"));
    }
}
