//! The schema patterns against the rules they stand for, in every regular-expression dialect the
//! document meets (Rust's `regex`, the `jsonschema` crate the operations validate with), and the
//! operations' table against the document; each MCP tool's schema against its parser (every
//! valid example passes both, every example the schema refuses the parser refuses too, naming
//! the field).

use chrono::NaiveDate;
use serde_json::{Value, json};

use crate::convo::Timestamp;
use crate::names::NameKind;
use crate::service::Scope;
use crate::service::ops::schema::{NON_BLANK_PATTERN, TIMESTAMP_PATTERN};
use crate::service::ops::{ApiError, Body};

#[test]
fn non_blank_is_exactly_not_all_whitespace_as_trim_sees_it() {
    let pattern = regex::Regex::new(NON_BLANK_PATTERN).unwrap();
    for c in (0..=0x10FFFF).filter_map(char::from_u32) {
        assert_eq!(pattern.is_match(c.encode_utf8(&mut [0; 4])), !c.is_whitespace(), "{c:?}");
    }
    let validator = jsonschema::validator_for(&json!({"pattern": NON_BLANK_PATTERN})).unwrap();
    for (text, valid) in [("x", true), ("\u{1c}", true), ("\u{feff}", true), ("", false)] {
        assert_eq!(validator.is_valid(&json!(text)), valid, "{text:?}");
    }
    for blank in [" \t\n", "\u{3000}\u{2003}", "\u{85}\u{a0}\u{2028}"] {
        assert!(!validator.is_valid(&json!(blank)), "{blank:?}");
    }
}

#[test]
fn a_timestamp_the_schema_takes_is_one_the_service_parses() {
    let pattern = regex::Regex::new(TIMESTAMP_PATTERN).unwrap();
    let validator = jsonschema::validator_for(&json!({"pattern": TIMESTAMP_PATTERN})).unwrap();
    for year in [0, 1, 100, 400, 1900, 1999, 2000, 2023, 2024, 2100, 9996, 9999] {
        for month in 0..=13 {
            for day in 0..=32 {
                let date = format!("{year:04}-{month:02}-{day:02}");
                let exists = NaiveDate::from_ymd_opt(year, month, day).is_some();
                assert_eq!(pattern.is_match(&date), exists, "{date}");
                assert_eq!(validator.is_valid(&json!(date)), exists, "{date}");
                if exists {
                    assert!(Timestamp::parse(&date).is_some(), "{date}");
                }
            }
        }
    }
    let good = [
        "2024-05-03 14:00",
        "2024-05-03T14:00",
        "2024-05-03 23:59:59",
        "2024-05-03T00:00:00Z",
        "2024-05-03T14:00:00.123456789+23:59",
        "0000-01-01T00:00:00Z",
        "9999-12-31T23:59:59Z",
        "0001-01-01T00:00:00+23:59",
        "9998-12-31T23:59:59-23:59",
        "0400-02-29T00:00:00+01:00",
    ];
    for text in good {
        assert!(pattern.is_match(text) && validator.is_valid(&json!(text)), "{text}");
        let parsed = Timestamp::parse(text).unwrap_or_else(|| panic!("{text} parses"));
        assert!(Timestamp::parse(&parsed.canonical()).is_some(), "{text} round-trips");
    }
    let bad = [
        "last week",
        "2024-5-3",
        " 2024-05-03",
        "2024-05-03\n",
        "2024-05-03T24:00",
        "2024-05-03 14:00Z",
        "2024-05-03T14:00:60Z",
        "2024-05-03T14:00:00.Z",
        "2024-05-03T14:00:00+24:00",
        "+2024-05-03",
        "0000-02-29T00:00:00+00:00",
        "0000-01-01T00:00:00+01:00",
        "9999-12-31T23:59:59-23:59",
    ];
    for text in bad {
        assert!(!pattern.is_match(text) && !validator.is_valid(&json!(text)), "{text}");
    }
    // Outside the four-digit years in UTC: refused by the service too, naming `timestamp`.
    for text in ["0000-01-01T00:00:00+01:00", "9999-12-31T23:59:59-23:59"] {
        assert!(Timestamp::parse(text).is_none(), "{text}");
    }
}

