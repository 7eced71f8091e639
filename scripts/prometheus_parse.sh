#!/usr/bin/env bash
# Parses a Prometheus text exposition (stdin) with the official Python client's parser
# (`prometheus_client.parser`, pinned, from PyPI) and prints it as JSON
# (scripts/prometheus_parse.py). The venv is ~/.cache/mragent-metrics (or
# $MRAGENT_METRICS_VENV), made once.
# tests/it/metrics.rs pipes a live `serve`'s `GET /metrics` through it.
set -euo pipefail
version=0.26.0
venv="${MRAGENT_METRICS_VENV:-$HOME/.cache/mragent-metrics}"
if ! "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('prometheus-client') != '$version')" 2> /dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "prometheus-client==$version"
fi
exec "$venv/bin/python" "$(dirname "$0")/prometheus_parse.py"
