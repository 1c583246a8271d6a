#!/bin/bash
# run-in-nspawn.sh SCRIPT [FILE...]: boot the test rootfs with systemd-nspawn (systemd PID 1, a
# system bus; no SELinux, no udev) and run SCRIPT in it as root. Files are copied to /test.
# Exit status: SCRIPT's (124 timeout, 125 harness error). The rootfs is never modified
# (--volatile=overlay). Env: VM_CACHE, NSPAWN_TIMEOUT=300, KEEP=1.
# Nothing is left behind: systemd-nspawn is this script's child, stopped (TERM, then KILL after
# 10 s) when the script ends however it ends; the timeout is kept by the script.
set -euo pipefail
VM_CACHE=${VM_CACHE:-/var/cache/nodectl-vm}
R=$VM_CACHE/rootfs
[ $# -ge 1 ] || { sed -n '2,6p' "$0"; exit 2; }
script=$1; shift
[ -x "$R/usr/lib/systemd/systemd" ] || { echo "no rootfs in $R: run tests/vm/build-image.sh" >&2; exit 125; }
command -v systemd-nspawn >/dev/null || { echo "systemd-nspawn missing: run tests/vm/setup-host.sh" >&2; exit 125; }
exec 8>>"$VM_CACHE/.lock"
flock -s -w 3600 8 || { echo "the rootfs in $VM_CACHE is being rebuilt for over an hour" >&2; exit 125; }
work=$(mktemp -d /tmp/nodectl-nspawn.XXXXXX)
# (nspawn stops its container's systemd on TERM: 10 s for that before KILL)
CHILD_GRACE=100
. "$(dirname "$0")/child.sh"
share=$work/share; mkdir -p "$share"
install -m 0755 "$script" "$share/run.sh"
for f in "$@"; do cp -a "$f" "$share/"; done
set +e
# The host has no systemd: --register=no --keep-unit. --private-network: links stay inside.
# "nodectl.test=1" after --boot reaches PID 1 as if on the kernel command line.
# (setpriv --pdeathsig: nspawn is killed with this script even when it is killed with SIGKILL)
setpriv --pdeathsig KILL systemd-nspawn -q -D "$R" --volatile=overlay --register=no --keep-unit \
  --private-network --bind="$share:/test" --machine=nodectl-test --console=pipe \
  --boot -- nodectl.test=1 >"$work/console.log" 2>&1 </dev/null &
child=$!
start=$SECONDS nrc=
while kill -0 "$child" 2>/dev/null; do
  if [ $((SECONDS - start)) -ge "${NSPAWN_TIMEOUT:-300}" ]; then
    stop_child 100; nrc=124
    break
  fi
  tick
done
if [ -z "$nrc" ]; then wait "$child"; nrc=$?; child=; fi
set -e
[ -f "$share/out/output.log" ] && cat "$share/out/output.log"
rc=125; [ -f "$share/out/rc" ] && rc=$(cat "$share/out/rc"); [ $nrc = 124 ] && rc=124
if [ "$rc" = 124 ] || [ "$rc" = 125 ]; then
  echo "---- nspawn_rc=$nrc; console tail:" >&2; tail -40 "$work/console.log" >&2
fi
exit "$rc"
