#!/bin/bash
# Tier 3, inside the VM (SELinux enforcing, MCS, podman, systemd 252): what a real Typhoon node
# does that the other suites' nodes do not.
#   T1  an AWS worker's first boot: no static hostname (the VM's is set transient to localhost,
#       as on EC2 before DHCP), the name set with hostnamectl --transient after nodectld started
#       (nodectld shares the host's UTS namespace), and afterburn.service as a stand-in unit
#       that writes the instance metadata only when something starts it (FCOS presets none of
#       it): nodectld starts it, kubelet (the stand-in image) runs with the provider id and the
#       node's name from the kernel, no --hostname-override
#   T2  Typhoon's ssh.tf: the bundle copied to ~core/assets, `sudo /opt/bootstrap/layout` as the
#       shipped controller config writes it: the command returns once every file is placed
#       (owner, mode, label) and the copy in the home directory is gone
#   T3  containerd from Debian with the shipped FCOS config (containerd config.toml from the
#       template) runs a pod through its CRI, as kubelet does: the runc v2 shim, the systemd
#       cgroup driver (a cri-containerd-*.scope in the pod's slice), an MCS pair of its own
# /test holds: check.sh, lib.sh, nodectld, nodectl, nodectld.service, org.nodectl.Agent1.conf,
# nodectl-apiserver-double, kubelet-standin/, butane/ (the release's rendered templates),
# cri-run (tests/testkit).
. /test/check.sh
. /test/lib.sh
export NO_COLOR=1
STANDIN=localhost/kubelet-standin:test

clean_node() {
  local t u since
  # One at a time, nodectld first (no pass of it starts kubelet again), each stop timed; a slow
  # one shows the journal of its stop. (Stopped together, kubelet went first, a hostname change
  # woke a pass that started it again, and that start, queued behind nodectld's own stop, held
  # nodectld until the 90 s stop timeout: nspawn suite.sh now checks that a stop ends such a pass.)
  for u in nodectld.service kubelet.service afterburn.service; do
    t=$SECONDS
    since=$(date '+%Y-%m-%d %H:%M:%S')
    systemctl stop "$u" 2>/dev/null
    [ $((SECONDS - t)) -lt 3 ] || { echo "  | (clean_node: $u's stop took $((SECONDS - t)) s)"
      journalctl -b --since "$since" --no-pager -o short-precise | grep -v audit | tail -25 | cut -c1-250 | sed 's/^/  |   /'; }
  done
  podman rm -af -t 0 >/dev/null 2>&1
  rm -rf /etc/kubernetes /var/lib/nodectl /etc/systemd/system/kubelet.service.d /var/lib/kubelet/pki \
    /var/lib/kubelet/kubeconfig /etc/ssl/etcd /run/metadata /opt/bootstrap
  systemctl daemon-reload
}

