use super::*;

fn check_parse(name: &str, arguments: &str, expected: Result<Tool, &str>) {
    let parsed = Tool::parse(name, arguments);
    match (parsed, expected) {
        (Ok(tool), Ok(expected)) => assert_eq!(tool, expected),
        (Err(error), Err(fragment)) => {
            let text = error.to_string();
            assert!(text.contains(fragment), "`{text}` should contain `{fragment}`");
        }
        (parsed, expected) => {
            panic!("parse({name}, {arguments}) = {parsed:?}, want {expected:?}")
        }
    }
}

#[test]
fn parses_every_tool() {
    check_parse(
        "edges_by_tag",
        r#"{"key":"painting","tag":"Art Class","note":"where she paints"}"#,
        Ok(Tool::EdgesByTag { key: "painting".into(), tag: "Art Class".into() }),
    );
    check_parse(
        "edges_by_tag",
        r#"{"key":" painting ","tag":"Art"}"#,
        Ok(Tool::EdgesByTag { key: "painting".into(), tag: "Art".into() }),
    );
    check_parse(
        "query_conversation_time",
        r#"{"event_id":"D1:3"}"#,
        Ok(Tool::QueryConversationTime { event_id: "D1:3".into() }),
    );
    check_parse(
        "query_event_keywords",
        r#"{"event_id":"D1:3-2"}"#,
        Ok(Tool::QueryEventKeywords { event_id: "D1:3-2".into() }),
    );
    check_parse(
        "query_event_context",
        r#"{"event_id":"D2:1"}"#,
        Ok(Tool::QueryEventContext { event_id: "D2:1".into() }),
    );
    check_parse(
        "query_personal_information",
        r#"{"person":"Caroline"}"#,
        Ok(Tool::QueryPersonalInformation { person: "Caroline".into() }),
    );
    check_parse(
        "query_personal_aspect",
        r#"{"person":"Caroline","aspect":"hobbies"}"#,
        Ok(Tool::QueryPersonalAspect { person: "Caroline".into(), aspect: "hobbies".into() }),
    );
    check_parse(
        "query_topic_events",
        r#"{"topic":"D1:t2"}"#,
        Ok(Tool::QueryTopicEvents { topic: "D1:t2".into() }),
    );
    check_parse(
        "query_memgas",
        r#"{"query":"kitten adoption"}"#,
        Ok(Tool::QueryMemgas { query: "kitten adoption".into(), k: MEMGAS_DEFAULT_K }),
    );
    check_parse(
        "query_memgas",
        r#"{"query":"kitten","k":3}"#,
        Ok(Tool::QueryMemgas { query: "kitten".into(), k: 3 }),
    );
}

#[test]
fn bad_calls_become_readable_errors() {
    check_parse(
        "delete_memory",
        "{}",
        Err("unknown tool `delete_memory`; the tools are: edges_by_tag"),
    );
    check_parse("edges_by_tag", r#"{"key": "painting", "tag": "#, Err("not a valid JSON object"));
    check_parse("edges_by_tag", r#"["painting"]"#, Err("expected an object"));
    check_parse("edges_by_tag", r#"{"key":"painting"}"#, Err("missing field `tag`"));
    check_parse("query_topic_events", r#"{"topic":3}"#, Err("invalid type: integer `3`"));
    check_parse("query_topic_events", r#"{"topic":"D1:t1","k":3}"#, Err("unknown field `k`"));
    check_parse("query_event_context", r#"{"event_id":"  "}"#, Err("`event_id` must not be empty"));
    check_parse("query_event_context", "", Err("missing field `event_id`"));
    check_parse("query_memgas", r#"{"query":"x","k":50}"#, Err("`k` must be between 1 and 10"));
    check_parse("query_memgas", r#"{"query":"x","k":"two"}"#, Err("invalid type: string"));
    let error = Tool::parse("edges_by_tag", "{").err();
    let text = error.map(|error| error.to_tool_result()).unwrap_or_default();
    let value: Value = serde_json::from_str(&text).unwrap_or_default();
    assert!(value["error"].as_str().is_some_and(|text| text.contains("edges_by_tag")));
}

#[test]
fn specs_cover_every_tool_with_described_arguments() {
    assert_eq!(Tool::specs(false).len(), 7);
    let specs = Tool::specs(true);
    let names: Vec<&str> = specs.iter().map(|spec| spec.name.as_str()).collect();
    assert_eq!(names[..7], TOOL_NAMES);
    assert_eq!(names[7], MEMGAS_TOOL);
    for spec in &specs {
        assert!(spec.description.len() > 40, "{} lacks a description", spec.name);
        let properties = spec.parameters["properties"].as_object().cloned().unwrap_or_default();
        assert!(!properties.is_empty());
        for (argument, schema) in properties {
            assert!(schema["type"] == "string" || schema["type"] == "integer");
            let description = schema["description"].as_str().unwrap_or_default();
            assert!(!description.is_empty(), "{}.{argument} lacks a description", spec.name);
        }
        // Every required argument is a declared property.
        for required in spec.parameters["required"].as_array().cloned().unwrap_or_default() {
            assert!(spec.parameters["properties"].get(required.as_str().unwrap_or("")).is_some());
        }
    }
}
