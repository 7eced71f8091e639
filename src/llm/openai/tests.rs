use std::sync::Arc;

use serde_json::json;

use super::errors::BODY_EXCERPT;
use super::request::{is_strict_compatible, to_wire_request};
use super::response::WireChatResponse;
use super::transport::Transport;
use super::*;
use crate::llm::secret::Secret;
use crate::llm::{ChatMessage, JsonSchemaSpec, ToolCall, ToolChoice, ToolSpec, Usage};

fn transport() -> Transport {
    Transport::new(
        &LlmConfig::new("http://127.0.0.1:9/v1", Secret::new("sk-unit"), "m"),
        Arc::default(),
    )
    .unwrap()
}

#[test]
fn lenient_response_parsing() {
    let body = json!({
        "id": "x", "provider": "Somebody", "service_tier": "on_demand",
        "choices": [{
            "finish_reason": "tool_calls", "native_finish_reason": "weird",
            "message": {"role": "assistant", "content": null, "refusal": null, "reasoning": "hmm",
                "tool_calls": [
                    {"id": "c1", "function": {"name": "lookup", "arguments": "{\"q\":1}"}, "index": 0},
                    {"function": {"name": "other", "arguments": {"a": 2}}}
                ]}
        }],
        "usage": {"prompt_tokens": 12, "completion_tokens": null, "cost": 0.1}
    });
    let wire: WireChatResponse = serde_json::from_value(body).unwrap();
    let response = transport().chat_response(wire).unwrap();
    assert_eq!(response.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(response.message.content, None);
    assert_eq!(response.usage, Usage { prompt_tokens: 12, completion_tokens: 0 });
    assert_eq!(
        response.message.tool_calls[0],
        ToolCall { id: "c1".into(), name: "lookup".into(), arguments: "{\"q\":1}".into() }
    );
    assert_eq!(response.message.tool_calls[1].id, "call_1");
    assert_eq!(response.message.tool_calls[1].arguments, "{\"a\":2}");
}

#[test]
fn unusable_replies_are_bad_replies_with_their_usage() {
    let usage = json!({"prompt_tokens": 9, "completion_tokens": 2});
    for body in [
        json!({"choices": [], "usage": usage}),
        json!({"choices": [{"finish_reason": "error", "message": {"content": "partial"}}], "usage": usage}),
        json!({"choices": [{"finish_reason": "stop", "message": {"content": "  \n"}}], "usage": usage}),
        json!({"choices": [{"finish_reason": "length", "message": {"content": null}}], "usage": usage}),
    ] {
        let wire: WireChatResponse = serde_json::from_value(body.clone()).unwrap();
        let error = transport().chat_response(wire).unwrap_err();
        let expected = Usage { prompt_tokens: 9, completion_tokens: 2 };
        assert!(
            matches!(&error, Error::BadReply { attempts: 1, usage, .. } if *usage == expected),
            "{body}: {error:?}"
        );
    }
}

#[test]
fn content_parts_are_joined() {
    let wire: WireChatResponse = serde_json::from_value(json!({
        "choices": [{"message": {"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}}]
    }))
    .unwrap();
    assert_eq!(transport().chat_response(wire).unwrap().message.content.as_deref(), Some("ab"));
}

#[test]
fn error_inside_a_200_body_keeps_its_integer_status() {
    let wire: WireChatResponse =
        serde_json::from_value(json!({"error": {"message": "slow down", "code": 429}})).unwrap();
    assert!(matches!(transport().chat_response(wire), Err(Error::RateLimited { .. })));
    let wire: WireChatResponse =
        serde_json::from_value(json!({"error": {"message": "upstream", "code": "provider_down"}}))
            .unwrap();
    assert!(matches!(transport().chat_response(wire), Err(Error::Api { status: 502, .. })));
}

#[test]
fn request_shape_with_tools_and_response_format() {
    let mut request = ChatRequest::new("m", vec![ChatMessage::system("s"), ChatMessage::user("u")]);
    request.tools = vec![ToolSpec {
        name: "f".into(),
        description: "d".into(),
        parameters: json!({"type": "object"}),
    }];
    request.tool_choice = Some(ToolChoice::Function("f".into()));
    request.response_format =
        Some(JsonSchemaSpec { name: "answer schema".into(), schema: json!({"type": "object"}) });
    let on = serde_json::to_value(to_wire_request(&request, true)).unwrap();
    assert_eq!(on["tool_choice"], json!({"type": "function", "function": {"name": "f"}}));
    assert_eq!(on["tools"][0]["type"], "function");
    assert_eq!(on["response_format"]["type"], "json_schema");
    assert_eq!(on["response_format"]["json_schema"]["name"], "answer_schema");
    assert_eq!(on["response_format"]["json_schema"]["strict"], false);
    let off = serde_json::to_value(to_wire_request(&request, false)).unwrap();
    assert!(off.get("response_format").is_none());
}

#[test]
fn strict_subset_detection() {
    assert!(is_strict_compatible(&json!({
        "type": "object", "additionalProperties": false, "required": ["a"],
        "properties": {"a": {"type": "array", "items": {"type": "object", "additionalProperties": false,
            "required": ["b"], "properties": {"b": {"type": "string"}}}}}
    })));
    assert!(!is_strict_compatible(
        &json!({"type": "object", "properties": {"a": {"type": "string"}}})
    ));
    assert!(!is_strict_compatible(&json!({
        "type": "object", "additionalProperties": false, "required": [], "properties": {"a": {}}
    })));
}

#[test]
fn bodies_are_scrubbed_and_bounded() {
    let transport = transport();
    assert_eq!(transport.errors.excerpt("bad key sk-unit"), "bad key ***");
    let long = "é".repeat(3000);
    assert!(transport.errors.excerpt(&long).len() <= BODY_EXCERPT + "…".len());
}

#[test]
fn bad_base_url_is_a_config_error() {
    let config = LlmConfig::new("localhost:8000", Secret::new("k"), "m");
    assert!(matches!(OpenAiChat::new(&config, Arc::default()), Err(Error::Config(_))));
}
