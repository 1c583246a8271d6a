# lib.sh: helpers for the in-guest suites (sourced).

# local_copy NAME: the path of /test/NAME copied to the guest's own disk, once a boot (again
# when /test's is newer). /test is a 9p share, slow under TCG: the debug nodectld (37 MB) took
# 1-6 s to read each time a suite installed it.
local_copy() {
  local c=/var/tmp/nodectl-test-files/$1
  if [ ! -e "$c" ] || [ "/test/$1" -nt "$c" ]; then
    # (synced before the rename: powercut.sh cuts the power and boots again from this disk)
    mkdir -p /var/tmp/nodectl-test-files && cp -p "/test/$1" "$c.new" && sync "$c.new" && mv "$c.new" "$c"
  fi
  echo "$c"
}

# put_bin NAME DEST: /test/NAME at DEST (a file path), mode 0755 and the label the policy gives
# DEST, as a hard link to its local copy: copying was the VM suites' largest cost (under TCG the
# 37 MB debug nodectld took 5-9 s and the API double 1.4 s, 80 s a run). `ln -f` replaces DEST's
# entry, never writes through it, so the local copy stays whole; a running binary keeps its inode.
put_bin() {
  local c
  c=$(local_copy "$1") && chmod 0755 "$c" || return 1
  ln -f "$c" "$2" 2>/dev/null || install -m 0755 "$c" "$2" || return 1
  restorecon "$2" >/dev/null 2>&1
  return 0
}

# install_nodectld CONFIG: install nodectld as packaging/ ships it, with CONFIG as its only
# config fragment; not started.
install_nodectld() {
  put_bin nodectld /usr/local/bin/nodectld && put_bin nodectl /usr/local/bin/nodectl
  install -m 0644 /test/nodectld.service /etc/systemd/system/nodectld.service
  install -D -m 0644 /test/org.nodectl.Agent1.conf /etc/dbus-1/system.d/org.nodectl.Agent1.conf
  rm -rf /etc/nodectl/config.d
  install -D -m 0644 "$1" /etc/nodectl/config.d/10-node.toml
  restorecon -R /etc/systemd/system/nodectld.service /etc/dbus-1/system.d /etc/nodectl >/dev/null 2>&1
  busctl call org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus ReloadConfig
  systemctl daemon-reload
}

# kubelet_stop_timeout: kubelet.service's stop timeout 10 s, in a test drop-in. Here the
# kubelet container's conmon at times outlives the container at a stop (it holds no descriptor
# of it; Debian 12's podman 4.3 and conmon 2.1; seen in controller.sh C2's restart):
# kubelet.service then stays "deactivating" until systemd's stop timeout, 90 s, kills it. The
# suites that call this check what comes after a stop, not the stop (kubelet.sh K1 checks a
# stop through the unit).
kubelet_stop_timeout() {
  mkdir -p /etc/systemd/system/kubelet.service.d
  printf '[Service]\nTimeoutStopSec=10\n' >/etc/systemd/system/kubelet.service.d/95-test-stop-timeout.conf
}

# kubelet_standin: an operator drop-in that replaces kubelet's command (no registry here), the
# kind of override nodectld leaves alone.
kubelet_standin() {
  mkdir -p /etc/systemd/system/kubelet.service.d
  printf '[Service]\nExecStartPre=\nExecStart=\nExecStart=/bin/sh -c "echo kubelet stand-in using $KUBELET_IMAGE; exec sleep infinity"\nExecStop=\n' \
    >/etc/systemd/system/kubelet.service.d/90-test-standin.conf
  systemctl daemon-reload
}

# busybox_image NAME: a local image from the guest's static busybox (no registry).
busybox_image() {
  podman image exists "$1" && return 0
  rm -rf /tmp/img && mkdir -p /tmp/img/bin /tmp/img/tmp && cp /bin/busybox /tmp/img/bin/busybox && chmod 1777 /tmp/img/tmp
  for a in $(/bin/busybox --list); do [ "$a" = busybox ] || ln -sf busybox "/tmp/img/bin/$a"; done
  tar -C /tmp/img -cf /tmp/img.tar . && podman import -q /tmp/img.tar "$1" >/dev/null
}

# sock_image NAME: busybox plus /sock-listen (tests/testkit) and the libraries it links.
sock_image() {
  podman image exists "$1" && return 0
  rm -rf /tmp/simg && mkdir -p /tmp/simg/bin /tmp/simg/tmp && cp /bin/busybox /tmp/simg/bin/busybox && chmod 1777 /tmp/simg/tmp
  for a in $(/bin/busybox --list); do [ "$a" = busybox ] || ln -sf busybox "/tmp/simg/bin/$a"; done
  cp /test/sock-listen /tmp/simg/sock-listen
  for l in $(ldd /test/sock-listen | grep -o '/[^ ]*'); do
    mkdir -p "/tmp/simg$(dirname "$l")" && cp -L "$l" "/tmp/simg$l"
  done
  tar -C /tmp/simg -cf /tmp/simg.tar . && podman import -q /tmp/simg.tar "$1" >/dev/null
}

# step_field ID FIELD: a field of one step in `nodectl status --json`.
step_field() { nodectl status --json | jq -r --arg id "$1" ".steps[] | select(.id == \$id) | .$2"; }

