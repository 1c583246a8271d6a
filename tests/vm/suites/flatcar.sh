#!/bin/bash
# Tier 3, inside the VM: a Flatcar node (issue 42). The same image in Flatcar's shape: its
# os-release (ID=flatcar), its system users in /usr/share/baselayout (etcd is 232 there and not in
# /etc/passwd: flatcar/baselayout), SELinux permissive as Flatcar boots, Debian's docker.io with a
# containerd.service of its own and --selinux-enabled as Flatcar's docker.service runs it
# (flatcar/scripts coreos/sysext/docker/.../docker.service: DOCKER_SELINUX=--selinux-enabled=true,
# Requires=containerd.service), containerd with Flatcar's SystemdCgroup = true.
#   F1  a worker on AWS: Debian's ignition applies nodectl's Flatcar worker config
#       (packaging/butane/flatcar-worker.bu with provider_id aws, cloud_provider external; the
#       release's squashfs image over HTTP, its sha512 checked), locksmithd masked, docker enabled
#       by its preset; the image merges, its Upholds= starts nodectld, which starts
#       coreos-metadata.service (a stand-in doing what Flatcar's unit does: afterburn's AWS
#       attributes renamed COREOS_EC2_*, /run/metadata/coreos a link), renders kubelet.service as
#       Typhoon's Flatcar unit (`docker run`), and the node converges: credentials from the API
#       double, kubelet (the stand-in image, loaded into docker) active under docker with the
#       provider id from the metadata. docker inspect: every -v of the unit, --network host,
#       --pid host, privileged (no private MCS pair: a container docker labels gets one), the
#       systemd cgroup driver (docker info, a docker-<id>.scope) as kubelet.yaml's cgroupDriver
#   F2  a controller: nodectl's Flatcar controller config, the bundle through /opt/bootstrap/layout
#       as Typhoon's ssh.tf calls it, etcd's keys owned by 232 (baselayout's etcd), and the three
#       control-plane static pods run by kubelet under docker, each reading its keys
# /test holds: check.sh, lib.sh, dist/ (release.sh's output), nodectl-butane, ignition,
# nodectl-apiserver-double, kubelet-standin/, example.vars, butane/.
. /test/check.sh
. /test/lib.sh
export NO_COLOR=1
STANDIN=localhost/kubelet-standin:test
V=$(ls /test/dist/flatcar | sed -n "s/^nodectl-\(.*\)-x86-64.raw$/\1/p")
IMG=nodectl-$V-x86-64.raw
SHA=$(sha512sum /test/dist/flatcar/$IMG | cut -d' ' -f1)
W=/tmp/flatcar && rm -rf $W && mkdir -p $W/files

fresh_node() {
  # the image unmerged first: its multi-user.target drop-in's Upholds= would start a nodectld
  # stopped while it is merged again at once
  rm -f /etc/extensions/nodectl.raw /var/lib/extensions/nodectl.raw
  systemctl restart systemd-sysext.service
  systemctl daemon-reload
  systemctl stop nodectld.service kubelet.service coreos-metadata.service >/dev/null 2>&1
  docker rm -f kubelet >/dev/null 2>&1
  podman rm -af -t 0 >/dev/null 2>&1
  rm -rf /etc/systemd/system/nodectld.service /etc/systemd/system/kubelet.service \
    /etc/systemd/system/kubelet.service.d /usr/local/bin/nodectld /usr/local/bin/nodectl \
    /etc/dbus-1/system.d/org.nodectl.Agent1.conf /etc/nodectl /etc/kubernetes /var/lib/nodectl \
    /var/lib/kubelet /etc/ssl/etcd /run/metadata /opt/bootstrap /opt/extensions/nodectl \
    /etc/sysupdate.nodectl.d /etc/systemd/import-pubring.gpg /etc/systemd/system/locksmithd.service \
    /etc/systemd/system-preset/20-ignition.preset 2>/dev/null
  systemctl daemon-reload
  systemctl reset-failed >/dev/null 2>&1
  busctl call org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus ReloadConfig
}

