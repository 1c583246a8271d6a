#!/bin/bash
# Tier 3, inside the VM (SELinux enforcing): nodectl as it ships (packaging/release.sh).
#   S1  Ignition: Debian's ignition binary (fetch-offline, then files, as ignition-files.service
#       runs it) applies a Typhoon-shaped Flatcar worker config (tests/typhoon/flatcar-worker.bu)
#       with nodectl's snippet (packaging/butane/snippets/flatcar-worker.bu) merged over it as
#       Typhoon's worker_snippets are (Ignition's config merge: units by name, files by path),
#       the release's image served over HTTP on 127.0.0.1: the image is downloaded and its
#       sha512 verified, the extension link, sysupdate transfer file, config fragment, bootstrap
#       kubeconfig (0600: the snippet's over Typhoon's 0644) are placed, locksmithd masked,
#       docker enabled by preset, Typhoon's kubelet.service written but not enabled; with a
#       wrong hash (nodectl's own worker config, packaging/butane/flatcar-worker.bu) Ignition
#       fails and places no image
#  S2  the Flatcar image (squashfs) merges: systemd-sysext lists it, its files are in /usr
#  S3  the Fedora CoreOS image (erofs, SELinux labels inside) in /var/lib/extensions: merge and
#       (permissive from here: systemd 252 labels the merged /usr's top directory wrongly,
#       systemd#34387; the only denials allowed are on that directory)
#       daemon-reload start nodectld.service from /usr/bin (the image's Upholds=), every file has
#       the label this node's policy gives its path, and the node comes up as in the demo
#       (kubelet stand-in image, API double): credentials issued, kubelet active
#  S4  systemd-sysupdate (254, Debian backports; 252 has none) with the transfer file and
#       keyring the FCOS worker config ships (rendered with a test key, translated, taken from
#       the Ignition), its source 0.1.1 served over HTTP on 127.0.0.1 (the shipped url-file
#       source: systemd-pull checks SHA256SUMS.gpg with gpg), signed by release.sh's own
#       functions: refused and nothing installed when SHA256SUMS has no .gpg (S4c), is signed by
#       another key (S4d), or an image changed after signing (S4b); a good release installs and
#       the link switches (S4a); refresh and restart run nodectld from 0.1.1's image
#  S5  unmerge, daemon-reload, stop: nodectld ends cleanly (inactive, result success), its files
#       are gone from /usr, its state in /var stays
# /test holds: check.sh, lib.sh, dist/ (release.sh's output), sysext-v2/ (0.1.1 images),
# sysext-vm/ (the images labeled with this VM's file_contexts),
# nodectl-butane, ignition, sysupdate/ (systemd-sysupdate, -import, -pull 254 + libsystemd-shared),
# release.sh (packaging/release.sh: S4 signs with its functions),
# nodectl-apiserver-double, kubelet-standin/, bootstrap-kubeconfig, example.vars, butane/.
. /test/check.sh
. /test/lib.sh
export NO_COLOR=1

V=$(ls /test/dist/flatcar | sed -n "s/^nodectl-\(.*\)-x86-64.raw$/\1/p")
IMG=nodectl-$V-x86-64.raw
W=/tmp/ign && rm -rf $W && mkdir -p $W/files

# A fresh node: what the suites before this one installed and left (nodectld from /usr/local
# and /etc, kubelet and its pods, /etc/kubernetes, the node's state) goes first.
systemctl stop nodectld.service kubelet.service >/dev/null 2>&1
podman rm -af -t 0 >/dev/null 2>&1
rm -rf /etc/systemd/system/nodectld.service /etc/systemd/system/kubelet.service \
  /etc/systemd/system/kubelet.service.d /usr/local/bin/nodectld /usr/local/bin/nodectl \
  /etc/dbus-1/system.d/org.nodectl.Agent1.conf /etc/nodectl /etc/kubernetes /var/lib/nodectl \
  /var/lib/kubelet 2>/dev/null
systemctl daemon-reload
systemctl reset-failed >/dev/null 2>&1
busctl call org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus ReloadConfig

