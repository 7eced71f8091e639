#!/usr/bin/env bash
# The project's one test command (README "Run the tests"; CI runs exactly this).
# Formatting, lints with warnings as errors, then every test in the release profile (the dev
# profile with optimised dependencies builds about twice as slowly here).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all --check
cargo clippy --release --all-targets --locked -- -D warnings
cargo test --release --locked
