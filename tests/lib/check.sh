# check.sh: tiny PASS/FAIL helpers for the in-guest suites (sourced). Ends with the plain
# closing line "SUITE: N passed, N failed".
# A line that ends 3 s or more after the previous one (or the start) says how long it took,
# `[+Ns]`: where a suite's time goes.
PASSED=0; FAILED=0; CHECK_T=$SECONDS
took() { local d=$((SECONDS - CHECK_T)); CHECK_T=$SECONDS; TOOK=; [ "$d" -lt 3 ] || TOOK=" [+${d}s]"; }
pass() { took; echo "PASS $*$TOOK"; PASSED=$((PASSED + 1)); }
fail() { took; echo "FAIL $*$TOOK"; FAILED=$((FAILED + 1)); }
# check NAME COMMAND...: PASS when COMMAND exits 0; its output is shown indented either way.
check() {
  local name=$1; shift
  local out rc
  out=$("$@" 2>&1); rc=$?
  [ -n "$out" ] && printf '%s\n' "$out" | sed 's/^/  | /' | head -60
  if [ $rc = 0 ]; then pass "$name"; else fail "$name (exit $rc)"; fi
}
# setup NAME COMMAND...: an assert of the test's own setup (what it installed or wrote itself),
# not of nodectl: no result, so not counted as passed; when it does not hold, the suite fails
# ("FAIL setup: NAME"), since what follows would test something else.
setup() {
  local name=$1; shift
  local out rc
  out=$("$@" 2>&1); rc=$?
  if [ $rc = 0 ]; then
    echo "  | setup: $name"
  else
    [ -n "$out" ] && printf '%s\n' "$out" | sed 's/^/  | /' | head -20
    fail "setup: $name (exit $rc)"
  fi
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
# converge_pass NAME: `nodectl converge`, then a check that a pass ran and was published after
# it (it returns once the pass is asked for): an equality after it that would also hold when no
# pass ran proves nothing otherwise.
converge_pass() {
  local before
  before=$(nodectl status --json | jq .daemon.passes)
  nodectl converge >/dev/null 2>&1
  check "$1: a pass ran after nodectl converge" wait_until 10 sh -c \
    "nodectl status --json | jq -e '.daemon.passes > $before and .daemon.state == \"ready\"'"
}
summary() {
  echo "$1: $PASSED passed, $FAILED failed"
  [ "$FAILED" = 0 ]
}
