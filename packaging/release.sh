#!/bin/bash
# release.sh [VERSION [OUTDIR]]: everything a nodectl release ships, from this checkout:
#   OUTDIR/bin/{nodectld,nodectl}          release binaries (stripped), ELF-checked (check-elf.sh)
#   OUTDIR/flatcar/nodectl-VERSION-x86-64.raw  sysext, squashfs   + OUTDIR/flatcar/SHA256SUMS
#   OUTDIR/fcos/nodectl-VERSION-x86-64.raw     sysext, erofs+SELinux + OUTDIR/fcos/SHA256SUMS
#   OUTDIR/butane/{fcos,flatcar}-{controller,worker}.bu   the templates with the release's
#     version, URL and image hashes (other variables: butane/example.vars, or VARS=file)
#   OUTDIR/ignition/*.ign                  each rendered to Ignition, checked (spec types, no
#     unknown key; Debian's ignition-validate for spec 3.3.0) and compared with its Butane
#   OUTDIR/SHA256SUMS                      every file above
# VERSION defaults to the workspace's (the binaries report it; another is refused). OUTDIR
# defaults to dist/. NODECTL_URL: where OUTDIR is published (default a placeholder host).
# Per-OS SHA256SUMS are what systemd-sysupdate's url-file source reads.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
cargo_version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
version=${1:-$cargo_version}
out=$(realpath -m "${2:-dist}")
[ "$version" = "$cargo_version" ] || { echo "release.sh: VERSION $version is not the workspace version $cargo_version (Cargo.toml), which the binaries report" >&2; exit 2; }
url=${NODECTL_URL:-https://downloads.example.com/nodectl/$version}
vars_in=${VARS:-packaging/butane/example.vars}
step() { echo "== release.sh: $*"; }

step "build (release, --locked)"
cargo build --release --locked -q -p nodectl --bins
cargo build --release --locked -q -p nodectl-butane
tool=target/release/nodectl-butane
rm -rf "$out" && mkdir -p "$out/bin" "$out/butane" "$out/ignition"
for b in nodectld nodectl; do strip -o "$out/bin/$b" "target/release/$b"; done
ls -l "$out/bin" | sed 1d

step "ELF: libraries and glibc versions Fedora CoreOS and Flatcar have"
packaging/check-elf.sh "$out/bin/nodectld" "$out/bin/nodectl"

step "systemd-sysext images"
packaging/sysext/build.sh "$version" "$out/bin" "$out"
# the FCOS image's labels, read back from its bytes (file_contexts.fcos applied at build time)
labels=$(packaging/sysext/erofs-labels.py "$out/fcos/nodectl-$version-x86-64.raw" /usr/bin/nodectld /usr/bin/nodectl \
  /usr/lib/systemd/system/nodectld.service /usr/lib/systemd/system/multi-user.target.d/10-nodectld.conf \
  /usr/share/dbus-1/system.d/org.nodectl.Agent1.conf /usr/lib/extension-release.d/extension-release.nodectl)
echo "$labels"
diff <(echo "$labels") <(printf '%s\n' \
  "/usr/bin/nodectld system_u:object_r:bin_t:s0" "/usr/bin/nodectl system_u:object_r:bin_t:s0" \
  "/usr/lib/systemd/system/nodectld.service system_u:object_r:systemd_unit_file_t:s0" \
  "/usr/lib/systemd/system/multi-user.target.d/10-nodectld.conf system_u:object_r:systemd_unit_file_t:s0" \
  "/usr/share/dbus-1/system.d/org.nodectl.Agent1.conf system_u:object_r:usr_t:s0" \
  "/usr/lib/extension-release.d/extension-release.nodectl system_u:object_r:lib_t:s0") \
  || { echo "release.sh: the FCOS image's SELinux labels are not Fedora's (above)" >&2; exit 1; }
for os in flatcar fcos; do (cd "$out/$os" && sha256sum -- *.raw >SHA256SUMS); done

step "Butane and Ignition"
vars=$(mktemp) && trap 'rm -f "$vars"' EXIT
files_dir=${FILES_DIR:-docs/examples}
# The bootstrap kubeconfig as Typhoon's cloud modules pass it (indent(10, ...)), from the files
# dir, unless the vars give one.
{ cat "$vars_in"; echo "nodectl_version=$version"; echo "nodectl_url=$url"
  for os in flatcar fcos; do
    echo "nodectl_sysext_${os}_sha512=$(sha512sum "$out/$os/nodectl-$version-x86-64.raw" | cut -d' ' -f1)"
  done
  grep -q '^kubeconfig' "$vars_in" || echo "kubeconfig@10=$(realpath "$files_dir")/bootstrap-kubeconfig"
} >"$vars"
for t in packaging/butane/*.bu; do
  n=$(basename "$t" .bu)
  "$tool" render "$vars" "$t" "$out/butane/$n.bu"
  "$tool" translate "$files_dir" "$out/butane/$n.bu" "$out/ignition/$n.ign"
  "$tool" compare "$files_dir" "$out/butane/$n.bu" "$out/ignition/$n.ign"
done
"$tool" check "$out"/ignition/*.ign
command -v ignition-validate >/dev/null || { echo "release.sh: ignition-validate not found (Debian: ignition; tests/vm/setup-host.sh installs it)" >&2; exit 2; }
for f in "$out"/ignition/*.ign; do
  grep -q '"version": "3.3.0"' "$f" || continue
  # it exits 0 on an unknown key (a warning): any output is a failure
  said=$(ignition-validate "$f" 2>&1) && [ -z "$said" ] || { echo "ignition-validate: $f: ${said:-failed}" >&2; exit 1; }
  echo "ignition-validate: $f: ok"
done

step "SHA256SUMS"
(cd "$out" && find . -type f ! -name SHA256SUMS -printf '%P\n' | LC_ALL=C sort | xargs sha256sum >SHA256SUMS)
echo "release.sh: nodectl $version in $out ($(wc -l <"$out/SHA256SUMS") files)"
