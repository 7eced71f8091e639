//! `add_batch`: adds to many conversations in one request. `POST /v1/conversations`
//! `{"conversations": [{"conversation", "messages", …}], "wait"}`.
//!
//! Every entry is checked before anything is stored; then the adds run concurrently (their
//! model calls share the client's adaptive limit; entries naming one conversation wait for
//! each other on its lock), through the one `wait` branch of [`super::add::store`] with one
//! bound for the whole request. Each entry answers on its own: its report or job, or its error
//! (say, a conversation of another user).

use std::sync::{Arc, LazyLock};

use serde::Serialize;
use serde_json::Value;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, Schema};
use utoipa::{PartialSchema, ToSchema};

use super::add::{AddReply, AddRequest, Wait};
use super::http::{Answer, BODY_ERRORS, HttpReply, HttpRequest, Route, reply, route, typed};
use super::schema::{Validator, name_schema, wait_schema};
use super::{Access, ApiError, Body, ErrorDetail, Operation, Service, fields};
use crate::names::NameKind;
use crate::service::{AddReport, Queued};

pub(crate) const OPERATION: Operation = Operation {
    name: "add_batch",
    routes: &[Route {
        body: Some(typed::<BatchRequest>()),
        ..route(
            "post",
            "/v1/conversations",
            "batch_add",
            &[
                reply(
                    200,
                    "each conversation's add report or error, in order",
                    typed::<BatchReply>(),
                ),
                reply(
                    202,
                    "with `wait: false`, or when some entry's build outlasted the bounded wait \
                     (`MRAGENT_ADD_WAIT`): each conversation's report, job or error, in order",
                    typed::<BatchReply>(),
                ),
            ],
            BODY_ERRORS,
            http,
        )
    }],
    tool: None,
};

/// Most conversations in one batch add.
pub(crate) const MAX_BATCH: usize = 100;

/// The body of a batch add.
#[derive(Debug, Clone)]
pub(crate) struct BatchRequest {
    /// Each conversation with its add.
    pub(crate) adds: Vec<(String, AddRequest)>,
    /// Whether to answer only once every session is built.
    pub(crate) wait: bool,
}

impl PartialSchema for BatchRequest {
    fn schema() -> RefOr<Schema> {
        let entry = AddRequest::object()
            .property("conversation", name_schema("conversation id (created on first add)"))
            .required("conversation");
        let adds = ArrayBuilder::new()
            .items(entry)
            .min_items(Some(1))
            .max_items(Some(MAX_BATCH))
            .description(Some(
                "the adds (entries naming one conversation run one after the other)",
            ));
        ObjectBuilder::new()
            .property("conversations", adds)
            .property("wait", wait_schema())
            .required("conversations")
            .into()
    }
}

impl ToSchema for BatchRequest {}

/// The compiled body schema.
pub(crate) static VALIDATOR: LazyLock<Validator> = LazyLock::new(Validator::of::<BatchRequest>);

impl BatchRequest {
    /// The body's fields, entry by entry (errors name `conversations[i].field`), then the whole
    /// body against the published schema.
    pub(crate) fn read(map: Body) -> Result<Self, ApiError> {
        let entries = match map.get("conversations") {
            Some(Value::Array(entries)) if !entries.is_empty() && entries.len() <= MAX_BATCH => {
                entries
            }
            Some(Value::Array(_)) => {
                let problem = format!("expected 1 to {MAX_BATCH} conversations");
                return Err(ApiError::bad("conversations", problem));
            }
            Some(_) => return Err(ApiError::bad("conversations", "expected an array")),
            None => return Err(ApiError::bad("conversations", "missing")),
        };
        let mut adds = Vec::with_capacity(entries.len());
        for (index, entry) in entries.iter().enumerate() {
            let within = |error: ApiError| error.within(&format!("conversations[{index}]"));
            let Value::Object(entry) = entry else {
                return Err(within(ApiError::bad("body", "expected an object")));
            };
            let id = fields::name(entry, "conversation", NameKind::Conversation)
                .and_then(|id| id.ok_or_else(|| ApiError::bad("conversation", "missing")))
                .map_err(within)?;
            adds.push((id, AddRequest::parse(entry.clone()).map_err(within)?));
        }
        let wait = fields::flag(&map, "wait")?.unwrap_or(true);
        VALIDATOR.check(&Value::Object(map))?;
        Ok(Self { adds, wait })
    }
}

/// One entry's outcome.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub(crate) struct BatchResult {
    /// The conversation.
    pub(crate) conversation: String,
    /// What the add stored and built (`wait: true`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) added: Option<AddReport>,
    /// What the add stored, and its job (`wait: false`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) queued: Option<Queued>,
    /// Why this entry failed (the others are unaffected).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<ErrorDetail>,
}

/// `POST /v1/conversations`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub(crate) struct BatchReply {
    /// One result per entry, in the request's order.
    pub(crate) results: Vec<BatchResult>,
}

impl BatchReply {
    /// Whether some build goes on in the background (HTTP 202).
    pub(crate) fn building(&self) -> bool {
        self.results.iter().any(|result| result.queued.is_some())
    }
}

/// Runs every entry of `request` for `access`.
pub(crate) async fn run(
    service: &Arc<Service>,
    access: &Access,
    mut request: BatchRequest,
) -> Result<BatchReply, ApiError> {
    access.write()?;
    // An entry naming another user or agent than the key's refuses the whole batch, before
    // anything is stored.
    for (index, (_, add)) in request.adds.iter_mut().enumerate() {
        access
            .bind(&mut add.scope)
            .map_err(|error| error.within(&format!("conversations[{index}]")))?;
    }
    // One bound for the whole request: an entry still building then answers with its job.
    let deadline = tokio::time::Instant::now() + service.settings().add_wait;
    let wait = request.wait;
    let results = futures::future::join_all(request.adds.into_iter().map(|(id, add)| async move {
        let mut result =
            BatchResult { conversation: id.clone(), added: None, queued: None, error: None };
        let AddRequest { messages, mut scope, wait: _ } = add;
        // A conversation the key does not reach fails this entry as a missing one would.
        if let Err(refused) = access.add(service, &id, &mut scope).await {
            result.error = Some(refused.detail);
            return result;
        }
        let wait = match wait {
            true => Wait::AtMost(deadline.saturating_duration_since(tokio::time::Instant::now())),
            false => Wait::No,
        };
        match super::add::store(service, &id, scope, messages, wait).await {
            Ok(AddReply::Done(report)) => result.added = Some(*report),
            Ok(AddReply::Building(queued)) => result.queued = Some(*queued),
            Err(failure) => result.error = Some(ApiError::from(failure).detail),
        }
        result
    }))
    .await;
    Ok(BatchReply { results })
}

fn http<'a>(service: &'a Arc<Service>, access: &'a Access, request: HttpRequest) -> Answer<'a> {
    Box::pin(async move {
        access.write()?;
        let body = BatchRequest::read(request.body?)?;
        let waited = body.wait;
        let reply = run(service, access, body).await?;
        HttpReply::with(!waited || reply.building(), reply)
    })
}
