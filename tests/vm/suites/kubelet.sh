#!/bin/bash
# Tier 3, inside the VM (SELinux enforcing, MCS, podman, udev): kubelet from the rendered unit.
#   K1  TLS bootstrap against the kube-apiserver double (run in this VM on loopback): nodectld
#       gets the node's certificate with the bootstrap token, then podman runs the stand-in
#       kubelet image from nodectld's rendered kubelet.service (operator image override) with the
#       node's own kubeconfig, SELinux enforcing; nodectl status shows kubelet active and the
#       certificate's expiry; kubelet stops on SIGTERM
#   K2  flannel: flannel.1 created without an address keeps its MAC with nodectld's link file;
#       without it (provider changed away from flannel: nodectld removes the file) udev rewrites it
#   K6  a bootstrap kubeconfig a container plants: not used, nothing of the node's identity moves
#   K7  FleetLock: a root process with zincati's uid outside zincati.service is refused
#   K5  the release build's idle footprint on that node: private memory (anonymous or dirty,
#       target <= 2 MiB, once the late trim gave back what the last pass freed), RSS shown; no
#       pass and (almost) no CPU in 10 s or more without events
# /test holds: check.sh, lib.sh, nodectld, nodectld-release, nodectl, nodectld.service,
# org.nodectl.Agent1.conf, worker.toml, nodectl-apiserver-double, kubelet-standin/.
. /test/check.sh
. /test/lib.sh
export NO_COLOR=1
STANDIN=localhost/kubelet-standin:test

echo "## K1: TLS bootstrap against the API double, then the stand-in kubelet image from the rendered unit"
systemctl stop nodectld.service kubelet.service 2>/dev/null
rm -rf /etc/kubernetes /var/lib/nodectl /etc/systemd/system/kubelet.service.d /var/lib/kubelet/pki /var/lib/kubelet/kubeconfig /etc/ssl/etcd
check "stand-in image built offline (podman import)" /test/kubelet-standin/build-image.sh $STANDIN
check "the API double listens on 127.0.0.1:6443" start_apiserver_double
install_nodectld /test/worker.toml
# The operator's override, as Typhoon documents it: nodectld never touches it, and it wins.
mkdir -p /etc/systemd/system/kubelet.service.d
printf '[Service]\nEnvironment=KUBELET_IMAGE=%s\n' $STANDIN >/etc/systemd/system/kubelet.service.d/10-image-override.conf
systemctl daemon-reload
check "nodectld starts" systemctl start nodectld.service
expect "kubelet waits for its kubeconfig" "$(systemctl is-active kubelet.service)" inactive
install -D -m 0600 /root/bootstrap-kubeconfig /etc/kubernetes/.kubeconfig.tmp && mv /etc/kubernetes/.kubeconfig.tmp /etc/kubernetes/kubeconfig
check "kubelet.service becomes active" wait_until 60 sh -c '[ "$(systemctl is-active kubelet.service)" = active ]'
check "the double saw the request from the bootstrap token and issued it" \
  grep -q "^MODIFIED node-csr-.* by system:bootstrap:abcdef conditions=\[Approved\] issued" /tmp/apiserver-double.log
sed 's/^/  | double: /' /tmp/apiserver-double.log
check "the stand-in runs with the node's own kubeconfig" wait_until 60 sh -c 'journalctl -u kubelet.service --no-pager -o cat | grep -q "kubelet stand-in: node .*, kubeconfig /var/lib/kubelet/kubeconfig"'
# The VM's hostname is nodevm, the node's name worker-1: kubelet must register as the name in
# its certificate (system:node:worker-1), so it gets --hostname-override.
check "kubelet registers under the node's name, not the hostname" sh -c 'journalctl -u kubelet.service --no-pager -o cat | grep -q "kubelet stand-in: node worker-1,"'
expect "kubelet's env file gives it the node kubeconfig" "$(grep ^KUBELET_KUBECONFIG= /etc/kubernetes/kubelet.env)" "KUBELET_KUBECONFIG=--kubeconfig=/var/lib/kubelet/kubeconfig"
check "kubelet never gets the bootstrap kubeconfig" sh -c "! podman inspect kubelet --format '{{.Args}}' | grep -q -- bootstrap-kubeconfig"
expect "the node kubeconfig authenticates with the node certificate" \
  "$(grep -c 'client-certificate: /var/lib/kubelet/pki/kubelet-client-current.pem' /var/lib/kubelet/kubeconfig) $(grep -c token /var/lib/kubelet/kubeconfig)" "1 0"
