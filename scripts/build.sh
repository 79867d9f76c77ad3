#!/usr/bin/env bash
# Configures and builds tqserve into build/ (Release), with ccache kept outside the clone.
# Extra arguments go to the CMake configure step, e.g. scripts/build.sh -DTQ_SANITIZE=address.
set -euo pipefail
cd "$(dirname "$0")/.."
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/tqserve/ccache}
export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-5G}
# Paths relative to the clone in the hash (and no working directory), so that another clone of the same tree
# (CI's, a fresh one) hits what this one compiled.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
build_dir=${TQSERVE_BUILD_DIR:-build}
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release "$@" > "$build_dir.configure.log" 2>&1 \
  || { cat "$build_dir.configure.log"; exit 1; }
cmake --build "$build_dir" -j"$(nproc)"
command -v ccache > /dev/null && ccache --show-stats 2>/dev/null | grep -Ei 'hit|miss' | head -n 3 || true
