#!/bin/bash
# boot-batch.sh N [LABEL]: boots the test VM N times with a trivial suite (no retry) and prints
# one line per boot and a summary: boots, hung boots, median seconds from power-on to the test
# runner. Settings come from run-in-vm.sh's environment (VM_ACCEL, VM_APPEND, VM_CPUS, ...), so
# batches compare them. Used to choose the VM tier's settings (docs/testing.md).
set -uo pipefail
cd "$(dirname "$0")/../.."
n=${1:?boots}; label=${2:-${VM_ACCEL:-default}}
suite=$(mktemp); trap 'rm -f "$suite"' EXIT
echo 'cut -d" " -f1 /proc/uptime' >"$suite"
times=(); hung=0
for i in $(seq "$n"); do
  out=$(VM_BOOT_RETRIES=0 VM_BOOT_TIMEOUT=${VM_BOOT_TIMEOUT:-150} tests/vm/run-in-vm.sh "$suite" 2>/dev/null)
  rc=$?
  if [ "$rc" = 126 ]; then
    hung=$((hung + 1)); echo "boot $i: HUNG"
  elif [ "$rc" = 0 ]; then
    t=$(tail -1 <<<"$out"); times+=("$t"); echo "boot $i: runner at ${t}s"
  else
    echo "boot $i: harness exit $rc"
  fi
done
median=$(printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]; else print "-"}')
echo "BATCH $label: $n boots, $hung hung, median ${median}s to the runner"
