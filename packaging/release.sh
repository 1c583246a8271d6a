#!/bin/bash
# release.sh [--check] [VERSION [OUTDIR]]: everything a nodectl release ships, from this checkout:
#   OUTDIR/bin/{nodectld,nodectl}          release binaries (stripped), ELF-checked (check-elf.sh)
#   OUTDIR/share/{bash-completion,zsh,fish,man}  nodectl's completions, the man pages of nodectl
#     and nodectld (clap's generators: nodectl-butane shell-docs), which the images carry
#   OUTDIR/flatcar/nodectl-VERSION-x86-64.raw  sysext, squashfs   + OUTDIR/flatcar/SHA256SUMS{,.gpg}
#   OUTDIR/fcos/nodectl-VERSION-x86-64.raw     sysext, erofs+SELinux + OUTDIR/fcos/SHA256SUMS{,.gpg}
#   OUTDIR/nodectl-release.gpg             the signing key's public part (binary OpenPGP keyring)
#   OUTDIR/kubectl-nodectl-VERSION-linux-amd64.tar.gz  the kubectl plugin for operators'
#     workstations (no libselinux, no D-Bus: check-elf.sh without them)
#   OUTDIR/krew/nodectl.yaml               its krew manifest (packaging/krew/nodectl.yaml with the
#     version, URL and the archive's SHA-256), checked by krew's rules
#   OUTDIR/butane/{fcos,flatcar}-{controller,worker}.bu   the templates with the release's
#     version, URL, image hashes and key (other variables: butane/example.vars, or VARS=file)
#   OUTDIR/ignition/*.ign                  each rendered to Ignition, checked (spec types, no
#     unknown key; Debian's ignition-validate for spec 3.3.0) and compared with its Butane
#   OUTDIR/SHA256SUMS{,.gpg}               every file above
# VERSION defaults to the workspace's (the binaries report it; another is refused). OUTDIR
# defaults to dist/. NODECTL_URL: where OUTDIR is published, https:// only (default a placeholder
# host). Per-OS SHA256SUMS are what systemd-sysupdate's url-file source reads; it checks them
# against SHA256SUMS.gpg (Verify=yes in the shipped transfer file) with the keyring the configs
# place in /etc/systemd/import-pubring.gpg.
# Signing: NODECTL_SIGNING_KEY=<fingerprint or uid> names one secret key in gpg's home (GNUPGHOME
# as the operator sets it; gpg-agent asks for its passphrase); NODECTL_RELEASE_KEYS, more public
# keys to ship beside it (a rotation: docs/install.md). Without a key the release is refused,
# unless NODECTL_UNSIGNED=1 (local test builds): then no SHA256SUMS.gpg, the configs ship an empty
# keyring and still say Verify=yes, so systemd-sysupdate installs nothing from such a release.
# --check: only the checks above (version, URL, key), none of the build.
# Sourced (`. release.sh`), it defines the release_* functions and returns (the tests use them).

# release_check_url URL: https:// and one word, or a message naming NODECTL_URL
release_check_url() {
  case "$1" in
    https://*[[:space:]]* | https://) ;;
    https://*) return 0 ;;
  esac
  echo "release.sh: NODECTL_URL='$1' is not an https:// URL: Ignition and systemd-sysupdate fetch the release from it" >&2
  return 2
}

# release_check_key: NODECTL_SIGNING_KEY names exactly one secret key (release_key_fpr is set to
# its fingerprint), or NODECTL_UNSIGNED=1 (release_key_fpr empty); a message otherwise
release_check_key() {
  release_key_fpr=
  if [ -n "${NODECTL_SIGNING_KEY:-}" ]; then
    local fprs
    fprs=$(gpg --batch --with-colons --list-secret-keys -- "$NODECTL_SIGNING_KEY" 2>/dev/null \
      | awk -F: '$1 == "sec" { want = 1; next } want && $1 == "fpr" { print $10; want = 0 }')
    if [ -z "$fprs" ]; then
      echo "release.sh: NODECTL_SIGNING_KEY=$NODECTL_SIGNING_KEY: no such secret key in gpg's home (${GNUPGHOME:-~/.gnupg}; gpg --list-secret-keys)" >&2
      return 2
    fi
    if [ "$(wc -l <<<"$fprs")" != 1 ]; then
      echo "release.sh: NODECTL_SIGNING_KEY=$NODECTL_SIGNING_KEY names $(wc -l <<<"$fprs") secret keys; give one fingerprint" >&2
      return 2
    fi
    release_key_fpr=$fprs
    local k
    for k in ${NODECTL_RELEASE_KEYS:-}; do
      gpg --batch --list-keys -- "$k" >/dev/null 2>&1 \
        || { echo "release.sh: NODECTL_RELEASE_KEYS: no public key '$k' in gpg's home" >&2; return 2; }
    done
  elif [ "${NODECTL_UNSIGNED:-}" = 1 ]; then
    echo "release.sh: NODECTL_UNSIGNED=1: an unsigned test build: no SHA256SUMS.gpg, the configs ship an empty keyring and still say Verify=yes, so systemd-sysupdate installs nothing from it" >&2
  else
    echo "release.sh: no signing key: set NODECTL_SIGNING_KEY=<fingerprint or uid> (a secret key in GNUPGHOME), or NODECTL_UNSIGNED=1 for a local test build nodes will not update from" >&2
    return 2
  fi
}

