# check.sh: tiny PASS/FAIL helpers for the in-guest suites (sourced). Ends with the plain
# closing line "SUITE: N passed, N failed".
PASSED=0; FAILED=0
pass() { echo "PASS $*"; PASSED=$((PASSED + 1)); }
fail() { echo "FAIL $*"; FAILED=$((FAILED + 1)); }
# check NAME COMMAND...: PASS when COMMAND exits 0; its output is shown indented either way.
check() {
  local name=$1; shift
  local out rc
  out=$("$@" 2>&1); rc=$?
  [ -n "$out" ] && printf '%s\n' "$out" | sed 's/^/  | /' | head -60
  if [ $rc = 0 ]; then pass "$name"; else fail "$name (exit $rc)"; fi
}
# expect NAME ACTUAL EXPECTED
expect() {
  if [ "$2" = "$3" ]; then pass "$1 ($2)"; else fail "$1: got '$2', want '$3'"; fi
}
# wait_until SECONDS COMMAND...: retries COMMAND every 0.2 s (test-side only).
wait_until() {
  local deadline=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -ge $deadline ] && return 1
    sleep 0.2
  done
}
summary() {
  echo "$1: $PASSED passed, $FAILED failed"
  [ "$FAILED" = 0 ]
}