# restore: this VM's own shape again (the suites after this one run in the same boot), also when
# the suite is cut short
restore() {
  [ -n "${restored:-}" ] && return 0
  restored=1
  fresh_node
  systemctl stop docker.service docker.socket containerd.service >/dev/null 2>&1
  systemctl disable docker.service >/dev/null 2>&1
  systemctl mask docker.service docker.socket containerd.service >/dev/null 2>&1
  # docker's networking (its bridge, chains and FORWARD policy) and what the configs wrote
  ip link del docker0 >/dev/null 2>&1
  iptables -P FORWARD "$forward_before"
  rm -rf /etc/docker/daemon.json /etc/containerd/config.toml /etc/systemd/system/coreos-metadata.service \
    /etc/systemd/system/etcd-member.service /etc/systemd/system/bootstrap.service /etc/etcd /var/lib/etcd \
    /etc/modules-load.d/nodectl.conf /etc/sysctl.d/50-nodectl.conf /home/core/.ssh
  cp $W/os-release.debian /usr/lib/os-release
  cp $W/passwd $W/group $W/shadow $W/gshadow /etc/
  rm -rf /usr/share/baselayout
  hostnamectl set-hostname "$hostname_before"
  systemctl daemon-reload
  setenforce "$enforce_before"
}

echo "## F0 Flatcar's shape"
fresh_node
cp /usr/lib/os-release $W/os-release.debian
cp /etc/passwd /etc/group /etc/shadow /etc/gshadow $W/
hostname_before=$(cat /etc/hostname)
enforce_before=$(getenforce)
forward_before=$(iptables -S FORWARD | sed -n 's/^-P FORWARD //p')
trap restore EXIT
# Flatcar's os-release (/etc/os-release links to it there as here)
cat >/usr/lib/os-release <<'EOF'
NAME="Flatcar Container Linux by Kinvolk"
ID=flatcar
ID_LIKE=coreos
VERSION=3975.2.1
VERSION_ID=3975.2.1
BUILD_ID=2024-09-24-2141
SYSEXT_LEVEL=1.0
PRETTY_NAME="Flatcar Container Linux by Kinvolk 3975.2.1 (Oklo)"
ANSI_COLOR="38;5;75"
HOME_URL="https://flatcar.org/"
BUG_REPORT_URL="https://issues.flatcar.org"
FLATCAR_BOARD="amd64-usr"
CPE_NAME="cpe:2.3:o:flatcar-linux:flatcar_linux:3975.2.1:*:*:*:*:*:*:*"
EOF
# baselayout's system users (flatcar/baselayout baselayout/passwd, group; nss "usrfiles" there):
# etcd is 232 in /usr/share/baselayout only, not in /etc/passwd (typhoon.sh made one: gone here)
mkdir -p /usr/share/baselayout
printf 'root:x:0:0:root:/root:/bin/bash\nbin:x:1:1:bin:/bin:/sbin/nologin\ndaemon:x:2:2:daemon:/sbin:/sbin/nologin\nnobody:x:65534:65534:nobody:/:/sbin/nologin\netcd:x:232:232::/dev/null:/sbin/nologin\n' \
  >/usr/share/baselayout/passwd
printf 'root:x:0:\nbin:x:1:\ndaemon:x:2:\netcd:x:232:\ndocker:x:233:\nnobody:x:65534:\n' >/usr/share/baselayout/group
userdel etcd >/dev/null 2>&1; groupdel etcd >/dev/null 2>&1
id core >/dev/null 2>&1 || useradd -m core
expect "no etcd in /etc/passwd (baselayout's)" "$(grep -c '^etcd:' /etc/passwd)" 0
# SELinux as Flatcar boots it: permissive; the denials logged meanwhile are looked at the end
mark=$(wc -l </var/log/audit/audit.log)
setenforce 0
# containerd as Flatcar's (flatcar/scripts coreos-overlay containerd config.toml: SystemdCgroup,
# enable_selinux), docker as Flatcar's docker.service runs it
mkdir -p /etc/containerd /etc/docker
printf 'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  enable_selinux = true\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\n  SystemdCgroup = true\n' \
  >/etc/containerd/config.toml
printf '{"selinux-enabled": true}\n' >/etc/docker/daemon.json
systemctl unmask containerd.service docker.service docker.socket >/dev/null 2>&1
systemctl daemon-reload
# what this node reports itself as
hostnamectl set-hostname ip-10-0-1-8

echo "## F1 a Flatcar worker on AWS: Ignition, the image, nodectld, kubelet under docker"
check "the API double listens on 127.0.0.1:6443" start_apiserver_double --node ip-10-0-1-8
cp /root/bootstrap-kubeconfig $W/files/bootstrap-kubeconfig
busybox httpd -f -p 127.0.0.1:8080 -h /test/dist &
httpd=$!
check "nodectl's Flatcar worker config renders (AWS: provider_id, cloud_provider)" render_config $W "$V" \
  http://127.0.0.1:8080 "$SHA" /test/butane/flatcar-worker.bu $W/w.ign provider_id=aws cloud_provider=external
