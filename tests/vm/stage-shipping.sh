#!/bin/bash
# stage-shipping.sh STAGE: what the VM's sysext suite needs, in STAGE: release.sh's whole output
# (dist/), the images labeled with the VM's own file_contexts (sysext-vm/: the VM runs Debian's
# policy, not Fedora's) and a second version of them (sysext-v2/, 0.1.1, for systemd-sysupdate),
# the Butane templates and the tool that renders them, Debian's ignition binary, and
# systemd-sysupdate 254. Needs the VM image (tests/vm/build-image.sh) for its file_contexts.
set -euo pipefail
stage=$1
cd "$(dirname "$0")/../.."
packaging/release.sh "" "$stage/dist"
version=$(ls "$stage/dist/flatcar" | sed -n 's/^nodectl-\(.*\)-x86-64.raw$/\1/p')
fc=$(mktemp) && trap 'rm -f "$fc"' EXIT
debugfs -R "cat /etc/selinux/default/contexts/files/file_contexts" "${VM_CACHE:-/var/cache/nodectl-vm}/disk.raw" >"$fc" 2>/dev/null
grep -q '^/usr/bin(/\.\*)?' "$fc" || { echo "stage-shipping.sh: cannot read the VM image's file_contexts" >&2; exit 1; }
SYSEXT_FILE_CONTEXTS=$fc packaging/sysext/build.sh "$version" "$stage/dist/bin" "$stage/sysext-vm"
SYSEXT_FILE_CONTEXTS=$fc packaging/sysext/build.sh 0.1.1 "$stage/dist/bin" "$stage/sysext-v2"
strip -o "$stage/nodectl-butane" target/release/nodectl-butane
mkdir -p "$stage/butane" && cp packaging/butane/*.bu "$stage/butane/" && cp packaging/butane/example.vars "$stage/"
cp -r packaging/butane/snippets "$stage/butane/" && cp -r tests/typhoon "$stage/"
cp /usr/lib/dracut/modules.d/30ignition/ignition "$stage/ignition"
tests/vm/fetch-sysupdate.sh "$stage/sysupdate"
