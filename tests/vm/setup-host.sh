#!/bin/bash
# setup-host.sh: host packages for building and testing nodectl on Debian 12 (root). Idempotent.
# qemu comes from bookworm-backports when the machine already has a backports qemu-utils
# (bookworm's qemu-system 7.2 conflicts with it).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
qemu_from=()
if dpkg-query -W -f='${Version}' qemu-utils 2>/dev/null | grep -q bpo; then
  if [ ! -f /etc/apt/sources.list.d/bookworm-backports.sources ]; then
    printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
      >/etc/apt/sources.list.d/bookworm-backports.sources
  fi
  qemu_from=(-t bookworm-backports)
fi
need=(libselinux1-dev clang libclang-dev pkg-config dbus systemd-container debootstrap e2fsprogs binutils
      squashfs-tools erofs-utils ignition containerd protobuf-compiler
      policycoreutils selinux-utils setools attr busybox-static bc jq gpg gpg-agent procps
      prometheus prometheus-node-exporter groff-base)
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
missing=()
for p in "${need[@]}"; do installed "$p" || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ] || ! installed qemu-system-x86; then
  apt-get update -qq
  [ ${#missing[@]} -eq 0 ] || apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # The tests run promtool and node_exporter themselves: the services the packages start on
  # this machine (when this script installed them) are stopped and disabled.
  for svc in prometheus prometheus-node-exporter; do
    if [[ " ${missing[*]} " == *" $svc "* ]] && [ -d /run/systemd/system ]; then
      systemctl disable --now "$svc.service" >/dev/null 2>&1 || true
    fi
  done
  # only qemu from backports: -t for everything would move systemd-container etc. too
  installed qemu-system-x86 || apt-get install -y -qq --no-install-recommends "${qemu_from[@]}" \
    qemu-system-x86 qemu-system-common qemu-system-data >/dev/null
fi
echo "[setup-host] host packages present"
