#!/bin/bash
# fetch-sysupdate.sh DEST: systemd-sysupdate and the systemd-import it runs, from Debian's
# bookworm-backports systemd 254 (the guest's systemd 252 has no sysupdate), with the
# libsystemd-shared-254.so they link, into DEST, for the VM's sysext suite (run with LD_LIBRARY_PATH=DEST). The .debs are cached in
# $VM_CACHE/sysupdate-254 (default /var/cache/nodectl-vm).
set -euo pipefail
dest=$1
cache=${VM_CACHE:-/var/cache/nodectl-vm}/sysupdate-254
mkdir -p "$cache" "$dest"
if ! ls "$cache"/systemd_254*.deb "$cache"/libsystemd-shared_254*.deb "$cache"/systemd-container_254*.deb >/dev/null 2>&1; then
  if ! apt-cache policy systemd | grep -q bookworm-backports; then
    printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
      >/etc/apt/sources.list.d/bookworm-backports.sources
    apt-get update -qq
  fi
  (cd "$cache" && apt-get download -qq systemd/bookworm-backports libsystemd-shared/bookworm-backports \
     systemd-container/bookworm-backports 2>/dev/null)
fi
x=$(mktemp -d) && trap 'rm -rf "$x"' EXIT
for d in "$cache"/systemd_254*.deb "$cache"/libsystemd-shared_254*.deb "$cache"/systemd-container_254*.deb; do
  dpkg-deb -x "$d" "$x"
done
# systemd-import copies a regular-file source, systemd-pull downloads a url-file one and checks
# SHA256SUMS.gpg (sysupdate runs them: SYSTEMD_IMPORT_PATH, SYSTEMD_PULL_PATH)
install -m 0755 "$x/lib/systemd/systemd-sysupdate" "$x/lib/systemd/systemd-import" "$x/lib/systemd/systemd-pull" "$dest/"
install -m 0644 "$x"/usr/lib/x86_64-linux-gnu/systemd/libsystemd-shared-254.so "$dest/"
LD_LIBRARY_PATH=$dest "$dest/systemd-sysupdate" --version | head -1