echo "## S1 Ignition applies the Flatcar worker config"
start_apiserver_double
cp /root/bootstrap-kubeconfig $W/files/bootstrap-kubeconfig
busybox httpd -f -p 127.0.0.1:8080 -h /test/dist &
httpd=$!
render() { # render SHA512 OUT.ign [TEMPLATE]
  render_config $W "$V" http://127.0.0.1:8080 "$1" "${3:-/test/butane/flatcar-worker.bu}" "$2"
}
# merged SHA512 OUT.ign: Typhoon's worker (the base) with nodectl's snippet merged over it, as
# Typhoon's ct_config merges worker_snippets (Ignition's own merge of a child config)
merged() {
  render "$1" $W/base.ign /test/typhoon/flatcar-worker.bu &&
    render "$1" $W/snippet.ign /test/butane/snippets/flatcar-worker.bu &&
    jq --arg src "data:;base64,$(base64 -w0 $W/snippet.ign)" '.ignition.config.merge = [{source: $src}]' \
      $W/base.ign >"$2"
}
# sysext: a refresh as at boot, by systemd-sysext.service (the system's own, systemd 252)
sysext() { systemctl restart systemd-sysext.service; }
# (lib.sh's ignition_apply: Debian's ignition, fetch-offline then files, on this booted root)
ignite() { ignition_apply $W "$1"; }
check "the worker config renders for this VM" render 0000"$(printf '%0124d' 0)" $W/bad.ign
ignite $W/bad.ign
check "a wrong sha512 fails Ignition's files stage" sh -c "grep CRITICAL $W/log | grep -q 'hash verification failed'"
grep 'CRITICAL' $W/log | head -2 | cut -c1-240 | sed 's/^/  | /'
expect "no image placed from a wrong hash" "$(ls /opt/extensions/nodectl 2>/dev/null | grep -c raw)" 0
# what that failed run placed before it stopped goes, as on a node that is reprovisioned
rm -rf /opt/extensions/nodectl /etc/extensions /etc/sysupdate.nodectl.d /etc/systemd/import-pubring.gpg /etc/nodectl /etc/kubernetes/kubeconfig \
  /etc/systemd/system/locksmithd.service /etc/systemd/system-preset/20-ignition.preset
check "Typhoon's worker config with nodectl's snippet merged renders with the image's sha512" \
  merged "$(sha512sum /test/dist/flatcar/$IMG | cut -d' ' -f1)" $W/w.ign
check "Ignition (fetch-offline, files) applies it" ignite $W/w.ign
grep -E 'writing file|hash|CRITICAL|ERROR|relabel' $W/log | head -12 | sed 's/^/  | /'
check "the downloaded image is the release's" cmp /opt/extensions/nodectl/$IMG /test/dist/flatcar/$IMG
expect "extension link" "$(readlink /etc/extensions/nodectl.raw)" /opt/extensions/nodectl/$IMG
check "transfer file placed" grep -q '^CurrentSymlink=/etc/extensions/nodectl.raw$' /etc/sysupdate.nodectl.d/nodectl.conf
check "it verifies signatures (Verify=yes)" grep -qx 'Verify=yes' /etc/sysupdate.nodectl.d/nodectl.conf
check "the release's key placed where systemd-pull reads it (from the base64 data URL)" \
  cmp /etc/systemd/import-pubring.gpg /test/dist/nodectl-release.gpg
expect "bootstrap kubeconfig mode" "$(stat -c %a /etc/kubernetes/kubeconfig)" 600
check "config fragment placed" grep -q '^role = "worker"$' /etc/nodectl/config.d/10-node.toml
check "kernel modules and sysctls placed for the first boot" sh -c "grep -qx br_netfilter /etc/modules-load.d/nodectl.conf && grep -qx fs.inotify.max_user_watches=16184 /etc/sysctl.d/50-nodectl.conf"
expect "locksmithd masked" "$(readlink /etc/systemd/system/locksmithd.service)" /dev/null
check "docker enabled by Ignition's preset" grep -qx 'enable docker.service' /etc/systemd/system-preset/20-ignition.preset
check "Typhoon's kubelet.service written (the base's)" grep -q -- '--bootstrap-kubeconfig' /etc/systemd/system/kubelet.service
check "but not enabled: the snippet's enabled: false won the merge" sh -c \
  "grep -qx 'disable kubelet.service' /etc/systemd/system-preset/20-ignition.preset && ! grep -qx 'enable kubelet.service' /etc/systemd/system-preset/20-ignition.preset"
