#!/usr/bin/env bash
# Runs every fuzz target (fuzz/fuzz_targets) for a bounded time; fails on any crash, panic,
# timeout or out-of-memory. CI runs it after scripts/test.sh.
#
#   FUZZ_SECONDS   time per target in seconds (default 60)
#   FUZZ_TARGETS   targets to run, space-separated (default: all)
#
# cargo-fuzz needs nightly-only rustc flags; RUSTC_BOOTSTRAP=1 lets the stable toolchain take
# them. libFuzzer is compiled by libfuzzer-sys with the system C++ compiler. Without a sanitizer:
# the code under test is safe Rust, where a bug shows as a panic, which libFuzzer reports.
# Inputs found along the way go into fuzz/corpus/<target>/ (git keeps only the seed-* files);
# a crashing input is written to fuzz/artifacts/<target>/.
set -euo pipefail
cd "$(dirname "$0")/.."

CARGO_FUZZ_VERSION=0.13.2
seconds=${FUZZ_SECONDS:-60}

if [[ "$(cargo fuzz --version 2> /dev/null)" != "cargo-fuzz $CARGO_FUZZ_VERSION" ]]; then
    cargo install cargo-fuzz --locked --version "$CARGO_FUZZ_VERSION"
fi

export RUSTC_BOOTSTRAP=1
# Release with debug assertions and overflow checks; 16 codegen units (cargo-fuzz's default of 1
# makes the build of every dependency several times slower, for somewhat faster runs). The same
# flags for build and run, so `run` reuses the build.
flags=(--release --debug-assertions --sanitizer none --codegen-units 16)
targets=${FUZZ_TARGETS:-$(cargo fuzz list)}

cargo fuzz build "${flags[@]}"
for target in $targets; do
    echo "fuzzing $target for ${seconds}s"
    # -timeout: one input taking over 10 s counts as a failure (a hang);
    # -rss_limit_mb: so does more than 2 GiB of memory.
    cargo fuzz run "${flags[@]}" "$target" -- \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
done
echo "fuzz: every target ran ${seconds}s without a crash"
