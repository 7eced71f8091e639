//! The MCP door: the table's tools listed once each, with descriptions and inline object
//! schemas; errors become flagged results; an edit is logged under the request's token name.
//! (Each tool's schema against its parser is the operations' test, `service::ops::common::tests`.)

use serde_json::json;

use super::*;
use crate::service::ServiceError;
use crate::store::StoreError;

/// The listed tools, by name.
fn tools() -> Vec<rmcp::model::Tool> {
    super::tools().into_iter().map(|(_, tool)| tool).collect()
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
