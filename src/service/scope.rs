//! What a query runs over: one conversation or all of a user's ([`Scope`]), narrowed by
//! [`SearchFilters`], and for `ask` optionally as known at a time.
//!
//! A search ranks each conversation of the scope through its cached index (concurrently) and
//! merges the lines by score; a line never comes from outside the scope. An ask over a user, or
//! as of a time, answers over a view made for it (`store::view`: the user's conversations as
//! one, renumbered; messages after the time cut away), indexed from the stored vectors, not
//! cached.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::cache::Cached;
use super::{MemoryService, ServiceError, blocking};
use crate::llm::Embedder;
use crate::store::{SessionOrigin, StoreError, StoredConversation};

/// What a query runs over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// One conversation.
    Conversation(String),
    /// Every conversation of a user.
    User(String),
}

impl Scope {
    /// The scope's name in question ids and traces: the conversation id, or `user:<id>`.
    pub fn label(&self) -> String {
        match self {
            Scope::Conversation(id) => id.clone(),
            Scope::User(user) => format!("user:{user}"),
        }
    }
}

/// Filters on the lines a search returns; each given one must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SearchFilters {
    /// Said by this speaker (letter case aside).
    pub speaker: Option<String>,
    /// Sent at or after this time (RFC 3339 UTC; see [`time_bound`]).
    pub from: Option<String>,
    /// Sent at or before this time.
    pub to: Option<String>,
    /// In this conversation (within a user's).
    pub conversation: Option<String>,
    /// Added with these tags.
    pub tags: BTreeMap<String, String>,
}

/// A time given by a user as a bound: RFC 3339 UTC with seconds. A bare date is its first
/// second (`end: false`) or its last (`end: true`). `None` when the text is not a time.
pub fn time_bound(text: &str, end: bool) -> Option<String> {
    use chrono::SecondsFormat;
    match crate::convo::Timestamp::parse(text)? {
        crate::convo::Timestamp::Date(date) if end => {
            Some(date.and_hms_opt(23, 59, 59)?.and_utc().to_rfc3339_opts(SecondsFormat::Secs, true))
        }
        stamp => Some(stamp.instant().to_rfc3339_opts(SecondsFormat::Secs, true)),
    }
}

/// A view to answer over, and where its sessions come from (a user's view renumbers them).
pub(super) struct View {
    pub(super) entry: Arc<Cached>,
    pub(super) origins: Vec<SessionOrigin>,
}

impl View {
    /// The conversation and turn id a view's turn id stands for.
    pub(super) fn origin(&self, dia_id: &str, scope: &Scope) -> (String, String) {
        let own = || (scope.label(), dia_id.to_string());
        let Some((session, turn)) = dia_id.strip_prefix('D').and_then(|rest| rest.split_once(':'))
        else {
            return own();
        };
        let number: Option<u32> = session.parse().ok();
        match self.origins.iter().find(|origin| Some(origin.number) == number) {
            Some(origin) => (origin.conversation.clone(), format!("D{}:{turn}", origin.original)),
            None => own(),
        }
    }
}

impl<M, E> MemoryService<M, E>
where
    E: Embedder + Clone + 'static,
{
    /// The conversations of a scope, by id; a user without conversations is an error naming
    /// the field.
    pub(super) async fn scope_members(
        &self,
        scope: &Scope,
        only: Option<&str>,
    ) -> Result<Vec<String>, ServiceError> {
        let user = match scope {
            Scope::Conversation(id) => {
                // It must exist even when a `conversation` filter names another one.
                let (store, owned) = (self.store.clone(), id.clone());
                if blocking(move || store.info(&owned)).await?.is_none() {
                    return Err(StoreError::UnknownConversation(id.clone()).into());
                }
                let other = only.is_some_and(|only| only != id);
                return Ok(if other { Vec::new() } else { vec![id.clone()] });
            }
            Scope::User(user) => user,
        };
        let (store, owned) = (self.store.clone(), user.clone());
        let listed = blocking(move || store.list_of(Some(&owned))).await?;
        if listed.is_empty() {
            return Err(ServiceError::UnknownUser(user.clone()));
        }
        let ids: Vec<String> = listed.into_iter().map(|info| info.id).collect();
        match only {
            // Not one of the user's: unknown, whether or not another user has it.
            Some(only) if !ids.iter().any(|id| id == only) => {
                Err(StoreError::UnknownConversation(only.to_string()).into())
            }
            Some(only) => Ok(vec![only.to_string()]),
            None => Ok(ids),
        }
    }

    /// Errors unless the scope exists (and a conversation is embedded with this service's
    /// embedder).
    pub async fn check_scope(&self, scope: &Scope) -> Result<(), ServiceError> {
        match scope {
            Scope::Conversation(id) => self.check_conversation(id).await,
            Scope::User(_) => self.scope_members(scope, None).await.map(drop),
        }
    }

    /// The view `ask` answers over: the conversation's cached entry, or a view made for a
    /// user or a time.
    pub(super) async fn view(
        &self,
        scope: &Scope,
        as_of: Option<&str>,
    ) -> Result<View, ServiceError> {
        if let (Scope::Conversation(id), None) = (scope, as_of) {
            return Ok(View { entry: self.cached(id).await?, origins: Vec::new() });
        }
        let members = self.scope_members(scope, None).await?;
        let entries =
            futures::future::try_join_all(members.iter().map(|id| self.cached(id))).await?;
        let (stored, origins) = match scope {
            Scope::Conversation(_) => (entries[0].stored.clone(), Vec::new()),
            Scope::User(_) => StoredConversation::merge(
                &scope.label(),
                entries.iter().map(|entry| entry.stored.clone()).collect(),
            ),
        };
        let stored = match as_of {
            Some(at) => stored.as_of(at),
            None => stored,
        };
        let updated = tokio::task::spawn_blocking(move || Cached::update(stored, None))
            .await
            .map_err(|error| anyhow::anyhow!("index task failed: {error}"))?;
        let (mut entry, _) =
            updated.map_err(|error| anyhow::anyhow!("indexing the stored vectors: {error}"))?;
        // Every word of the view is a word of a member, whose vector the member's entry stored.
        for id in &members {
            let missing = entry.words_without_vectors();
            if missing.is_empty() {
                break;
            }
            let (store, owned) = (self.store.clone(), id.clone());
            entry.set_word_vectors(blocking(move || store.word_vectors(&owned, &missing)).await?);
        }
        if !entry.words_without_vectors().is_empty() {
            return Err(anyhow::anyhow!("the view's memory words lack stored vectors").into());
        }
        Ok(View { entry: Arc::new(entry), origins })
    }
}

#[cfg(test)]
mod tests {
    use super::time_bound;

    #[test]
    fn a_date_bounds_from_its_first_to_its_last_second() {
        assert_eq!(time_bound("2024-05-03", false).as_deref(), Some("2024-05-03T00:00:00Z"));
        assert_eq!(time_bound("2024-05-03", true).as_deref(), Some("2024-05-03T23:59:59Z"));
        assert_eq!(
            time_bound("2024-05-03T12:00:00+02:00", true).as_deref(),
            Some("2024-05-03T10:00:00Z")
        );
        assert_eq!(time_bound("soon", false), None);
    }
}