#[test]
fn every_request_schema_compiles_and_is_the_one_the_document_publishes() {
    crate::service::ops::check_schemas().unwrap();
    let document = crate::serve::document();
    let published = |name: &str| document["components"]["schemas"][name].clone();
    let own = |schema: utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>| {
        serde_json::to_value(schema).unwrap()
    };
    use utoipa::PartialSchema as _;
    assert_eq!(published("AddRequest"), own(crate::service::ops::add::AddRequest::schema()));
    assert_eq!(
        published("BatchRequest"),
        own(crate::service::ops::add_batch::BatchRequest::schema())
    );
    assert_eq!(
        published("SearchRequest"),
        own(crate::service::ops::search::SearchRequest::schema())
    );
    assert_eq!(published("AskRequest"), own(crate::service::ops::ask::AskRequest::schema()));
    assert_eq!(
        published("CorrectRequest"),
        own(crate::service::ops::correct::CorrectRequest::schema())
    );
}

/// The table holds (each operation, each method and path once, every placeholder with a rule),
/// and a table that breaks it is found; the document names every route of the table and no
/// other.
#[test]
fn the_table_holds_and_the_document_names_its_routes() {
    crate::service::ops::check_routes(crate::service::ops::OPERATIONS).unwrap();
    let twice = [crate::service::ops::list::OPERATION, crate::service::ops::list::OPERATION];
    assert!(crate::service::ops::check_routes(&twice).unwrap_err().contains("list"));
    const ODD: crate::service::ops::http::Route = crate::service::ops::http::Route {
        path: "/v1/odd/{thing}",
        ..crate::service::ops::show::OPERATION.routes[0]
    };
    let mut odd = crate::service::ops::show::OPERATION;
    odd.name = "odd";
    odd.routes = &[ODD];
    assert!(crate::service::ops::check_routes(&[odd]).unwrap_err().contains("{thing}"));
    let document = crate::serve::document();
    let mut documented = Vec::new();
    for (path, item) in document["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            documented.push((method.clone(), path.clone(), operation["operationId"].clone()));
        }
    }
    let mut tabled: Vec<_> = crate::service::ops::OPERATIONS
        .iter()
        .flat_map(|operation| operation.routes)
        .map(|route| (route.method.to_string(), route.path.to_string(), json!(route.id)))
        .collect();
    tabled.insert(0, ("get".into(), "/openapi.json".into(), json!("document")));
    documented.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    tabled.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    assert_eq!(documented, tabled);
}

/// A path's ids: percent-decoded, each held to its placeholder's rule, and the one that breaks
/// it named (a conversation id as `conversation`, the others by their placeholder).
#[test]
fn path_ids_are_decoded_checked_and_named() {
    use crate::service::ops::http::PathIds;
    let template = "/v1/conversations/{id}/messages/{message}";
    let ids = PathIds::read(template, "/v1/conversations/a%2Bb/messages/m1").unwrap();
    assert_eq!(ids.conversation().unwrap(), "a+b");
    assert_eq!(ids.message().unwrap(), "m1");
    let field =
        |template: &str, path: &str| PathIds::read(template, path).unwrap_err().detail.field;
    assert_eq!(field(template, "/v1/conversations/%FF/messages/m1"), "conversation");
    assert_eq!(field(template, "/v1/conversations/a/messages/%FF"), "message");
    assert_eq!(field(template, "/v1/conversations/..%2F..%2Fetc/messages/m1"), "conversation");
    assert_eq!(field("/v1/users/{user}/ask", "/v1/users/a%20b/ask"), "user");
    for bad in ["0", "-1", "+1", "1.0", "x", "99999999999999999999"] {
        assert_eq!(field("/v1/jobs/{job}", &format!("/v1/jobs/{bad}")), "job", "{bad}");
    }
    let job = PathIds::read("/v1/jobs/{job}", "/v1/jobs/42").unwrap();
    assert_eq!(job.number("job").unwrap(), 42);
    let user = PathIds::read("/v1/users/{user}/facts", "/v1/users/ann/facts").unwrap();
    assert_eq!(user.scope().unwrap(), crate::service::Scope::User("ann".into()));
}

/// `value`, a JSON object.
fn object(value: Value) -> Body {
    match value {
        Value::Object(object) => object,
        other => panic!("not an object: {other}"),
    }
}

/// The input schema of MCP tool `name`, as the table gives it (and the MCP door lists it),
/// compiled.
fn schema(name: &str) -> jsonschema::Validator {
    let tool = crate::service::ops::OPERATIONS
        .iter()
        .filter_map(|operation| operation.tool)
        .find(|tool| tool.name == name)
        .unwrap();
    jsonschema::validator_for(&Value::Object((tool.input)())).unwrap()
}

