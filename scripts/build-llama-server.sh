#!/usr/bin/env bash
# Builds (once) llama.cpp's `llama-server`, `llama-bench` and `llama-batched-bench` from the llama.cpp sources
# vendored in the llama-cpp-python source distribution on PyPI, outside the clone, and prints llama-server's path
# (the benches are beside it). bench/serving/load.py runs the server as the reference; bench/models/vs_llama.py
# runs llama-bench, bench/models/batched_decode.py llama-batched-bench.
# Idempotent: a second run with the same settings only prints the path.
#
# Settings (TQSERVE_*):
#   TQSERVE_LLAMA_CPP_PY_VERSION  llama-cpp-python version to fetch (default 0.3.36, the one in llama-venv)
#   TQSERVE_LLAMA_SERVER_DIR      where sources, build and binary go (default ~/.cache/tqserve/llama-server)
#   TQSERVE_LLAMA_SERVER_JOBS     parallel compile jobs (default 2)
#   TQSERVE_LLAMA_SERVER_NATIVE   GGML_NATIVE: ON (default; -march=native, like tqserve's build) or OFF
set -euo pipefail
version=${TQSERVE_LLAMA_CPP_PY_VERSION:-0.3.36}
dir=${TQSERVE_LLAMA_SERVER_DIR:-$HOME/.cache/tqserve/llama-server}
jobs=${TQSERVE_LLAMA_SERVER_JOBS:-2}
native=${TQSERVE_LLAMA_SERVER_NATIVE:-ON}
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/tqserve/ccache}
export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-5G}

src="$dir/src/llama_cpp_python-$version"
build="$dir/build-$version"
bin="$build/bin/llama-server"
stamp="$build/.tqserve-settings"
want="version=$version native=$native targets=llama-server,llama-bench,llama-batched-bench"

if [ -x "$bin" ] && [ -x "$build/bin/llama-bench" ] && [ -x "$build/bin/llama-batched-bench" ] \
    && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  echo "$bin"
  exit 0
fi

mkdir -p "$dir/src"
if [ ! -f "$src/vendor/llama.cpp/CMakeLists.txt" ]; then
  sdist=$(ls "$dir"/src/llama_cpp_python-"$version".tar.gz 2>/dev/null || true)
  if [ -z "$sdist" ]; then
    echo "build-llama-server: downloading the llama-cpp-python $version source distribution" >&2
    python3 -m pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
      --dest "$dir/src" "llama-cpp-python==$version" >&2
    sdist="$dir/src/llama_cpp_python-$version.tar.gz"
  fi
  [ -f "$sdist" ] || { echo "build-llama-server: $sdist not found after pip download" >&2; exit 1; }
  rm -rf "$src.tmp" && mkdir -p "$src.tmp"
  tar -xzf "$sdist" -C "$src.tmp" --strip-components=1
  [ -f "$src.tmp/vendor/llama.cpp/CMakeLists.txt" ] \
    || { echo "build-llama-server: no vendor/llama.cpp in $sdist" >&2; exit 1; }
  rm -rf "$src" && mv "$src.tmp" "$src"
fi

launcher=()
command -v ccache > /dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
generator=()
command -v ninja > /dev/null && generator=(-G Ninja)
echo "build-llama-server: configuring $build" >&2
cmake -S "$src/vendor/llama.cpp" -B "$build" "${generator[@]}" "${launcher[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DLLAMA_CURL=OFF -DGGML_NATIVE="$native" -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_COMMON=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_USE_PREBUILT_UI=OFF \
  -DLLAMA_OPENSSL=OFF -DBUILD_SHARED_LIBS=OFF > "$build.configure.log" 2>&1 \
  || { cat "$build.configure.log" >&2; exit 1; }
echo "build-llama-server: building llama-server and the benches with $jobs jobs (log: $build.build.log)" >&2
cmake --build "$build" --target llama-server llama-bench llama-batched-bench -j"$jobs" > "$build.build.log" 2>&1 \
  || { tail -n 50 "$build.build.log" >&2; exit 1; }
for b in "$bin" "$build/bin/llama-bench" "$build/bin/llama-batched-bench"; do
  [ -x "$b" ] || { echo "build-llama-server: $b was not built" >&2; exit 1; }
done
echo "$want" > "$stamp"
echo "$bin"
