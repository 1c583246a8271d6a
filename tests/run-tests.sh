#!/bin/bash
# run-tests.sh: every test tier, on a fresh Debian 12 machine (as root):
#   tier 1  cargo test                      pure logic, scratch roots, a private dbus-daemon
#   tier 2  systemd-nspawn                  real systemd PID 1 and system bus
#   tier 3  QEMU VM (TCG)                   SELinux enforcing with MCS, udev, podman
# Installs host packages and builds the cached test image when missing. Exits non-zero when any
# tier fails; a tier that cannot run is a failure, never a skip. TIERS="1 2 3" selects tiers.
set -uo pipefail
cd "$(dirname "$0")/.."
TIERS=${TIERS:-1 2 3}
results=()
failed=0
record() { # record TIER RC
  if [ "$2" = 0 ]; then results+=("PASS tier $1"); else results+=("FAIL tier $1 (exit $2)"); failed=$((failed + 1)); fi
}
hdr() { printf '\n======== %s\n' "$*"; }

if [ "$(id -u)" != 0 ]; then
  echo "run-tests.sh runs the nspawn and VM tiers, which need root" >&2
  exit 2
fi
hdr "host setup"
tests/vm/setup-host.sh || exit 1

if [[ " $TIERS " == *" 1 "* ]]; then
  hdr "tier 1: cargo test"
  # Build first and flush what the build wrote: on a fresh clone gigabytes of build output are
  # still being written back, and the tests that time an fsync'd write (approval_latency's
  # 50 ms guard) would measure that writeback instead (57 ms seen once on a fresh clone).
  if cargo test --workspace --no-run 2>&1; then
    sync
    cargo test --workspace 2>&1 &&
      # the crash campaign: binaries with crash points (feature failpoints), >= 500 kills
      cargo test -p nodectl --features failpoints --test crash_campaign -- --nocapture 2>&1
  fi
  record 1 $?
fi

