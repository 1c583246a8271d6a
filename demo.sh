#!/bin/bash
# demo.sh: a node coming up under nodectld, in a VM (Debian 12, systemd, SELinux enforcing with
# MCS). On a fresh Debian 12 machine, as root: installs host packages, builds nodectl and the
# cached VM image (about 4 minutes the first time), boots the VM (about 30 s) and prints what
# happens there.
set -euo pipefail
cd "$(dirname "$0")"
[ "$(id -u)" = 0 ] || { echo "demo.sh needs root (packages, debootstrap, qemu)" >&2; exit 2; }
tests/vm/setup-host.sh
cargo build --release --bins
tests/vm/build-image.sh
stage=$(mktemp -d /tmp/nodectl-demo.XXXXXX)
trap 'rm -rf "$stage"' EXIT
cp target/release/nodectld target/release/nodectl target/release/nodectl-apiserver-double packaging/systemd/nodectld.service \
   packaging/dbus/org.nodectl.Agent1.conf "$stage/"
cp docs/examples/worker.toml docs/examples/bootstrap-kubeconfig tests/vm/suites/lib.sh "$stage/"
cp -a tests/kubelet-standin "$stage/"
echo "booting the VM (QEMU TCG, about 30 s)..."
tests/vm/run-in-vm.sh tests/vm/suites/demo.sh "$stage"/*
