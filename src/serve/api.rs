//! The bodies the API takes and gives, and the schemas the OpenAPI document declares for them.
//!
//! Response bodies derive their schemas (`utoipa::ToSchema`); request bodies and the `{id}`
//! parameter write theirs out with utoipa's builders, because their constraints come from the
//! shared limits in [`crate::names`] and must use those constants. The handlers check a body
//! field by field first (errors name the field), then against the very schema published here
//! (`openapi::Validators`), so the document and the checks cannot disagree.

use serde::Serialize;
use utoipa::openapi::RefOr;
use utoipa::openapi::path::{Parameter, ParameterBuilder, ParameterIn};
use utoipa::openapi::schema::{
    AllOfBuilder, AnyOfBuilder, ArrayBuilder, ObjectBuilder, Schema, SchemaType, Type,
};
use utoipa::{IntoParams, PartialSchema, ToSchema};

use crate::names::{MAX_MESSAGE_CHARS, MAX_MESSAGES_PER_ADD, MAX_NAME_CHARS, NAME_PATTERN};
use crate::service::{AddReport, SearchHit};
use crate::store::{ConversationInfo, ForgottenMessage};

/// Largest `k` a search may ask for.
pub(crate) const MAX_K: u64 = 100;
/// `k` when a search does not give one.
pub(crate) const DEFAULT_K: u64 = 10;

/// A string that is not all whitespace: one character outside Rust's `char::is_whitespace` (the
/// Unicode `White_Space` set, which `str::trim` removes). Spelled as `\uXXXX` escapes so that
/// ECMA 262, Python and Rust regular expressions read it alike (their `\s` differ).
pub(crate) const NON_BLANK_PATTERN: &str = "[^\\u0009-\\u000D\\u0020\\u0085\\u00A0\\u1680\\u2000-\\u200A\\u2028\\u2029\\u202F\\u205F\\u3000]";

/// A calendar date `YYYY-MM-DD` that exists (leap years included), its year matching `$year`
/// and, on 29 February, its century year (`YY00`, leap when `YY` is a multiple of 4) `$century`.
macro_rules! date_pattern {
    ($year:literal, $century:literal) => {
        concat!(
            "(?:",
            $year,
            "-(?:(?:0[1-9]|1[0-2])-(?:0[1-9]|1[0-9]|2[0-8])",
            "|(?:0[13-9]|1[0-2])-(?:29|30)|(?:0[13578]|1[02])-31)",
            "|(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|",
            $century,
            "00)-02-29)"
        )
    };
}

/// Hours, minutes, seconds and an optional fraction.
macro_rules! time_pattern {
    () => {
        "T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]{1,9})?"
    };
}

/// A message timestamp `convo::Timestamp::parse` takes: a date; a date and `HH:MM[:SS]` (`T` or
/// a space between, UTC); RFC 3339 with seconds, optional fraction and `Z`; or RFC 3339 with an
/// offset, in the years 0001 to 9998 only (in 0000 or 9999 an offset can move the time out of
/// the four-digit years, which the service refuses).
pub(crate) const TIMESTAMP_PATTERN: &str = concat!(
    "^(?:",
    date_pattern!("[0-9]{4}", "(?:[02468][048]|[13579][26])"),
    "(?:[T ](?:[01][0-9]|2[0-3]):[0-5][0-9](?::[0-5][0-9])?|",
    time_pattern!(),
    "Z)?|",
    date_pattern!(
        "(?:000[1-9]|00[1-9][0-9]|0[1-9][0-9]{2}|[1-8][0-9]{3}|9[0-8][0-9]{2}|99[0-8][0-9]|999[0-8])",
        "(?:0[48]|[2468][048]|[13579][26])"
    ),
    time_pattern!(),
    "[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])$"
);

fn string(description: &str) -> ObjectBuilder {
    ObjectBuilder::new().schema_type(Type::String).description(Some(description))
}

/// A string with a non-whitespace character.
fn non_blank(description: &str) -> ObjectBuilder {
    string(description).min_length(Some(1)).pattern(Some(NON_BLANK_PATTERN))
}

fn message_text() -> RefOr<Schema> {
    let text = || non_blank("what was said").max_length(Some(MAX_MESSAGE_CHARS));
    let part = ObjectBuilder::new()
        .description(Some("an OpenAI-style text content part"))
        .property("type", string("`text`").enum_values(Some(["text"])))
        .property("text", text())
        .required("text");
    let parts = ArrayBuilder::new()
        .description(Some("OpenAI-style content parts: one text part"))
        .items(part)
        .min_items(Some(1))
        .max_items(Some(1));
    AnyOfBuilder::new().item(text()).item(parts).into()
}

fn one_of_required(keys: &[&str]) -> RefOr<Schema> {
    keys.iter()
        .fold(AnyOfBuilder::new(), |any, key| any.item(ObjectBuilder::new().required(*key)))
        .into()
}

/// One message of an add (the `convo` format: see `data/examples/README.md`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Message;