/// Parses `arguments` as tool `name` does before it runs its operation.
fn parse(name: &str, arguments: Value) -> Result<(), ApiError> {
    let arguments = object(arguments);
    match name {
        "add_messages" => crate::service::ops::add::parse_tool(arguments).map(drop),
        "search_memory" => crate::service::ops::search::parse_tool(arguments).map(drop),
        "ask_memory" => crate::service::ops::ask::parse_tool(arguments).map(drop),
        "forget" => crate::service::ops::forget::parse_tool(arguments).map(drop),
        "show_conversation" => {
            let mut arguments = arguments;
            crate::service::ops::take_id(&mut arguments, "conversation", NameKind::Conversation)
                .map(drop)
        }
        "list_conversations" => crate::service::ops::list::ListRequest::parse(&arguments).map(drop),
        other => panic!("no tool {other}"),
    }
}

#[test]
fn valid_arguments_pass_both_the_schema_and_the_parser() {
    let message = json!({"speaker": "Maya", "text": "I run on Tuesdays", "timestamp": "2024-03-02T09:15:00Z", "session": "s1"});
    let cases = [
        ("add_messages", json!({"conversation": "demo", "messages": [message]})),
        (
            "add_messages",
            json!({"conversation": "alice:chat", "messages": [
                {"speaker": "Sam", "text": "hi", "timestamp": "2024-03-02", "session": 3},
                {"speaker": "Maya", "text": "hello", "timestamp": "2024-03-02 10:00"},
            ], "user": "maya", "agent": "bot-1", "tags": {"topic": "running"}}),
        ),
        ("search_memory", json!({"conversation": "demo", "query": "running club"})),
        (
            "search_memory",
            json!({"user": "maya", "conversation": "demo", "query": "dog", "k": 5,
                "speaker": "Sam", "from": "2024-03-01", "to": "2024-04-01T00:00:00Z",
                "tags": {"topic": "running"}}),
        ),
        ("search_memory", json!({"conversation": "demo", "query": "dog", "k": null})),
        ("ask_memory", json!({"conversation": "demo", "question": "Who has a dog?"})),
        ("ask_memory", json!({"user": "maya", "question": "Where?", "as_of": "2024-03-10"})),
        ("list_conversations", json!({})),
        ("list_conversations", json!({"user": "maya"})),
        ("show_conversation", json!({"conversation": "demo"})),
        ("forget", json!({"conversation": "demo"})),
        ("forget", json!({"conversation": "demo", "message": "0123456789abcdef0123456789abcdef"})),
    ];
    for (tool, arguments) in cases {
        let errors: Vec<String> =
            schema(tool).iter_errors(&arguments).map(|error| error.to_string()).collect();
        assert!(errors.is_empty(), "{tool} {arguments}: the schema refuses: {errors:?}");
        if let Err(error) = parse(tool, arguments.clone()) {
            panic!("{tool} {arguments}: the parser refuses: {:?}", error.detail);
        }
    }
}

