//! `mragent keys create|list|revoke`: API keys in the project's store (`store::keys`).

use anyhow::Context as _;

use super::Outcome;
use super::output::outln;
use crate::cli::KeysCommand;
use crate::settings::ProjectPaths;
use crate::store::{ApiKey, KeyScope, NewKey};

/// Runs one `keys` subcommand on the project's store.
pub async fn execute(paths: &ProjectPaths, command: KeysCommand) -> anyhow::Result<Outcome> {
    let paths = paths.clone();
    let printed = tokio::task::spawn_blocking(move || run(&paths, command))
        .await
        .context("the keys task failed")??;
    for line in printed {
        outln!("{line}")?;
    }
    Ok(Outcome::Success)
}

fn run(paths: &ProjectPaths, command: KeysCommand) -> anyhow::Result<Vec<String>> {
    let store = super::own::open_store(paths)?;
    match command {
        KeysCommand::Create(args) => {
            let scope = KeyScope::parse(&args.scope).with_context(|| {
                format!("scope {:?}: expected read, write or admin", args.scope)
            })?;
            let new = NewKey {
                name: args.name,
                user: args.user,
                agent: args.agent,
                scope,
                expires_at: args.expires.map(|lifetime| chrono::Utc::now() + lifetime),
            };
            let created = store.create_key(&new)?;
            if args.json {
                return Ok(vec![serde_json::to_string_pretty(&created)?]);
            }
            Ok(vec![
                created.secret.clone(),
                format!(
                    "key {} ({}): shown once, stored only as its hash; give it as \
                     `Authorization: Bearer <key>`",
                    created.key.name,
                    describe(&created.key)
                ),
            ])
        }
        KeysCommand::List(args) => {
            let keys = store.keys()?;
            if args.json {
                return Ok(vec![serde_json::to_string_pretty(&keys)?]);
            }
            Ok(keys.iter().map(|key| format!("{:<24} {}", key.name, describe(key))).collect())
        }
        KeysCommand::Revoke(args) => {
            let key = store.revoke_key(&args.key)?;
            Ok(vec![format!("revoked {} ({})", key.name, describe(&key))])
        }
    }
}

/// One line about a key: id, scope, binding, expiry, revocation.
fn describe(key: &ApiKey) -> String {
    let mut parts = vec![format!("id {}", key.id), format!("scope {}", key.scope.name())];
    if let Some(user) = &key.user {
        parts.push(format!("user {user}"));
    }
    if let Some(agent) = &key.agent {
        parts.push(format!("agent {agent}"));
    }
    if let Some(at) = &key.expires_at {
        parts.push(format!("expires {at}"));
    }
    if let Some(at) = &key.revoked_at {
        parts.push(format!("revoked {at}"));
    }
    parts.join(", ")
}
