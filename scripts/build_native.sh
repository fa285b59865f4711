#!/usr/bin/env bash
# Build llama.cpp's own `llama-speculative-simple` and `llama-server` from the llama.cpp
# sources vendored in llama-cpp-python (the same version specdec runs on), for
# scripts/compare/native_compare.py (per-prompt mode uses the first, server mode the second).
#
#   scripts/build_native.sh                                  # CPU build; prints llama-speculative-simple
#   scripts/build_native.sh llama-server                     # same build; prints llama-server
#   CMAKE_ARGS="-DGGML_CUDA=on" scripts/build_native.sh      # CUDA build (use a separate
#                                                            # SPECDEC_NATIVE_DIR per backend)
#
# Everything lives outside the repository, in ${SPECDEC_NATIVE_DIR:-$HOME/.cache/specdec/native}:
#   src/     the llama-cpp-python sdist (pip download) and its unpacked tree
#   build/   the cmake build tree; the binaries are build/bin/llama-speculative-simple and
#            build/bin/llama-server
# Nothing of llama.cpp is ever copied into the repository.
#
# Flags match how pip builds llama-cpp-python from source, so the comparison is fair:
# Release, GGML_NATIVE=ON (-march=native), GGML_OPENMP=ON, shared libraries. Only the
# targets needed are compiled (about 15 minutes on 2 cores, most of it ggml-cpu and llama;
# llama-server adds mtmd and the server sources). Both targets are always built together.
# LLAMA_CURL no longer exists in this llama.cpp (it is "deprecated and will be ignored");
# downloads now go through cpp-httplib, so LLAMA_OPENSSL=OFF is what keeps the network out.
# llama-server's web UI is left out (LLAMA_BUILD_UI=OFF: no npm; LLAMA_USE_PREBUILT_UI=OFF:
# no Hugging Face download of prebuilt assets); the server's HTTP API is all we use.
#
# Idempotent: when the requested binary exists its path is printed and nothing is rebuilt
# (SPECDEC_NATIVE_REBUILD=1 forces the cmake step). The requested binary's path is always
# the last line of stdout. The one argument names it: llama-speculative-simple (default) or
# llama-server.
#
# Environment:
#   SPECDEC_NATIVE_DIR     cache directory (default ~/.cache/specdec/native)
#   SPECDEC_LLAMA_SDIST    an already downloaded llama_cpp_python-<ver>.tar.gz, or an unpacked
#                          llama_cpp_python-<ver> directory, used instead of `pip download`
#   LLAMA_CPP_PYTHON_VERSION  (default 0.3.36, the version specdec pins)
#   CMAKE_ARGS             extra cmake arguments, appended last (they win)
#   JOBS                   parallel compile jobs (default: nproc)
set -euo pipefail

VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
CACHE="${SPECDEC_NATIVE_DIR:-$HOME/.cache/specdec/native}"
SRC_DIR="$CACHE/src"
TREE="$SRC_DIR/llama_cpp_python-$VERSION"
LLAMA_DIR="$TREE/vendor/llama.cpp"
BUILD_DIR="$CACHE/build"
TARGETS=(llama-speculative-simple llama-server)
JOBS="${JOBS:-$(nproc 2>/dev/null || echo 2)}"

log() { echo "build_native: $*" >&2; }

case "${1:-llama-speculative-simple}" in
    llama-speculative-simple|speculative-simple) WANT=llama-speculative-simple ;;
    llama-server|server) WANT=llama-server ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) log "error: unknown binary '$1' (use llama-speculative-simple or llama-server)"; exit 2 ;;
esac
BIN="$BUILD_DIR/bin/$WANT"

if [[ -x "$BIN" && "${SPECDEC_NATIVE_REBUILD:-0}" != 1 ]]; then
    log "already built"
    echo "$BIN"
    exit 0
fi

mkdir -p "$SRC_DIR"

