#!/bin/bash
# harness-test.sh: the VM harness's own checks (issue: a hung boot is caught and retried).
#  1. A guest whose test runner never starts (masked on the kernel command line) is caught within
#     the boot bound, killed, and booted again; after the retries run-in-vm.sh exits 126.
#  2. A suite that started and failed is never retried: its exit status comes back after one boot.
set -uo pipefail
cd "$(dirname "$0")/../.."
. tests/lib/check.sh
log=$(mktemp); trap 'rm -f "$log"' EXIT
bound=45

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
VM_BOOT_TIMEOUT=$bound tests/vm/run-in-vm.sh "$log.suite" >/dev/null 2>"$log"
rc=$?
rm -f "$log.suite"
expect "a suite that fails returns its own status" "$rc" 3
expect "and is not retried" "$(grep -c '^VM-BOOT-RETRY' "$log")" 0
summary "harness"
