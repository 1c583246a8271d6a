#!/bin/bash
# Tier 3, inside the QEMU VM: SELinux enforcing with MCS, udev, podman, systemd 252.
# /test holds: check.sh, nodectld, nodectl, nodectld.service, org.nodectl.Agent1.conf, worker.toml.
. /test/check.sh
. /test/lib.sh
export NO_COLOR=1

echo "## host"
expect "SELinux enforcing" "$(getenforce)" Enforcing

echo "## install nodectld as packaging/ ships it"
install_nodectld /test/worker.toml
start=$(date +%s%N)
check "nodectld starts and reaches READY" systemctl start nodectld.service
echo "  | start took $(( ($(date +%s%N) - start) / 1000000 )) ms"
expect "nodectld active" "$(systemctl is-active nodectld.service)" active
echo "  | nodectld runs as $(tr -d '\0' </proc/"$(systemctl show -p MainPID --value nodectld.service)"/attr/current)"

echo "## nodectl status --json"
st=$(nodectl status --json)
jq -c '{source, daemon: {state: .daemon.state, ready: .daemon.ready}, host: {os: .host.os, selinux: .host.selinux, labels_applied: .host.labels_applied}}' <<<"$st" | sed 's/^/  | /'
expect "status from the daemon" "$(jq -r .source <<<"$st")" daemon
expect "daemon READY" "$(jq -r .daemon.ready <<<"$st")" true
expect "host generic" "$(jq -r .host.os <<<"$st")" generic
expect "SELinux enforcing" "$(jq -r .host.selinux.mode <<<"$st")" enforcing
expect "MLS/MCS on" "$(jq -r .host.selinux.mls <<<"$st")" true
expect "labels applied" "$(jq -r .host.labels_applied <<<"$st")" true
nodectl status | sed 's/^/  | /'

echo "## files nodectld wrote carry the policy's labels (set before rename)"
for f in /etc/systemd/system/kubelet.service /etc/systemd/system/kubelet.service.d/00-nodectl-image.conf \
         /etc/modules-load.d/nodectl.conf /etc/sysctl.d/50-nodectl.conf /var/lib/kubelet; do
  have=$(stat -c %C "$f"); want=$(matchpathcon -n "$f")
  expect "label of $f (policy default)" "$have" "$want"
done
# /etc/kubernetes is a managed tree (selinux.relabel): shared container label, s0.
for f in /etc/kubernetes /etc/kubernetes/manifests; do
  expect "label of $f (managed)" "$(stat -c %C "$f")" system_u:object_r:container_file_t:s0
done
# The CNI directories: the label kubelet's `:z` mounts give them at each start (the network's
# pods write there), so no pass undoes a kubelet start's relabel.
for f in /etc/cni/net.d /opt/cni/bin; do
  expect "label of $f (kubelet's :z)" "$(stat -c %C "$f")" system_u:object_r:container_file_t:s0
done
check "no temp files left behind" sh -c '! find /etc/systemd/system /etc/kubernetes /etc/modules-load.d /etc/sysctl.d -name ".*.nodectl-*" | grep .'

echo "## files systemd applies at boot take effect now"
expect "br_netfilter loaded (systemd-modules-load restarted)" "$(test -d /sys/module/br_netfilter && echo loaded)" loaded
expect "fs.inotify.max_user_watches applied (systemd-sysctl restarted)" "$(cat /proc/sys/fs/inotify/max_user_watches)" 16184

echo "## nodectld's own AVC denials"
# Kernel AVCs by comm, and D-Bus USER_AVCs where nodectld's pid is the sender or target.
pid=$(systemctl show -p MainPID --value nodectld.service)
denials=$(grep -E "denied.*(comm=\"nodectl|[ s t]pid=$pid[^0-9])" /var/log/audit/audit.log 2>/dev/null)
[ -n "$denials" ] && printf '%s\n' "$denials" | sed 's/^/  | /'
expect "no AVC denials involving nodectld" "$(printf '%s' "$denials" | grep -c denied)" 0

summary vm
