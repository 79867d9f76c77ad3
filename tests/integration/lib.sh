# Helpers for shell integration tests: source it, call check/expect_* and finish at the end.
failures=0
pass() { echo "ok   - $*"; }
fail() { echo "FAIL - $*"; failures=$((failures + 1)); }
# expect_rc WANT DESCRIPTION -- command... (the line says the seconds it took: where a slow test spends its time)
expect_rc() {
  local want=$1 what=$2 t0=$SECONDS; shift 3
  set +e; out=$("$@" 2>&1); rc=$?; set -e
  if [ "$rc" = "$want" ]; then pass "$what (exit $rc, $((SECONDS - t0)) s)"
  else fail "$what: exit $rc, want $want, $((SECONDS - t0)) s; output: $out"; fi
}
# expect_out SUBSTRING DESCRIPTION: checks $out from the last expect_rc.
expect_out() {
  if grep -qF -- "$1" <<<"$out"; then pass "$2"; else fail "$2: output lacks '$1': $out"; fi
}
# Skips: a test that cannot run here says why with the marker "[  SKIPPED ]" and exits 77 (TQ_SKIP_EXIT_CODE in
# cmake/tq_helpers.cmake), which ctest reports as Skipped; scripts/test-skips.py lists the reasons, and in CI any skip
# outside the gpu label fails the test command.
skips=0
# skip_test REASON: nothing of the test can run here.
skip_test() { echo "[  SKIPPED ] $*"; exit 77; }
# skip_case REASON: one case cannot run here; the rest goes on, and finish exits 77 if nothing failed.
skip_case() { echo "[  SKIPPED ] $*"; skips=$((skips + 1)); }
finish() {
  if [ "$failures" -ne 0 ]; then echo "$failures check(s) failed"; exit 1; fi
  if [ "$skips" -ne 0 ]; then echo "all checks that ran passed; $skips case(s) skipped"; exit 77; fi
  echo "all checks passed"
}