impl PartialSchema for Message {
    fn schema() -> RefOr<Schema> {
        let speaker = || non_blank("who said it");
        let timestamp = || {
            string("RFC 3339 (2024-05-03T14:00:00Z), YYYY-MM-DD HH:MM[:SS] (UTC) or YYYY-MM-DD")
                .pattern(Some(TIMESTAMP_PATTERN))
        };
        let session = || {
            AnyOfBuilder::new()
                .description(Some("the caller's session id"))
                .item(non_blank("a session id"))
                .item(ObjectBuilder::new().schema_type(Type::Number))
        };
        let fields = ObjectBuilder::new()
            .property("speaker", speaker())
            .property("name", speaker())
            .property("role", speaker())
            .property("text", message_text())
            .property("content", message_text())
            .property("timestamp", timestamp())
            .property("time", timestamp())
            .property("date", timestamp())
            .property("created_at", timestamp())
            .property("session", session())
            .property("session_id", session());
        AllOfBuilder::new()
            .description(Some(
                "a speaker (`speaker`, `name` or `role`), a text (`text` or `content`), \
                 optionally a timestamp (`timestamp`, `time`, `date` or `created_at`) and a \
                 session id (`session` or `session_id`); where two names are given the first \
                 listed is used",
            ))
            .item(fields)
            .item(one_of_required(&["speaker", "name", "role"]))
            .item(one_of_required(&["text", "content"]))
            .into()
    }
}

impl ToSchema for Message {}

/// A name ([`crate::names::check_name`]'s rule).
pub(crate) fn name_schema(description: &str) -> ObjectBuilder {
    string(description)
        .min_length(Some(1))
        .max_length(Some(MAX_NAME_CHARS))
        .pattern(Some(NAME_PATTERN))
}

/// Largest number of tags on one add or one search.
pub(crate) const MAX_TAGS: usize = 32;

/// Free key/value tags: names to names.
pub(crate) fn tags_schema(description: &str) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .description(Some(description))
        .property_names(Some(name_schema("a tag key")))
        .additional_properties(Some(name_schema("a tag value")))
        .max_properties(Some(MAX_TAGS))
}

/// A time in the timestamp formats messages take.
pub(crate) fn time_schema(description: &str) -> ObjectBuilder {
    string(description).pattern(Some(TIMESTAMP_PATTERN))
}

/// `POST /v1/conversations/{id}/messages`.
#[derive(Debug, Clone)]
pub(crate) struct AddRequest {
    /// The messages, parsed.
    pub(crate) messages: Vec<crate::convo::Message>,
    /// Who the conversation belongs to, and the messages' tags.
    pub(crate) scope: crate::store::AddScope,
    /// Whether to answer only once the sessions are built.
    pub(crate) wait: bool,
}

impl PartialSchema for AddRequest {
    fn schema() -> RefOr<Schema> {
        AddRequest::object().into()
    }
}

impl AddRequest {
    /// The add body's object schema (a batch entry extends it with `conversation`).
    pub(crate) fn object() -> ObjectBuilder {
        let messages = ArrayBuilder::new()
            .items(Message::schema())
            .min_items(Some(1))
            .max_items(Some(MAX_MESSAGES_PER_ADD));
        ObjectBuilder::new()
            .property("messages", messages)
            .property("wait", wait_schema())
            .property(
                "user",
                name_schema("the user the conversation belongs to (set when it is created)"),
            )
            .property(
                "agent",
                name_schema("the agent the conversation belongs to (set when it is created)"),
            )
            .property(
                "tags",
                tags_schema("tags every message of this add carries (search filters on them)"),
            )
            .required("messages")
    }
}

impl ToSchema for AddRequest {}

/// The `wait` flag of an add.
pub(crate) fn wait_schema() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::Boolean, Type::Null]))
        .description(Some(
            "true (the default): answer when the new sessions are built; false: store the \
             messages, answer 202 with a job at once, and build in the background \
             (`GET /v1/jobs/{job}`)",
        ))
}

/// Most conversations in one batch add.
pub(crate) const MAX_BATCH: usize = 100;

/// `POST /v1/conversations`.
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

