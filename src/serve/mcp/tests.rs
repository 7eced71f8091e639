//! The tools' schemas against their parsers: every valid example passes both, every example the
//! schema refuses the parser refuses too, naming the field; and errors become flagged results.

use serde_json::json;

use super::*;
use crate::names::NameKind;
use crate::service::Scope;
use crate::service::ServiceError;
use crate::store::StoreError;
use rmcp::model::JsonObject;

fn object(value: Value) -> JsonObject {
    match value {
        Value::Object(object) => object,
        other => panic!("not an object: {other}"),
    }
}

/// The listed tools, by name.
fn tools() -> Vec<rmcp::model::Tool> {
    super::tools().into_iter().map(|(_, tool)| tool).collect()
}

/// The input schema of `tool`, compiled.
fn schema(tool: &str) -> jsonschema::Validator {
    let tool = tools().into_iter().find(|listed| listed.name == tool).unwrap();
    jsonschema::validator_for(&Value::Object(tool.input_schema.as_ref().clone())).unwrap()
}

/// Parses `arguments` as `tool` does before calling the service.
fn parse(tool: &str, arguments: Value) -> Result<(), ApiError> {
    let arguments = object(arguments);
    match tool {
        "add_messages" => ops::add::parse_tool(arguments).map(drop),
        "search_memory" => ops::search::parse_tool(arguments).map(drop),
        "ask_memory" => ops::ask::parse_tool(arguments).map(drop),
        "forget" => ops::forget::parse_tool(arguments).map(drop),
        "show_conversation" => {
            let mut arguments = arguments;
            ops::take_id(&mut arguments, "conversation", NameKind::Conversation).map(drop)
        }
        "list_conversations" => ops::list::ListRequest::parse(&arguments).map(drop),
        other => panic!("no tool {other}"),
    }
}

#[test]
fn six_tools_each_with_a_description_and_an_inline_object_schema() {
    let tools = tools();
    let names: Vec<&str> = tools.iter().map(|tool| tool.name.as_ref()).collect();
    assert_eq!(
        names,
        [
            "add_messages",
            "ask_memory",
            "forget",
            "list_conversations",
            "search_memory",
            "show_conversation"
        ]
    );
    for tool in &tools {
        let description = tool.description.as_deref().unwrap_or_default();
        assert!(description.len() > 100, "{}: {description}", tool.name);
        let schema = Value::Object(tool.input_schema.as_ref().clone());
        assert_eq!(schema["type"], "object", "{}", tool.name);
        let text = schema.to_string();
        assert!(!text.contains("$ref"), "{}: {text}", tool.name);
        assert!(!text.contains("\\n"), "{}: descriptions on one line: {text}", tool.name);
        assert!(jsonschema::validator_for(&schema).is_ok(), "{}: {text}", tool.name);
        assert!(tool.annotations.is_some(), "{}", tool.name);
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
    let (scope, request) = ops::search::parse_tool(arguments).unwrap();
    assert_eq!(scope, Scope::User("maya".into()));
    assert_eq!(request.filters.conversation.as_deref(), Some("demo"));
    let arguments = object(json!({"conversation": "demo", "query": "dog"}));
    let (scope, request) = ops::search::parse_tool(arguments).unwrap();
    assert_eq!(scope, Scope::Conversation("demo".into()));
    assert_eq!((request.filters.conversation, request.k), (None, 10));
}

#[test]
fn an_error_is_a_flagged_result_with_the_http_error_body() {
    let result = reply(Err(ApiError::bad("k", "expected an integer from 1 to 100")));
    assert_eq!(result.is_error, Some(true));
    let body = json!({"error": {"code": "invalid", "field": "k", "message": "expected an integer from 1 to 100"}});
    assert_eq!(result.structured_content, Some(body.clone()));
    let text = result.content[0].as_text().map(|text| text.text.clone()).unwrap_or_default();
    assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), body);

    let unknown = ServiceError::Store(StoreError::UnknownConversation("nobody".into()));
    let result = reply(Err(unknown.into()));
    assert_eq!(result.structured_content.unwrap()["error"]["code"], "unknown_conversation");

    let done = reply(Ok(Called { reply: json!({"ok": true}), failed: false }));
    assert_eq!(done.is_error, Some(false));
    assert_eq!(
        reply(Ok(Called { reply: json!({"ok": false}), failed: true })).is_error,
        Some(true)
    );
}

#[test]
fn an_edit_over_http_is_logged_under_the_requests_token_name() {
    let mut extensions = Extensions::new();
    assert_eq!(access(&extensions).actor(), STDIO_ACTOR);
    let mut request = axum::http::Request::new(());
    request.extensions_mut().insert(Access::admin("alice"));
    let (parts, ()) = request.into_parts();
    extensions.insert(parts);
    assert_eq!(access(&extensions).actor(), "alice");
}

#[test]
fn every_tool_of_the_table_is_listed_once_with_its_description() {
    let listed: Vec<(String, String)> = tools()
        .into_iter()
        .map(|tool| (tool.name.to_string(), tool.description.unwrap_or_default().to_string()))
        .collect();
    let mut tabled: Vec<(String, String)> = ops::OPERATIONS
        .iter()
        .filter_map(|operation| operation.tool)
        .map(|tool| (tool.name.to_string(), tool.description.to_string()))
        .collect();
    tabled.sort();
    assert_eq!(listed, tabled);
}
