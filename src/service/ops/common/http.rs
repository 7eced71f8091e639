//! What an operation's HTTP route is, for the one HTTP door (`serve`): its method, path and
//! `operationId`, what the OpenAPI document says of it (its query parameters, its body and
//! replies by their types, its errors), and the call that runs it ([`HttpCall`]: the request's
//! checked path ids, query and body in, the reply out).
//!
//! A route's path parameters follow from its path: each `{name}` has one rule here (the
//! document's parameter and the check), so `{id}` means a conversation id wherever it appears.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;
use utoipa::openapi::RefOr;
use utoipa::openapi::path::{Parameter, ParameterIn};
use utoipa::openapi::schema::Schema;

use super::schema::{id_number, name_parameter, name_schema, path_parameter};
use crate::names::{NameKind, check_name};
use crate::service::Scope;
use crate::service::ops::{Access, ApiError, Body, Service, to_json};

/// One HTTP route of an operation.
#[derive(Clone, Copy)]
pub(crate) struct Route {
    /// `get`, `post` or `delete`.
    pub(crate) method: &'static str,
    /// The path, with its `{parameters}`.
    pub(crate) path: &'static str,
    /// The OpenAPI `operationId`.
    pub(crate) id: &'static str,
    /// Its query parameters, as the document declares them (none: the query is not read).
    pub(crate) query: fn() -> Vec<Parameter>,
    /// Its body's type, if it takes a JSON body.
    pub(crate) body: Option<Typed>,
    /// Its answers but the errors.
    pub(crate) replies: &'static [Reply],
    /// The statuses of the errors it may answer.
    pub(crate) errors: &'static [u16],
    /// Runs it.
    pub(crate) call: HttpCall,
}

impl std::fmt::Debug for Route {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "{} {} ({})", self.method, self.path, self.id)
    }
}

impl Route {
    /// The names of its query parameters.
    pub(crate) fn query_names(&self) -> Vec<String> {
        (self.query)()
            .into_iter()
            .filter(|parameter| parameter.parameter_in == ParameterIn::Query)
            .map(|parameter| parameter.name)
            .collect()
    }

    /// Its path parameters, as the document declares them, in the path's order.
    pub(crate) fn path_parameters(&self) -> Vec<Parameter> {
        placeholders(self.path).filter_map(PathId::of).map(PathId::parameter).collect()
    }
}

/// A route of `method` on `path`, documented as `id`, that answers `replies` and `errors` and
/// takes no query and no body (a route that does says so with struct update syntax).
pub(crate) const fn route(
    method: &'static str,
    path: &'static str,
    id: &'static str,
    replies: &'static [Reply],
    errors: &'static [u16],
    call: HttpCall,
) -> Route {
    Route { method, path, id, query: Vec::new, body: None, replies, errors, call }
}

/// One successful answer of a route.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) description: &'static str,
    /// The JSON body's type.
    pub(crate) body: Typed,
    /// Whether it may come as server-sent events instead (`stream: true`).
    pub(crate) events: bool,
}

/// A JSON reply with `status`.
pub(crate) const fn reply(status: u16, description: &'static str, body: Typed) -> Reply {
    Reply { status, description, body, events: false }
}

/// A type the document names: its schema and the schemas it refers to.
#[derive(Clone, Copy)]
pub(crate) struct Typed {
    /// Its name in the document's components.
    pub(crate) name: fn() -> Cow<'static, str>,
    /// Adds its schema and every schema it refers to.
    pub(crate) collect: fn(&mut Vec<(String, RefOr<Schema>)>),
}

impl std::fmt::Debug for Typed {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(&(self.name)())
    }
}

/// `T` as the document names it.
pub(crate) const fn typed<T: ToSchema>() -> Typed {
    Typed { name: T::name, collect: collect::<T> }
}

fn collect<T: ToSchema>(schemas: &mut Vec<(String, RefOr<Schema>)>) {
    schemas.push((T::name().into_owned(), T::schema()));
    T::schemas(schemas);
}

/// A route's run: the request in, the reply out.
pub(crate) type HttpCall = for<'a> fn(&'a Arc<Service>, &'a Access, HttpRequest) -> Answer<'a>;

/// What a route's run gives: its reply, in time.
pub(crate) type Answer<'a> = BoxFuture<'a, Result<HttpReply, ApiError>>;

/// A request as an operation reads it.
#[derive(Debug)]
pub(crate) struct HttpRequest {
    /// The path's ids, each checked against its rule.
    pub(crate) path: PathIds,
    /// The query's parameters (strings), every one a parameter the route declares.
    pub(crate) query: Body,
    /// The body as a JSON object, or why it is not one: answered when the operation reads it,
    /// so that it may check the caller first.
    pub(crate) body: Result<Body, ApiError>,
}

/// What a route answers.
pub(crate) enum HttpReply {
    /// A JSON body with a status (200, or 202 while a build goes on).
    Json { status: u16, body: Value },
    /// Server-sent events, each a name and its JSON data.
    Events(BoxStream<'static, (&'static str, Value)>),
}

impl std::fmt::Debug for HttpReply {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Json { status, .. } => write!(formatter, "Json({status})"),
            Self::Events(_) => formatter.write_str("Events"),
        }
    }
}

impl HttpReply {
    /// `body` with 200.
    pub(crate) fn ok(body: impl Serialize) -> Result<Self, ApiError> {
        Self::with(false, body)
    }

    /// `body` with 202 while `building`, else 200.
    pub(crate) fn with(building: bool, body: impl Serialize) -> Result<Self, ApiError> {
        Ok(Self::Json { status: if building { 202 } else { 200 }, body: to_json(body)? })
    }
}

