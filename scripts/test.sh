#!/usr/bin/env bash
# The project's one test command (README "Run the tests"; CI runs exactly this).
# Formatting, lints with warnings as errors, then every test in the release profile (the dev
# profile with optimised dependencies builds about twice as slowly here), then schemathesis
# against a live `serve` (tests/it/schemathesis.rs, ignored by the default run; it installs
# schemathesis from PyPI into a venv through scripts/schemathesis.sh). Its budget:
# MRAGENT_SCHEMATHESIS_EXAMPLES (cases per operation and phase) and MRAGENT_SCHEMATHESIS_SECONDS.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all --check
cargo clippy --release --all-targets --features candle-baseline --locked -- -D warnings
cargo test --release --locked
cargo test --release --locked --test it -- --ignored --nocapture schemathesis
