//! The places the store suite runs on: a SQLite file in a folder of its own, or a new database
//! of the private PostgreSQL server (`tests/support/private_pg.rs`).

use super::super::db::{self, Conn, params};
use super::super::{Store, StoreError, schema, schema_pg};

#[path = "../../../tests/support/private_pg.rs"]
mod private_pg;

#[derive(Debug, Clone, Copy)]
pub(super) enum Kind {
    Sqlite,
    Postgres,
}

/// A store's place: the SQLite folder (kept until the test ends) or the PostgreSQL URL.
pub(super) struct TestPlace {
    pub(super) _dir: Option<tempfile::TempDir>,
    pub(super) sqlite: Option<std::path::PathBuf>,
    pub(super) url: Option<String>,
}

impl TestPlace {
    pub(super) fn new(kind: Kind) -> Self {
        match kind {
            Kind::Sqlite => {
                let dir = tempfile::tempdir().unwrap();
                let path = Store::default_path(dir.path());
                TestPlace { _dir: Some(dir), sqlite: Some(path), url: None }
            }
            Kind::Postgres => TestPlace {
                _dir: None,
                sqlite: None,
                url: Some(private_pg::shared().fresh_database()),
            },
        }
    }

    pub(super) fn open(&self) -> Result<Store, StoreError> {
        match (&self.sqlite, &self.url) {
            (Some(path), _) => Store::open(path),
            (_, Some(url)) => Store::open_url(url),
            _ => unreachable!("a place is one or the other"),
        }
    }

    /// Brings the empty database to `version` only, then runs `sql` in it.
    pub(super) fn at_version(&self, version: u32, sql: &str) {
        match (&self.sqlite, &self.url) {
            (Some(path), _) => {
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                let mut connection = rusqlite::Connection::open(path).unwrap();
                assert_eq!(schema::migrate_to(&mut connection, version).unwrap(), version);
                connection.execute_batch(sql).unwrap();
            }
            (_, Some(url)) => {
                let pg = db::PgStore::new(url).unwrap();
                assert_eq!(schema_pg::migrate(&pg, version).unwrap(), version);
                raw_pg(url).execute_batch(sql).unwrap();
            }
            _ => unreachable!("a place is one or the other"),
        }
    }

    /// A connection to the database outside any store.
    pub(super) fn raw(&self) -> Conn {
        match (&self.sqlite, &self.url) {
            (Some(path), _) => Conn::Sqlite(rusqlite::Connection::open(path).unwrap()),
            (_, Some(url)) => raw_pg(url),
            _ => unreachable!("a place is one or the other"),
        }
    }

    pub(super) fn version(&self) -> u32 {
        match self.raw() {
            Conn::Sqlite(connection) => schema::version(&connection).unwrap(),
            pg => schema_pg::version(&pg).unwrap(),
        }
    }

    pub(super) fn set_version(&self, version: u32) {
        match self.raw() {
            Conn::Sqlite(connection) => {
                connection.pragma_update(None, "user_version", version).unwrap();
            }
            pg => {
                pg.execute("UPDATE mragent_schema SET version = ?1", params![version]).unwrap();
            }
        }
    }

    /// An empty blob in the backend's SQL.
    pub(super) fn empty_blob(&self) -> &'static str {
        if self.sqlite.is_some() { "x''" } else { "decode('', 'hex')" }
    }
}

fn raw_pg(url: &str) -> Conn {
    let pg = db::PgStore::new(url).unwrap();
    Conn::pg(pg.get().unwrap())
}

pub(super) fn store(kind: Kind) -> (TestPlace, Store) {
    let place = TestPlace::new(kind);
    let store = place.open().unwrap();
    (place, store)
}

pub(super) fn count(store: &Store, sql: &str) -> i64 {
    store.connect().unwrap().query_row(sql, params![], |row| row.get(0)).unwrap()
}
