#!/usr/bin/env bash
# Installs schemathesis (pinned, from PyPI) into its own venv and runs it with the arguments
# given: `scripts/schemathesis.sh run …`. The venv is ~/.cache/mragent-schemathesis (or
# $MRAGENT_SCHEMATHESIS_VENV), made once; wheels only where they exist.
# tests/it/schemathesis.rs runs it against a live `serve`; CI runs that test after the suite.
set -euo pipefail
version=4.32.5
venv="${MRAGENT_SCHEMATHESIS_VENV:-$HOME/.cache/mragent-schemathesis}"
if ! "$venv/bin/schemathesis" --version 2> /dev/null | grep -qx "schemathesis, version $version"; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check --only-binary :all: \
        "schemathesis==$version" \
        || "$venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$version"
fi
exec "$venv/bin/schemathesis" "$@"
