#!/usr/bin/env bash
# The test command: installs what the tests need (Debian packages, the Python venv, the default model), builds once,
# and runs every test with ctest. `--quick` leaves out tests labelled slow. Then, in CI (CI=true) or when
# TQ_FUZZ_SECONDS is set, a bounded libFuzzer run of every decoder (scripts/fuzz.sh, 60 s per target in CI), and
# with TQ_SANITIZE=1 the daemon under ASan + UBSan and TSan on part of the integration suite.
# Prints how long each phase took.
set -euo pipefail
cd "$(dirname "$0")/.."
exclude=()
if [ "${1:-}" = "--quick" ]; then exclude=(-LE slow); fi

script_start=$(date +%s)
phase_start=$script_start
phase() {
  local now; now=$(date +%s)
  [ -n "${phase_name:-}" ] && echo "== phase '$phase_name' took $((now - phase_start)) s"
  phase_name=$1; phase_start=$now
  [ -n "$phase_name" ] && echo "== phase '$phase_name'"
  return 0
}

phase install;  bash scripts/install-deps.sh; scripts/python-env.sh > /dev/null
# The data the tests read ships in tests/data (tests/data/README.md): check it is what SHA256SUMS says.
(cd tests/data && sha256sum --check --quiet SHA256SUMS) || { echo "test: tests/data does not match SHA256SUMS"; exit 1; }
phase model;    scripts/fetch-model.sh > /dev/null
# Gemma 3 270M for its golden test (head_dim 256, sliding window); without it those tests skip (and CI fails).
scripts/fetch-model.sh --gemma3 > /dev/null || echo "test: Gemma 3 could not be fetched; its tests will skip"
phase build;    bash scripts/build.sh
phase test
# Tests labelled gpu run too: without a GPU they skip at once, saying why (scripts/gpu-check.sh runs them on one).
# A skipped test shows as "Skipped"; the list after ctest gives each reason, and with CI=true any skip outside the gpu
# label fails this command. The output sizes keep a skipped test's whole output for that list.
junit="$PWD/build/ctest-junit.xml"
rc=0
ctest --test-dir build --output-on-failure -j"$(nproc)" "${exclude[@]}" --output-junit "$junit" \
  --test-output-size-passed 4000000 --test-output-size-failed 4000000 || rc=$?
python3 scripts/test-skips.py "$junit" build || rc=$((rc == 0 ? 1 : rc))
fuzz_seconds=${TQ_FUZZ_SECONDS:-}
[ -z "$fuzz_seconds" ] && [ "${CI:-}" = true ] && fuzz_seconds=60
if [ -n "$fuzz_seconds" ]; then
  phase fuzz
  # A fixed seed in CI: the same commit gets the same verdict; long runs (scripts/fuzz.sh N) explore anew.
  seed=${TQ_FUZZ_SEED:-}
  [ -z "$seed" ] && [ "${CI:-}" = true ] && seed=1
  TQ_FUZZ_SEED=$seed bash scripts/fuzz.sh "$fuzz_seconds" || rc=$((rc == 0 ? 1 : rc))
else
  echo "== fuzz: not run (CI=true or TQ_FUZZ_SECONDS=N runs every fuzz target N seconds)"
fi
# The daemon under ASan + UBSan, then under TSan, running the integration tests that drive its outside-input and its
# concurrent paths (scripts/sanitize.sh; the whole suite is `bash scripts/sanitize.sh address|thread`), with
# TQ_SANITIZE=1. Not on in CI yet: its first clean-clone CI run met a TSan report inside gRPC's callback API that
# no run before had shown (suppressed since, docs/security.md); it goes in after a clean-clone run with that
# suppression shows it steady. A sanitizer build from an empty compiler cache takes 15-40 minutes on 2 cores, so
# the phase stops at a budget (TQ_CI_BUDGET_S, 80 minutes after this script started, inside CI's 90) and says so;
# whatever it compiled is cached, and the next run goes on from there.
if [ "${TQ_SANITIZE:-}" = 1 ]; then
  phase sanitize
  budget=$(( ${TQ_CI_BUDGET_S:-4800} - ($(date +%s) - script_start) ))
  # TSan runs the daemon 10-20x slower: its subset is the front ends' threads (gRPC callbacks, HTTP connections,
  # aborts across tenants); test_lifecycle and test_kv_tiers run under it in `sanitize.sh thread` (docs/security.md).
  tsan_tests=(test_grpc.py test_connections.py test_tenants.py)
  asan_tests=(test_bad_input.py test_request_decoding.py test_auth.py test_connections.py test_grpc.py
              test_kv_tiers.py test_tenants.py test_timeouts.py)
  for run in address thread; do
    if [ "$run" = thread ]; then tests=("${tsan_tests[@]}"); else tests=("${asan_tests[@]}"); fi
    left=$(( budget - ($(date +%s) - phase_start) ))
    if [ "$left" -lt 120 ]; then
      echo "== sanitize $run: NOT RUN, the time budget (TQ_CI_BUDGET_S) is spent (${left} s left)"
      continue
    fi
    src=0
    timeout --kill-after=30 "$left" bash scripts/sanitize.sh "$run" "${tests[@]}" || src=$?
    if [ "$src" -eq 124 ] || [ "$src" -eq 137 ]; then
      echo "== sanitize $run: STOPPED at the time budget (TQ_CI_BUDGET_S; a cold compiler cache?); not a verdict"
    elif [ "$src" -ne 0 ]; then
      rc=$((rc == 0 ? 1 : rc))
    fi
  done
else
  echo "== sanitize: not run (TQ_SANITIZE=1 runs the daemon under ASan+UBSan and TSan)"
fi
phase ""
exit "$rc"
