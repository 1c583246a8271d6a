#!/bin/bash
# build-image.sh: build the nodectl test image (Debian bookworm, systemd PID 1, D-Bus, udev,
# SELinux "default" policy with MCS, podman), fully from Debian packages.
#
# Output in $VM_CACHE (default /var/cache/nodectl-vm): rootfs/ (also the nspawn tier's root),
# vmlinuz, initrd.img, disk.raw. The image is keyed on a hash of its inputs (this script,
# guest/*, options); an unchanged image is reused in well under a second.
#
# Env: VM_CACHE, MIRROR, DISK_SIZE=4G, FORCE=1 (redo configure+disk), REBUILD_ROOTFS=1.
# Needs (Debian 12 host, root): debootstrap e2fsprogs policycoreutils (tests/vm/setup-host.sh).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
VM_CACHE=${VM_CACHE:-/var/cache/nodectl-vm}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
DISK_SIZE=${DISK_SIZE:-4G}
R=$VM_CACHE/rootfs
# podman and friends for the kubelet tier; auditd so AVC denials land in audit.log; libcurl4
# and gpg for systemd-pull 254 (sysext.sh S4: it downloads with libcurl and runs gpg --verify
# on SHA256SUMS.gpg), gpg-agent for the test keys S4 makes; docker.io for the Flatcar run (flatcar.sh: kubelet under
# docker, as Typhoon's Flatcar units run it).
PKGS=systemd,systemd-sysv,udev,dbus,linux-image-amd64,initramfs-tools,selinux-basics,selinux-policy-default,policycoreutils,setools,auditd,podman,crun,conmon,netavark,iptables,golang-github-containers-common,iproute2,kmod,busybox-static,jq,containerd,libcurl4,gpg,gpg-agent,docker.io

log() { echo "[build-image] $*" >&2; }
step() { local s=$SECONDS; "$@"; log "$1 took $((SECONDS - s))s"; }

[ "$(id -u)" = 0 ] || { echo "build-image.sh must run as root" >&2; exit 1; }
for b in debootstrap mkfs.ext4 setfiles; do
  command -v "$b" >/dev/null || { echo "missing $b: run tests/vm/setup-host.sh" >&2; exit 1; }
done
mkdir -p "$VM_CACHE"
# One build at a time, and none while a VM or container runs from the image (run-in-vm.sh and
# run-in-nspawn.sh hold this lock shared while they run).
exec 8>>"$VM_CACHE/.lock"
flock -w 3600 8 || { echo "build-image.sh: $VM_CACHE/.lock held for an hour" >&2; exit 1; }

