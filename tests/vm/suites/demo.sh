#!/bin/bash
# The demo, inside the VM: a node comes up under nodectld.
set -u
say() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }
run() { say "$*"; "$@"; }
install -m 0755 /test/nodectld /test/nodectl /usr/local/bin/ && restorecon /usr/local/bin/nodectl* >/dev/null 2>&1
install -m 0644 /test/nodectld.service /etc/systemd/system/
install -D -m 0644 /test/org.nodectl.Agent1.conf /etc/dbus-1/system.d/org.nodectl.Agent1.conf
busctl call org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus ReloadConfig
install -D -m 0644 /test/worker.toml /etc/nodectl/config.d/10-node.toml && restorecon -R /etc/nodectl >/dev/null 2>&1
# No registry here: kubelet's command is replaced by a stand-in through an operator drop-in,
# exactly the kind of override nodectld leaves alone.
mkdir -p /etc/systemd/system/kubelet.service.d
printf '[Service]\nExecStartPre=\nExecStart=\nExecStart=/bin/sh -c "echo kubelet stand-in using $KUBELET_IMAGE; exec sleep infinity"\nExecStop=\n' \
  >/etc/systemd/system/kubelet.service.d/90-demo-standin.conf
systemctl daemon-reload

run cat /etc/nodectl/config.d/10-node.toml
run nodectl plan
run systemctl start nodectld.service
run nodectl status
say "# provisioning drops the bootstrap kubeconfig (as Ignition or Terraform over SSH would)"
printf 'apiVersion: v1\nkind: Config\n' >/etc/kubernetes/.kubeconfig.tmp && mv /etc/kubernetes/.kubeconfig.tmp /etc/kubernetes/kubeconfig
for _ in $(seq 50); do [ "$(systemctl is-active kubelet.service)" = active ] && break; sleep 0.2; done
run systemctl --no-pager status kubelet.service --lines=3
run nodectl status
run journalctl -u nodectld.service --no-pager -o cat
[ "$(systemctl is-active kubelet.service)" = active ]
