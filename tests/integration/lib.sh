# Helpers for shell integration tests: source it, call check/expect_* and finish at the end.
failures=0
pass() { echo "ok   - $*"; }
fail() { echo "FAIL - $*"; failures=$((failures + 1)); }
# expect_rc WANT DESCRIPTION -- command...
expect_rc() {
  local want=$1 what=$2; shift 3
  set +e; out=$("$@" 2>&1); rc=$?; set -e
  if [ "$rc" = "$want" ]; then pass "$what (exit $rc)"; else fail "$what: exit $rc, want $want; output: $out"; fi
}
# expect_out SUBSTRING DESCRIPTION: checks $out from the last expect_rc.
expect_out() {
  if grep -qF -- "$1" <<<"$out"; then pass "$2"; else fail "$2: output lacks '$1': $out"; fi
}
finish() {
  if [ "$failures" -ne 0 ]; then echo "$failures check(s) failed"; exit 1; fi
  echo "all checks passed"
}
