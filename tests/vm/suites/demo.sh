#!/bin/bash
# The demo, inside the VM: a node comes up under nodectld.
set -u
say() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }
run() { say "$*"; "$@"; }
. /test/lib.sh
install_nodectld /test/worker.toml
# No registry here: a stand-in kubelet image (tests/kubelet-standin) is built offline, and an
# operator drop-in points KUBELET_IMAGE at it, the override Typhoon documents; nodectld leaves it
# alone and podman runs it from nodectld's rendered unit.
/test/kubelet-standin/build-image.sh localhost/kubelet-standin:demo >/dev/null
mkdir -p /etc/systemd/system/kubelet.service.d
printf '[Service]\nEnvironment=KUBELET_IMAGE=localhost/kubelet-standin:demo\n' >/etc/systemd/system/kubelet.service.d/10-image-override.conf
systemctl daemon-reload

# No cluster here either: the kube-apiserver double (tests/apiserver-double) serves the TLS
# bootstrap on 127.0.0.1:6443 inside this VM and auto-approves, as kube-controller-manager does.
start_apiserver_double
run cat /etc/nodectl/config.d/10-node.toml
run nodectl plan
run systemctl start nodectld.service
run nodectl status
say "# provisioning drops the bootstrap kubeconfig (as Ignition or Terraform over SSH would)"
install -m 0600 /root/bootstrap-kubeconfig /etc/kubernetes/.kubeconfig.tmp && mv /etc/kubernetes/.kubeconfig.tmp /etc/kubernetes/kubeconfig
for _ in $(seq 150); do journalctl -u kubelet.service -o cat | grep -q 'stand-in: kubeconfig /var' && break; sleep 0.2; done
say "# the API server's side: the request, made with the bootstrap token, approved and issued"
sed 's/^/  /' /tmp/apiserver-double.log
run ls -l /var/lib/kubelet/pki
run systemctl --no-pager status kubelet.service --lines=3
run podman ps --format '{{.Names}}  {{.Image}}  {{.Status}}'
run ls -Z /etc/kubernetes
run nodectl status
say "# the node's own security audit (exit 2: a medium finding, the bootstrap token left on disk)"
nodectl audit; echo "(exit $?)"
run journalctl -u nodectld.service --no-pager -o cat
ok=$([ "$(systemctl is-active kubelet.service)" = active ] && echo yes)
stop_apiserver_double
[ "$ok" = yes ]
