#!/usr/bin/env bash
# Installs the official MCP Python SDK (pinned, from PyPI) into its own venv and runs
# scripts/mcp_client.py with the arguments given: `scripts/mcp_client.sh TARGET_JSON`.
# The venv is ~/.cache/mragent-mcp (or $MRAGENT_MCP_VENV), made once (under a lock, since
# tests may start two clients at once); wheels only where they exist.
# tests/it/mcp.rs runs it against `mragent mcp` (stdio) and `serve`'s /mcp (HTTP).
set -euo pipefail
version=2.3.0
venv="${MRAGENT_MCP_VENV:-$HOME/.cache/mragent-mcp}"
ready() {
    "$venv/bin/python" -c 'import importlib.metadata as m, sys; sys.exit(m.version("mcp") != sys.argv[1])' \
        "$version" 2> /dev/null
}
if ! ready; then
    mkdir -p "$(dirname "$venv")"
    exec 9> "$venv.lock"
    flock 9
    if ! ready; then
        python3 -m venv "$venv"
        "$venv/bin/pip" install --quiet --disable-pip-version-check --only-binary :all: \
            "mcp==$version" \
            || "$venv/bin/pip" install --quiet --disable-pip-version-check "mcp==$version"
    fi
    flock -u 9
fi
exec "$venv/bin/python" "$(dirname "$0")/mcp_client.py" "$@"
