#!/usr/bin/env bash
# The test command: installs what the tests need (Debian packages, the Python venv, the default model), builds once,
# and runs every test with ctest. `--quick` leaves out tests labelled slow. Then, in CI (CI=true) or when
# TQ_FUZZ_SECONDS is set, a bounded libFuzzer run of every decoder (scripts/fuzz.sh, 60 s per target in CI).
# Prints how long each phase took.
set -euo pipefail
cd "$(dirname "$0")/.."
exclude=()
if [ "${1:-}" = "--quick" ]; then exclude=(-LE slow); fi

phase_start=$(date +%s)
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
phase ""
exit "$rc"