#[test]
fn what_the_schema_refuses_the_parser_refuses_naming_the_field() {
    let message = json!({"speaker": "Maya", "text": "hi"});
    let cases = [
        ("add_messages", json!({"messages": [message]}), "conversation"),
        ("add_messages", json!({"conversation": "../etc", "messages": [message]}), "conversation"),
        ("add_messages", json!({"conversation": "demo", "messages": []}), "messages"),
        ("add_messages", json!({"conversation": "demo", "messages": "hi"}), "messages"),
        (
            "add_messages",
            json!({"conversation": "demo", "messages": [{"speaker": "Maya"}]}),
            "text",
        ),
        ("add_messages", json!({"conversation": "demo", "messages": [{"text": "hi"}]}), "speaker"),
        (
            "add_messages",
            json!({"conversation": "demo", "messages": [message], "user": "a b"}),
            "user",
        ),
        (
            "add_messages",
            json!({"conversation": "demo", "messages": [message], "tags": {"a": 1}}),
            "tags",
        ),
        ("search_memory", json!({"conversation": "demo"}), "query"),
        ("search_memory", json!({"conversation": "demo", "query": ""}), "query"),
        ("search_memory", json!({"conversation": "demo", "query": "dog", "k": 0}), "k"),
        ("search_memory", json!({"conversation": "demo", "query": "dog", "k": 101}), "k"),
        ("search_memory", json!({"conversation": "demo", "query": "dog", "k": "ten"}), "k"),
        ("search_memory", json!({"conversation": 7, "query": "dog"}), "conversation"),
        ("search_memory", json!({"user": "a/b", "query": "dog"}), "user"),
        ("ask_memory", json!({"conversation": "demo"}), "question"),
        ("ask_memory", json!({"conversation": "demo", "question": 3}), "question"),
        ("show_conversation", json!({}), "conversation"),
        ("show_conversation", json!({"conversation": ".hidden"}), "conversation"),
        ("forget", json!({"conversation": "demo", "message": "x/y"}), "message"),
        ("list_conversations", json!({"user": ""}), "user"),
        (
            "search_memory",
            json!({"conversation": "demo", "query": "dog", "speaker": null}),
            "speaker",
        ),
        (
            "add_messages",
            json!({"conversation": "demo", "messages": [{"speaker": "Maya", "text": "hi", "session": null}]}),
            "session",
        ),
    ];
    for (tool, arguments, field) in cases {
        assert!(!schema(tool).is_valid(&arguments), "{tool} {arguments}: the schema accepts");
        match parse(tool, arguments.clone()) {
            Ok(()) => panic!("{tool} {arguments}: the parser accepts"),
            Err(error) => assert_eq!(error.detail.field, field, "{tool} {arguments}"),
        }
    }
}

#[test]
fn the_parser_checks_what_the_schema_leaves_to_it() {
    // Times and non-blank texts have no pattern in the tools' schemas (a model's context is
    // better spent on descriptions), and the scope rules (a conversation or a user) are in
    // words: the parser holds them, naming the field.
    let cases = [
        (
            "ask_memory",
            json!({"conversation": "demo", "question": "Who?", "as_of": "soon"}),
            "as_of",
        ),
        ("search_memory", json!({"conversation": "demo", "query": "dog", "from": "May"}), "from"),
        ("search_memory", json!({"conversation": "demo", "query": "   "}), "query"),
        ("ask_memory", json!({"question": "Who?"}), "conversation"),
        ("search_memory", json!({"query": "dog"}), "conversation"),
        ("ask_memory", json!({"conversation": "demo", "user": "maya", "question": "Who?"}), "user"),
        (
            "add_messages",
            json!({"conversation": "demo", "messages": [{"speaker": "Maya", "text": "hi", "timestamp": "2024-13-01"}]}),
            "timestamp",
        ),
    ];
    for (tool, arguments, field) in cases {
        match parse(tool, arguments.clone()) {
            Ok(()) => panic!("{tool} {arguments}: the parser accepts"),
            Err(error) => assert_eq!(error.detail.field, field, "{tool} {arguments}"),
        }
    }
}

#[test]
fn a_user_search_keeps_the_conversation_as_its_filter() {
    let arguments = object(json!({"user": "maya", "conversation": "demo", "query": "dog"}));
    let (scope, request) = crate::service::ops::search::parse_tool(arguments).unwrap();
    assert_eq!(scope, Scope::User("maya".into()));
    assert_eq!(request.filters.conversation.as_deref(), Some("demo"));
    let arguments = object(json!({"conversation": "demo", "query": "dog"}));
    let (scope, request) = crate::service::ops::search::parse_tool(arguments).unwrap();
    assert_eq!(scope, Scope::Conversation("demo".into()));
    assert_eq!((request.filters.conversation, request.k), (None, 10));
}

/// A store failure tells a client only what it can do (the database's words stay out of the
/// body every door sends), while the operator's command line prints what the store said.
#[test]
fn a_store_failure_hides_its_cause_from_clients_and_shows_it_to_the_operator() {
    use crate::store::StoreError;
    let cases = [
        StoreError::Corrupt("row 7 of table facts: bad blob".into()),
        StoreError::Unavailable("connection to db.internal:5432 refused".into()),
        StoreError::Authentication("password authentication failed for user mragent".into()),
    ];
    for error in cases {
        let said = error.to_string();
        let api = ApiError::from(error);
        assert_eq!(api.to_string(), said);
        let body = serde_json::to_string(&api.body()).unwrap();
        for word in ["row 7", "db.internal", "password authentication"] {
            assert!(!body.contains(word), "{body}");
        }
    }
    let plain = ApiError::bad("k", "expected an integer");
    assert_eq!(plain.to_string(), "expected an integer");
}
