#!/usr/bin/env bash
# Runs every fuzz target (fuzz/fuzz_targets) for a bounded time; fails on any crash, panic,
# timeout or out-of-memory. CI runs it after scripts/test.sh.
#
#   FUZZ_SECONDS   time per target in seconds (default 60)
#   FUZZ_TARGETS   targets to run, space-separated (default: all)
#
# The targets are libFuzzer binaries (libfuzzer-sys, which compiles libFuzzer with the system
# C++ compiler), built in the release profile of the test build, in the same target/, so every
# dependency the tests compiled is reused. scripts/fuzz-rustc instruments only the workspace's
# own crates (the code under test and the targets) with libFuzzer's coverage, debug assertions
# and overflow checks: the flags cargo-fuzz would set, without its rebuild of every dependency
# and without installing cargo-fuzz. No sanitizer: the code under test is safe Rust, where a
# bug shows as a panic, which libFuzzer reports.
# Inputs found along the way go into fuzz/corpus/<target>/ (git keeps only the seed-* files);
# a crashing input is written to fuzz/artifacts/<target>/.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${FUZZ_SECONDS:-60}
targets=${FUZZ_TARGETS:-$(basename -s .rs fuzz/fuzz_targets/*.rs)}

RUSTC_WORKSPACE_WRAPPER="$PWD/scripts/fuzz-rustc" \
    cargo build --release --locked -p mragent-fuzz --bins
for target in $targets; do
    echo "fuzzing $target for ${seconds}s"
    mkdir -p "fuzz/corpus/$target" "fuzz/artifacts/$target"
    # -timeout: one input taking over 10 s counts as a failure (a hang);
    # -rss_limit_mb: so does more than 2 GiB of memory.
    "target/release/$target" "fuzz/corpus/$target" \
        -artifact_prefix="fuzz/artifacts/$target/" \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
done
echo "fuzz: every target ran ${seconds}s without a crash"
