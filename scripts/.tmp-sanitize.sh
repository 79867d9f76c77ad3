#!/usr/bin/env bash
# The daemon under a sanitizer, running the integration suite (tests/integration/*.py) against it.
# Usage: scripts/sanitize.sh address|thread [pytest arguments, e.g. test files; default: the whole suite]
#   address: ASan + UBSan (build-asan/), thread: TSan (build-tsan/); RelWithDebInfo, CUDA off, only the tqserve
#   binary is built (ccache, as scripts/build.sh). Every sanitizer report is written under build-<san>/reports/;
#   the script fails when a test fails or when any report was written (a race or leak in a daemon whose test
#   passed still fails it). test_skips.py needs the main build's gtest probe and is left out.
set -euo pipefail
cd "$(dirname "$0")/.."
san=${1:?usage: scripts/sanitize.sh address|thread [pytest arguments]}
shift
case "$san" in
  address) dir=build-asan ;;
  thread) dir=build-tsan ;;
  *) echo "sanitize: '$san' is not address or thread"; exit 2 ;;
esac
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/tqserve/ccache}
# Debug info (-g) makes ccache hash the paths: relative to the clone, and not the build directory, so that a fresh
# clone in another place (CI) hits the cache of an earlier one.
export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1
start=$(date +%s)
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTQ_SANITIZE="$san" -DTQ_ENABLE_CUDA=OFF \
  -DTQ_BUILD_TESTS=OFF > "$dir.configure.log" 2>&1 || { cat "$dir.configure.log"; exit 1; }
cmake --build "$dir" -j"$(nproc)" --target tqserve > "$dir.build.log" 2>&1 || { tail -n 40 "$dir.build.log"; exit 1; }
echo "sanitize: $san build took $(( $(date +%s) - start )) s"

reports="$PWD/$dir/reports"
rm -rf "$reports" && mkdir -p "$reports"
supp="$PWD/scripts/sanitizer-suppressions"
# Reports go to files (the daemon's stderr is the tests' log); a report does not stop the daemon, so one test run
# collects all of them.
export ASAN_OPTIONS="log_path=$reports/asan:detect_leaks=1:halt_on_error=0:detect_stack_use_after_return=0"
export UBSAN_OPTIONS="log_path=$reports/ubsan:print_stacktrace=1:halt_on_error=0"
export LSAN_OPTIONS="suppressions=$supp/lsan.txt"
export TSAN_OPTIONS="log_path=$reports/tsan:halt_on_error=0:second_deadlock_stack=1:suppressions=$supp/tsan.txt"
# Sanitized daemons run several times slower: the tests stretch the waits that only bound how long something may
# take (tests/integration/conftest.py: scaled()).
case "$san" in
  address) export TQ_TEST_TIME_SCALE=${TQ_TEST_TIME_SCALE:-8} ;;
  thread) export TQ_TEST_TIME_SCALE=${TQ_TEST_TIME_SCALE:-16} ;;
esac
venv=$(scripts/python-env.sh)
rc=0
[ $# -eq 0 ] && set -- .
(cd tests/integration && TQ_TEST_BINARY_DIR="$PWD/../../$dir" "$venv/bin/python" -m pytest -q -rsfE -p no:cacheprovider \
  --ignore=test_skips.py "$@") || rc=$?
found=$(find "$reports" -type f | sort)
if [ -n "$found" ]; then
  echo "sanitize: $san reports:"
  for f in $found; do echo "== $f"; head -n 60 "$f"; done
  rc=1
fi
echo "sanitize: $san finished in $(( $(date +%s) - start )) s (rc $rc)"
exit "$rc"
