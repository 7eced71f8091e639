"""Call the mragent HTTP API (`mragent serve`) with the Python standard library alone.

    mragent serve &                      # 127.0.0.1:8080; set MRAGENT_SERVE_TOKEN to require a token
    python3 data/examples/http_client.py
"""
import json
import os
import urllib.error
import urllib.request

BASE = os.environ.get("MRAGENT_URL", "http://127.0.0.1:8080")
TOKEN = os.environ.get("MRAGENT_SERVE_TOKEN")


def call(method, path, body=None):
    request = urllib.request.Request(BASE + path, method=method)
    if body is not None:
        request.data = json.dumps(body).encode()
        request.add_header("Content-Type", "application/json")
    if TOKEN:
        request.add_header("Authorization", "Bearer " + TOKEN)
    try:
        with urllib.request.urlopen(request, timeout=600) as response:
            return json.load(response)
    except urllib.error.HTTPError as error:  # 4xx/5xx: {"error": {"code", "field", "message"}}
        raise SystemExit(f"{error.code}: {json.load(error)['error']}")


here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "conversation.jsonl")) as file:
    messages = [json.loads(line) for line in file if line.strip()]

print(call("POST", "/v1/conversations/demo/messages", {"messages": messages}))
for hit in call("POST", "/v1/conversations/demo/search", {"query": "dog", "k": 3})["hits"]:
    print(f"{hit['score']:.3f} [{hit['dia_id']}] {hit['date']} {hit['speaker']}: {hit['text']}")
answer = call("POST", "/v1/conversations/demo/ask", {"question": "What is Sam's dog called?"})
print(answer["answer"], "| supported by", [line["dia_id"] for line in answer["supporting"]])
print([c["id"] for c in call("GET", "/v1/conversations")["conversations"]])
