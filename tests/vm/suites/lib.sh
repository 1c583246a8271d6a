# lib.sh: helpers for the in-guest suites (sourced).

# install_nodectld CONFIG: install nodectld as packaging/ ships it, with CONFIG as its only
# config fragment; not started.
install_nodectld() {
  install -m 0755 /test/nodectld /test/nodectl /usr/local/bin/
  install -m 0644 /test/nodectld.service /etc/systemd/system/nodectld.service
  install -D -m 0644 /test/org.nodectl.Agent1.conf /etc/dbus-1/system.d/org.nodectl.Agent1.conf
  rm -rf /etc/nodectl/config.d
  install -D -m 0644 "$1" /etc/nodectl/config.d/10-node.toml
  restorecon -R /usr/local/bin/nodectld /usr/local/bin/nodectl /etc/systemd/system/nodectld.service \
    /etc/dbus-1/system.d /etc/nodectl >/dev/null 2>&1
  busctl call org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus ReloadConfig
  systemctl daemon-reload
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

# step_field ID FIELD: a field of one step in `nodectl status --json`.
step_field() { nodectl status --json | jq -r --arg id "$1" ".steps[] | select(.id == \$id) | .$2"; }
