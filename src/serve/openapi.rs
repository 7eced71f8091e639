//! The OpenAPI 3.1 document, built from the operations' table (`service::ops::OPERATIONS`):
//! each route's path and query parameters, body and replies by their types (whose schemas the
//! operations hold their bodies to), and errors; [`Base`] (utoipa's derive) adds the title,
//! the security scheme and the error body.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use serde_json::{Map, Value, json};
use utoipa::OpenApi as _;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{OpenApi, RefOr, Schema};

use super::AppState;
use crate::service::ops::http::{AUTH_ERRORS, Typed, typed};
use crate::service::ops::{ErrorBody, OPERATIONS, Route};

/// The parts of the document no route carries: title, security, the error body.
#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "mragent memory API",
        description = "Add messages to a persistent conversation memory, search it, ask it. \
            Every request needs `Authorization: Bearer <token>` when the server has tokens or \
            keys: an operator token (`MRAGENT_SERVE_TOKEN`) or a key from `mragent keys create`, \
            which may be bound to one user and limited to reading. Every error, whatever the route or the cause (a bad field, path or \
            body, an unknown route, a wrong method, a body over the limit, a missing token), \
            is the JSON body `ErrorBody`."
    ),
    components(schemas(ErrorBody)),
    modifiers(&Bearer),
    security(("bearer" = []))
)]
pub(super) struct Base;

struct Bearer;

impl utoipa::Modify for Bearer {
    fn modify(&self, document: &mut OpenApi) {
        let components = document.components.get_or_insert_with(Default::default);
        let scheme = HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build();
        components.add_security_scheme("bearer", SecurityScheme::Http(scheme));
    }
}

/// `GET /openapi.json`: this document.
pub(super) async fn document(State(state): State<Arc<AppState>>) -> Json<Value> {
    Json(state.document.clone())
}

/// The document: [`Base`], then every route of the operations' table, grouped by collection
/// (the path's segment after `/v1/`) in the order the table first names each, then by the
/// table's order; the schemas of their bodies and replies, by name.
pub(super) fn build() -> Result<Value, serde_json::Error> {
    let mut document = serde_json::to_value(Base::openapi())?;
    let mut schemas = Vec::new();
    (typed::<ErrorBody>().collect)(&mut schemas);
    let mut paths = Map::new();
    paths.insert("/openapi.json".into(), json!({"get": own_route()}));
    for route in in_document_order() {
        let entry = paths.entry(route.path).or_insert_with(|| json!({}));
        entry[route.method] = operation(route, &mut schemas)?;
    }
    document["paths"] = Value::Object(paths);
    let mut named = BTreeMap::new();
    for (name, schema) in schemas {
        if let std::collections::btree_map::Entry::Vacant(slot) = named.entry(name) {
            slot.insert(serde_json::to_value(schema)?);
        }
    }
    document["components"]["schemas"] = Value::Object(named.into_iter().collect());
    Ok(document)
}

/// The table's routes, grouped by collection (stable within each).
fn in_document_order() -> Vec<&'static Route> {
    let collection = |route: &Route| route.path.split('/').nth(2).unwrap_or_default();
    let routes: Vec<&'static Route> =
        OPERATIONS.iter().flat_map(|operation| operation.routes).collect();
    let mut collections: Vec<&str> = Vec::new();
    for route in &routes {
        if !collections.contains(&collection(route)) {
            collections.push(collection(route));
        }
    }
    let mut ordered = routes;
    ordered.sort_by_key(|route| collections.iter().position(|name| *name == collection(route)));
    ordered
}

/// The document's own route.
fn own_route() -> Value {
    let mut responses = Map::new();
    let content = json!({"application/json": {"schema": {"type": "object"}}});
    let answer = json!({"description": "the OpenAPI 3.1 document", "content": content});
    responses.insert("200".into(), answer);
    responses.extend(error_responses(AUTH_ERRORS));
    json!({
        "summary": "`GET /openapi.json`: this document.",
        "operationId": "document",
        "responses": responses,
    })
}

