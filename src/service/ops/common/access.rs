//! Who a request is and what it may reach ([`Access`]): put on every request by `authorize`,
//! checked by every operation before the service is called.
//!
//! - The environment's tokens (`MRAGENT_SERVE_TOKEN(S)`) and a server without tokens are
//!   admin: everything, every user's.
//! - A store key (`mragent keys create`) has a scope (`read`, `write`, `admin`) and may be bound
//!   to a user and an agent. A bound key reaches only the conversations of its user (and
//!   agent): anything else (a conversation, a fact, a job, an edit, a user) is answered exactly
//!   as a missing one (the same 404, code and message), listings and the edit log leave it out,
//!   and an add naming another user is refused. Read keys cannot change anything (403 whatever
//!   the id, so the refusal tells nothing about it).
//!
//! Every check runs after the request's own input is read and checked, where the service's own
//! existence check would run, so a refusal and a missing id are answered at the same step with
//! the same body.

use crate::service::ops::{ApiError, Service};
use crate::service::{Scope, ServiceError};
use crate::store::{AddScope, ApiKey, ConversationInfo, KeyScope, StoreError};

/// What a request may reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Access {
    /// The token's or key's name (the audit log's actor).
    pub(crate) name: String,
    /// The store key's id, for store keys.
    pub(crate) key: Option<String>,
    /// The only user reached, when bound.
    pub(crate) user: Option<String>,
    /// The only agent reached, when bound.
    pub(crate) agent: Option<String>,
    /// What it may do.
    pub(crate) scope: KeyScope,
}

impl Access {
    /// Everything, as `name` (the environment's tokens, a server without tokens, stdio MCP).
    pub(crate) fn admin(name: &str) -> Self {
        Self { name: name.to_string(), key: None, user: None, agent: None, scope: KeyScope::Admin }
    }

    /// What a store key may reach.
    pub(crate) fn of_key(key: ApiKey) -> Self {
        Self {
            name: key.name,
            key: Some(key.id),
            user: key.user,
            agent: key.agent,
            scope: key.scope,
        }
    }

    /// The audit log's actor: the name, with `#<key id>` for store keys.
    pub(crate) fn actor(&self) -> String {
        match &self.key {
            Some(id) => format!("{}#{id}", self.name),
            None => self.name.clone(),
        }
    }

    /// Whether it reaches only some users' conversations.
    pub(crate) fn bound(&self) -> bool {
        self.user.is_some() || self.agent.is_some()
    }

    /// Whether it reaches `info`'s conversation.
    pub(crate) fn sees(&self, info: &ConversationInfo) -> bool {
        let same = |bound: &Option<String>, owner: &Option<String>| {
            bound.as_ref().is_none_or(|bound| owner.as_ref() == Some(bound))
        };
        same(&self.user, &info.user) && same(&self.agent, &info.agent)
    }

    /// 403 unless it may change memory (add, forget, correct, undo).
    pub(crate) fn write(&self) -> Result<(), ApiError> {
        if self.scope == KeyScope::Read {
            return Err(forbidden(format!(
                "key {:?} may only read (scope read); adding, forgetting, correcting and \
                 undoing need a write key",
                self.name
            )));
        }
        Ok(())
    }

    /// 403 unless it is an admin key (metrics: every user's counts).
    pub(crate) fn admin_only(&self) -> Result<(), ApiError> {
        if self.scope != KeyScope::Admin {
            return Err(forbidden(format!("key {:?} is not an admin key", self.name)));
        }
        Ok(())
    }

    /// The conversation `id` as it may see it: a conversation it does not reach is
    /// `unknown_conversation`, exactly as a missing one.
    pub(crate) async fn conversation(&self, service: &Service, id: &str) -> Result<(), ApiError> {
        if !self.bound() || self.info(service, id).await?.is_some_and(|info| self.sees(&info)) {
            return Ok(());
        }
        Err(ServiceError::Store(StoreError::UnknownConversation(id.to_string())).into())
    }

    /// A scope of a query: its conversation, or its user (only its own user; an agent-bound key
    /// asks per conversation, since a user's view mixes the user's agents).
    pub(crate) async fn scope(&self, service: &Service, scope: &Scope) -> Result<(), ApiError> {
        match scope {
            Scope::Conversation(id) => self.conversation(service, id).await,
            Scope::User(user) => self.user(user),
        }
    }