expect "kubelet.path masked (bare metal's)" "$(readlink /etc/systemd/system/kubelet.path)" /dev/null

echo "## S2 the Flatcar image (squashfs) merges"
# merged as at boot, by systemd-sysext.service: a merge from this unconfined shell would give the
# overlay's top layer this shell's tmpfs label, which services may not search
check "systemd-sysext merge (systemd-sysext.service)" sysext
check "systemd-sysext lists nodectl" sh -c 'systemd-sysext status --json=short | jq -e ".[] | select(.hierarchy == \"/usr\") | .extensions | index(\"nodectl\")"'
check "its files are in /usr" test -x /usr/bin/nodectld -a -f /usr/lib/systemd/system/nodectld.service -a -f /usr/share/dbus-1/system.d/org.nodectl.Agent1.conf
check "its completions load in bash (complete -p nodectl)" bash -c 'source /usr/share/bash-completion/completions/nodectl && complete -p nodectl'
# (each renders without a warning: tier 1, tools/butane/tests/shell_docs.rs, with groff)
check "its man pages are in /usr/share/man (nodectl.1, nodectl-converge.1, nodectld.8)" \
  test -s /usr/share/man/man1/nodectl.1 -a -s /usr/share/man/man1/nodectl-converge.1 -a -s /usr/share/man/man8/nodectld.8
rm -f /etc/extensions/nodectl.raw
check "unmerged (refresh without the image)" sysext

echo "## S3 the Fedora CoreOS image (erofs, labels) starts nodectld from /usr"
# (The release's image carries Fedora's labels, which this policy lacks: release.sh reads them
# back from the image's bytes, packaging/sysext/erofs-labels.py.)
# systemd before 257 gives the merged /usr's top directory its workspace's tmpfs label
# (systemd#34387, fixed by #35132 in 257, which Fedora CoreOS and Flatcar run): with it, nothing
# may search /usr here (dbus-daemon, udev, generators). From here on the VM runs permissive, and
# every denial logged is checked at the end: only that top directory may appear.
# (systemd-tmpfiles-clean.timer fires 15 min after boot: its walk of /tmp met a container's
# tmpfs root, container_file_t:s0, in a run where this window came then; it is not the sysext's
# to answer for, so it does not run in the window)
systemctl stop systemd-tmpfiles-clean.timer
while [ "$(systemctl is-active systemd-tmpfiles-clean.service)" = activating ]; do sleep 0.2; done
mark=$(wc -l </var/log/audit/audit.log)
setenforce 0
# This VM runs Debian's policy, whose unit-file type is systemd_unit_t: the same build, labeled
# with this VM's own file_contexts (run-tests.sh takes it from the VM image), is the one merged.
mkdir -p /var/lib/extensions.d /var/lib/extensions
cp /test/sysext-vm/fcos/$IMG /var/lib/extensions.d/ && ln -sf /var/lib/extensions.d/$IMG /var/lib/extensions/nodectl.raw
/test/kubelet-standin/build-image.sh localhost/kubelet-standin:demo >/dev/null
mkdir -p /etc/systemd/system/kubelet.service.d
printf '[Service]\nEnvironment=KUBELET_IMAGE=localhost/kubelet-standin:demo\n' >/etc/systemd/system/kubelet.service.d/10-image-override.conf
check "systemd-sysext merge (systemd-sysext.service)" sysext
ls -dZ /usr /usr/bin | sed 's/^/  | /'
busctl call org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus ReloadConfig >/dev/null
check "daemon-reload" systemctl daemon-reload
check "nodectld started by the image's Upholds=" wait_until 60 sh -c '[ "$(systemctl is-active nodectld.service)" = active ]'
[ "$(systemctl is-active nodectld.service)" = active ] || journalctl -u nodectld.service -o cat --no-pager | tail -8 | sed 's/^/  | /'
expect "nodectld runs /usr/bin/nodectld" "$(readlink /proc/$(systemctl show -p MainPID --value nodectld.service)/exe)" /usr/bin/nodectld
for f in /usr/bin/nodectld /usr/bin/nodectl /usr/lib/systemd/system/nodectld.service /usr/lib/systemd/system/nodectld.socket \
         /usr/share/dbus-1/system.d/org.nodectl.Agent1.conf /usr/lib/extension-release.d/extension-release.nodectl \
         /usr/share/man/man1/nodectl.1 /usr/share/bash-completion/completions/nodectl; do
  expect "label of $f is the policy's" "$(stat -c %C "$f")" "$(matchpathcon -n "$f")"
