//! Our [`ChatRequest`] in async-openai's typed request form (what goes on the wire).

use async_openai::types::chat::{
    ChatCompletionMessageToolCall, ChatCompletionMessageToolCalls, ChatCompletionNamedToolChoice,
    ChatCompletionRequestAssistantMessage, ChatCompletionRequestAssistantMessageContent,
    ChatCompletionRequestMessage, ChatCompletionRequestSystemMessage,
    ChatCompletionRequestSystemMessageContent, ChatCompletionRequestToolMessage,
    ChatCompletionRequestToolMessageContent, ChatCompletionRequestUserMessage,
    ChatCompletionRequestUserMessageContent, ChatCompletionTool, ChatCompletionToolChoiceOption,
    ChatCompletionTools, CreateChatCompletionRequest, FunctionCall, FunctionName, FunctionObject,
    ResponseFormat, ResponseFormatJsonSchema, ToolChoiceOptions,
};
use serde_json::Value;

use crate::llm::{ChatMessage, ChatRequest, JsonSchemaSpec, Role, ToolChoice};

/// Our request in async-openai's typed form. `response_format` is only sent when
/// `structured_output` is on.
#[allow(deprecated)] // `max_tokens` and `seed`: deprecated by OpenAI, still what compatible servers read.
pub(super) fn to_wire_request(
    request: &ChatRequest,
    structured_output: bool,
) -> CreateChatCompletionRequest {
    let tools = (!request.tools.is_empty()).then(|| {
        request
            .tools
            .iter()
            .map(|tool| {
                ChatCompletionTools::Function(ChatCompletionTool {
                    function: FunctionObject {
                        name: tool.name.clone(),
                        description: Some(tool.description.clone()),
                        parameters: Some(tool.parameters.clone()),
                        strict: None,
                    },
                })
            })
            .collect()
    });
    let tool_choice = request.tool_choice.as_ref().map(|choice| match choice {
        ToolChoice::Auto => ChatCompletionToolChoiceOption::Mode(ToolChoiceOptions::Auto),
        ToolChoice::None => ChatCompletionToolChoiceOption::Mode(ToolChoiceOptions::None),
        ToolChoice::Required => ChatCompletionToolChoiceOption::Mode(ToolChoiceOptions::Required),
        ToolChoice::Function(name) => {
            ChatCompletionToolChoiceOption::Function(ChatCompletionNamedToolChoice {
                function: FunctionName { name: name.clone() },
            })
        }
    });
    let response_format =
        request.response_format.as_ref().filter(|_| structured_output).map(response_format);
    CreateChatCompletionRequest {
        model: request.model.clone(),
        messages: request.messages.iter().map(wire_message).collect(),
        tools,
        tool_choice,
        parallel_tool_calls: request.parallel_tool_calls,
        temperature: request.temperature,
        max_tokens: request.max_tokens,
        seed: request.seed,
        response_format,
        ..CreateChatCompletionRequest::default()
    }
}

#[allow(deprecated)] // `function_call` is filled by `Default` only.
fn wire_message(message: &ChatMessage) -> ChatCompletionRequestMessage {
    let text = message.content.clone().unwrap_or_default();
    match message.role {
        Role::System => ChatCompletionRequestMessage::System(ChatCompletionRequestSystemMessage {
            content: ChatCompletionRequestSystemMessageContent::Text(text),
            name: None,
        }),
        Role::User => ChatCompletionRequestMessage::User(ChatCompletionRequestUserMessage {
            content: ChatCompletionRequestUserMessageContent::Text(text),
            name: None,
        }),
        Role::Assistant => {
            ChatCompletionRequestMessage::Assistant(ChatCompletionRequestAssistantMessage {
                content: message
                    .content
                    .clone()
                    .map(ChatCompletionRequestAssistantMessageContent::Text),
                tool_calls: (!message.tool_calls.is_empty()).then(|| {
                    message
                        .tool_calls
                        .iter()
                        .map(|call| {
                            ChatCompletionMessageToolCalls::Function(
                                ChatCompletionMessageToolCall {
                                    id: call.id.clone(),
                                    function: FunctionCall {
                                        name: call.name.clone(),
                                        arguments: call.arguments.clone(),
                                    },
                                },
                            )
                        })
                        .collect()
                }),
                ..ChatCompletionRequestAssistantMessage::default()
            })
        }
        Role::Tool => ChatCompletionRequestMessage::Tool(ChatCompletionRequestToolMessage {
            content: ChatCompletionRequestToolMessageContent::Text(text),
            tool_call_id: message.tool_call_id.clone().unwrap_or_default(),
        }),
    }
}

/// `response_format: {type: json_schema, ...}`. `strict` is requested only when the schema is
/// within OpenAI's strict subset (every object closed and all its properties required);
/// otherwise strict mode would make the provider reject the request.
fn response_format(spec: &JsonSchemaSpec) -> ResponseFormat {
    let name: String = spec
        .name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' })
        .take(64)
        .collect();
    ResponseFormat::JsonSchema {
        json_schema: ResponseFormatJsonSchema {
            description: None,
            name,
            schema: spec.schema.clone(),
            strict: Some(is_strict_compatible(&spec.schema)),
        },
    }
}

/// Whether every object schema inside `schema` sets `additionalProperties: false` and requires
/// all of its properties.
pub fn is_strict_compatible(schema: &Value) -> bool {
    match schema {
        Value::Object(map) => {
            let is_object = map.get("type").is_some_and(|kind| {
                kind == "object"
                    || kind.as_array().is_some_and(|kinds| kinds.iter().any(|k| k == "object"))
            }) || map.contains_key("properties");
            if is_object {
                let closed = map.get("additionalProperties") == Some(&Value::Bool(false));
                let properties = map.get("properties").and_then(Value::as_object);
                let required: Vec<&str> = map
                    .get("required")
                    .and_then(Value::as_array)
                    .map(|names| names.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                let all_required = properties
                    .is_none_or(|props| props.keys().all(|key| required.contains(&key.as_str())));
                if !closed || !all_required {
                    return false;
                }
            }
            map.values().all(is_strict_compatible)
        }
        Value::Array(items) => items.iter().all(is_strict_compatible),
        _ => true,
    }
}