/// `POST /v1/conversations/{id}/search` and `POST /v1/users/{user}/search`.
#[derive(Debug, Clone)]
pub(crate) struct SearchRequest {
    /// What to look for.
    pub(crate) query: String,
    /// How many lines.
    pub(crate) k: u64,
    /// Which lines may come back.
    pub(crate) filters: crate::service::SearchFilters,
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
                    .max_length(Some(MAX_NAME_CHARS)),
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

/// `POST /v1/conversations/{id}/ask`.
#[derive(Debug, Clone)]
pub(crate) struct AskRequest {
    /// The question.
    pub(crate) question: String,
    /// Answer as server-sent events.
    pub(crate) stream: bool,
    /// Answer as known at this time (RFC 3339 UTC).
    pub(crate) as_of: Option<String>,
}

impl PartialSchema for AskRequest {
    fn schema() -> RefOr<Schema> {
        let stream = ObjectBuilder::new()
            .schema_type(SchemaType::from_iter([Type::Boolean, Type::Null]))
            .description(Some("answer as server-sent events (default false)"));
        ObjectBuilder::new()
            .property("question", non_blank("the question"))
            .property("stream", stream)
            .property("as_of", time_schema("answer from what was known at this time: later messages are invisible, facts valid then are current (a date: its end)"))
            .required("question")
            .into()
    }
}

impl ToSchema for AskRequest {}

/// `POST /v1/facts/{fact}/correct`.
#[derive(Debug, Clone)]
pub(crate) struct CorrectRequest;

impl PartialSchema for CorrectRequest {
    fn schema() -> RefOr<Schema> {
        let value = ObjectBuilder::new()
            .schema_type(Type::String)
            .description(Some("the fact's value from now on"))
            .min_length(Some(1))
            .max_length(Some(crate::names::MAX_MESSAGE_CHARS))
            .pattern(Some(NON_BLANK_PATTERN));
        ObjectBuilder::new().property("value", value).required("value").into()
    }
}

impl ToSchema for CorrectRequest {}

/// The `{id}` path parameter: a conversation id ([`crate::names::check_name`]'s rule).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConversationId;

/// A path parameter holding a name ([`crate::names::check_name`]'s rule).
fn name_parameter(name: &str, description: &str) -> Parameter {
    let schema = ObjectBuilder::new()
        .schema_type(Type::String)
        .min_length(Some(1))
        .max_length(Some(MAX_NAME_CHARS))
        .pattern(Some(NAME_PATTERN));
    ParameterBuilder::new()
        .name(name)
        .parameter_in(ParameterIn::Path)
        .required(utoipa::openapi::Required::True)
        .description(Some(format!(
            "{description}: ASCII letters, digits and . _ - : @ +, starting with a letter or \
             digit, no `..`"
        )))
        .schema(Some(schema))
        .build()
}

impl IntoParams for ConversationId {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        vec![name_parameter("id", "conversation id")]
    }
}

/// The `{id}` and `{message}` path parameters: a conversation id and one of its message ids.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MessagePath;

impl IntoParams for MessagePath {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        vec![
            name_parameter("id", "conversation id"),
            name_parameter("message", "message id (its content hash, as `memory show` lists it)"),
        ]
    }
}

/// `DELETE /v1/conversations/{id}/messages/{message}`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub(crate) struct ForgetMessageReply {
    /// The message forgotten and the session it was in.
    pub(crate) forgotten: ForgottenMessage,
    /// The rebuild of that session from the messages left.
    pub(crate) rebuilt: AddReport,
}

/// `GET /v1/conversations`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub(crate) struct ConversationList {
    /// Every conversation, by id.
    pub(crate) conversations: Vec<ConversationInfo>,
}

/// `DELETE /v1/conversations/{id}`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub(crate) struct Deleted {
    /// The conversation as it was.
    pub(crate) deleted: ConversationInfo,
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

/// What went wrong, for a client to act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ErrorCode {
    /// A field, the path or the body is unusable (400).
    Invalid,
    /// Missing, wrong, revoked or expired bearer token or key (401).
    Unauthorized,
    /// The key may not do this (403).
    Forbidden,
    /// Over the key's rate limit; retry after `Retry-After` seconds (429).
    RateLimited,
    /// No such endpoint (404).
    NotFound,
    /// No such conversation (404).
    UnknownConversation,
    /// No such message in the conversation (404).
    UnknownMessage,
    /// The user has no conversation (404).
    UnknownUser,
    /// No such fact (404).
    UnknownFact,
    /// No such edit (404).
    UnknownEdit,
    /// No such job (404).
    UnknownJob,
    /// The edit cannot be undone (409).
    NotUndoable,
    /// The add names another user or agent than the conversation has (409).
    ScopeMismatch,
    /// The method is not one the path takes (405).
    MethodNotAllowed,
    /// The conversation has no built session yet (409).
    NotBuilt,
    /// The conversation was embedded with another embedder (409).
    EmbedderMismatch,
    /// The body is over the size limit (413).
    TooLarge,
    /// The service failed (500).
    Internal,
    /// The store's database cannot be reached now; retry after `Retry-After` seconds (503).
    StoreUnavailable,
    /// The store's database refused mragent's credentials: an operator must fix the
    /// configuration; retrying does not help (500).
    StoreAuthentication,
}

/// The error's details.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub(crate) struct ErrorDetail {
    /// What went wrong.
    pub(crate) code: ErrorCode,
    /// What to fix: a body field, `conversation`, `path`, `method`, `body` or `authorization`;
    /// empty for internal errors.
    pub(crate) field: String,
    /// For a person.
    pub(crate) message: String,
}

/// Every error the API answers, whatever the route or the cause.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub(crate) struct ErrorBody {
    /// The error.
    pub(crate) error: ErrorDetail,
}