# release_sign DIR: DIR/SHA256SUMS.gpg, a detached binary signature of DIR/SHA256SUMS by
# release_key_fpr (what systemd-pull fetches beside SHA256SUMS and passes to `gpg --verify`)
release_sign() {
  rm -f "$1/SHA256SUMS.gpg"
  gpg --batch --yes --local-user "$release_key_fpr" --detach-sign --output "$1/SHA256SUMS.gpg" "$1/SHA256SUMS"
}

# release_export_key FILE: the key's public part, and NODECTL_RELEASE_KEYS' (other keys nodes
# are to accept: the next key during a rotation), a binary keyring (what --keyring= reads)
release_export_key() {
  # shellcheck disable=SC2086 # NODECTL_RELEASE_KEYS is a list
  gpg --batch --export -- "$release_key_fpr" ${NODECTL_RELEASE_KEYS:-} >"$1" && [ -s "$1" ]
}

# release_verify DIR KEYRING: DIR/SHA256SUMS.gpg checked as systemd-pull 254 checks it
# (src/import/pull-common.c, verify_gpg(): a fresh --homedir, --no-default-keyring,
# --keyring=<one file>, --trust-model=always, the manifest on stdin)
release_verify() {
  local home rc=0 keyring said
  keyring=$(realpath "$2") home=$(mktemp -d)
  said=$(gpg --no-options --no-default-keyring --no-auto-key-locate --no-auto-check-trustdb --batch \
    --trust-model=always --homedir="$home" --keyring="$keyring" \
    --verify "$1/SHA256SUMS.gpg" - <"$1/SHA256SUMS" 2>&1) || rc=$?
  rm -rf "$home"
  [ "$rc" = 0 ] || echo "$said" | sed 's/^/  /' >&2
  return $rc
}

[ "${BASH_SOURCE[0]}" = "$0" ] || return 0