    /// The user `user`: another user than its own is `unknown_user`, exactly as a user
    /// without conversations.
    pub(crate) fn user(&self, user: &str) -> Result<(), ApiError> {
        if let Some(agent) = &self.agent {
            return Err(forbidden(format!(
                "key {:?} reaches only agent {agent:?}'s conversations: query them one by one",
                self.name
            )));
        }
        match &self.user {
            Some(own) if own != user => Err(ServiceError::UnknownUser(user.to_string()).into()),
            _ => Ok(()),
        }
    }

    /// An add to conversation `id` with `scope`: needs write; a bound key's user and agent are
    /// the add's (naming others is refused), and a conversation it does not reach is
    /// `unknown_conversation` (a new one is created for its user).
    pub(crate) async fn add(
        &self,
        service: &Service,
        id: &str,
        scope: &mut AddScope,
    ) -> Result<(), ApiError> {
        self.bind(scope)?;
        if !self.bound() {
            return Ok(());
        }
        match self.info(service, id).await? {
            Some(info) if !self.sees(&info) => {
                Err(ServiceError::Store(StoreError::UnknownConversation(id.to_string())).into())
            }
            _ => Ok(()),
        }
    }

    /// Puts a bound key's user and agent on an add; refuses an add that names others.
    pub(crate) fn bind(&self, scope: &mut AddScope) -> Result<(), ApiError> {
        self.write()?;
        for (field, bound, given) in
            [("user", &self.user, &mut scope.user), ("agent", &self.agent, &mut scope.agent)]
        {
            let Some(bound) = bound else { continue };
            match given {
                Some(named) if named != bound => {
                    let message = format!(
                        "key {:?} adds only to {field} {bound:?}'s conversations",
                        self.name
                    );
                    return Err(forbidden(message).field(field));
                }
                _ => *given = Some(bound.clone()),
            }
        }
        Ok(())
    }

    /// Fact `id`, when it reaches its conversation; else `unknown_fact`, as a missing one.
    pub(crate) async fn fact(&self, service: &Service, id: i64) -> Result<(), ApiError> {
        let store = service.store().clone();
        self.owned(
            service,
            move || store.fact(id).map(|fact| fact.conversation),
            || StoreError::UnknownFact(id),
        )
        .await
    }

    /// Edit `id`, when it reaches its conversation; else `unknown_edit`, as a missing one.
    pub(crate) async fn edit(&self, service: &Service, id: i64) -> Result<(), ApiError> {
        let store = service.store().clone();
        self.owned(
            service,
            move || store.edit(id).map(|edit| edit.conversation),
            || StoreError::UnknownEdit(id),
        )
        .await
    }

    /// Job `id`, when it reaches its conversation; else `unknown_job`, as a missing one.
    pub(crate) async fn job(&self, service: &Service, id: i64) -> Result<(), ApiError> {
        let store = service.store().clone();
        self.owned(
            service,
            move || store.job(id).map(|job| job.conversation),
            || StoreError::UnknownJob(id),
        )
        .await
    }

    /// Whether it reaches the conversation `owner` names; `missing` otherwise.
    async fn owned(
        &self,
        service: &Service,
        owner: impl FnOnce() -> Result<String, StoreError> + Send + 'static,
        missing: impl FnOnce() -> StoreError,
    ) -> Result<(), ApiError> {
        if !self.bound() {
            return Ok(());
        }
        let conversation = match run(owner).await {
            Ok(conversation) => conversation,
            Err(ServiceError::Store(
                StoreError::UnknownFact(_) | StoreError::UnknownEdit(_) | StoreError::UnknownJob(_),
            )) => return Err(ServiceError::Store(missing()).into()),
            Err(other) => return Err(other.into()),
        };
        match self.info(service, &conversation).await? {
            Some(info) if self.sees(&info) => Ok(()),
            _ => Err(ServiceError::Store(missing()).into()),
        }
    }

    async fn info(
        &self,
        service: &Service,
        id: &str,
    ) -> Result<Option<ConversationInfo>, ApiError> {
        let (store, id) = (service.store().clone(), id.to_string());
        Ok(run(move || store.info(&id)).await?)
    }

    /// The conversations of `infos` it reaches.
    pub(crate) fn filter(&self, infos: Vec<ConversationInfo>) -> Vec<ConversationInfo> {
        infos.into_iter().filter(|info| self.sees(info)).collect()
    }
}

async fn run<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> Result<T, ServiceError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|error| ServiceError::Other(anyhow::anyhow!("a store task failed: {error}")))?
        .map_err(ServiceError::Store)
}

/// 403 `forbidden`, naming `authorization`.
fn forbidden(message: String) -> ApiError {
    ApiError::forbidden(message)
}
