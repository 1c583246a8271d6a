#!/bin/sh
# build-image.sh TAG: the stand-in kubelet image, offline: the guest's static busybox plus
# ./kubelet as entrypoint, imported with `podman import` (no registry).
set -eu
tag=${1:-localhost/kubelet-standin:test}
here=$(cd "$(dirname "$0")" && pwd)
img=$(mktemp -d)
mkdir -p "$img/bin" "$img/tmp"
cp /bin/busybox "$img/bin/busybox"
for a in $(/bin/busybox --list); do [ "$a" = busybox ] || ln -sf busybox "$img/bin/$a"; done
install -m 0755 "$here/kubelet" "$here/static-pods" "$img/"
tar -C "$img" -cf "$img.tar" .
podman import -q --change 'ENTRYPOINT ["/kubelet"]' "$img.tar" "$tag" >/dev/null
rm -rf "$img" "$img.tar"
echo "$tag"