inputs_hash=$( { cat "$0" "$HERE"/guest/*; echo "$DISK_SIZE $MIRROR $PKGS"; } | sha256sum | cut -c1-16)
if [ "${FORCE:-0}" != 1 ] && [ "${REBUILD_ROOTFS:-0}" != 1 ] && [ -f "$VM_CACHE/disk.raw" ] \
   && [ "$(cat "$VM_CACHE/.image-stamp" 2>/dev/null)" = "$inputs_hash" ]; then
  log "image $inputs_hash is current in $VM_CACHE"
  exit 0
fi

debootstrap_rootfs() {
  local stamp="bookworm minbase $PKGS"
  if [ "${REBUILD_ROOTFS:-0}" != 1 ] && [ "$(cat "$R/.debootstrap-stamp" 2>/dev/null)" = "$stamp" ]; then
    log "reusing rootfs $R"; return 0
  fi
  rm -rf "$R"
  log "debootstrap into $R (about 3 minutes)"
  debootstrap --variant=minbase --include="$PKGS" bookworm "$R" "$MIRROR" >"$VM_CACHE/debootstrap.log" 2>&1 \
    || { tail -30 "$VM_CACHE/debootstrap.log" >&2; exit 1; }
  echo "$stamp" >"$R/.debootstrap-stamp"
}

configure() {
  echo nodevm >"$R/etc/hostname"
  printf '127.0.0.1 localhost\n127.0.1.1 nodevm\n' >"$R/etc/hosts"
  echo '/dev/vda / ext4 rw,relatime 0 1' >"$R/etc/fstab"
  chroot "$R" passwd -dq root 2>/dev/null || chroot "$R" passwd -d root >/dev/null
  sed -i 's/^SELINUX=.*/SELINUX=enforcing/' "$R/etc/selinux/config"
  rm -f "$R/.autorelabel"
  # Debian's kernel has ext4 and virtio_blk as modules: a small initrd with just those.
  mkdir -p "$R/etc/initramfs-tools/conf.d"
  printf 'MODULES=list\nCOMPRESS=zstd\n' >"$R/etc/initramfs-tools/conf.d/nodevm.conf"
  printf 'virtio_pci\nvirtio_blk\next4\n' >"$R/etc/initramfs-tools/modules"
  if [ ! -f "$R/.initrd-stamp" ]; then
    chroot "$R" update-initramfs -u -k all >/dev/null 2>&1
    touch "$R/.initrd-stamp"
  fi
  install -m 0755 "$HERE/guest/test-runner" "$R/usr/local/sbin/nodectl-test-runner"
  install -m 0644 "$HERE/guest/test-runner.service" "$R/etc/systemd/system/nodectl-test-runner.service"
  chroot "$R" systemctl enable nodectl-test-runner.service >/dev/null 2>&1
  chroot "$R" systemctl mask serial-getty@ttyS0.service getty@tty1.service \
    apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer e2scrub_reap.service fstrim.timer \
    podman-restart.service podman-auto-update.timer podman-auto-update.service >/dev/null 2>&1 || true
  # containerd runs only where a suite starts it, with the config nodectl ships (typhoon.sh T3):
  # masked, so kubelet.service's Wants=containerd.service does not start it with Debian's
  # defaults under the other suites (their kubelet is a podman stand-in that needs none)
  chroot "$R" systemctl disable containerd.service >/dev/null 2>&1 || true
  chroot "$R" systemctl mask containerd.service >/dev/null 2>&1 || true
  # docker likewise: only flatcar.sh starts it (Flatcar's docker.service with its containerd)
  chroot "$R" systemctl disable docker.service docker.socket >/dev/null 2>&1 || true
  chroot "$R" systemctl mask docker.service docker.socket >/dev/null 2>&1 || true
  chroot "$R" systemctl set-default multi-user.target >/dev/null 2>&1
  [ -s "$R/etc/machine-id" ] || chroot "$R" systemd-machine-id-setup >/dev/null 2>&1
  rm -f "$R"/var/cache/apt/archives/*.deb "$R"/boot/*.dpkg-bak
  # Debian's refpolicy has no container module: a test-only module defines container_t (enforcing,
  # MCS-constrained), container_file_t and container_ro_file_t.
  if ! cmp -s "$HERE/guest/container-shim.cil" "$R/usr/local/share/container-shim.cil" \
     || ! chroot "$R" semodule -l 2>/dev/null | grep -qx container-shim; then
    install -m 0644 "$HERE/guest/container-shim.cil" "$R/usr/local/share/container-shim.cil"
    chroot "$R" semodule -n -X 400 -i /usr/local/share/container-shim.cil
  fi
  # Test-only: let services in initrc_t answer D-Bus calls from unconfined_t (see the file).
  if ! cmp -s "$HERE/guest/nodectl-lab.cil" "$R/usr/local/share/nodectl-lab.cil" \
     || ! chroot "$R" semodule -l 2>/dev/null | grep -qx nodectl-lab; then
    install -m 0644 "$HERE/guest/nodectl-lab.cil" "$R/usr/local/share/nodectl-lab.cil"
    chroot "$R" semodule -n -X 400 -i /usr/local/share/nodectl-lab.cil
  fi
}

relabel() {
  # The host kernel has no SELinux: setfiles writes the security.selinux xattrs unvalidated.
  setfiles -r "$R" -F -T 0 "$R/etc/selinux/default/contexts/files/file_contexts" "$R" 2>&1 \
    | grep -v -E 'Read-only|not supported' >&2 || true
  getfattr -n security.selinux --only-values "$R/usr/bin/systemctl" >/dev/null
}

mkdisk() {
  local kver
  kver=$(ls "$R/boot" | sed -n 's/^vmlinuz-//p' | sort -V | tail -1)
  cp "$R/boot/vmlinuz-$kver" "$VM_CACHE/vmlinuz"
  cp "$R/boot/initrd.img-$kver" "$VM_CACHE/initrd.img"
  rm -f "$VM_CACHE/disk.raw.tmp"
  truncate -s "$DISK_SIZE" "$VM_CACHE/disk.raw.tmp"
  mkfs.ext4 -q -F -L nodectlroot -d "$R" "$VM_CACHE/disk.raw.tmp"   # -d keeps the label xattrs
  mv "$VM_CACHE/disk.raw.tmp" "$VM_CACHE/disk.raw"
  echo "$inputs_hash" >"$VM_CACHE/.image-stamp"
}

step debootstrap_rootfs
step configure
step relabel
step mkdisk
log "image $inputs_hash ready in $VM_CACHE"
