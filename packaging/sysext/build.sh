#!/bin/bash
# build.sh VERSION BINDIR OUTDIR: the systemd-sysext images of nodectl (the way Flatcar ships
# Kubernetes, flatcar/sysext-bakery), from the release binaries in BINDIR:
#   OUTDIR/flatcar/nodectl-VERSION-x86-64.raw  squashfs (for /opt/extensions/nodectl/)
#   OUTDIR/fcos/nodectl-VERSION-x86-64.raw     erofs with SELinux labels (for /var/lib/extensions.d/)
# Both carry usr/bin/{nodectld,nodectl}, nodectld.service (ExecStart from /usr/bin) and
# nodectld.socket (FleetLock's port, where Zincati asks nodectld), a
# multi-user.target drop-in with Upholds=nodectld.service (so nodectld starts on merge), the
# D-Bus policy, nodectl's completions (bash, zsh, fish) and the man pages of nodectl and
# nodectld (from BINDIR/../share, `nodectl-butane shell-docs`), and
# usr/lib/extension-release.d/extension-release.nodectl (ID=_any: one image
# for both OSes' /usr, ARCHITECTURE=x86-64). Reproducible: fixed timestamps, files owned by root.
# SYSEXT_FILE_CONTEXTS: another policy's file_contexts for the erofs labels (the VM tier uses its own).
set -euo pipefail
[ $# -eq 3 ] || { sed -n '2,11p' "$0" >&2; exit 2; }
version=$1 bindir=$2 out=$3
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
case $version in ''|*[!0-9A-Za-z.+~^_-]*) echo "build.sh: VERSION '$version' has characters systemd-sysupdate's @v cannot match" >&2; exit 2;; esac
for b in nodectld nodectl; do
  [ -x "$bindir/$b" ] || { echo "build.sh: $bindir/$b: missing or not executable" >&2; exit 2; }
done
share=$(dirname "$bindir")/share
for f in bash-completion/completions/nodectl man/man1/nodectl.1 man/man8/nodectld.8; do
  [ -f "$share/$f" ] || { echo "build.sh: $share/$f: missing (release.sh makes it: nodectl-butane shell-docs)" >&2; exit 2; }
done
for t in mksquashfs mkfs.erofs; do
  command -v "$t" >/dev/null || { echo "build.sh: $t not found (Debian: squashfs-tools, erofs-utils; tests/vm/setup-host.sh installs them)" >&2; exit 2; }
done
tree=$(mktemp -d /tmp/nodectl-sysext.XXXXXX)
trap 'rm -rf "$tree"' EXIT
u=$tree/usr
install -d -m 0755 "$u/bin" "$u/lib/systemd/system/multi-user.target.d" \
  "$u/lib/extension-release.d" "$u/share/dbus-1/system.d"
install -m 0755 "$bindir/nodectld" "$bindir/nodectl" "$u/bin/"
sed -e 's#/usr/local/bin/#/usr/bin/#g' "$repo/packaging/systemd/nodectld.service" \
  >"$u/lib/systemd/system/nodectld.service"
grep -q '^ExecStart=/usr/bin/nodectld$' "$u/lib/systemd/system/nodectld.service" \
  || { echo "build.sh: packaging/systemd/nodectld.service: ExecStart is not /usr/local/bin/nodectld" >&2; exit 1; }
# FleetLock's port held by systemd (nodectld.service wants it; held where Zincati is told to ask
# nodectld: its condition)
install -m 0644 "$repo/packaging/systemd/nodectld.socket" "$u/lib/systemd/system/nodectld.socket"
cat >"$u/lib/systemd/system/multi-user.target.d/10-nodectld.conf" <<'UNIT'
# From the nodectl sysext: start nodectld when the image is merged (at boot, or by
# `systemd-sysext merge` + `systemctl daemon-reload` on a running node), and keep it up.
[Unit]
Upholds=nodectld.service
UNIT
install -m 0644 "$repo/packaging/dbus/org.nodectl.Agent1.conf" "$u/share/dbus-1/system.d/"
for d in bash-completion zsh fish man; do
  cp -R "$share/$d" "$u/share/"
done
find "$u/share/bash-completion" "$u/share/zsh" "$u/share/fish" "$u/share/man" -type d -exec chmod 0755 {} + -o -type f -exec chmod 0644 {} +
printf 'ID=_any\nARCHITECTURE=x86-64\nSYSEXT_SCOPE=system\nIMAGE_ID=nodectl\nIMAGE_VERSION=%s\n' "$version" \
  >"$u/lib/extension-release.d/extension-release.nodectl"
chmod 0644 "$u/lib/extension-release.d/extension-release.nodectl" "$u/lib/systemd/system/"*.service "$u/lib/systemd/system/"*.socket \
  "$u/lib/systemd/system/multi-user.target.d/"*.conf
find "$tree" -exec touch -h -d @0 {} +
name=nodectl-$version-x86-64.raw
mkdir -p "$out/flatcar" "$out/fcos"
rm -f "$out/flatcar/$name" "$out/fcos/$name"
mksquashfs "$tree" "$out/flatcar/$name" -all-root -noappend -quiet -no-progress -mkfs-time 0 -all-time 0 >/dev/null
mkfs.erofs --quiet -zlz4hc --all-root -T0 -U 00000000-0000-0000-0000-000000000000 \
  --file-contexts="${SYSEXT_FILE_CONTEXTS:-$here/file_contexts.fcos}" "$out/fcos/$name" "$tree"
echo "build.sh: $out/flatcar/$name (squashfs), $out/fcos/$name (erofs, SELinux labels)"
