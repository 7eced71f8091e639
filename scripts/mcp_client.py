#!/usr/bin/env python3
"""A real MCP client (the official Python SDK) against mragent's memory tools, for
tests/it/mcp.rs. It lists the tools, adds a conversation, lists, shows, searches, asks,
provokes tool errors and checks the server still answers, forgets one message then the whole
conversation, and connects once more in the handshake-era mode. Over HTTP it also checks that a
request without the bearer token gets 401.

It prints one JSON summary of what it saw on standard output and decides nothing: the Rust test
asserts on the summary. A call that raised is recorded with its exception, never fatal.

Usage: mcp_client.py TARGET_JSON, where TARGET_JSON is
  {"transport": "stdio", "command": ..., "args": [...], "cwd": ..., "env": {...}, "messages": FILE}
  {"transport": "http", "url": ..., "token": ..., "messages": FILE}
FILE holds the messages to add, one JSON object per line.
"""

import json
import sys
import traceback

import anyio
import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

TIMEOUT_S = 60


def connection(target, token):
    """What `Client` connects to: the stdio command, or the URL with `token` (if any)."""
    if target["transport"] == "stdio":
        return StdioServerParameters(
            command=target["command"],
            args=target["args"],
            cwd=target["cwd"],
            env=target.get("env") or {},
        )
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(TIMEOUT_S))
    return streamable_http_client(target["url"], http_client=http)


def record(result):
    """A tool result as the test reads it: the error flag and the JSON of its text content."""
    texts = [block.text for block in result.content if getattr(block, "type", "") == "text"]
    try:
        body = json.loads(texts[0]) if texts else None
    except ValueError:
        body = {"unparsed": texts[0]}
    return {
        "is_error": bool(result.is_error),
        "body": body,
        "texts": len(texts),
        "structured_matches": result.structured_content == body,
    }


async def call(client, name, arguments):
    try:
        with anyio.fail_after(TIMEOUT_S):
            return record(await client.call_tool(name, arguments))
    except Exception as error:  # noqa: BLE001 - recorded for the test to see
        return {"exception": f"{type(error).__name__}: {error}"}


def tool_summary(tool):
    schema = tool.input_schema or {}
    return {
        "name": tool.name,
        "description": tool.description or "",
        "schema_type": schema.get("type"),
        "properties": sorted((schema.get("properties") or {}).keys()),
        "required": sorted(schema.get("required") or []),
        "has_ref": "$ref" in json.dumps(schema),
        "read_only": getattr(tool.annotations, "read_only_hint", None),
        "destructive": getattr(tool.annotations, "destructive_hint", None),
    }


async def scenario(target, messages):
    summary = {"transport": target["transport"], "calls": {}}
    calls = summary["calls"]
    async with Client(connection(target, target.get("token")), read_timeout_seconds=TIMEOUT_S) as client:
        summary["protocol_version"] = client.protocol_version
        info = client.server_info
        summary["server_name"] = info.name if info else None
        summary["instructions"] = client.instructions or ""
        listed = await client.list_tools()
        summary["tools"] = [tool_summary(tool) for tool in listed.tools]

        calls["add"] = await call(
            client,
            "add_messages",
            {"conversation": "demo", "messages": messages, "user": "maya", "tags": {"source": "mcp"}},
        )
        calls["add_again"] = await call(client, "add_messages", {"conversation": "demo", "messages": messages})
        calls["add_no_wait"] = await call(
            client, "add_messages", {"conversation": "demo", "messages": messages, "wait": False}
        )
        calls["list"] = await call(client, "list_conversations", {})
        calls["list_user"] = await call(client, "list_conversations", {"user": "maya"})
        calls["list_other_user"] = await call(client, "list_conversations", {"user": "nobody"})
        calls["show"] = await call(client, "show_conversation", {"conversation": "demo"})
        calls["search"] = await call(
            client, "search_memory", {"conversation": "demo", "query": "greyhound dog Pepper", "k": 3}
        )
        calls["search_user"] = await call(
            client,
            "search_memory",
            {"user": "maya", "query": "half marathon Lisbon", "k": 2, "tags": {"source": "mcp"}},
        )
        calls["ask"] = await call(
            client, "ask_memory", {"conversation": "demo", "question": "What is the name of Sam's dog?"}
        )

        # Tool errors: each must be a result flagged isError naming the field, and the server
        # must go on answering.
        calls["error_unknown_conversation"] = await call(
            client, "search_memory", {"conversation": "nobody", "query": "dog"}
        )
        calls["error_bad_id"] = await call(client, "show_conversation", {"conversation": "../etc/passwd"})
        calls["error_missing_id"] = await call(client, "ask_memory", {"question": "Who?"})
        calls["error_both_scopes"] = await call(
            client, "ask_memory", {"conversation": "demo", "user": "maya", "question": "Who?"}
        )
        calls["error_no_messages"] = await call(client, "add_messages", {"conversation": "demo", "messages": []})
        calls["error_bad_message"] = await call(
            client, "add_messages", {"conversation": "demo", "messages": [{"speaker": "Maya"}]}
        )
        calls["error_k"] = await call(client, "search_memory", {"conversation": "demo", "query": "dog", "k": 0})
        calls["error_wrong_type"] = await call(client, "search_memory", {"conversation": 7, "query": "dog"})
        calls["after_errors"] = await call(client, "show_conversation", {"conversation": "demo"})

        hits = ((calls["search"].get("body") or {}).get("hits")) or [{}]
        message = hits[0].get("id", "0" * 32)
        calls["forget_message"] = await call(client, "forget", {"conversation": "demo", "message": message})
        calls["forget_message_again"] = await call(client, "forget", {"conversation": "demo", "message": message})
        calls["forget"] = await call(client, "forget", {"conversation": "demo"})
        calls["show_forgotten"] = await call(client, "show_conversation", {"conversation": "demo"})
        calls["list_after"] = await call(client, "list_conversations", {})

    # A client of the handshake era (the `initialize` exchange) on the same server.
    async with Client(
        connection(target, target.get("token")), mode="legacy", read_timeout_seconds=TIMEOUT_S
    ) as client:
        listed = await client.list_tools()
        summary["legacy"] = {
            "protocol_version": client.protocol_version,
            "tools": sorted(tool.name for tool in listed.tools),
            "list": await call(client, "list_conversations", {}),
        }
    return summary


async def unauthorized(target):
    """Without the token: the status and body of a bare POST, and what the SDK client says."""
    found = {}
    request = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(TIMEOUT_S)) as http:
        response = await http.post(
            target["url"],
            json=request,
            headers={"Accept": "application/json, text/event-stream"},
        )
        found["status"] = response.status_code
        try:
            found["body"] = response.json()
        except ValueError:
            found["body"] = {"unparsed": response.text}
    try:
        with anyio.fail_after(TIMEOUT_S):
            async with Client(connection(target, None), read_timeout_seconds=TIMEOUT_S) as client:
                await client.list_tools()
        found["client_error"] = None
    except BaseException as error:  # noqa: BLE001 - an ExceptionGroup from the task group too
        found["client_error"] = f"{type(error).__name__}: {error}"
    return found


async def main():
    target = json.loads(sys.argv[1])
    with open(target["messages"], encoding="utf-8") as handle:
        messages = [json.loads(line) for line in handle if line.strip()]
    try:
        summary = await scenario(target, messages)
    except BaseException as error:  # noqa: BLE001 - reported in the summary
        summary = {"fatal": "".join(traceback.format_exception(error))}
    if target["transport"] == "http" and target.get("token"):
        summary["unauthorized"] = await unauthorized(target)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    anyio.run(main)