# --- sources --------------------------------------------------------------------------------
if [[ ! -f "$LLAMA_DIR/CMakeLists.txt" ]]; then
    if [[ -n "${SPECDEC_LLAMA_SDIST:-}" && -d "${SPECDEC_LLAMA_SDIST}" ]]; then
        log "copying the unpacked sources from $SPECDEC_LLAMA_SDIST"
        rm -rf "$TREE.tmp"
        cp -a "$SPECDEC_LLAMA_SDIST" "$TREE.tmp"
        mv "$TREE.tmp" "$TREE"
    else
        SDIST="$SRC_DIR/llama_cpp_python-$VERSION.tar.gz"
        if [[ ! -f "$SDIST" ]]; then
            if [[ -n "${SPECDEC_LLAMA_SDIST:-}" && -f "${SPECDEC_LLAMA_SDIST}" ]]; then
                log "using the sdist $SPECDEC_LLAMA_SDIST"
                cp "$SPECDEC_LLAMA_SDIST" "$SDIST"
            else
                log "downloading the llama-cpp-python $VERSION sdist"
                python3 -m pip download --no-deps --no-binary :all: \
                    "llama-cpp-python==$VERSION" -d "$SRC_DIR" >&2
                # pip may name it llama_cpp_python-... or llama-cpp-python-...
                found=$(ls "$SRC_DIR"/llama[_-]cpp[_-]python-"$VERSION".tar.gz 2>/dev/null | head -n1 || true)
                [[ -n "$found" ]] || { log "error: pip download left no sdist in $SRC_DIR"; exit 1; }
                [[ "$found" == "$SDIST" ]] || mv "$found" "$SDIST"
            fi
        fi
        log "unpacking $SDIST"
        rm -rf "$TREE.tmp"
        mkdir -p "$TREE.tmp"
        tar -xzf "$SDIST" -C "$TREE.tmp" --strip-components=1
        rm -rf "$TREE"
        mv "$TREE.tmp" "$TREE"
    fi
fi
[[ -f "$LLAMA_DIR/examples/speculative-simple/speculative-simple.cpp" ]] || {
    log "error: $LLAMA_DIR has no examples/speculative-simple"; exit 1; }
[[ -f "$LLAMA_DIR/tools/server/server.cpp" ]] || {
    log "error: $LLAMA_DIR has no tools/server"; exit 1; }

# --- configure and build ----------------------------------------------------------------------
CMAKE_FLAGS=(
    -DCMAKE_BUILD_TYPE=Release
    -DBUILD_SHARED_LIBS=ON
    -DGGML_NATIVE=ON
    -DGGML_OPENMP=ON
    -DLLAMA_BUILD_COMMON=ON
    -DLLAMA_BUILD_EXAMPLES=ON
    -DLLAMA_BUILD_TESTS=OFF
    -DLLAMA_BUILD_TOOLS=ON        # tools/ holds the server; only the targets below are compiled
    -DLLAMA_BUILD_SERVER=ON
    -DLLAMA_BUILD_UI=OFF
    -DLLAMA_USE_PREBUILT_UI=OFF
    -DLLAMA_BUILD_APP=OFF
    -DLLAMA_OPENSSL=OFF
)
# shellcheck disable=SC2206  # CMAKE_ARGS is a space-separated list, as pip's build reads it
EXTRA=(${CMAKE_ARGS:-})

log "configuring in $BUILD_DIR: ${CMAKE_FLAGS[*]} ${EXTRA[*]:-}"
start=$(date +%s)
cmake -S "$LLAMA_DIR" -B "$BUILD_DIR" "${CMAKE_FLAGS[@]}" "${EXTRA[@]}" >&2
log "building ${TARGETS[*]} with $JOBS jobs"
cmake --build "$BUILD_DIR" --config Release --target "${TARGETS[@]}" -j "$JOBS" >&2
log "built in $(( $(date +%s) - start )) s"

for t in "${TARGETS[@]}"; do
    [[ -x "$BUILD_DIR/bin/$t" ]] || { log "error: the build finished but $BUILD_DIR/bin/$t is missing"; exit 1; }
done
echo "$BIN"