/// The ids of a request's path, by the placeholder that held them.
#[derive(Debug, Default)]
pub(crate) struct PathIds(BTreeMap<&'static str, String>);

impl PathIds {
    /// The ids of `path` (the request's, percent-encoded) by `template`'s placeholders; each
    /// checked against its rule, the first that breaks it answered as a 400 naming it.
    pub(crate) fn read(template: &str, path: &str) -> Result<Self, ApiError> {
        let mut ids = BTreeMap::new();
        for (pattern, given) in template.split('/').zip(path.split('/')) {
            let Some(id) = pattern.strip_prefix('{').and_then(|rest| rest.strip_suffix('}')) else {
                continue;
            };
            let Some(kind) = PathId::of(id) else { continue };
            let decoded = percent_encoding::percent_decode_str(given)
                .decode_utf8()
                .map_err(|_| ApiError::bad(kind.field(), "not UTF-8"))?;
            kind.check(&decoded)?;
            ids.insert(kind.placeholder(), decoded.into_owned());
        }
        Ok(Self(ids))
    }

    fn get(&self, placeholder: &str) -> Result<&str, ApiError> {
        self.0.get(placeholder).map(String::as_str).ok_or_else(|| {
            ApiError::from(crate::service::ServiceError::Other(anyhow::anyhow!(
                "the route has no {{{placeholder}}}"
            )))
        })
    }

    /// `{id}`: a conversation.
    pub(crate) fn conversation(&self) -> Result<String, ApiError> {
        self.get("id").map(str::to_string)
    }

    /// `{message}`.
    pub(crate) fn message(&self) -> Result<String, ApiError> {
        self.get("message").map(str::to_string)
    }

    /// `{user}` when the path has one, else `{id}`: what a query over a user's conversations
    /// or one conversation reads.
    pub(crate) fn scope(&self) -> Result<Scope, ApiError> {
        match self.0.get("user") {
            Some(user) => Ok(Scope::User(user.clone())),
            None => self.conversation().map(Scope::Conversation),
        }
    }

    /// A numeric id (`{fact}`, `{edit}`, `{job}`), checked by [`PathIds::read`].
    pub(crate) fn number(&self, placeholder: &str) -> Result<i64, ApiError> {
        let text = self.get(placeholder)?;
        text.parse().map_err(|_| ApiError::bad(placeholder, "expected a whole number from 1"))
    }
}

/// A path placeholder and its rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PathId {
    Conversation,
    Message,
    User,
    Number(&'static str),
}

impl PathId {
    fn of(placeholder: &str) -> Option<Self> {
        Some(match placeholder {
            "id" => Self::Conversation,
            "message" => Self::Message,
            "user" => Self::User,
            "fact" => Self::Number("fact"),
            "edit" => Self::Number("edit"),
            "job" => Self::Number("job"),
            _ => return None,
        })
    }

    fn placeholder(self) -> &'static str {
        match self {
            Self::Conversation => "id",
            Self::Message => "message",
            Self::User => "user",
            Self::Number(name) => name,
        }
    }

    /// The field an error names.
    fn field(self) -> &'static str {
        match self {
            Self::Conversation => "conversation",
            other => other.placeholder(),
        }
    }

    fn check(self, given: &str) -> Result<(), ApiError> {
        let kind = match self {
            Self::Conversation => NameKind::Conversation,
            Self::Message => NameKind::Message,
            Self::User => NameKind::User,
            Self::Number(field) => {
                return match given.parse::<i64>() {
                    Ok(number)
                        if number >= 1 && given.bytes().all(|byte| byte.is_ascii_digit()) =>
                    {
                        Ok(())
                    }
                    _ => Err(ApiError::bad(
                        field,
                        format!("expected a whole number from 1, not {given:?}"),
                    )),
                };
            }
        };
        check_name(kind, given).map_err(|error| ApiError::bad(self.field(), error.to_string()))
    }

    fn parameter(self) -> Parameter {
        match self {
            Self::Conversation => name_parameter("id", "conversation id"),
            Self::Message => name_parameter(
                "message",
                "message id (its content hash, as `memory show` lists it)",
            ),
            Self::User => path_parameter("user", "user id", name_schema("user id")),
            Self::Number("fact") => {
                path_parameter("fact", "fact id, as the facts listing gives it", id_number())
            }
            Self::Number("edit") => {
                path_parameter("edit", "edit id, as the audit log gives it", id_number())
            }
            Self::Number(name) => {
                path_parameter(name, "job id, as the add that queued it answered", id_number())
            }
        }
    }
}

/// The placeholders of `path`, in order.
fn placeholders(path: &str) -> impl Iterator<Item = &str> {
    path.split('/')
        .filter_map(|part| part.strip_prefix('{').and_then(|rest| rest.strip_suffix('}')))
}

/// Every path placeholder a route uses has a rule (checked when a door opens).
pub(crate) fn check_placeholders(route: &Route) -> Result<(), String> {
    match placeholders(route.path).find(|placeholder| PathId::of(placeholder).is_none()) {
        Some(unknown) => {
            Err(format!("{} has a placeholder {{{unknown}}} with no rule", route.path))
        }
        None => Ok(()),
    }
}

/// The errors of a request naming a conversation (or a fact, an edit, a job).
pub(crate) const ID_ERRORS: &[u16] = &[400, 401, 403, 404, 429, 500, 503];
/// The errors of a request with a body: a query, an add, an edit.
pub(crate) const BODY_ERRORS: &[u16] = &[400, 401, 403, 404, 409, 413, 429, 500, 503];
/// The errors of any request.
pub(crate) const AUTH_ERRORS: &[u16] = &[401, 403, 429, 500, 503];
