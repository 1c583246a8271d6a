#!/bin/bash
# harness-test.sh: the test harness's own checks.
#  1. A guest whose test runner never starts (masked on the kernel command line) is caught within
#     the boot bound, killed, and booted again; after the retries run-in-vm.sh exits 126.
#  2. A suite that started and failed is never retried: its exit status comes back after one boot;
#     a boot whose audit log has a denial tests/vm/expected-avc does not list (a USER_AVC too)
#     fails though its suite passed.
#  3. One run at a time (issue 50): run-tests.sh refuses to start while another run holds the
#     lock, or while a VM or container is up (a process named as QEMU stands in for one), exit 2.
#  4. Nothing left behind: run-tests.sh interrupted while its VM runs, by ^C (INT to its process
#     group) or by TERM to it alone (each trapped: its exit status and message checked),
#     run-in-vm.sh killed with SIGKILL, and run-in-nspawn.sh by TERM, leave no QEMU and no nspawn.
set -uo pipefail
cd "$(dirname "$0")/../.."
. tests/lib/check.sh
log=$(mktemp); trap 'rm -f "$log"; rm -rf "$log.d"' EXIT
mkdir -p "$log.d"
# (a hung boot is one whose runner never starts: any bound tells it; 6 s keeps this cheap)
bound=6

printf 'exit 0\n' >"$log.ok"
start=$SECONDS
VM_APPEND="systemd.mask=nodectl-test-runner.service" VM_BOOT_TIMEOUT=$bound VM_BOOT_RETRIES=1 \
  tests/vm/run-in-vm.sh "$log.ok" >/dev/null 2>"$log"
rc=$?
took=$((SECONDS - start))
rm -f "$log.ok"
expect "a guest that never starts the runner: every boot hung (exit 126)" "$rc" 126
expect "it was booted twice (one retry), each caught" "$(grep -c '^VM-BOOT-RETRY' "$log")" 2
check "each hung boot was killed within the bound (${bound}s each, ${took}s in all)" test "$took" -lt $((2 * bound + 30))
check "the console tail is shown" grep -q '  | ' "$log"

printf 'echo suite started; exit 3\n' >"$log.suite"
VM_BOOT_TIMEOUT=60 tests/vm/run-in-vm.sh "$log.suite" >/dev/null 2>"$log"
rc=$?
rm -f "$log.suite"
expect "a suite that fails returns its own status" "$rc" 3
expect "and is not retried" "$(grep -c '^VM-BOOT-RETRY' "$log")" 0

# An unlisted USER_AVC in a boot's audit log (planted as dbus-daemon writes one: no comm=, the
# program as exe= inside msg='...') fails the boot whose suite passed (issue 63: the gate read
# kernel AVCs alone).
cat >"$log.avc" <<'SUITE'
echo "type=USER_AVC msg=audit(1733349000.200:457): pid=310 uid=101 auid=4294967295 ses=4294967295 subj=system_u:system_r:system_dbusd_t:s0-s0:c0.c1023 msg='avc:  denied  { send_msg } for msgtype=method_call interface=org.nodectl.Agent1 member=Converge dest=org.nodectl.Agent1 spid=812 tpid=640 scontext=system_u:system_r:harness_planted_t:s0 tcontext=system_u:system_r:initrc_t:s0 tclass=dbus permissive=0  exe=\"/usr/bin/dbus-daemon\" sauid=101 hostname=? addr=? terminal=?'" >>/var/log/audit/audit.log
exit 0
SUITE
VM_BOOT_TIMEOUT=60 tests/vm/run-in-vm.sh "$log.avc" >/dev/null 2>"$log"
rc=$?
rm -f "$log.avc"
expect "a boot with an unlisted USER_AVC fails though its suite passed (exit 1)" "$rc" 1
check "the gate names it (dbus-daemon's send_msg from the planted domain)" grep -q 'harness_planted_t initrc_t dbus dbus-daemon send_msg' "$log"