stage=$(mktemp -d /tmp/nodectl-stage.XXXXXX)
trap 'rm -rf "$stage" "$stage.crash" "$stage.gnupg"' EXIT
if [[ " $TIERS " == *" 2 "* || " $TIERS " == *" 3 "* ]]; then
  hdr "build binaries for the guests"
  # The crash campaign on real systemd (tier 2's crash.sh): its test binary and nodectl with
  # crash points, taken before the plain build below puts the plain nodectl in its place.
  campaign=$(cargo test -p nodectl --features failpoints --test crash_campaign --no-run --message-format=json \
    | jq -r 'select(.reason == "compiler-artifact" and .target.name == "crash_campaign") | .executable' | tail -1)
  [ -x "$campaign" ] || { echo "cannot find the crash_campaign test binary" >&2; exit 1; }
  mkdir -p "$stage.crash" # (not in $stage: the other guests do not need them)
  strip -o "$stage.crash/crash_campaign" "$campaign"
  strip -o "$stage.crash/nodectl-failpoints" target/debug/nodectl
  grep -q 'systemd::start' "$stage.crash/nodectl-failpoints" || { echo "target/debug/nodectl has no crash points" >&2; exit 1; }
  cargo build --bins -p nodectl -p nodectl-testkit -p nodectl-apiserver-double || exit 1
  # What ships (packaging's release profile), for the VM's footprint check (kubelet.sh K5).
  cargo build --release -p nodectl --bin nodectld --bin nodectl || exit 1
  # The relabel benchmark measures what ships too (nodectl-selinux optimized as in nodectld).
  cargo build --release -p nodectl-testkit --bin relabel-bench || exit 1
  live=$(cargo test -p nodectl-units --test systemd_live --no-run --message-format=json 2>/dev/null \
    | jq -r 'select(.reason == "compiler-artifact" and .target.name == "systemd_live") | .executable' | tail -1)
  [ -x "$live" ] || { echo "cannot find the systemd_live test binary" >&2; exit 1; }
  # Same glibc (2.36) on host and guest: the host's build runs there as is. Stripped to copy fast.
  strip -o "$stage/nodectld" target/debug/nodectld
  strip -o "$stage/nodectl" target/debug/nodectl
  strip -o "$stage/nodectld-release" target/release/nodectld
  strip -o "$stage/nodectl-release" target/release/nodectl
  strip -o "$stage/systemd_live" "$live"
  strip -o "$stage/label-observer" target/debug/label-observer
  strip -o "$stage/relabel-bench" target/release/relabel-bench
  strip -o "$stage/sock-listen" target/debug/sock-listen
  strip -o "$stage/rename-now" target/debug/rename-now
  strip -o "$stage/zincati-id" target/debug/zincati-id
  strip -o "$stage/fake-logind" target/debug/fake-logind
  strip -o "$stage/cri-run" target/debug/cri-run
  strip -o "$stage/nodectl-apiserver-double" target/debug/nodectl-apiserver-double
  cp tests/lib/check.sh tests/vm/suites/*.sh tests/bench/bench.sh packaging/systemd/nodectld.service \
     packaging/dbus/org.nodectl.Agent1.conf docs/examples/worker.toml docs/examples/controller.toml \
     docs/examples/bootstrap-kubeconfig "$stage/"
  cp -a tests/kubelet-standin "$stage/"
  mkdir -p "$stage/butane" && cp packaging/butane/*.bu "$stage/butane/"
  hdr "test image"
  tests/vm/build-image.sh || exit 1
  hdr "release artifacts (packaging/release.sh) for the VM's sysext suite"
  # release.sh signs: a throwaway key, in a gpg home of this run's own (sysext.sh S1 places its
  # public part as the configs ship it; S4 signs with keys it makes itself)
  (export GNUPGHOME=$stage.gnupg && mkdir -m 0700 "$GNUPGHOME" &&
    gpg --batch --passphrase '' --quick-gen-key 'nodectl test release <release@nodectl.invalid>' ed25519 sign never 2>/dev/null &&
    NODECTL_SIGNING_KEY=release@nodectl.invalid tests/vm/stage-shipping.sh "$stage"; rc=$?
    gpgconf --kill gpg-agent; exit $rc) || exit 1
  cp packaging/release.sh "$stage/"
fi

if [[ " $TIERS " == *" 2 "* ]]; then
  hdr "tier 2: systemd-nspawn"
  start=$SECONDS
  tests/vm/run-in-nspawn.sh tests/nspawn/suite.sh "$stage"/*
  rc=$?
  # The crash campaign on real systemd, in a boot of its own (a fresh node): ~200 s.
  NSPAWN_TIMEOUT=1200 tests/vm/run-in-nspawn.sh tests/nspawn/crash.sh "$stage"/check.sh "$stage.crash"/*
  crc=$?
  record 2 $((rc != 0 ? rc : crc))
  echo "(tier 2 took $((SECONDS - start)) s)"
fi

if [[ " $TIERS " == *" 3 "* ]]; then
  hdr "tier 3: QEMU VM, SELinux enforcing"
  start=$SECONDS
  # One boot for every VM suite (a boot costs ~20 s under TCG). A hung boot is retried by
  # run-in-vm.sh (VM-BOOT-RETRY lines); the summary counts the retries.
  VM_TIMEOUT=2700 tests/vm/run-in-vm.sh tests/vm/suites/all.sh "$stage"/* -- node.sh secrets.sh kubelet.sh controller.sh typhoon.sh sysext.sh crash.sh bench.sh \
    2> >(tee "$stage/vm.stderr" >&2)
  record 3 $?
  # The harness itself: a hung boot is caught within its bound and retried; a failed suite is not.
  tests/vm/harness-test.sh 2> >(tee "$stage/harness.stderr" >&2)
  record 3-harness $?
  sleep 1 # (the tee processes flush)
  vm_retries=$(cat "$stage/vm.stderr" 2>/dev/null | grep -c '^VM-BOOT-RETRY')
  echo "(tier 3 took $((SECONDS - start)) s; suite boots retried after a hang: $vm_retries)"
fi

hdr "summary"
printf '%s\n' "${results[@]}"
[ -z "${vm_retries:-}" ] || echo "VM boots retried after a hang: $vm_retries (the harness test's own 2 not counted)"
echo "tiers: $(( ${#results[@]} - failed )) passed, $failed failed"
[ "$failed" = 0 ]