done
check "kubelet active (credentials from the double)" wait_until 90 sh -c '[ "$(systemctl is-active kubelet.service)" = active ] && [ -s /var/lib/kubelet/kubeconfig ]'
check "nodectl status: converged" wait_until 30 sh -c 'nodectl status --json | jq -e ".steps | all(.state == \"converged\")"'
nodectl status | sed 's/^/  | /' | head -30

echo "## S4 systemd-sysupdate takes 0.1.1 only with a good signature"
V2=0.1.1
U=/srv/nodectl-updates
rm -rf $U && mkdir -p $U/fcos && cp /test/sysext-v2/fcos/nodectl-$V2-x86-64.raw $U/fcos/
# the release's URL here: plain HTTP on loopback (release.sh requires https://; what is under
# test is the signature, which does not depend on the transport)
busybox httpd -f -p 127.0.0.1:8081 -h $U &
httpd4=$!
# two throwaway keys (no passphrase): the release's (a) and another (b)
export GNUPGHOME=$W/gnupg && rm -rf $GNUPGHOME && mkdir -m 0700 $GNUPGHOME
for k in a b; do
  gpg --batch --passphrase '' --quick-gen-key "nodectl test $k <$k@nodectl.invalid>" ed25519 sign never >/dev/null 2>&1
done
. /test/release.sh # release_check_key, release_sign, release_export_key: what release.sh signs with
sign_as() { NODECTL_SIGNING_KEY=$1@nodectl.invalid release_check_key && release_sign $U/fcos; }
export_a() { NODECTL_SIGNING_KEY=a@nodectl.invalid release_check_key && release_export_key $W/release.gpg; }
check "the test key a exported (release_export_key)" export_a
# The FCOS worker config, rendered with that key and this URL and translated: its transfer file and
# keyring, the bytes Ignition would write (data: URLs decoded), at the paths it names.
{ cat /test/example.vars; echo "nodectl_version=$V"; echo "nodectl_url=http://127.0.0.1:8081"
  echo "nodectl_sysext_flatcar_sha512=$(printf '%0128d' 0)"; echo "nodectl_sysext_fcos_sha512=$(printf '%0128d' 0)"
  echo "nodectl_release_key_base64=$(base64 -w0 $W/release.gpg)"
  echo "kubeconfig@10=$W/files/bootstrap-kubeconfig"; } >$W/vars4
render4() { /test/nodectl-butane render $W/vars4 /test/butane/fcos-worker.bu $W/f.bu && /test/nodectl-butane translate $W/files $W/f.bu $W/f.ign; }
check "the FCOS worker config renders with the test key" render4
placed() { # placed PATH: the file of that path in $W/f.ign written there, as Ignition writes it
  local src
  src=$(jq -er --arg p "$1" '.storage.files[] | select(.path == $p) | .contents.source' $W/f.ign) || return 1
  mkdir -p "$(dirname "$1")"
  case "$src" in
    'data:;base64,'*) printf '%s' "${src#data:;base64,}" | base64 -d >"$1" ;;
    'data:,'*) printf '%b' "$(printf '%s' "${src#data:,}" | sed 's/\\/\\\\/g; s/%/\\x/g')" >"$1" ;;
    *) return 1 ;;
  esac
}
place_both() { placed /etc/sysupdate.nodectl.d/nodectl.conf && placed /etc/systemd/import-pubring.gpg; }
check "transfer file and keyring placed from the config" place_both
sed 's/^/  | /' /etc/sysupdate.nodectl.d/nodectl.conf
check "the keyring is the exported key" cmp /etc/systemd/import-pubring.gpg $W/release.gpg
SU() {
  SYSTEMD_IMPORT_PATH=/test/sysupdate/systemd-import SYSTEMD_PULL_PATH=/test/sysupdate/systemd-pull \
    LD_LIBRARY_PATH=/test/sysupdate /test/sysupdate/systemd-sysupdate --component=nodectl "$@"
}
# refused PATTERN: `update` fails, says PATTERN (systemd-pull's reason), and installs nothing
refused() {
  if SU update >$W/su.log 2>&1; then echo "sysupdate update succeeded"; return 1; fi
  grep -E "$1" $W/su.log | head -3
  grep -qE "$1" $W/su.log || { tail -5 $W/su.log; return 1; }
  ! test -e /var/lib/extensions.d/nodectl-$V2-x86-64.raw &&
    [ "$(readlink -f /var/lib/extensions/nodectl.raw)" = /var/lib/extensions.d/$IMG ]
}
(cd $U/fcos && sha256sum -- *.raw >SHA256SUMS)
check "S4c an unsigned SHA256SUMS (no SHA256SUMS.gpg) is refused, nothing installed" \
  refused 'Failed to retrieve signature file'