set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
check_only=0
[ "${1:-}" != --check ] || { check_only=1; shift; }
cargo_version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
version=${1:-$cargo_version}
out=$(realpath -m "${2:-dist}")
[ "$version" = "$cargo_version" ] || { echo "release.sh: VERSION $version is not the workspace version $cargo_version (Cargo.toml), which the binaries report" >&2; exit 2; }
url=${NODECTL_URL:-https://downloads.example.com/nodectl/$version}
release_check_url "$url" || exit 2
release_check_key || exit 2
vars_in=${VARS:-packaging/butane/example.vars}
step() { echo "== release.sh: $*"; }
[ "$check_only" = 0 ] || { echo "release.sh: checks passed (version $version, $url, ${release_key_fpr:-unsigned})"; exit 0; }

step "build (release, --locked)"
cargo build --release --locked -q -p nodectl -p kubectl-nodectl --bins
cargo build --release --locked -q -p nodectl-butane
tool=target/release/nodectl-butane
rm -rf "$out" && mkdir -p "$out/bin" "$out/butane" "$out/ignition"
for b in nodectld nodectl; do strip -o "$out/bin/$b" "target/release/$b"; done
ls -l "$out/bin" | sed 1d

step "ELF: libraries and glibc versions Fedora CoreOS and Flatcar have"
packaging/check-elf.sh "$out/bin/nodectld" "$out/bin/nodectl"

step "the kubectl plugin: ELF without libselinux, archive, krew manifest"
plugin=$(mktemp -d)
strip -o "$plugin/kubectl-nodectl" target/release/kubectl-nodectl
ELF_ALLOWED="libc.so.6 libm.so.6 libgcc_s.so.1 ld-linux-x86-64.so.2" packaging/check-elf.sh "$plugin/kubectl-nodectl"
said=$("$plugin/kubectl-nodectl" --version)
[ "$said" = "kubectl-nodectl $version" ] || { echo "release.sh: kubectl-nodectl --version says '$said', not $version" >&2; exit 1; }
archive=kubectl-nodectl-$version-linux-amd64.tar.gz
# reproducible: sorted, root-owned, the commit's time, gzip without a name or time
mtime=$(git log -1 --format=%ct 2>/dev/null || echo 0)
tar -C "$plugin" --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$mtime" -cf - kubectl-nodectl | gzip -n -9 >"$out/$archive"
rm -rf "$plugin"
[ "$(tar -tzf "$out/$archive")" = kubectl-nodectl ] || { echo "release.sh: $archive does not hold just kubectl-nodectl (the manifest's files)" >&2; exit 1; }
mkdir -p "$out/krew"
"$tool" krew packaging/krew/nodectl.yaml "$version" "$url" "$(sha256sum "$out/$archive" | cut -d' ' -f1)" "$out/krew/nodectl.yaml"

step "completions and man pages (into the images' /usr/share)"
"$tool" shell-docs "$out/share"

step "systemd-sysext images"
packaging/sysext/build.sh "$version" "$out/bin" "$out"
# the FCOS image's labels, read back from its bytes (file_contexts.fcos applied at build time)
labels=$(packaging/sysext/erofs-labels.py "$out/fcos/nodectl-$version-x86-64.raw" /usr/bin/nodectld /usr/bin/nodectl /usr/share/man/man1/nodectl.1 /usr/share/bash-completion/completions/nodectl \
  /usr/lib/systemd/system/nodectld.service /usr/lib/systemd/system/nodectld.socket /usr/lib/systemd/system/multi-user.target.d/10-nodectld.conf \
  /usr/share/dbus-1/system.d/org.nodectl.Agent1.conf /usr/lib/extension-release.d/extension-release.nodectl)
echo "$labels"
diff <(echo "$labels") <(printf '%s\n' \
  "/usr/bin/nodectld system_u:object_r:bin_t:s0" "/usr/bin/nodectl system_u:object_r:bin_t:s0" \
  "/usr/share/man/man1/nodectl.1 system_u:object_r:man_t:s0" "/usr/share/bash-completion/completions/nodectl system_u:object_r:usr_t:s0" \
  "/usr/lib/systemd/system/nodectld.service system_u:object_r:systemd_unit_file_t:s0" \
  "/usr/lib/systemd/system/nodectld.socket system_u:object_r:systemd_unit_file_t:s0" \
  "/usr/lib/systemd/system/multi-user.target.d/10-nodectld.conf system_u:object_r:systemd_unit_file_t:s0" \
  "/usr/share/dbus-1/system.d/org.nodectl.Agent1.conf system_u:object_r:usr_t:s0" \
  "/usr/lib/extension-release.d/extension-release.nodectl system_u:object_r:lib_t:s0") \
  || { echo "release.sh: the FCOS image's SELinux labels are not Fedora's (above)" >&2; exit 1; }
for os in flatcar fcos; do (cd "$out/$os" && sha256sum -- *.raw >SHA256SUMS); done

step "signatures (SHA256SUMS.gpg) and the public key"
if [ -n "$release_key_fpr" ]; then
  release_export_key "$out/nodectl-release.gpg"
  for os in flatcar fcos; do
    release_sign "$out/$os"
    release_verify "$out/$os" "$out/nodectl-release.gpg" \
      || { echo "release.sh: $os/SHA256SUMS.gpg does not verify with nodectl-release.gpg (expired key? a signing subkey not exported?)" >&2; exit 1; }
  done
  key_base64=$(base64 -w0 "$out/nodectl-release.gpg")
  echo "signed by $release_key_fpr; its public key: nodectl-release.gpg"
else
  key_base64= # the configs get an empty keyring: nothing verifies
  echo "unsigned (NODECTL_UNSIGNED=1): systemd-sysupdate will refuse this release"
fi

step "Butane and Ignition"
vars=$(mktemp) && trap 'rm -f "$vars"' EXIT
files_dir=${FILES_DIR:-docs/examples}
# The bootstrap kubeconfig as Typhoon's cloud modules pass it (indent(10, ...)), from the files
# dir, unless the vars give one.
{ cat "$vars_in"; echo "nodectl_version=$version"; echo "nodectl_url=$url"
  echo "nodectl_release_key_base64=$key_base64"
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
(cd "$out" && find . -type f ! -path ./SHA256SUMS -printf '%P\n' | LC_ALL=C sort | xargs sha256sum >SHA256SUMS)
if [ -n "$release_key_fpr" ]; then
  release_sign "$out" && release_verify "$out" "$out/nodectl-release.gpg"
fi
echo "release.sh: nodectl $version in $out ($(wc -l <"$out/SHA256SUMS") files)"