/// One route as the document describes it; the schemas it names are added to `schemas`.
fn operation(
    route: &Route,
    schemas: &mut Vec<(String, RefOr<Schema>)>,
) -> Result<Value, serde_json::Error> {
    let mut operation = Map::new();
    operation.insert("operationId".into(), route.id.into());
    let parameters: Vec<_> = route.path_parameters().into_iter().chain((route.query)()).collect();
    if !parameters.is_empty() {
        operation.insert("parameters".into(), serde_json::to_value(parameters)?);
    }
    if let Some(body) = route.body {
        (body.collect)(schemas);
        let content = json!({"application/json": {"schema": reference(&body)}});
        operation.insert("requestBody".into(), json!({"content": content, "required": true}));
    }
    let mut responses = Map::new();
    for reply in route.replies {
        (reply.body.collect)(schemas);
        let mut content = json!({"application/json": {"schema": reference(&reply.body)}});
        if reply.events {
            content["text/event-stream"] = json!({"itemSchema": event_item()});
        }
        let answer = json!({"description": reply.description, "content": content});
        responses.insert(reply.status.to_string(), answer);
    }
    responses.extend(error_responses(route.errors));
    operation.insert("responses".into(), Value::Object(responses));
    Ok(Value::Object(operation))
}

/// A `$ref` to `typed`'s schema.
fn reference(typed: &Typed) -> Value {
    json!({"$ref": format!("#/components/schemas/{}", (typed.name)())})
}

/// One server-sent event of a streamed ask, as clients read it: OpenAPI 3.2's `itemSchema`
/// (which utoipa cannot write) holds an object with the `event` name and its `data` (a JSON
/// text).
fn event_item() -> Value {
    json!({
        "type": "object",
        "required": ["event", "data"],
        "properties": {
            "event": {"enum": ["started", "round", "answer", "error"]},
            "data": {"type": "string", "contentMediaType": "application/json"},
        },
    })
}

/// The error responses of `codes`, every one the JSON `ErrorBody`.
fn error_responses(codes: &[u16]) -> Map<String, Value> {
    let schema = reference(&typed::<ErrorBody>());
    codes
        .iter()
        .map(|status| {
            let description = match status {
                400 => "a field, the id or the body is unusable; `field` names it",
                401 => "missing, wrong, revoked or expired bearer token or key",
                403 => "the key may not do this: a read key changing memory, an add naming another user than the key's, a user-wide query with an agent-bound key, metrics without an admin key",
                429 => "over the key's rate limit (`rate_limited`); retry after the `Retry-After` seconds",
                404 => "no such conversation, user, message, fact, job or edit (one the key does not reach is answered exactly as a missing one)",
                409 => "an ask with no built session to answer from (`not_built`, its message names why: nothing said before `as_of`, a job still building, or failed sessions; a search answers 200 with `pending_sessions` instead), another embedder or another user, or the edit cannot be undone",
                413 => "the body is over the size limit",
                503 => "the store's database cannot be reached now (`store_unavailable`); retry after the `Retry-After` seconds",
                _ => "the service failed",
            };
            let content = json!({"application/json": {"schema": schema}});
            (status.to_string(), json!({"description": description, "content": content}))
        })
        .collect()
}

/// A request schema that does not compile, or a door that disagrees with the operations' table
/// (a bug in `service::ops`).
#[derive(Debug, thiserror::Error)]
#[error("{name} does not hold: {message}")]
pub struct SchemaError {
    name: String,
    message: String,
}

impl SchemaError {
    pub(super) fn document(error: serde_json::Error) -> Self {
        Self { name: "the OpenAPI document".into(), message: error.to_string() }
    }

    pub(super) fn request(message: String) -> Self {
        Self { name: "a request body".into(), message }
    }

    /// The operations' table disagrees with a door (a bug in `service::ops`).
    pub(super) fn table(message: String) -> Self {
        Self { name: "the operations' table".into(), message }
    }
}
