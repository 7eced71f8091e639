//! `search`: the stored lines most relevant to a query, over one conversation or all of a
//! user's (no chat model). `POST /v1/conversations/{id}/search`, `POST /v1/users/{user}/search`;
//! MCP `search_memory`.

use std::sync::{Arc, LazyLock};

use futures::future::BoxFuture;

use serde::Serialize;
use serde_json::{Value, json};
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ObjectBuilder, Schema, SchemaType, Type};
use utoipa::{PartialSchema, ToSchema};

use super::http::{Answer, BODY_ERRORS, HttpReply, HttpRequest, Route, reply, route, typed};
use super::schema::{Validator, name_schema, non_blank, tags_schema, time_schema, tool};
use super::{
    Access, ApiError, Body, Called, Hints, McpTool, Operation, Service, fields, required_text,
    take_id,
};
use crate::names::NameKind;
use crate::service::{Scope, SearchFilters, SearchHit};

pub(crate) const OPERATION: Operation = Operation {
    name: "search",
    routes: &[
        Route {
            body: Some(typed::<SearchRequest>()),
            ..route(
                "post",
                "/v1/conversations/{id}/search",
                "search",
                &[reply(200, "ranked memory lines (no chat model)", typed::<SearchReply>())],
                BODY_ERRORS,
                http,
            )
        },
        Route {
            body: Some(typed::<SearchRequest>()),
            ..route(
                "post",
                "/v1/users/{user}/search",
                "user_search",
                &[reply(
                    200,
                    "ranked memory lines of all the user's conversations (no chat model)",
                    typed::<UserSearchReply>(),
                )],
                BODY_ERRORS,
                http,
            )
        },
    ],
    tool: Some(TOOL),
};

/// The MCP tool.
pub(crate) const TOOL: McpTool = McpTool {
    name: "search_memory",
    description: "Find the stored lines most relevant to a query: ranked messages, each \
        with its conversation, message `id`, speaker, date and text. Fast (no chat model). \
        Use it to look things up, to see exact wording and dates, or to find a message id \
        (for `forget`); to get an answer to a question that needs several facts combined \
        or reasoned over, use ask_memory instead. Scope: one conversation (`conversation`) \
        or all of a user's (`user`); filters: speaker, time range, tags.",
    hints: Hints::Reads,
    input,
    call,
};

/// Largest `k` a search may ask for.
pub(crate) const MAX_K: u64 = 100;
/// `k` when a search does not give one.
pub(crate) const DEFAULT_K: u64 = 10;

/// The body of a search.
#[derive(Debug, Clone)]
pub(crate) struct SearchRequest {
    /// What to look for.
    pub(crate) query: String,
    /// How many lines.
    pub(crate) k: u64,
    /// Which lines may come back.
    pub(crate) filters: SearchFilters,
}

impl PartialSchema for SearchRequest {
    fn schema() -> RefOr<Schema> {
        let k = ObjectBuilder::new()
            .schema_type(SchemaType::from_iter([Type::Integer, Type::Null]))
            .description(Some(format!("how many lines (default {DEFAULT_K})")))
            .minimum(Some(1))
            .maximum(Some(MAX_K));
        ObjectBuilder::new()
            .property("query", non_blank("what to look for"))
            .property("k", k)
            .property(
                "speaker",
                non_blank("only lines said by this speaker (letter case aside)")
                    .max_length(Some(crate::names::MAX_NAME_CHARS)),
            )
            .property(
                "from",
                time_schema("only lines sent at or after this time (a date: its first second)"),
            )
            .property(
                "to",
                time_schema("only lines sent at or before this time (a date: its last second)"),
            )
            .property(
                "conversation",
                name_schema("only lines of this conversation (of the user's)"),
            )
            .property("tags", tags_schema("only lines added with all these tags"))
            .required("query")
            .into()
    }
}

impl ToSchema for SearchRequest {}

/// The compiled body schema.
pub(crate) static VALIDATOR: LazyLock<Validator> = LazyLock::new(Validator::of::<SearchRequest>);

impl SearchRequest {
    /// The body's fields, each checked on its own (errors name the field).
    pub(crate) fn parse(map: &Body) -> Result<Self, ApiError> {
        let query = required_text(map, "query")?;
        let bad_k = || ApiError::bad("k", format!("expected an integer from 1 to {MAX_K}"));
        let k = match map.get("k") {
            None | Some(Value::Null) => DEFAULT_K,
            // JSON Schema's `integer` counts 5.0 as an integer; so does this.
            Some(Value::Number(number)) => number
                .as_u64()
                .or_else(|| {
                    number.as_f64().filter(|k| k.fract() == 0.0 && *k >= 1.0).map(|k| k as u64)
                })
                .filter(|k| (1..=MAX_K).contains(k))
                .ok_or_else(bad_k)?,
            Some(_) => return Err(bad_k()),
        };
        let filters = SearchFilters {
            speaker: fields::text(map, "speaker", crate::names::MAX_NAME_CHARS)?,
            from: fields::time(map, "from", false)?,
            to: fields::time(map, "to", true)?,
            conversation: fields::name(map, "conversation", NameKind::Conversation)?,
            tags: fields::tags(map)?,
        };
        Ok(Self { query, k, filters })
    }

