#!/bin/sh
# build-image.sh TAG: the stand-in kubelet image, offline: the guest's static busybox, its perl
# (perl-base, Essential in Debian) with the shared libraries it links for the static pods' inotify
# watch (Debian's busybox has no inotifyd), and ./kubelet as entrypoint, imported with
# `podman import` (no registry).
# Built once a boot: the image is labeled with a hash of what goes in it, and a later build
# with the same inputs tags that image instead (each VM suite asks for it; a build took ~8 s).
set -eu
tag=${1:-localhost/kubelet-standin:test}
here=$(cd "$(dirname "$0")" && pwd)
perl=$(command -v perl) || { echo "build-image.sh: no perl (./static-pods watches with it)" >&2; exit 1; }
inputs=$(cat "$0" "$here/kubelet" "$here/static-pods" /bin/busybox "$perl" | sha256sum | cut -c1-32)
have=$(podman images -q --filter "label=standin=$inputs" | head -1)
if [ -n "$have" ]; then
  podman tag "$have" "$tag"
  echo "$tag (the image built from the same inputs)"
  exit 0
fi
img=$(mktemp -d)
mkdir -p "$img/bin" "$img/tmp"
cp /bin/busybox "$img/bin/busybox"
for a in $(/bin/busybox --list); do [ "$a" = busybox ] || ln -sf busybox "$img/bin/$a"; done
mkdir -p "$img/usr/bin" && cp "$perl" "$img/usr/bin/perl"
for lib in $(ldd "$perl" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }'); do
  mkdir -p "$img$(dirname "$lib")" && cp -L "$lib" "$img$lib"
done
install -m 0755 "$here/kubelet" "$here/static-pods" "$img/"
tar -C "$img" -cf "$img.tar" .
podman import -q --change 'ENTRYPOINT ["/kubelet"]' --change "LABEL standin=$inputs" "$img.tar" "$tag" >/dev/null
rm -rf "$img" "$img.tar"
echo "$tag"
