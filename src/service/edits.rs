//! Facts as memory holds them (`facts`), single edits (`correct_fact`; forgetting one message
//! is in `add`), their audit log (`history`) and `undo`. Each edit takes the lock of the
//! conversation it changes and is one store transaction with its log row; an edit that changes
//! messages then rebuilds only the session it touched.

use serde::Serialize;

use super::add::AddReport;
use super::{MemoryService, ServiceError, blocking};
use crate::llm::{ChatModel, Embedder};
use crate::names::MAX_MESSAGE_CHARS;
use crate::store::{Edit, FORGET_MESSAGE, StoredFact};

/// Which facts to list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FactQuery {
    /// A user's conversations…
    pub user: Option<String>,
    /// …or one conversation (or one of the user's).
    pub conversation: Option<String>,
    /// Only this person (letter case aside).
    pub person: Option<String>,
    /// Only this aspect (letter case aside).
    pub aspect: Option<String>,
    /// Earlier values too, not only the current facts.
    pub history: bool,
    /// As known at this time (RFC 3339 UTC; `None`: now).
    pub as_of: Option<String>,
}

/// A listed fact: the row, and whether it is current at the time asked about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct ListedFact {
    /// The fact.
    #[serde(flatten)]
    pub fact: super::FactEntry,
    /// Current at the time asked about (else an earlier value, replaced by then).
    pub current: bool,
}

/// What an undo did.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct UndoReport {
    /// The undo's row in the audit log.
    pub undo: super::EditEntry,
    /// The rebuild of the session a restored message went back into.
    pub rebuilt: Option<AddReport>,
}

impl<M, E> MemoryService<M, E>
where
    E: Embedder + Clone + 'static,
{
    /// The facts `query` asks for: current first within each person and aspect, then earlier
    /// values (with `history`), latest first.
    pub async fn facts(&self, query: &FactQuery) -> Result<Vec<ListedFact>, ServiceError> {
        if query.user.is_none() && query.conversation.is_none() {
            return Err(ServiceError::invalid("user", "give a user or a conversation"));
        }
        let (store, user, conversation) =
            (self.store.clone(), query.user.clone(), query.conversation.clone());
        let rows = blocking(move || store.facts(user.as_deref(), conversation.as_deref())).await?;
        Ok(select_facts(rows, query))
    }

    /// The audit log of a user's conversations, of one conversation, or of all.
    pub async fn history(
        &self,
        user: Option<&str>,
        conversation: Option<&str>,
    ) -> Result<Vec<Edit>, ServiceError> {
        let (store, user, conversation) =
            (self.store.clone(), user.map(str::to_string), conversation.map(str::to_string));
        blocking(move || store.history(user.as_deref(), conversation.as_deref())).await
    }

    /// Sets fact `id`'s value, logged as `actor`'s edit.
    pub async fn correct_fact(
        &self,
        id: i64,
        value: &str,
        actor: &str,
    ) -> Result<Edit, ServiceError> {
        let value = value.trim().to_string();
        if value.is_empty() {
            return Err(ServiceError::invalid("value", "empty value"));
        }
        if value.chars().count() > MAX_MESSAGE_CHARS {
            return Err(ServiceError::invalid(
                "value",
                format!("over {MAX_MESSAGE_CHARS} characters"),
            ));
        }
        let (store, actor) = (self.store.clone(), actor.to_string());
        blocking(move || {
            let conversation = store.fact(id)?.conversation;
            let _lock = store.lock_conversation(&conversation)?;
            store.correct_fact(id, &value, &actor)
        })
        .await
    }
}

impl<M, E> MemoryService<M, E>
where
    M: ChatModel,
    E: Embedder + Clone + 'static,
{
    /// Reverts edit `id` as `actor`; a restored message's session is rebuilt at once.
    pub async fn undo(&self, id: i64, actor: &str) -> Result<UndoReport, ServiceError> {
        let (store, actor) = (self.store.clone(), actor.to_string());
        let (lock, undo, kind) = blocking(move || {
            let edit = store.edit(id)?;
            let lock = store.lock_conversation(&edit.conversation)?;
            let undo = store.undo(id, &actor)?;
            Ok((lock, undo, edit.kind))
        })
        .await?;
        let rebuilt = if kind == FORGET_MESSAGE {
            let mut report = AddReport::before_build(&undo.conversation, false, 0, 0);
            self.build_pending(&mut report, None).await?;
            Some(report)
        } else {
            None
        };
        drop(lock);
        Ok(UndoReport { undo: undo.into(), rebuilt })
    }
}

/// The facts of `rows` that `query` asks for: current first within each person and aspect,
/// then earlier values (with `history`), latest first.
fn select_facts(rows: Vec<StoredFact>, query: &FactQuery) -> Vec<ListedFact> {
    let same = |given: &Option<String>, value: &str| {
        given.as_ref().is_none_or(|given| given.trim().eq_ignore_ascii_case(value.trim()))
    };
    let at = query.as_of.as_deref();
    let mut listed: Vec<ListedFact> = rows
        .into_iter()
        .filter(|fact| same(&query.person, &fact.person) && same(&query.aspect, &fact.aspect))
        .filter(|fact| match (at, fact.valid_from.as_deref()) {
            (Some(at), Some(from)) => from <= at,
            _ => true,
        })
        .map(|fact| ListedFact { current: fact.current_at(at), fact: fact.into() })
        .filter(|listed| query.history || listed.current)
        .collect();
    listed.sort_by(|a, b| {
        let key = |listed: &ListedFact| {
            (
                listed.fact.person.to_lowercase(),
                listed.fact.aspect.to_lowercase(),
                !listed.current,
                std::cmp::Reverse(listed.fact.valid_from.clone()),
                listed.fact.id,
            )
        };
        key(a).cmp(&key(b))
    });
    listed
}