expect "key and certificate 0600, their directory 0700" \
  "$(stat -L -c %a /var/lib/kubelet/pki/kubelet-client-current.pem) $(stat -c %a /var/lib/kubelet/pki) $(stat -c %a /var/lib/kubelet/kubeconfig)" "600 700 600"
expect "status shows the node's certificate" "$(nodectl status --json | jq -r .credentials.subject)" "system:node:worker-1"
check "status shows its expiry (Typhoon's 72h)" sh -c 'nodectl status --json | jq -e ".credentials.expires_in_s > 71*3600 and .credentials.expires_in_s <= 72*3600"'
nodectl status | grep -E 'Credentials:' | sed 's/^/  | /'
check "nodectl status (human) shows the expiry" sh -c 'nodectl status | grep -q "Credentials: system:node:worker-1 valid until .* (in 7[01]h"'

echo "## K3: node credentials unreadable from containers, even through a hostPath mount; kept so across a kubelet restart"
busybox_image localhost/pod:1 >/dev/null
current=$(readlink -f /var/lib/kubelet/pki/kubelet-client-current.pem)
# hostpath_reads KEY: what a level-s0 pod with /var/lib/kubelet and /etc/kubernetes mounted
# read-only, without relabel, reads of the kubelet's key (pki/KEY), the node kubeconfig, the
# bootstrap kubeconfig and kubelet.yaml: one line each, "NAME: " and the file's first line or
# cat's error (one pod for the four: a podman run costs ~1.5 s under TCG).
hostpath_reads() {
  podman run --rm --security-opt label=level:s0 -v /var/lib/kubelet:/kubelet:ro -v /etc/kubernetes:/kube:ro \
    localhost/pod:1 sh -c 'for f in "key:/kubelet/pki/$1" node:/kubelet/kubeconfig bootstrap:/kube/kubeconfig yaml:/kube/kubelet.yaml; do
      echo "${f%%:*}: $(cat "${f#*:}" 2>&1 | head -1)"; done' _ "$1" 2>&1
}
k3() { # the checks, run before and after a kubelet restart
  local reads; reads=$(hostpath_reads "$(basename "$current")")
  read_of() { sed -n "s/^$1: //p" <<<"$reads"; }
  echo "  | key $(stat -c %C "$current"), node kubeconfig $(stat -c %C /var/lib/kubelet/kubeconfig), bootstrap kubeconfig $(stat -c %C /etc/kubernetes/kubeconfig)"
  check "K3$1 the kubelet's key is not container-readable ($(stat -c %C "$current" | cut -d: -f3))" sh -c "! stat -c %C '$current' | grep -q container_file_t"
  check "K3$1 a pod with /var/lib/kubelet mounted (ro, no relabel) cannot read the kubelet's key" grep -q 'Permission denied' <<<"$(read_of key)"
  check "K3$1 ... nor the node kubeconfig" grep -q 'Permission denied' <<<"$(read_of node)"
  check "K3$1 a pod with /etc/kubernetes mounted (ro, no relabel) cannot read the bootstrap token" grep -q 'Permission denied' <<<"$(read_of bootstrap)"
  expect "K3$1 shared files stay shared: kubelet.yaml" "$(stat -c %C /etc/kubernetes/kubelet.yaml)" system_u:object_r:container_file_t:s0
  expect "K3$1 a pod reads the shared kubelet.yaml" "$(read_of yaml)" "# Managed by nodectl: changes here are overwritten (see nodectl's kubelet.* settings)."
  expect "K3$1 modes: key 0600, pki 0700" "$(stat -c %a "$current") $(stat -c %a /var/lib/kubelet/pki)" "600 700"
}
k3 a
systemctl restart kubelet.service
check "kubelet restarted" wait_until 60 sh -c '[ "$(systemctl is-active kubelet.service)" = active ]'
k3 b
# Something (a :z mount, a chcon) makes a credential container-readable: nodectld puts the key
# back at once (its inotify watch on the credentials wakes a pass; no converge asked for). The
# bootstrap kubeconfig it leaves as it is and does not use (a container type: it may be a
# container's, planted; relabeled, it would look placed by root): the audit names it, restorecon
# mends it.
chcon -t container_file_t /etc/kubernetes/kubeconfig "$current"
check "K3c nodectld resets a container label on the key, by itself" wait_until 15 sh -c \
  "[ \"\$(stat -c %C '$current')\" = system_u:object_r:var_lib_t:s0 ]"
check "K3c ... and leaves the bootstrap kubeconfig's, not using it" wait_until 15 sh -c \
  "nodectl status --json | jq -r '.steps[] | select(.id == \"bootstrap-kubeconfig\") | .detail' | grep -q 'not used: .*a type containers write'"
expect "K3c the bootstrap kubeconfig keeps the container type" "$(stat -c %C /etc/kubernetes/kubeconfig)" system_u:object_r:container_file_t:s0
out=$(nodectl audit --json)
check "K3c the audit reports it readable by containers" grep -q /etc/kubernetes/kubeconfig <<<"$(jq -r '.findings[] | select(.id != "bootstrap-token-on-disk") | .path' <<<"$out")"
restorecon /etc/kubernetes/kubeconfig
check "K3c after restorecon it is used again" wait_until 15 sh -c \
  "nodectl status --json | jq -r '.steps[] | select(.id == \"bootstrap-kubeconfig\") | .detail' | grep -qx '/etc/kubernetes/kubeconfig present'"
out=$(nodectl audit --json); rc=$?
echo "  | nodectl audit: exit $rc, $(jq -r '[.findings[].id] | join(", ")' <<<"$out")"
expect "the audit finds the bootstrap token still on disk (and nothing about labels or modes)" \
  "$(jq -r '[.findings[].id] | unique | join(",")' <<<"$out")" "bootstrap-token-on-disk"
# A file containers share, hard-linked into the credentials' directory (same filesystem): its
# label is the inode's, so nodectld's "credential" relabel would take it from every pod that
# shares it. It leaves it, checked and labeled through one descriptor (issue 51, 4).
echo "## K3d: a shared file hard-linked among the credentials keeps its label"
shared=/var/lib/nodectl-k3d-shared
echo shared >"$shared" && chcon system_u:object_r:container_file_t:s0 "$shared"
ln "$shared" /var/lib/kubelet/pki/zz-linked
# (a new link raises IN_CREATE, which the credentials' watch does not wake a pass for)
nodectl converge >/dev/null
check "K3d nodectld leaves it and says why" wait_until 15 sh -c \
  "nodectl status --json | jq -r '.steps[] | select(.id == \"relabel\") | .detail' | grep -q 'pki/zz-linked: not relabeled: it has 2 hard links'"
expect "K3d the shared file keeps its label" "$(stat -c %C "$shared")" system_u:object_r:container_file_t:s0
rm -f /var/lib/kubelet/pki/zz-linked "$shared"
journalctl -u kubelet.service --no-pager -o cat | grep 'stand-in' | tail -2 | sed 's/^/  | /'
expect "podman runs the operator's image as container 'kubelet'" "$(podman ps --filter name=^kubelet$ --format '{{.Image}}')" "$STANDIN"
check "the command line is the rendered one (worker label, config)" sh -c \
  "podman inspect kubelet --format '{{.Args}}' | grep -q -- '--node-labels=node.kubernetes.io/node' && podman inspect kubelet --format '{{.Args}}' | grep -q -- '--config=/etc/kubernetes/kubelet.yaml'"
expect "SELinux enforcing throughout" "$(getenforce)" Enforcing
check "nodectl status shows kubelet active" wait_until 15 sh -c 'nodectl status --json | jq -e ".kubelet.active == \"active\""'
expect "status shows the image systemd runs (the operator's drop-in)" "$(nodectl status --json | jq -r .kubelet_image)" "$STANDIN"
check "and says a drop-in overrides the configured image" sh -c \
  "nodectl status | grep -qF 'kubelet $STANDIN (a drop-in overrides the configured quay.io/poseidon/kubelet:'"
nodectl status | grep -E 'Node:|Kubelet:|SELinux:' | sed 's/^/  | /'
start=$SECONDS
check "kubelet stops on SIGTERM (podman stop)" systemctl stop kubelet.service
expect "it stopped within 10 s, not after podman's timeout" "$([ $((SECONDS - start)) -lt 10 ] && echo yes || echo "no ($((SECONDS - start)) s)")" yes
check "the stand-in saw SIGTERM" sh -c 'journalctl -u kubelet.service --no-pager -o cat | grep -q "SIGTERM, exiting"'
echo "## K6: a bootstrap kubeconfig a container plants: nothing of the node's identity leaves root, nothing runs"
# Issue 37, 1. The operator removed the bootstrap kubeconfig (docs/security.md); a root container
# with a hostPath on /etc/kubernetes (its own MCS pair) writes one, 0600, as root.
ca_before=$(sha256sum </etc/kubernetes/ca.crt); node_before=$(sha256sum </var/lib/kubelet/kubeconfig)
rm -f /etc/kubernetes/kubeconfig /run/nodectl-pwned
check "K6 without it the node is converged (its own certificate)" wait_until 15 sh -c \
  "nodectl status --json | jq -r '.steps[] | select(.id == \"bootstrap-kubeconfig\") | .detail' | grep -q 'absent, not needed'"
plant() { # the kubeconfig on stdin, written by a container
  podman run --rm -i -v /etc/kubernetes:/host localhost/pod:1 sh -c 'cat >/host/.k && chmod 600 /host/.k && mv /host/.k /host/kubeconfig'
}
k6_case() { # NAME: after the planted file, a pass: the node's CA and kubeconfig untouched, nothing ran
  nodectl converge >/dev/null 2>&1
  echo "  | $1: planted $(stat -c '%U %a %C' /etc/kubernetes/kubeconfig); status: $(step_field bootstrap-kubeconfig detail | cut -c1-150)"
  check "K6 $1: the file carries the container's own level" sh -c "stat -c %C /etc/kubernetes/kubeconfig | grep -Eq ':container_file_t:s0:c[0-9]+,c[0-9]+$'"
  check "K6 $1: not used, and status says why" grep -q 'not used: .*a type containers write: not trusted' <<<"$(step_field bootstrap-kubeconfig detail)"
  expect "K6 $1: kubelet's CA (clientCAFile) unchanged" "$(sha256sum </etc/kubernetes/ca.crt)" "$ca_before"
  expect "K6 $1: the node kubeconfig unchanged" "$(sha256sum </var/lib/kubelet/kubeconfig)" "$node_before"
  check "K6 $1: no key in /etc/kubernetes/ca.crt" sh -c '! grep -q "PRIVATE KEY" /etc/kubernetes/ca.crt'
  check "K6 $1: nothing ran" test ! -e /run/nodectl-pwned
}
sed 's|^\( *\)certificate-authority-data: .*|\1certificate-authority: /var/lib/kubelet/pki/kubelet-client-current.pem|' /root/bootstrap-kubeconfig | plant
k6_case "a CA file naming the node's key"
sed "s|^\( *\)server: .*|\1server: https://127.0.0.1:1|; s|^\( *\)token: .*|\1exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/touch, args: [/run/nodectl-pwned]}|" /root/bootstrap-kubeconfig | plant
k6_case "another server and an exec plugin"
sed "s|^\( *\)server: .*|\1server: https://127.0.0.1:1|" /root/bootstrap-kubeconfig | plant
k6_case "another server"
check "K6 the container's file keeps its label (never relabeled to look placed by root)" sh -c "stat -c %C /etc/kubernetes/kubeconfig | grep -q container_file_t"
install -m 0600 /root/bootstrap-kubeconfig /etc/kubernetes/.kubeconfig.tmp && mv /etc/kubernetes/.kubeconfig.tmp /etc/kubernetes/kubeconfig
echo "  | the operator's: $(stat -c '%U %a %C' /etc/kubernetes/kubeconfig)"
check "K6 the operator's own file (root, the node's server and CA) is used again" wait_until 15 sh -c \
  "nodectl status --json | jq -r '.steps[] | select(.id == \"bootstrap-kubeconfig\") | .detail' | grep -qx '/etc/kubernetes/kubeconfig present'"
echo "  | bootstrap-kubeconfig: $(step_field bootstrap-kubeconfig detail | cut -c1-160)"

echo "## K4: the agent's own surface: systemd hardening, no secret in any log line"
# Recorded in docs/security.md; a change that makes it worse fails here.
EXPOSURE_MAX=2.5
score=$(systemd-analyze security nodectld.service --no-pager 2>/dev/null | tail -1 | grep -o '[0-9][0-9]*\.[0-9]' | head -1)
systemd-analyze security nodectld.service --no-pager 2>/dev/null | tail -1 | sed 's/^/  | /'
check "K4 systemd-analyze security nodectld.service: $score, no worse than $EXPOSURE_MAX" \
  awk -v s="$score" -v m="$EXPOSURE_MAX" 'BEGIN { exit !(s != "" && s + 0 <= m + 0) }'
expect "K4 the test token appears nowhere in this boot's journal (all fields)" \
  "$(journalctl -b -o verbose --no-pager | grep -c 0123456789abcdef)" 0
keyline=$(sed -n '/PRIVATE KEY-----$/,/END/p' "$current" | sed -n 2p)
check "K4 the node's key bytes appear nowhere in this boot's journal" \
  sh -c "[ -n '$keyline' ] && ! journalctl -b -o verbose --no-pager | grep -qF -- '$keyline'"

echo "## K5: idle footprint of the release build (target: <= 2 MiB private memory, no busy polling)"
# What ships: the release build (packaging's profile), as nodectld.service runs it, on a node
# that holds its credentials, with kubelet running and FleetLock served; the credentials check
# talks to the double.
put_bin nodectld-release /usr/local/bin/nodectld
# (Zincati's user exists before the endpoint starts: reboot.fleetlock_users is resolved then)
id zincati >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin zincati
printf '[reboot]\nstrategy = "fleet-lock"\n' >/etc/nodectl/config.d/30-reboot.toml
# FleetLock's port as the FCOS configs ship it: Zincati's fragment (the socket's condition) and
# nodectld.socket, which nodectld.service wants; systemd holds the port, nodectld serves on it.
mkdir -p /etc/zincati/config.d
printf '[updates]\nstrategy = "fleet_lock"\n[updates.fleet_lock]\nbase_url = "http://127.0.0.1:9455/"\n' \
  >/etc/zincati/config.d/55-nodectl-fleetlock.toml
install -m 0644 /test/nodectld.socket /etc/systemd/system/nodectld.socket
restorecon /etc/systemd/system/nodectld.socket
systemctl daemon-reload
check "K5 the release nodectld starts" systemctl restart nodectld.service
expect "K5 nodectld.socket holds FleetLock's port (SELinux enforcing)" "$(systemctl is-active nodectld.socket)" active
check "K5 nodectld serves on the descriptor systemd passed" sh -c \
  "journalctl _SYSTEMD_INVOCATION_ID=\$(systemctl show -p InvocationID --value nodectld.service) -o cat | grep -q 'port is held by systemd (nodectld.socket)'"
check "K5 it converges (kubelet active, FleetLock served)" wait_until 60 sh -c \
  'nodectl status --json | jq -e ".daemon.status_line == \"node converged\" and .kubelet.active == \"active\" and .reboot.endpoint != null"'
sleep 2
pid=$(systemctl show -p MainPID --value nodectld.service)
cpu() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
# (the pass count from the metrics file nodectld rewrites after each pass: no call wakes it)
passes() { awk '$1 == "nodectl_passes_total" {print $2}' /run/nodectl/metrics/nodectl.prom; }
# Private: per mapping the larger of Anonymous and Private_Dirty (each page once): what nodectld
# holds that no file backs (the target); RSS also counts the binary's code, page cache the node
# can reclaim (bench.sh B5 measures the unit's memory.current too).
private() {
  awk '/^[0-9a-f]+-[0-9a-f]+ / {t += (a > d ? a : d); a = 0; d = 0} /^Anonymous:/ {a = $2} /^Private_Dirty:/ {d = $2}
       END {t += (a > d ? a : d); print t}' "/proc/$pid/smaps"
}
# Idle from here: what the last passes freed goes back at the late trim (10 s after a pass),
# so private memory is read each second until it is at the target (a hang bound of 45 s), and
# the window for passes and CPU lasts at least 10 s. (A fixed 10 s window once read 4.2 MiB,
# 15 s after the converged check: a pass came after the trim and its own trim was still due.)
passes0=$(passes); cpu0=$(cpu); t0=$SECONDS
priv=$(private)
while [ "$priv" -gt 2304 ] && [ $((SECONDS - t0)) -lt 45 ]; do sleep 1; priv=$(private); done
idle=$((SECONDS - t0))
[ "$idle" -ge 10 ] || { sleep $((10 - idle)); idle=10; }
passes1=$(passes); cpu1=$(cpu)
rss=$(awk '/^Rss:/ {print $2}' "/proc/$pid/smaps_rollup")
echo "  | nodectld (release) idle: RSS $rss kB, PSS $(awk '/^Pss:/ {print $2}' "/proc/$pid/smaps_rollup") kB, anonymous $(awk '/^Anonymous:/ {print $2}' "/proc/$pid/smaps_rollup") kB, $(ls "/proc/$pid/task" | wc -l) thread(s); CPU $((cpu1 - cpu0)) ticks in $idle s"
grep '^nodectl_resident_memory_bytes' /run/nodectl/metrics/nodectl.prom | sed 's/^/  | (after the last pass) /'
awk '/^[0-9a-f]+-[0-9a-f]+ /{name=$6} /^Rss:/{rss[name]+=$2} END{for(n in rss) if (rss[n] >= 100) print "  | " rss[n] " kB " n}' "/proc/$pid/smaps" | sort -k3
echo "  | private (anonymous or dirty) $priv kB, $idle s after the converged check and 2 s settling"
check "K5 idle private memory comes down to <= 2 MiB + 0.25 ($priv kB; guard: target and allowance)" test "$priv" -le 2304
# (both read from the metrics file: a file without the count would compare two empty strings)
check "K5 the pass count is in the metrics file (${passes0:-none} before, ${passes1:-none} after)" \
  test -n "$passes0" -a -n "$passes1"
expect "K5 no pass in $idle s idle (no polling)" "$passes1" "$passes0"
# (nothing calls nodectld in the window: passes come from its metrics file. The ticks are a
# figure (the benchmark's B5 reports them per state); the check is 10x the 10 ticks idling may take, which
# only a poller exceeds: issue 50, no timing gate in the test command)
check "K5 not polling: $((cpu1 - cpu0)) CPU ticks in $idle s idle (a poller above 100)" test $((cpu1 - cpu0)) -le 100

echo "## K8: journalctl -o json shows the documented fields (docs/troubleshooting.md; the MESSAGE_IDs: typhoon.sh T1)"
k8=$(journalctl -u nodectld.service --no-pager -o json | jq -s -c '{step: map(select(.STEP)) | length, trigger: map(select(.TRIGGER)) | length, prefixed: map(select(.F_STEP or .F_TRIGGER)) | length, ids: (map(.SYSLOG_IDENTIFIER) | unique)}')
echo "  | $k8"
check "K8 STEP and TRIGGER fields, none prefixed F_, from nodectld" \
  jq -e '.step > 0 and .trigger > 0 and .prefixed == 0 and (.ids | index("nodectld"))' <<<"$k8"

echo "## K7: FleetLock serves Zincati's unit, not whoever takes its uid"
# Issue 37, 4: a root process can setuid to zincati before socket(); the kernel's socket table
# then shows zincati's uid. nodectld asks the kernel (sock_diag) for the client socket's cgroup.
cat >/tmp/fl-client <<'CLIENT'
body='{"client_params":{"id":"0123456789abcdef0123456789abcdef","group":"workers"}}'
exec 3<>/dev/tcp/127.0.0.1/9455 || exit 1
printf 'POST /v1/pre-reboot HTTP/1.1\r\nHost: 127.0.0.1\r\nfleet-lock-protocol: true\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s' "${#body}" "$body" >&3
cat <&3
CLIENT
# (the reply through a file systemd opens: Debian's policy lets dbus-daemon pass no fd of
# unconfined_t, which systemd-run --pipe needs)
in_unit() {
  rm -f /run/fl-out
  systemd-run --quiet --wait --collect --unit="$1" --uid=zincati -p RuntimeMaxSec=60 -p StandardOutput=truncate:/run/fl-out \
    bash -c 'c=$(sed -n "s/^0:://p" /proc/self/cgroup); echo "client in cgroup $c ($(stat -c %i "/sys/fs/cgroup$c"))"; bash /tmp/fl-client'
  cat /run/fl-out
}
out=$(timeout 60 setpriv --reuid=zincati --regid="$(id -g zincati)" --init-groups bash /tmp/fl-client)
echo "  | root as zincati's uid, outside zincati.service: $(tail -1 <<<"$out" | cut -c1-160)"
check "K7 a root process with zincati's uid outside zincati.service is refused" grep -q '"kind":"forbidden_peer"' <<<"$out"
out=$(in_unit other.service)
check "K7 zincati's uid in another unit is refused" grep -q '"kind":"forbidden_peer"' <<<"$out"
out=$(in_unit zincati.service)
echo "  | zincati in zincati.service: $(head -1 <<<"$out"); $(tail -1 <<<"$out" | cut -c1-200)"
check "K7 zincati in zincati.service is served (another node's id: wrong_node, not forbidden_peer)" grep -q '"kind":"wrong_node"' <<<"$out"
systemctl stop nodectld.socket
rm /etc/nodectl/config.d/30-reboot.toml /etc/zincati/config.d/55-nodectl-fleetlock.toml /etc/systemd/system/nodectld.socket
systemctl daemon-reload
systemctl restart nodectld.service
stop_apiserver_double

echo "## K2: flannel's MAC and nodectld's 50-flannel.link"
modprobe vxlan >/dev/null 2>&1
dev=$(ls /sys/class/net | grep -v -x lo | head -1)
# flannel_mac: create flannel.1 without an address; print "kernel-assigned udev-final".
flannel_mac() {
  udevadm settle
  udevadm control --stop-exec-queue          # hold udev to read the kernel-assigned MAC first
  ip link add flannel.1 type vxlan id 1 dev "$dev" dstport 8472
  local before; before=$(cat /sys/class/net/flannel.1/address)
  udevadm control --start-exec-queue
  udevadm settle -t 30; sleep 1; udevadm settle -t 30
  echo "$before $(cat /sys/class/net/flannel.1/address)"
  ip link del flannel.1; udevadm settle
}
expect "nodectld wrote the link file (flannel)" "$(head -c 19 /etc/systemd/network/50-flannel.link 2>&1)" "# Managed by nodect"
udevadm control --reload
read -r before after <<<"$(flannel_mac)"
echo "  | with 50-flannel.link: kernel $before, after udev $after"
expect "K2a the MAC flannel.1 got is kept" "$after" "$before"
sed -i 's/provider = "flannel"/provider = "cilium"/' /etc/nodectl/config.d/10-node.toml
check "nodectld removes its link file when the provider changes" wait_until 15 sh -c '! test -e /etc/systemd/network/50-flannel.link'
udevadm control --reload
read -r before after <<<"$(flannel_mac)"
echo "  | without it:          kernel $before, after udev $after"
check "K2b without the link file udev rewrites the MAC (MACAddressPolicy=persistent)" test "$before" != "$after"

summary kubelet
