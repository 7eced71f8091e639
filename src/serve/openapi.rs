//! The OpenAPI 3.1 document of the API, written out by hand: five small paths do not warrant a
//! derive framework. The HTTP tests check that every route is documented.

use axum::Json;
use serde_json::{Value, json};

pub(super) async fn document() -> Json<Value> {
    Json(spec())
}

fn error_responses() -> Value {
    let error = json!({"$ref": "#/components/responses/Error"});
    json!({"400": error, "401": error, "404": error, "409": error, "413": error})
}

fn json_body(schema: Value) -> Value {
    json!({"required": true, "content": {"application/json": {"schema": schema}}})
}

fn ok(description: &str, schema: Value) -> Value {
    let mut responses = error_responses();
    responses["200"] =
        json!({"description": description, "content": {"application/json": {"schema": schema}}});
    responses
}

/// The document.
pub(crate) fn spec() -> Value {
    let id = json!([{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}, "description": "conversation id"}]);
    let message = json!({
        "type": "object",
        "description": "speaker (or name/role), text (or content), optional timestamp (RFC 3339 or YYYY-MM-DD) and session id",
        "properties": {
            "speaker": {"type": "string"}, "name": {"type": "string"}, "role": {"type": "string"},
            "text": {"type": "string"}, "content": {"type": "string"},
            "timestamp": {"type": "string"}, "session": {"type": ["string", "integer"]}
        }
    });
    json!({
        "openapi": "3.1.0",
        "info": {"title": "mragent memory API", "version": env!("CARGO_PKG_VERSION"),
                 "description": "Add messages to a persistent conversation memory, search it, ask it. Bearer token required when MRAGENT_SERVE_TOKEN is set."},
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "responses": {"Error": {"description": "bad input or state; `field` names what to fix",
                "content": {"application/json": {"schema": {"type": "object", "properties": {"error": {"type": "object",
                    "properties": {"code": {"type": "string"}, "field": {"type": "string"}, "message": {"type": "string"}}}}}}}}}
        },
        "security": [{"bearer": []}],
        "paths": {
            "/v1/conversations": {"get": {"summary": "list conversations", "responses": ok("the conversations", json!({"type": "object"}))}},
            "/v1/conversations/{id}": {
                "get": {"summary": "one conversation's summary", "parameters": id, "responses": ok("the summary", json!({"type": "object"}))},
                "delete": {"summary": "forget a conversation", "parameters": id, "responses": ok("what was deleted", json!({"type": "object"}))}
            },
            "/v1/conversations/{id}/messages": {"post": {"summary": "add messages (idempotent; only new sessions are built)", "parameters": id,
                "requestBody": json_body(json!({"type": "object", "required": ["messages"], "properties": {"messages": {"type": "array", "items": message}}})),
                "responses": ok("the add report", json!({"type": "object"}))}},
            "/v1/conversations/{id}/search": {"post": {"summary": "ranked memory lines (no chat model)", "parameters": id,
                "requestBody": json_body(json!({"type": "object", "required": ["query"], "properties": {"query": {"type": "string"}, "k": {"type": "integer", "minimum": 1, "maximum": 100}}})),
                "responses": ok("the hits", json!({"type": "object"}))}},
            "/v1/conversations/{id}/ask": {"post": {"summary": "answer a question with the tool loop; `stream: true` sends server-sent events `started`, one `round` per loop step (kind `model`: the round's tool calls; kind `tools`: their results, summarised), then `answer` or `error`", "parameters": id,
                "requestBody": json_body(json!({"type": "object", "required": ["question"], "properties": {"question": {"type": "string"}, "stream": {"type": "boolean"}}})),
                "responses": ok("the answer, supporting lines and trace path", json!({"type": "object"}))}}
        }
    })
}
