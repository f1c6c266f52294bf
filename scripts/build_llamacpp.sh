#!/usr/bin/env bash
# Build the llama.cpp that PyPI's llama-cpp-python sdist vendors (pinned below) and the small
# driver scripts/llamacpp_ctx.cpp, for the llama.cpp oracle (tests/test_llamacpp_oracle.py).
# CPU only, Release, -j2, only the `llama` library target (no tools, tests, server or CURL).
# Usage: scripts/build_llamacpp.sh [WORKDIR]   (default: .cache/llamacpp)
# Prints the path of the driver binary on its last line; export it as KVPLAN_LLAMACPP_BIN.
# Time on the 2 shared cores of the dev machine (load about 3): sdist download 1 min 49 s, cmake
# configure and build 12 min 2 s (user 8 min 8 s); a rerun with the build folder kept, 4 s.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
WORK=${1:-$REPO/.cache/llamacpp}
PYPI_VERSION=0.3.36         # llama-cpp-python release whose sdist vendors llama.cpp
LLAMACPP_COMMIT=0c1e57098   # ggml-org/llama.cpp commit it vendors (its CHANGELOG)
LLAMACPP_BUILD=11312      # its build number (b11312 = 0c1e57098)
JOBS=${KVPLAN_BUILD_JOBS:-2}
mkdir -p "$WORK"
cd "$WORK"
SRC="$WORK/llama_cpp_python-$PYPI_VERSION/vendor/llama.cpp"
if [ ! -f "$SRC/CMakeLists.txt" ]; then
  python -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$PYPI_VERSION" -d "$WORK"
  tar xzf "llama_cpp_python-$PYPI_VERSION.tar.gz"
fi
cmake -S "$SRC" -B "$WORK/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
  -DLLAMA_BUILD_COMMON=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
  -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=OFF -DGGML_OPENMP=OFF \
  -DLLAMA_BUILD_NUMBER="$LLAMACPP_BUILD" -DLLAMA_BUILD_COMMIT="$LLAMACPP_COMMIT" >/dev/null
cmake --build "$WORK/build" --target llama -j "$JOBS" >/dev/null
LIBS=$(find "$WORK/build" -name 'libllama.a' -o -name 'libggml*.a' | sort -r | tr '\n' ' ')
c++ -O2 -std=c++17 -I"$SRC/include" -I"$SRC/ggml/include" \
  -DKVPLAN_LLAMACPP_BUILD="\"b$LLAMACPP_BUILD\"" "$REPO/scripts/llamacpp_ctx.cpp" \
  -Wl,--start-group $LIBS -Wl,--end-group -lpthread -ldl -lm -o "$WORK/llamacpp_ctx"
echo "$WORK/llamacpp_ctx"