    /// The body: its fields, then the whole body against the published schema.
    pub(crate) fn read(map: Body) -> Result<Self, ApiError> {
        VALIDATOR.read(map, Self::parse)
    }
}

/// `POST /v1/conversations/{id}/search`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub(crate) struct SearchReply {
    /// The conversation id.
    pub(crate) conversation: String,
    /// The query as given.
    pub(crate) query: String,
    /// The lines found, best first.
    pub(crate) hits: Vec<SearchHit>,
    /// Sessions stored but not built yet (a background job is building them, or they failed
    /// and the next add retries them): their lines cannot be found yet.
    pub(crate) pending_sessions: u64,
}

/// `POST /v1/users/{user}/search`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub(crate) struct UserSearchReply {
    /// The user.
    pub(crate) user: String,
    /// The query as given.
    pub(crate) query: String,
    /// The lines found, best first, each naming its conversation.
    pub(crate) hits: Vec<SearchHit>,
    /// Sessions of the user's conversations stored but not built yet (see the conversation
    /// search).
    pub(crate) pending_sessions: u64,
}

/// What a search answers, by its scope.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub(crate) enum Found {
    Conversation(SearchReply),
    User(UserSearchReply),
}

/// Searches `scope` for `access`.
pub(crate) async fn run(
    service: &Service,
    access: &Access,
    scope: Scope,
    request: SearchRequest,
) -> Result<Found, ApiError> {
    access.scope(service, &scope).await?;
    let SearchRequest { query, k, filters } = request;
    let hits = service.search_scoped(&scope, &query, k as usize, &filters).await?;
    let pending_sessions = service.pending_sessions(&scope).await?;
    Ok(match scope {
        Scope::Conversation(conversation) => {
            Found::Conversation(SearchReply { conversation, query, hits, pending_sessions })
        }
        Scope::User(user) => Found::User(UserSearchReply { user, query, hits, pending_sessions }),
    })
}

/// The tool's input: a conversation or a user, then the body of a search.
fn input() -> Body {
    tool::input(
        &["query"],
        json!({
            "conversation": tool::id(
                "The conversation to search. Without `user` it is the scope (required then); with \
                 `user`, only this one of the user's conversations is searched.",
            ),
            "user": tool::id(
                "A user id: search all of the user's conversations (each line names its \
                 conversation).",
            ),
            "query": tool::non_blank(
                "What to look for, in words (matched by meaning and by keywords).",
            ),
            "k": {
                "description": "How many lines, best first (default 10).",
                "type": ["integer", "null"],
                "format": "uint64",
                "minimum": 1,
                "maximum": MAX_K,
            },
            "speaker": tool::text(
                "Only lines said by this speaker (letter case aside).",
                crate::names::MAX_NAME_CHARS,
            ),
            "from": tool::time("Only lines sent at or after this time (a date: its first second)."),
            "to": tool::time("Only lines sent at or before this time (a date: its last second)."),
            "tags": tool::tags("Only lines added with all these tags."),
        }),
    )
}

/// The tool's arguments: the scope, then the body of a search. With `user`, the scope is the
/// user's conversations and `conversation` the body's filter; without, the conversation is the
/// scope.
pub(crate) fn parse_tool(mut arguments: Body) -> Result<(Scope, SearchRequest), ApiError> {
    let scope = match fields::name(&arguments, "user", NameKind::User)? {
        Some(user) => {
            arguments.remove("user");
            Scope::User(user)
        }
        None => {
            Scope::Conversation(take_id(&mut arguments, "conversation", NameKind::Conversation)?)
        }
    };
    Ok((scope, SearchRequest::read(arguments)?))
}

fn call<'a>(
    service: &'a Arc<Service>,
    access: &'a Access,
    arguments: Body,
) -> BoxFuture<'a, Result<Called, ApiError>> {
    Box::pin(async move {
        let (scope, request) = parse_tool(arguments)?;
        Called::new(run(service, access, scope, request).await?, false)
    })
}

fn http<'a>(service: &'a Arc<Service>, access: &'a Access, request: HttpRequest) -> Answer<'a> {
    Box::pin(async move {
        let scope = request.path.scope()?;
        let body = SearchRequest::read(request.body?)?;
        HttpReply::ok(run(service, access, scope, body).await?)
    })
}
