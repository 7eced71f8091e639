//! TLS to PostgreSQL (`sslmode`, `sslrootcert` as libpq reads them) against the tests' private
//! server, given a certificate for `localhost` signed by a CA the test makes: verify-full with
//! that CA connects over TLS; another CA, or a host name the certificate does not name, is
//! refused with a message that says so; verify-ca checks the chain only; require encrypts
//! without checking; disable stays plain.

use std::process::Command;

use mragent::store::Store;

use crate::private_pg;

/// Turns TLS on in the shared server with a certificate for `localhost` only (not its
/// address), signed by `ca.pem` in the returned folder; `other-ca.pem` signs nothing of it.
fn tls_server() -> std::path::PathBuf {
    let pg = private_pg::shared();
    let dir = pg.dir().join(format!("tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    crate::support::tls_certificates(&dir, &["ca", "other-ca"], "DNS:localhost");
    let root =
        Command::new("id").arg("-u").output().is_ok_and(|out| out.stdout.starts_with(b"0\n"));
    if root {
        assert!(
            Command::new("chown")
                .arg("-R")
                .arg("postgres:postgres")
                .arg(&dir)
                .status()
                .unwrap()
                .success()
        );
    }
    assert!(
        Command::new("chmod").arg("600").arg(dir.join("server.key")).status().unwrap().success()
    );
    let mut admin = postgres::Client::connect(&pg.url("postgres"), postgres::NoTls).unwrap();
    // One statement per call: several in one string run as one transaction, where ALTER
    // SYSTEM is refused.
    for statement in [
        format!("ALTER SYSTEM SET ssl_cert_file = '{}'", dir.join("server.pem").display()),
        format!("ALTER SYSTEM SET ssl_key_file = '{}'", dir.join("server.key").display()),
        "ALTER SYSTEM SET ssl = on".to_string(),
        "SELECT pg_reload_conf()".to_string(),
    ] {
        admin.batch_execute(&statement).unwrap();
    }
    dir
}

/// Whether the store's connections to `database` are encrypted (it keeps one in its pool).
fn encrypted(database: &str) -> bool {
    let mut admin =
        postgres::Client::connect(&private_pg::shared().url("postgres"), postgres::NoTls).unwrap();
    let row = admin
        .query_one(
            "SELECT COALESCE(bool_and(s.ssl), false) FROM pg_stat_ssl s
             JOIN pg_stat_activity a USING (pid) WHERE a.datname = $1 AND a.application_name = 'mragent'",
            &[&database],
        )
        .unwrap();
    row.get(0)
}

#[test]
fn tls_to_postgres_verifies_the_ca_and_the_host_name_as_libpq_does() {
    let dir = tls_server();
    let pg = private_pg::shared();
    let url = pg.fresh_database();
    let database = url.rsplit('/').next().unwrap().to_string();
    let at = |host: &str, query: &str| {
        format!("postgres://{}@{host}:{}/{database}?{query}", private_pg::USER, pg.port())
    };
    let ca = dir.join("ca.pem").display().to_string();
    let other = dir.join("other-ca.pem").display().to_string();
    // Verified fully: over TLS.
    let store = Store::open_url(&at("localhost", &format!("sslmode=verify-full&sslrootcert={ca}")))
        .unwrap();
    store.list().unwrap();
    assert!(encrypted(&database));
    drop(store);
    // Another CA: refused, saying the certificate's issuer is unknown.
    let refused =
        Store::open_url(&at("localhost", &format!("sslmode=verify-full&sslrootcert={other}")))
            .unwrap_err()
            .to_string();
    assert!(refused.contains("certificate") && refused.contains("UnknownIssuer"), "{refused}");
    // A name the certificate does not hold (its address): refused by verify-full, saying so;
    // accepted by verify-ca, which checks the chain only.
    let refused =
        Store::open_url(&at("127.0.0.1", &format!("sslmode=verify-full&sslrootcert={ca}")))
            .unwrap_err()
            .to_string();
    assert!(refused.contains("not valid for name"), "{refused}");
    Store::open_url(&at("127.0.0.1", &format!("sslmode=verify-ca&sslrootcert={ca}")))
        .unwrap()
        .list()
        .unwrap();
    // require: encrypted, unchecked; require with a CA checks the chain (libpq's rule).
    Store::open_url(&at("127.0.0.1", "sslmode=require")).unwrap().list().unwrap();
    assert!(
        Store::open_url(&at("127.0.0.1", &format!("sslmode=require&sslrootcert={other}"))).is_err()
    );
    // verify-full without a CA, or an unknown mode: a message naming the parameter.
    let missing = Store::open_url(&at("localhost", "sslmode=verify-full")).unwrap_err().to_string();
    assert!(missing.contains("sslrootcert"), "{missing}");
    let unknown = Store::open_url(&at("localhost", "sslmode=always")).unwrap_err().to_string();
    assert!(unknown.contains("sslmode"), "{unknown}");
    // disable: plain (on a database of its own: the connections above may linger a moment).
    let fresh = pg.fresh_database();
    let fresh = fresh.rsplit('/').next().unwrap();
    let plain_url =
        format!("postgres://{}@127.0.0.1:{}/{fresh}?sslmode=disable", private_pg::USER, pg.port());
    let plain = Store::open_url(&plain_url).unwrap();
    plain.list().unwrap();
    assert!(!encrypted(fresh));
}
