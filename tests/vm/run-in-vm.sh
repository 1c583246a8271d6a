#!/bin/bash
# run-in-vm.sh SCRIPT [FILE...] [-- ARG...]: boot the test VM (QEMU TCG; SELinux enforcing with
# MCS, udev, podman) and run SCRIPT ARG... in it as root (unconfined_t). Files are copied to /test
# (a 9p share).
# Exit status: SCRIPT's (124 timeout, 125 harness error, 126 every boot hung; 1 when the boot had
# an SELinux denial tests/vm/expected-avc does not list: tests/vm/avc-gate.sh). The disk is attached
# snapshot=on, so the cached image is never modified. Env: VM_CACHE, VM_MEM=2048, VM_CPUS=2,
# VM_TIMEOUT=900, KEEP=1, VM_APPEND (extra kernel parameters), VM_ACCEL (QEMU's -accel; the
# default was chosen by a batch of boots, docs/testing.md), VM_REBOOT=1 (a reboot of the guest
# resets it in the same QEMU, keeping the disk's overlay, and the runner runs SCRIPT again: the
# power-cut campaign; without it a reboot ends QEMU).
# A boot that hangs (the runner's TESTRUNNER-START not seen within VM_BOOT_TIMEOUT=150 s: TCG
# boots take 20-40 s here; about one in six used to stall in RCU forever) is killed, its console
# tail shown, and the VM booted again, at most VM_BOOT_RETRIES=2 more times. A suite that started
# is never retried, whatever its result. Each retry is logged as "VM-BOOT-RETRY" (the test
# command's summary counts them).
# Nothing is left behind: QEMU is this script's child, killed when the script ends however it
# ends (INT, TERM, HUP, a failed command); its timeout is kept by the script, not by GNU timeout
# (which put QEMU in a process group of its own, out of reach of ^C). The image is held with a
# shared lock while QEMU runs (build-image.sh takes it exclusive to rebuild).
# /dev/kvm here is PVM-backed and cannot run a stock kernel: TCG is used.
set -euo pipefail
VM_CACHE=${VM_CACHE:-/var/cache/nodectl-vm}
[ $# -ge 1 ] || { sed -n '2,7p' "$0"; exit 2; }
script=$1; shift
for f in vmlinuz initrd.img disk.raw; do
  [ -f "$VM_CACHE/$f" ] || { echo "missing $VM_CACHE/$f: run tests/vm/build-image.sh" >&2; exit 125; }
done
exec 8>>"$VM_CACHE/.lock"
flock -s -w 3600 8 || { echo "the VM image in $VM_CACHE is being rebuilt for over an hour" >&2; exit 125; }
work=$(mktemp -d /tmp/nodectl-vm.XXXXXX)
CHILD_GRACE=20
. "$(dirname "$0")/child.sh"
share=$work/share; mkdir -p "$share"
files=(); args=()
while [ $# -gt 0 ]; do
  if [ "$1" = -- ]; then shift; args=("$@"); break; fi
  files+=("$1"); shift
done
for f in "${files[@]}"; do cp -a "$f" "$share/"; done
install -m 0755 "$script" "$share/run-script"
quoted=""
[ ${#args[@]} -eq 0 ] || quoted=$(printf ' %q' "${args[@]}")
printf 'exec bash /test/run-script%s\n' "$quoted" >"$share/run.sh"
# VM_TCG_APPEND (default "norandmaps mitigations=off"): under TCG, with address-space
# randomization every exec maps ld.so and libc at new addresses, whose code QEMU translates anew
# (its translations are keyed by address), and the kernel's Spectre mitigations (retpolines, RSB
# filling) are emulated too: a batch on 2026-12-07 measured 300 execs of /bin/true in 12.0 s with
# both, 5.8 s without, a boot to the runner 3-12 s faster. Nothing the suites test depends on
# either. The benchmark (tests/run-tests.sh --bench) boots without them (VM_TCG_APPEND=""): its
# figures keep a node's kernel settings.
append="root=/dev/vda rw console=ttyS0 security=selinux selinux=1 enforcing=1 nodectl.test=1 panic=-1 quiet loglevel=4 systemd.show_status=0 ${VM_TCG_APPEND-norandmaps mitigations=off} ${VM_APPEND:-}"
boot_timeout=${VM_BOOT_TIMEOUT:-150}
retries=${VM_BOOT_RETRIES:-2}

# One boot: QEMU in the background, watched until the runner starts (then until it ends or the
# whole timeout, VM_TIMEOUT: 124). Returns QEMU's status, or 200 for a hung boot (QEMU killed).
boot() {
  rm -rf "$share/out"; : >"$work/console.log"; : >"$work/runner.log"
  # One NIC on an isolated QEMU hub with no host backend: no traffic leaves the VM.
  local reboot=-no-reboot
  [ "${VM_REBOOT:-0}" = 1 ] && reboot=""
  # (setpriv --pdeathsig: QEMU dies with this script even when it is killed with SIGKILL)
  setpriv --pdeathsig KILL qemu-system-x86_64 -accel "${VM_ACCEL:-tcg,thread=multi,tb-size=512}" -cpu "${VM_CPU:-max,la57=off}" -machine q35 \
    -m "${VM_MEM:-2048}" -smp "${VM_CPUS:-2}" -display none -monitor none $reboot \
    -kernel "$VM_CACHE/vmlinuz" -initrd "$VM_CACHE/initrd.img" -append "$append" \
    -drive "file=$VM_CACHE/disk.raw,format=raw,if=virtio,snapshot=on,cache=unsafe" \
    -virtfs "local,path=$share,mount_tag=testshare,security_model=none,id=testshare" \
    -netdev hubport,id=n0,hubid=0 -device virtio-net-pci,netdev=n0,mac=52:54:00:12:34:56 \
    -serial "file:$work/console.log" -serial "file:$work/runner.log" \
    -object rng-random,filename=/dev/urandom,id=rng0 -device virtio-rng-pci,rng=rng0 2>"$work/qemu.stderr" &
  child=$!
  local start=$SECONDS started=0 limit=${VM_TIMEOUT:-900}
  while kill -0 "$child" 2>/dev/null; do
    [ "$started" = 1 ] || ! grep -q TESTRUNNER-START "$work/runner.log" 2>/dev/null || started=1
    if [ "$started" = 0 ] && [ $((SECONDS - start)) -ge "$boot_timeout" ]; then
      stop_child 20; return 200
    fi
    if [ $((SECONDS - start)) -ge "$limit" ]; then
      stop_child 20; return 124
    fi
    tick
  done
  local rc=0
  wait "$child" || rc=$?
  child=
  return $rc
}

set +e
attempt=1
while :; do
  boot; qrc=$?
  [ "$qrc" = 200 ] || break
  echo "VM-BOOT-RETRY boot $attempt hung: no TESTRUNNER-START within ${boot_timeout}s; console tail:" >&2
  if [ -s "$work/console.log" ]; then
    tail -15 "$work/console.log" | sed 's/^/  | /' >&2
  else
    echo "  | (the console printed nothing)" >&2
  fi
  if [ "$attempt" -gt "$retries" ]; then
    echo "VM-BOOT-HUNG every boot hung ($attempt)" >&2
    break
  fi
  attempt=$((attempt + 1))
done
set -e
[ -f "$share/out/output.log" ] && cat "$share/out/output.log"
rc=125; [ -f "$share/out/rc" ] && rc=$(cat "$share/out/rc"); [ $qrc = 124 ] && rc=124; [ $qrc = 200 ] && rc=126
{
  [ -f "$share/out/boot.txt" ] && sed 's/^/---- boot: /' "$share/out/boot.txt"
  if [ -s "$share/out/avc.log" ]; then
    echo "---- SELinux: $(grep -c 'permissive=0' "$share/out/avc.log") enforced denials in this boot"
    grep 'permissive=0' "$share/out/avc.log" | head -20
    # Every kind of denial, counted (the basis for a list of expected ones, issue 39): source
    # type, target type, class and permission, with the command.
    echo "---- SELinux: denials by kind (count, permissive, scontext type, tcontext type, class, comm, perms)"
    # (the gate's own reading: kernel AVCs and the USER_AVCs of dbus-daemon and systemd alike)
    "$(dirname "$0")/avc-gate.sh" --kinds "$share/out/avc.log" | head -40
    # A denial not listed in tests/vm/expected-avc (each with its reason) fails the run.
    if ! "$(dirname "$0")/avc-gate.sh" "$share/out/avc.log"; then
      echo "---- SELinux: an unexpected denial: the run fails (list it in tests/vm/expected-avc with a reason if it is expected)"
      [ "$rc" = 0 ] && rc=1
    fi
  fi
  if [ "$rc" = 124 ] || [ "$rc" = 125 ]; then
    echo "---- qemu_rc=$qrc; console tail:"; tail -40 "$work/console.log"; cat "$work/qemu.stderr"
  fi
} >&2
[ -z "${VM_JOURNAL_OUT:-}" ] || cp "$share/out/journal.log" "$VM_JOURNAL_OUT" 2>/dev/null || true
exit "$rc"