# start_apiserver_double [ARGS...]: the kube-apiserver double (tests/apiserver-double) on
# 127.0.0.1:6443 inside this machine, logging to /tmp/apiserver-double.log; its bootstrap
# kubeconfig (Typhoon's form, token abcdef.0123456789abcdef) is written to
# /root/bootstrap-kubeconfig. Never any other network.
start_apiserver_double() {
  stop_apiserver_double
  put_bin nodectl-apiserver-double /usr/local/bin/nodectl-apiserver-double
  rm -f /root/bootstrap-kubeconfig
  /usr/local/bin/nodectl-apiserver-double --listen 127.0.0.1:6443 --token abcdef.0123456789abcdef \
    --write-bootstrap-kubeconfig /root/bootstrap-kubeconfig "$@" >/tmp/apiserver-double.log 2>&1 &
  # (a file, not a variable: callers run this under `check`, in a subshell)
  echo $! >/run/apiserver-double.pid
  for _ in $(seq 100); do [ -s /root/bootstrap-kubeconfig ] && return 0; sleep 0.1; done
  echo "the API double did not start:" >&2; cat /tmp/apiserver-double.log >&2
  return 1
}

stop_apiserver_double() {
  local pid
  pid=$(cat /run/apiserver-double.pid 2>/dev/null) || return 0
  kill "$pid" 2>/dev/null
  for _ in $(seq 50); do [ -d "/proc/$pid" ] || break; sleep 0.1; done
  rm -f /run/apiserver-double.pid
}

# typhoon_records: the records every controller bundle in terraform-render-bootstrap's shape
# holds (test keys and certificates, the control plane's kubeconfigs, the static manifests of
# tests/kubelet-standin/fixtures), as "##### PATH" records on stdout; callers add their own.
record() { printf '##### %s\n' "$1"; cat "$2"; printf '\n'; }
typhoon_records() {
  local cert key conf f m
  cert=$'-----BEGIN CERTIFICATE-----\nMIIBtestcert\n-----END CERTIFICATE-----'
  key=$'-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEtestkeybytes\n-----END EC PRIVATE KEY-----'
  conf=$'apiVersion: v1\nkind: Config\nusers:\n- name: u\n  user:\n    client-certificate-data: Y2VydA==\n    client-key-data: a2V5\n'
  for f in ca.crt apiserver.crt service-account.pub; do printf '%s\n' "$cert" >/tmp/$f; done
  for f in ca.key apiserver.key service-account.key; do printf '%s\n' "$key" >/tmp/$f; done
  printf '%s\n' "$conf" >/tmp/cp.conf
  for f in ca.crt ca.key apiserver.crt apiserver.key service-account.pub service-account.key; do record tls/k8s/$f /tmp/$f; done
  record tls/etcd/etcd-client-ca.crt /tmp/ca.crt
  record tls/etcd/etcd-client.crt /tmp/apiserver.crt
  record tls/etcd/etcd-client.key /tmp/apiserver.key
  for f in server.crt server.key peer.crt peer.key; do record tls/etcd/$f /tmp/ca.key; done
  record auth/controller-manager.conf /tmp/cp.conf
  record auth/scheduler.conf /tmp/cp.conf
  for m in kube-apiserver kube-controller-manager kube-scheduler; do
    record static-manifests/$m.yaml /test/kubelet-standin/fixtures/$m.yaml
  done
}

# ignition_apply DIR CONFIG: Debian's ignition (/test/ignition) applies CONFIG to this booted root:
# fetch-offline then files, as ignition-fetch-offline.service and ignition-files.service run
# them (--root=/; in the initramfs it is /sysroot); its log in DIR/log. At the end Ignition
# relabels what it wrote with `setfiles -r ROOT`, and Debian's setfiles refuses `-r /`: a shim
# (DIR/shim/setfiles) drops that one argument pair, nothing else.
ignition_apply() {
  mkdir -p "$1/shim" && cat >"$1/shim/setfiles" <<'SHIM'
#!/bin/bash
args=()
while [ $# -gt 0 ]; do
  if [ "$1" = -r ] && [ "${2:-}" = / ]; then shift 2; continue; fi
  args+=("$1"); shift
done
exec /sbin/setfiles "${args[@]}"
SHIM
  chmod +x "$1/shim/setfiles"
  rm -rf /run/ignition /run/ignition.json && mkdir -p /run/ignition
  PATH=$1/shim:$PATH IGNITION_CONFIG_FILE=$2 /test/ignition --root=/ --platform=file --stage=fetch-offline --log-to-stdout >"$1/log" 2>&1 &&
    PATH=$1/shim:$PATH IGNITION_CONFIG_FILE=$2 /test/ignition --root=/ --platform=file --stage=files --log-to-stdout >>"$1/log" 2>&1
}

# render_config DIR VERSION URL SHA512 TEMPLATE OUT.ign [NAME=VALUE...]: a Butane template of
# the release rendered (example.vars, the release's key, this node's bootstrap kubeconfig in
# DIR/files, the NAME=VALUEs given) and translated to Ignition by nodectl-butane.
render_config() {
  local d=$1 v=$2 url=$3 sha=$4 tmpl=$5 out=$6
  shift 6
  mkdir -p "$d/files"
  { cat /test/example.vars; echo "nodectl_version=$v"; echo "nodectl_url=$url"
    echo "nodectl_sysext_flatcar_sha512=$sha"; echo "nodectl_sysext_fcos_sha512=$sha"
    echo "nodectl_release_key_base64=$(base64 -w0 /test/dist/nodectl-release.gpg)"
    echo "kubeconfig@10=$d/files/bootstrap-kubeconfig"; printf '%s\n' "$@"; } >"$d/vars"
  /test/nodectl-butane render "$d/vars" "$tmpl" "$d/config.bu" &&
    /test/nodectl-butane translate "$d/files" "$d/config.bu" "$out"
}