# 3. The lock and the start-up check, on a lock of the test's own (the run this test is part of
# holds the real one). TIERS=probe with no image: a run that failed to refuse would do nothing
# much (its VM cannot start).
lk=$log.d/lock
out=$(flock -n "$lk" env -u NODECTL_RUN_LOCKED NODECTL_TEST_LOCK="$lk" TIERS=probe VM_CACHE="$log.d/no-image" tests/run-tests.sh 2>&1)
rc=$?
expect "a run started while another holds the lock refuses (exit 2)" "$rc" 2
check "it says another run holds the lock" grep -q 'another test run holds' <<<"$out"
cp /bin/sleep "$log.d/qemu-system-x86_64"
"$log.d/qemu-system-x86_64" 120 &
fake=$!
for _ in $(seq 50); do [ "$(cat /proc/$fake/comm 2>/dev/null)" = qemu-system-x86 ] && break; sleep 0.1; done
out=$(env -u NODECTL_RUN_LOCKED NODECTL_TEST_LOCK="$lk" TIERS=probe VM_CACHE="$log.d/no-image" tests/run-tests.sh 2>&1)
rc=$?
kill "$fake" 2>/dev/null; wait "$fake" 2>/dev/null
expect "a run started while a VM is up refuses (exit 2)" "$rc" 2
check "it names the VM's process" grep -q "^$fake .*qemu-system-x86_64" <<<"$out"

# 4. Interrupted runs. under PID NAME-REGEX: the NAME processes under PID (any depth).
under() {
  local c
  for c in $(pgrep -P "$1"); do
    grep -qE "$2" "/proc/$c/comm" 2>/dev/null && echo "$c"
    under "$c" "$2"
  done
}
# interrupt HOW NAME RC SAYS CMD...: CMD in a session of its own; once a NAME process runs under
# it, the signal (HOW: INT to the group as ^C sends it; TERM or KILL to CMD alone); then CMD
# must end within 30 s with status RC, having said SAYS (a regex; "" for none), and no NAME
# process be left anywhere.
interrupt() {
  local how=$1 name=$2 want=$3 says=$4 pid i found= ended= rc
  shift 4
  # (perl: a command started with & by a script ignores INT, which it could not trap then;
  # a run started at a terminal does not)
  setsid perl -e '$SIG{INT} = "DEFAULT"; exec @ARGV or die "exec: $!"' "$@" >"$log.d/out" 2>&1 &
  pid=$!
  for i in $(seq 300); do
    [ -n "$(under "$pid" "$name")" ] && { found=1; break; }
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  expect "$how: $1 started its $name" "${found:-no}" 1
  case $how in
    INT) kill -INT -- "-$pid" ;;
    *) kill "-$how" "$pid" ;;
  esac
  for i in $(seq 150); do kill -0 "$pid" 2>/dev/null || { ended=1; break; }; sleep 0.2; done
  expect "$how: $1 ended within 30 s" "${ended:-no}" 1
  wait "$pid" 2>/dev/null; rc=$?
  expect "$how: $1 exited $want" "$rc" "$want"
  [ -z "$says" ] || check "$how: $1 said so" grep -qE "$says" "$log.d/out"
  sleep 1
  # (a zombie is dead, only not yet reaped by PID 1, which is slow to here: not left behind)
  expect "$how: no $name left behind" "$(pgrep -a "$name" | while read -r p rest; do
    [ "$(awk '{print $3}' "/proc/$p/stat" 2>/dev/null)" = Z ] || echo "$p $rest"; done)" ""
  [ -z "$ended" ] && kill -KILL -- "-$pid" 2>/dev/null
  [ -n "$found" ] && [ -n "$ended" ] || sed 's/^/  | /' "$log.d/out" | tail -20
}
interrupt INT '^qemu-system' 130 'interrupted \(INT\)' env TIERS=probe NODECTL_RUN_LOCKED=harness tests/run-tests.sh
interrupt TERM '^qemu-system' 143 'interrupted \(TERM\)' env TIERS=probe NODECTL_RUN_LOCKED=harness tests/run-tests.sh
printf 'sleep 600\n' >"$log.d/sleep.sh"
# SIGKILL cannot be trapped: QEMU goes with its runner by its parent-death signal
interrupt KILL '^qemu-system' 137 '' tests/vm/run-in-vm.sh "$log.d/sleep.sh"
interrupt TERM '^systemd-nspawn' 143 '' tests/vm/run-in-nspawn.sh "$log.d/sleep.sh"
summary "harness"
