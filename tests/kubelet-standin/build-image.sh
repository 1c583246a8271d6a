#!/bin/sh
# build-image.sh TAG: the stand-in kubelet image, offline: the guest's static busybox, its perl
# (perl-base, Essential in Debian) with the shared libraries it links for the static pods' inotify
# watch (Debian's busybox has no inotifyd), and ./kubelet as entrypoint, imported with
# `podman import` (no registry).
set -eu
tag=${1:-localhost/kubelet-standin:test}
here=$(cd "$(dirname "$0")" && pwd)
img=$(mktemp -d)
mkdir -p "$img/bin" "$img/tmp"
cp /bin/busybox "$img/bin/busybox"
for a in $(/bin/busybox --list); do [ "$a" = busybox ] || ln -sf busybox "$img/bin/$a"; done
perl=$(command -v perl) || { echo "build-image.sh: no perl (./static-pods watches with it)" >&2; exit 1; }
mkdir -p "$img/usr/bin" && cp "$perl" "$img/usr/bin/perl"
for lib in $(ldd "$perl" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }'); do
  mkdir -p "$img$(dirname "$lib")" && cp -L "$lib" "$img$lib"
done
install -m 0755 "$here/kubelet" "$here/static-pods" "$img/"
tar -C "$img" -cf "$img.tar" .
podman import -q --change 'ENTRYPOINT ["/kubelet"]' "$img.tar" "$tag" >/dev/null
rm -rf "$img" "$img.tar"
echo "$tag"