check "Ignition (fetch-offline, files) applies it" ignition_apply $W $W/w.ign
grep -E 'writing file|hash|CRITICAL|ERROR' $W/log | head -6 | cut -c1-200 | sed 's/^/  | /'
check "the image downloaded and checked" cmp /opt/extensions/nodectl/$IMG /test/dist/flatcar/$IMG
expect "locksmithd masked (the config's: reboots are nodectld's)" "$(readlink /etc/systemd/system/locksmithd.service)" /dev/null
# the first boot: systemd applies Ignition's presets (docker enabled), multi-user.target starts it
check "docker enabled by Ignition's preset" sh -c 'systemctl preset docker.service && [ "$(systemctl is-enabled docker.service)" = enabled ]'
check "docker starts (with containerd.service)" systemctl start docker.service
echo "  | docker $(docker version --format '{{.Server.Version}}'), cgroup driver $(docker info --format '{{.CgroupDriver}}'), security: $(docker info --format '{{join .SecurityOptions " "}}')"
# (docker's settings are this suite's own, as Flatcar's docker.service has them: setup, not results;
# nodectl's part, kubelet.yaml asking the same driver and the container in docker's scope, is F1's)
setup "docker's cgroup driver is systemd" test "$(docker info --format '{{.CgroupDriver}}')" = systemd
setup "docker labels containers (selinux-enabled, this suite's daemon.json)" sh -c "docker info --format '{{join .SecurityOptions \" \"}}' | grep -q selinux"
# the stand-in kubelet image, into docker (no registry here)
check "stand-in image built (podman import) and loaded into docker" sh -c \
  "/test/kubelet-standin/build-image.sh $STANDIN >/dev/null && podman save $STANDIN | docker load -q >/dev/null && docker image inspect $STANDIN >/dev/null"
