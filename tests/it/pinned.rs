//! What people read, pinned before the service's doors are restructured (issue 40, step 1):
//! the OpenAPI document and MCP's `tools/list`, as a client receives them over HTTP. A change
//! to either shows as a snapshot diff (`cargo insta review`), never silently.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;

use crate::serve::Api;

#[tokio::test]
async fn the_openapi_document_is_pinned() {
    let server = crate::own::server(Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    let api = Api::start(&server, dir.path()).await;
    let (status, document) = api.get("/openapi.json").await;
    assert_eq!(status, StatusCode::OK, "{document}");
    assert!(document["paths"].as_object().is_some_and(|paths| paths.len() > 10), "{document}");
    insta::assert_json_snapshot!("openapi", document);
}

#[tokio::test]
async fn the_mcp_tool_list_is_pinned() {
    let server = crate::own::server(Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    let api = Api::start(&server, dir.path()).await;
    let (status, reply) =
        api.post("/mcp", json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})).await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    let tools = &reply["result"]["tools"];
    assert_eq!(tools.as_array().map(Vec::len), Some(6), "{reply}");
    insta::assert_json_snapshot!("mcp_tools_list", tools);
}
