#!/bin/bash
# The demo, inside the VM: a node comes up under nodectld.
set -u
say() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }
run() { say "$*"; "$@"; }
. /test/lib.sh
install_nodectld /test/worker.toml
kubelet_standin

run cat /etc/nodectl/config.d/10-node.toml
run nodectl plan
run systemctl start nodectld.service
run nodectl status
say "# provisioning drops the bootstrap kubeconfig (as Ignition or Terraform over SSH would)"
cp /test/bootstrap-kubeconfig /etc/kubernetes/.kubeconfig.tmp && mv /etc/kubernetes/.kubeconfig.tmp /etc/kubernetes/kubeconfig
for _ in $(seq 50); do [ "$(systemctl is-active kubelet.service)" = active ] && break; sleep 0.2; done
run systemctl --no-pager status kubelet.service --lines=3
run nodectl status
run journalctl -u nodectld.service --no-pager -o cat
[ "$(systemctl is-active kubelet.service)" = active ]