busybox_image localhost/pod:1 >/dev/null
check "and the pods' busybox image" sh -c 'podman save localhost/pod:1 | docker load -q >/dev/null'
mkdir -p /etc/systemd/system/kubelet.service.d
printf '[Service]\nEnvironment=KUBELET_IMAGE=%s\n' $STANDIN >/etc/systemd/system/kubelet.service.d/10-image-override.conf
kubelet_stop_timeout
# coreos-metadata.service as Flatcar's (flatcar/scripts coreos-overlay coreos-base/afterburn
# files/coreos-metadata.service): afterburn writes AFTERBURN_AWS_*, the unit renames them
# COREOS_EC2_* and links /run/metadata/coreos to its file. Nothing starts it but nodectld here
# (Typhoon's kubelet.service Requires= it).
cat >/etc/systemd/system/coreos-metadata.service <<'EOF'
[Unit]
Description=coreos-metadata stand-in (Flatcar's unit; the metadata as afterburn's AWS provider writes it)
[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh -c 'sleep 1; mkdir -p /run/metadata; printf "AFTERBURN_AWS_AVAILABILITY_ZONE=us-east-1b\nAFTERBURN_AWS_INSTANCE_ID=i-0f1a7c\nAFTERBURN_AWS_REGION=us-east-1\n" >/run/metadata/flatcar'
ExecStartPost=/usr/bin/sed --in-place "s/AFTERBURN/COREOS/g ; s/AWS/EC2/g ; s/GCP/GCE/g" /run/metadata/flatcar
ExecStartPost=/usr/bin/ln -fs /run/metadata/flatcar /run/metadata/coreos
EOF
systemctl daemon-reload
check "the Flatcar image merges (systemd-sysext.service)" systemctl restart systemd-sysext.service
busctl call org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus ReloadConfig >/dev/null
check "daemon-reload: the image's Upholds= starts nodectld" sh -c \
  'systemctl daemon-reload && for i in $(seq 300); do [ "$(systemctl is-active nodectld.service)" = active ] && exit 0; sleep 0.2; done; exit 1'
expect "nodectld runs /usr/bin/nodectld" "$(readlink /proc/$(systemctl show -p MainPID --value nodectld.service)/exe)" /usr/bin/nodectld
check "nodectl status: a Flatcar host" wait_until 10 sh -c 'nodectl status --json | jq -e ".host.os == \"flatcar\""'
check "nodectld started coreos-metadata.service" wait_until 30 sh -c '[ "$(systemctl is-active coreos-metadata.service)" = active ]'
check "kubelet.service active" wait_until 90 sh -c '[ "$(systemctl is-active kubelet.service)" = active ] && [ -s /var/lib/kubelet/kubeconfig ]'
# (a step that applied its changes was checked after them: converged, as `nodectl status` says)
converged='.steps | all(.state == "converged" or .state == "applied")'
check "nodectl status: converged" wait_until 60 sh -c "nodectl status --json | jq -e '$converged'"
[ "$(nodectl status --json | jq -r "$converged")" = true ] || nodectl status | head -30 | sed 's/^/  | /'
expect "the certificate names the node" "$(nodectl status --json | jq -r .credentials.subject)" "system:node:ip-10-0-1-8"
unit=/etc/systemd/system/kubelet.service
check "kubelet.service is the docker unit: docker rm -f, then docker run -d" sh -c \
  "grep -n 'ExecStartPre=' $unit | head -2 | tr '\n' ' ' | grep -q 'docker rm -f kubelet.*docker run -d --name kubelet'"
check "the stand-in runs under docker and registers as the hostname" wait_until 30 sh -c \
  'journalctl -u kubelet.service --no-pager -o cat | grep -q "kubelet stand-in: node ip-10-0-1-8,"'
ins=$(docker inspect kubelet)
args=$(jq -r '.[0].Args | join(" ")' <<<"$ins")
check "kubelet has the provider id from coreos-metadata (COREOS_EC2_*)" grep -q -- "--provider-id=aws:///us-east-1b/i-0f1a7c" <<<"$args"
check "and --cloud-provider=external" grep -q -- "--cloud-provider=external" <<<"$args"
# docker inspect against what the unit asks
want=$(sed -n 's/^ *-v \([^ ]*\) \\$/\1/p' $unit | sort)
have=$(jq -r '.[0].HostConfig.Binds[]' <<<"$ins" | sort)
expect "every -v of the unit, and no other mount (docker inspect .HostConfig.Binds)" "$have" "$want"
echo "  | binds: $(tr '\n' ' ' <<<"$have")"
expect "--network host" "$(jq -r '.[0].HostConfig.NetworkMode' <<<"$ins")" host
expect "--pid host" "$(jq -r '.[0].HostConfig.PidMode' <<<"$ins")" host
expect "--privileged" "$(jq -r '.[0].HostConfig.Privileged' <<<"$ins")" true
pid=$(jq -r '.[0].State.Pid' <<<"$ins")
expect "in a docker-<id>.scope of system.slice (the systemd cgroup driver)" \
  "$(cut -d: -f3 /proc/$pid/cgroup)" "/system.slice/docker-$(jq -r '.[0].Id' <<<"$ins").scope"
check "kubelet's config asks the same driver (cgroupDriver: systemd)" grep -qx 'cgroupDriver: systemd' /etc/kubernetes/kubelet.yaml
ctx=$(cat /proc/$pid/attr/current | tr -d '\0')
echo "  | kubelet's process: $ctx; docker's ProcessLabel: '$(jq -r '.[0].ProcessLabel' <<<"$ins")'"
# privileged: docker labels it not at all (label disabled), so no private pair: level s0
expect "kubelet's MCS level: s0, no private pair (the unit's --privileged)" "${ctx#*:*:*:}" s0
# the unit's process killed: the container is dockerd's and keeps running (ExecStopPost's
# `docker rm` refuses a running one); the restart's `docker rm -f` removes it, or the new
# `docker run --name kubelet` would fail on the name (moby/moby#6791)
id1=$(jq -r '.[0].Id' <<<"$ins")
systemctl kill --signal=KILL kubelet.service
check "kubelet.service killed: the container left running" sh -c "[ \"\$(docker inspect -f '{{.State.Running}}' $id1)\" = true ]"
check "its restart (RestartSec=10) removes it with docker rm -f and runs a new one" wait_until 40 sh -c \
  "[ \"\$(systemctl is-active kubelet.service)\" = active ] && id=\$(docker inspect -f '{{.Id}}' kubelet) && [ \"\$id\" != $id1 ] && ! docker inspect $id1 >/dev/null 2>&1"
labeled=$(docker run --rm --network none localhost/pod:1 cat /proc/self/attr/current | tr -d '\0')
check "where docker labels a container it gets a pair of its own ($labeled)" grep -qE ':s0:c[0-9]+,c[0-9]+$' <<<"$labeled"
kill $httpd

echo "## F2 a Flatcar controller: the bundle by ssh.tf's layout, static pods under docker"
fresh_node
busybox httpd -f -p 127.0.0.1:8080 -h /test/dist &
httpd=$!
hostnamectl set-hostname ip-10-0-1-9
check "the API double (same CA) for the controller" start_apiserver_double --node ip-10-0-1-9
cp /root/bootstrap-kubeconfig $W/files/bootstrap-kubeconfig
check "nodectl's Flatcar controller config renders" render_config $W "$V" \
  http://127.0.0.1:8080 "$SHA" /test/butane/flatcar-controller.bu $W/c.ign
check "Ignition applies it" ignition_apply $W $W/c.ign
check "the layout script is nodectl's" grep -qx 'exec /usr/bin/nodectl import assets' /opt/bootstrap/layout
mkdir -p /etc/systemd/system/kubelet.service.d
printf '[Service]\nEnvironment=KUBELET_IMAGE=%s\n' $STANDIN >/etc/systemd/system/kubelet.service.d/10-image-override.conf
kubelet_stop_timeout
check "the image merges, nodectld starts (the controller waits for its bundle)" sh -c \
  'systemctl restart systemd-sysext.service && busctl call org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus ReloadConfig >/dev/null &&
   systemctl daemon-reload && for i in $(seq 300); do [ "$(systemctl is-active nodectld.service)" = active ] && exit 0; sleep 0.2; done; exit 1'
expect "a nodectld of its own, from /usr/bin" "$(readlink /proc/$(systemctl show -p MainPID --value nodectld.service)/exe)" /usr/bin/nodectld
{ typhoon_records; record auth/admin.conf /tmp/cp.conf; } >/home/core/assets
chown core: /home/core/assets
records=$(grep -c '^##### ' /home/core/assets)
out=$(cd /home/core && SUDO_UID=$(id -u core) SUDO_GID=$(id -g core) SUDO_USER=core /opt/bootstrap/layout 2>&1); layout_rc=$?
echo "$out" | sed 's/^/  | layout: /'
# (ssh.tf runs it over SSH and fails the apply on a non-zero exit: its status is asserted)
expect "/opt/bootstrap/layout exits 0, as Typhoon's ssh.tf requires" "$layout_rc" 0
check "the layout returned once nodectld placed the bundle" grep -q "placed by nodectld: $records files" <<<"$out"
expect "etcd's peer key: 232's (baselayout's etcd), 0600" "$(stat -c '%u %a' /etc/ssl/etcd/etcd/peer.key)" "232 600"
check "kubelet.service active under docker" wait_until 90 sh -c \
  '[ "$(systemctl is-active kubelet.service)" = active ] && [ "$(docker inspect -f "{{.State.Running}}" kubelet)" = true ]'
# (the stand-in's pods: podman on the host, as controller.sh reads them)
pod_says() { wait_until 60 sh -c "n=\$(podman ps --filter 'name=^k8s_$1_$1_' --format '{{.Names}}' | head -1); [ -n \"\$n\" ] && podman logs \"\$n\" 2>&1 | tail -1 | grep -q -- '$2'"; }
check "kube-apiserver runs, uid 65534, and reads its 8 files (kubelet under docker)" pod_says kube-apiserver 'uid 65534: read 8 files'
check "kube-controller-manager reads its kubeconfig and keys" pod_says kube-controller-manager 'uid 65534: read 4 files'
check "kube-scheduler reads its kubeconfig" pod_says kube-scheduler 'uid 65534: read 1 files'
check "nodectl status: converged (credentials from the double)" wait_until 60 sh -c \
  "nodectl status --json | jq -e '($converged) and (.credentials.subject == \"system:node:ip-10-0-1-9\")'"
[ "$(nodectl status --json | jq -r "$converged")" = true ] || nodectl status | head -30 | sed 's/^/  | /'
check "the reboot coordination is the controller's (group controllers, update_engine)" sh -c \
  'nodectl status --json | jq -e ".reboot.group == \"controllers\" and (.reboot.endpoint | startswith(\"update_engine\"))"'
kill $httpd
stop_apiserver_double

echo "## back to this VM's own shape"
restore
avcs=$(tail -n +"$((mark + 1))" /var/log/audit/audit.log | grep -a 'avc: *denied' || true)
echo "  | $(grep -c . <<<"$avcs") denials while permissive (Flatcar's mode)"
[ -z "$avcs" ] || sed -n 's/.*avc: *denied *{ *\([^}]*\)}.*comm="\([^"]*\)".*scontext=\([^ ]*\) tcontext=\([^ ]*\) tclass=\([^ ]*\).*/\3 \4 \5 \2 \1/p' <<<"$avcs" \
  | sort | uniq -c | sort -rn | head -12 | sed 's/^/  | /'
summary flatcar