echo "## T1: an AWS worker's first boot: the hostname after nodectld started, afterburn started by it"
clean_node
check "stand-in image built offline (podman import)" /test/kubelet-standin/build-image.sh $STANDIN
check "the API double listens on 127.0.0.1:6443" start_apiserver_double --node ip-10-0-1-7
# afterburn as FCOS ships it: a oneshot nothing enables; this one writes what afterburn's AWS
# provider writes (AFTERBURN_AWS_* in /run/metadata/afterburn), after a while.
cat >/etc/systemd/system/afterburn.service <<'EOF'
[Unit]
Description=afterburn stand-in (instance metadata)
[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh -c 'sleep 2; mkdir -p /run/metadata; printf "AFTERBURN_AWS_AVAILABILITY_ZONE=us-east-1a\nAFTERBURN_AWS_INSTANCE_ID=i-0123\n" >/run/metadata/.afterburn && mv /run/metadata/.afterburn /run/metadata/afterburn'
EOF
printf '[node]\nrole = "worker"\n[kubelet]\nprovider_id = "aws"\ncloud_provider = "external"\n' >/tmp/aws-worker.toml
install_nodectld /tmp/aws-worker.toml
# Test timers (a debug build only): node-identity's 5 s rechecks for the transient hostname and
# afterburn's metadata come every 0.3 s (removed at the suite's end).
mkdir -p /etc/systemd/system/nodectld.service.d
printf '[Service]\nEnvironment=NODECTL_TEST_TIMERS=scale=1/16\n' >/etc/systemd/system/nodectld.service.d/50-test-timers.conf
mkdir -p /etc/systemd/system/kubelet.service.d
printf '[Service]\nEnvironment=KUBELET_IMAGE=%s\n' $STANDIN >/etc/systemd/system/kubelet.service.d/10-image-override.conf
kubelet_stop_timeout # (clean_node stops it between T1, T2 and T3; none checks that stop)
install -D -m 0600 /root/bootstrap-kubeconfig /etc/kubernetes/kubeconfig
systemctl daemon-reload
# EC2 before DHCP: no static hostname (Typhoon's AWS configs write none), the kernel's localhost
mv /etc/hostname /root/hostname.static
hostnamectl --transient set-hostname localhost
check "T1 nodectld starts" systemctl start nodectld.service
identity() { nodectl status --json | jq -r '.steps[] | select(.id == "node-identity") | "\(.state): \(.waiting_for // .detail)"'; }
echo "  | kernel hostname $(hostname); node-identity $(identity)"
check "T1 node-identity waits for a hostname other than localhost" wait_until 10 sh -c \
  'nodectl status --json | jq -e ".steps[] | select(.id == \"node-identity\") | .state == \"waiting\" and (.waiting_for | test(\"hostname other than\"))"'
expect "T1 afterburn not started while the name is unknown" "$(systemctl is-active afterburn.service)" inactive
hostnamectl --transient set-hostname ip-10-0-1-7
check "T1 the transient hostname ends the wait (nodectld sees the kernel's name)" wait_until 15 sh -c \
  'nodectl status --json | jq -e ".steps[] | select(.id == \"node-identity\") | .detail // \"\" | test(\"node name ip-10-0-1-7\")"'
echo "  | kernel hostname $(hostname); node-identity $(identity)"
check "T1 nodectld started afterburn.service" wait_until 15 sh -c '[ "$(systemctl is-active afterburn.service)" = active ]'
check "T1 kubelet.service becomes active" wait_until 60 sh -c '[ "$(systemctl is-active kubelet.service)" = active ]'
check "T1 the stand-in registers as the kernel's hostname" wait_until 30 sh -c \
  'journalctl -u kubelet.service --no-pager -o cat | grep -q "kubelet stand-in: node ip-10-0-1-7,"'
args=$(podman inspect kubelet --format '{{join .Args " "}}')
check "T1 kubelet has the provider id from afterburn's metadata" grep -q -- "--provider-id=aws:///us-east-1a/i-0123" <<<"$args"
check "T1 and --cloud-provider=external, no --hostname-override" bash -c \
  'grep -q -- "--cloud-provider=external" <<<"$1" && ! grep -q -- "--hostname-override" <<<"$1"' _ "$args"
expect "T1 the certificate names the kernel's hostname" "$(nodectl status --json | jq -r .credentials.subject)" "system:node:ip-10-0-1-7"
# (the node is registered here, so its condition is reported: docs/troubleshooting.md's
# MESSAGE_ID, as journalctl -o json shows it)
check "T1 journalctl -o json: the condition's MESSAGE_ID with STATUS, REASON, NODE, from nodectld" wait_until 30 sh -c \
  "journalctl -u nodectld.service --no-pager -o json | jq -e -s 'map(select(.MESSAGE_ID == \"4f1c2a7e9b3d4c5e8a6f0b1c2d3e4f50\" and .STATUS and .REASON and .NODE == \"ip-10-0-1-7\" and .SYSLOG_IDENTIFIER == \"nodectld\")) | length > 0' >/dev/null"
mv /root/hostname.static /etc/hostname
hostnamectl set-hostname "$(cat /etc/hostname)"
rm -f /etc/systemd/system/afterburn.service
clean_node
stop_apiserver_double

echo "## T2: Typhoon's ssh.tf: the bundle to ~core/assets, then sudo /opt/bootstrap/layout"
printf '[node]\nrole = "controller"\nname = "controller-0"\n' >/tmp/controller.toml
id etcd >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin etcd
install_nodectld /tmp/controller.toml
mkdir -p /etc/systemd/system/kubelet.service.d
printf '[Service]\nEnvironment=KUBELET_IMAGE=%s\n' $STANDIN >/etc/systemd/system/kubelet.service.d/10-image-override.conf
kubelet_stop_timeout # (clean_node stops it between T1, T2 and T3; none checks that stop)
systemctl daemon-reload
check "T2 nodectld starts (the controller waits for its bundle)" systemctl start nodectld.service
# the layout script exactly as the shipped controller config writes it
awk '/path: \/opt\/bootstrap\/layout/ {f=1} f && /inline: \|/ {i=1; next} i && !/^          / && !/^$/ {exit} i {sub(/^          /, ""); print}' \
  /test/butane/fcos-controller.bu >/tmp/layout
mkdir -p /opt/bootstrap && install -m 0544 /tmp/layout /opt/bootstrap/layout
echo "  | /opt/bootstrap/layout: $(tr '\n' ';' </tmp/layout)"
check "T2 the shipped layout is nodectl's" grep -qx 'exec /usr/bin/nodectl import assets' /opt/bootstrap/layout
ln -sf /usr/local/bin/nodectl /usr/bin/nodectl
id core >/dev/null 2>&1 || useradd -m core
# A bundle in terraform-render-bootstrap's shape, as ssh.tf writes it.
{ typhoon_records; record auth/admin.conf /tmp/cp.conf; } >/home/core/assets
chown core: /home/core/assets
records=$(grep -c '^##### ' /home/core/assets)
start=$(date +%s%N)
# (ssh.tf: `sudo /opt/bootstrap/layout` as core, in core's home directory. The image has no
# sudo: root here, with what sudo(8) puts in the environment of the command it runs for core:
# SUDO_UID, SUDO_GID, SUDO_USER. `nodectl import` takes a bundle owned by root, by the user
# running it, or by SUDO_UID's; core's copy is core's.)
out=$(cd /home/core && SUDO_UID=$(id -u core) SUDO_GID=$(id -g core) SUDO_USER=core /opt/bootstrap/layout 2>&1); layout_rc=$?
echo "$out" | sed 's/^/  | layout: /'
# (ssh.tf runs it over SSH and fails the apply on a non-zero exit: its status is asserted)
expect "T2 /opt/bootstrap/layout exits 0, as Typhoon's ssh.tf requires" "$layout_rc" 0
echo "  | layout took $(( ($(date +%s%N) - start) / 1000000 )) ms"
check "T2 the layout returned once nodectld placed the bundle" grep -q "placed by nodectld: $records files" <<<"$out"
expect "T2 the copy in the home directory is gone" "$(test -e /home/core/assets && echo there || echo gone)" gone
expect "T2 etcd's peer key: etcd's, 0600, the policy's label" \
  "$(stat -c '%U %a %C' /etc/ssl/etcd/etcd/peer.key)" "etcd 600 $(matchpathcon -n /etc/ssl/etcd/etcd/peer.key)"
expect "T2 the control plane's key: 65534's, 0600, shared label" \
  "$(stat -c '%u %a %C' /etc/kubernetes/pki/apiserver.key)" "65534 600 system_u:object_r:container_file_t:s0"
check "T2 the static manifests are in place" test -s /etc/kubernetes/manifests/kube-apiserver.yaml
check "T2 nodectl wait secrets (bootstrap.service's) returns at once" timeout 5 nodectl wait secrets
rm -f /usr/bin/nodectl
clean_node

echo "## T3: containerd from Debian, with the shipped FCOS config, runs a pod through its CRI"
# /etc/containerd/config.toml exactly as the shipped FCOS worker config writes it
awk '/path: \/etc\/containerd\/config.toml/ {f=1} f && /inline: \|/ {i=1; next} i && !/^          / && !/^$/ {exit} i {sub(/^          /, ""); print}' \
  /test/butane/fcos-worker.bu >/tmp/containerd.toml
install -D -m 0644 /tmp/containerd.toml /etc/containerd/config.toml
restorecon -R /etc/containerd >/dev/null 2>&1
echo "  | containerd $(containerd --version | awk '{print $3}'), config: $(grep -c . /etc/containerd/config.toml) lines"
expect "T3 containerd's effective runc runtime_type" \
  "$(containerd config dump | awk '/runtimes.runc\]/ {f=1} f && /runtime_type/ {print $3; exit}')" '"io.containerd.runc.v2"'
# containerd's state as container-selinux labels it (the test policy's container-shim.cil has
# its file contexts); nodectld made /var/lib/containerd for kubelet's mount before
restorecon -R /var/lib/containerd >/dev/null 2>&1
systemctl unmask containerd.service >/dev/null 2>&1
check "T3 containerd starts with it" systemctl start containerd.service
SOCK=/run/containerd/containerd.sock
# The sandbox image containerd is configured with (its pause), and the pod's, imported locally.
busybox_image localhost/pod:1 >/dev/null
pause=$(containerd config dump | awk -F'"' '/sandbox_image/ {print $2; exit}')
rm -rf /tmp/pause && mkdir -p /tmp/pause/bin && cp /bin/busybox /tmp/pause/bin/busybox && ln -s busybox /tmp/pause/bin/sleep
tar -C /tmp/pause -cf /tmp/pause.tar . && podman import -q --change 'ENTRYPOINT ["/bin/sleep","2147483647"]' /tmp/pause.tar "$pause" >/dev/null
for i in "$pause" localhost/pod:1; do
  rm -f /tmp/img.tar
  podman save --format oci-archive -o /tmp/img.tar "$i" 2>&1 | sed 's/^/  | podman save: /'
  ctr -n k8s.io images import --base-name "${i%:*}" /tmp/img.tar 2>&1 | sed 's/^/  | ctr import: /'
  if ! ctr -n k8s.io images ls -q | grep -qx "$i"; then # (a ref.name that is the whole name)
    ctr -n k8s.io images import /tmp/img.tar 2>&1 | sed 's/^/  | ctr import: /'
    ctr -n k8s.io images ls -q | grep -qx "$i" || ctr -n k8s.io images tag "$(ctr -n k8s.io images ls -q | grep -F "${i##*/}" | head -1)" "$i" >/dev/null
  fi
done
echo "  | images: $(ctr -n k8s.io images ls -q | tr '\n' ' ')"
out=$(/test/cri-run $SOCK run t3 localhost/pod:1 kubepods-besteffort.slice 65534 /bin/sleep 600 2>&1)
echo "$out" | sed 's/^/  | cri-run: /'
sandbox=$(awk '/^sandbox/ {print $2}' <<<"$out"); cid=$(awk '/^container/ {print $2}' <<<"$out"); pid=$(awk '/^pid/ {print $2}' <<<"$out")
check "T3 the pod runs (RunPodSandbox, CreateContainer, StartContainer)" test -n "$pid" -a -d "/proc/$pid"
check "T3 through the runc v2 shim (runtime_type io.containerd.runc.v2)" \
  sh -c 'grep -l containerd-shim-runc-v2 /proc/[0-9]*/cmdline 2>/dev/null | grep -q .'
cg=$(cat "/proc/$pid/cgroup" 2>/dev/null)
echo "  | cgroup: $cg"
check "T3 in a systemd scope of the pod's slice (SystemdCgroup = true)" \
  grep -q "kubepods-besteffort.slice/cri-containerd-$cid.scope" <<<"$cg"
label=$(tr -d '\0' <"/proc/$pid/attr/current" 2>/dev/null)
echo "  | process label: $label"
check "T3 container_t with an MCS pair of its own (enable_selinux = true)" \
  grep -Eq ':container_t:s0:c[0-9]+,c[0-9]+$' <<<"$label"
expect "T3 as the uid the pod asks for" "$(stat -c %u "/proc/$pid")" 65534
[ -n "$sandbox" ] && /test/cri-run $SOCK remove "$sandbox"
systemctl stop containerd.service
systemctl mask containerd.service >/dev/null 2>&1
rm -rf /etc/containerd
rm -f /etc/systemd/system/nodectld.service.d/50-test-timers.conf && systemctl daemon-reload

summary typhoon