check "release_sign as key b" sign_as b
check "S4d a SHA256SUMS signed by another key is refused, nothing installed" \
  refused 'Signature verification failed'
check "release_sign as key a (the shipped one)" sign_as a
img2=$U/fcos/nodectl-$V2-x86-64.raw
cp $img2 $W/v2.raw
b=$(od -An -tu1 -j 65536 -N1 $img2 | tr -d ' ')
printf "\\x$(printf %02x $(((b + 1) % 256)))" | dd of=$img2 bs=1 seek=65536 count=1 conv=notrunc status=none
check "S4b an image changed (one byte) after signing is refused, nothing installed" \
  refused 'did not check out|tampered'
cp $W/v2.raw $img2
lists_v2() { SU list | grep -q $V2; }
check "S4a sysupdate lists 0.1.1 from the signed release" lists_v2
check "S4a sysupdate update: signature good, 0.1.1 installed" SU update
check "0.1.1 installed beside $V" test -f /var/lib/extensions.d/nodectl-$V2-x86-64.raw -a -f /var/lib/extensions.d/$IMG
expect "link switched" "$(readlink -f /var/lib/extensions/nodectl.raw)" /var/lib/extensions.d/nodectl-$V2-x86-64.raw
kill $httpd4
gpgconf --kill gpg-agent
unset GNUPGHOME
refresh_restart() { sysext && systemctl daemon-reload && systemctl restart nodectld.service; }
check "refresh, reload, restart" refresh_restart
expect "the merged image is 0.1.1" "$(sed -n 's/^IMAGE_VERSION=//p' /usr/lib/extension-release.d/extension-release.nodectl)" $V2
expect "nodectld active after the update" "$(systemctl is-active nodectld.service)" active
expect "kubelet kept running" "$(systemctl is-active kubelet.service)" active

echo "## S5 uninstall as docs/install.md says: nodectld stops cleanly"
uninstall() { rm /var/lib/extensions/nodectl.raw && sysext && systemctl daemon-reload && systemctl stop nodectld.service; }
check "remove the link, refresh, reload, stop" uninstall
expect "nodectld inactive" "$(systemctl is-active nodectld.service)" inactive
expect "nodectld's result" "$(systemctl show -p Result --value nodectld.service)" success
check "its files are gone from /usr" sh -c '! test -e /usr/bin/nodectld && ! test -e /usr/lib/systemd/system/nodectld.service'
check "its state in /var stays" test -s /var/lib/kubelet/kubeconfig
stop_apiserver_double
kill $httpd
# the denials while permissive: each must be on the merged /usr's top directory (the overlay's
# root, inode 2), none on a file of the image or anything nodectld touched
avcs=$(tail -n +"$((mark + 1))" /var/log/audit/audit.log | grep -a 'avc: *denied' || true)
others=$(grep -v 'dev="overlay" ino=2 ' <<<"$avcs" | grep . || true)
echo "  | $(grep -c . <<<"$avcs") denials while permissive, $(grep -c 'dev="overlay" ino=2 ' <<<"$avcs") on the merged /usr's top directory"
expect "no denial but the merged /usr's top directory (systemd#34387)" "$(grep -c . <<<"$others")" 0
[ -z "$others" ] || cut -c1-300 <<<"$others" | head -8 | sed 's/^/  | /'
setenforce 1
systemctl start systemd-tmpfiles-clean.timer
summary sysext
