# crashlib.sh: what the VM's crash campaign (crash.sh) and power-cut campaign (powercut.sh) share
# (sourced after check.sh and lib.sh): a controller's bundle, snapshots of the managed trees, a
# fresh node, the convergence check.
INBOX=/var/lib/nodectl/inbox
TREES="/etc/kubernetes/pki /etc/kubernetes/manifests /etc/ssl/etcd /opt/bootstrap/assets"
# where the placing pass creates its temp files and directories (cut-at's trigger)
WATCH="/etc/kubernetes /etc/ssl /opt"

# bundle FILE [VARIANT]: a controller's records, each with the content its kind is checked for;
# VARIANT changes every record's content (a new bundle replacing an older one).
bundle() {
  local r v=${2:-}
  local key=$'-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEcrashkeybytes'"$v"$'\n-----END EC PRIVATE KEY-----'
  local cert=$'-----BEGIN CERTIFICATE-----\nMIIBcrashcert'"$v"$'\n-----END CERTIFICATE-----'
  local conf=$'apiVersion: v1\nkind: Config\nusers:\n- name: u'"$v"$'\n  user:\n    client-key-data: a2V5\n'
  {
    for r in tls/k8s/ca.crt tls/k8s/apiserver.crt tls/k8s/service-account.pub tls/etcd/etcd-client.crt \
      tls/etcd/server.crt tls/etcd/peer.crt; do printf '##### %s\n%s\n' "$r" "$cert"; done
    for r in tls/k8s/ca.key tls/k8s/apiserver.key tls/k8s/service-account.key tls/etcd/etcd-client.key \
      tls/etcd/server.key tls/etcd/peer.key; do printf '##### %s\n%s\n' "$r" "$key"; done
    for r in auth/admin.conf auth/scheduler.conf; do printf '##### %s\n%s' "$r" "$conf"; done
    for r in kube-apiserver kube-scheduler; do printf '##### static-manifests/%s.yaml\napiVersion: v1\nkind: Pod\nmetadata: {name: %s%s}\n' "$r" "$r" "$v"; done
    printf '##### manifests/coredns/deployment.yaml\nkind: Deployment\nmetadata: {name: coredns%s}\n' "$v"
  } >"$1"
}
# Every entry of the managed trees: path, type and mode, owner, label, and a content hash (the
# size, 0 for an empty file, in the last field). Hidden entries are nodectld's temp files and
# directories, not yet renamed into place: left out, and counted by temps.
snapshot() {
  find $TREES -name '.*' -prune -o \( -type f -o -type d \) -print 2>/dev/null | sort | while read -r f; do
    if [ -f "$f" ]; then h="$(sha256sum <"$f" | cut -c1-16) $(stat -c %s "$f")"; else h="dir -"; fi
    printf '%s %s\n' "$(stat -c '%n %A %U:%G %C' "$f")" "$h"
  done
}
temps() { find $TREES -name '.*.nodectl-*' 2>/dev/null | wc -l; }
clean() {
  systemctl stop nodectld.service kubelet.service 2>/dev/null
  systemctl kill -s KILL nodectld.service 2>/dev/null
  systemctl reset-failed nodectld.service kubelet.service 2>/dev/null
  # and the node credentials and runtime state an earlier suite may have left (the sysext
  # suite keeps /var/lib/kubelet as an upgrade would): each trial is a fresh controller's
  rm -rf $TREES /etc/kubernetes/ca.crt /etc/kubernetes/kubelet.env $INBOX \
    /var/lib/kubelet/kubeconfig /var/lib/kubelet/pki /run/nodectl
  mkdir -p $INBOX
}
converged() {
  wait_until 60 sh -c 'nodectl status --json | jq -e ".daemon.status_line == \"node converged\"" >/dev/null && [ "$(systemctl is-active kubelet.service)" = active ] && [ -z "$(ls -A /var/lib/nodectl/inbox)" ]'
}
# The directories a controller's bundle fills in any case, which nodectld makes while it waits
# (after its look-ahead of their labels; /etc/kubernetes/manifests is node-files'): the bundle's
# pass makes only its own (manifests/coredns).
AHEAD_DIRS="/etc/kubernetes/pki /etc/kubernetes/manifests /etc/ssl/etcd/etcd /opt/bootstrap/assets/manifests"
# waiting_for_secrets: nodectld is up, its secrets step waits for a bundle, and the directories
# it makes ahead of the bundle are made (else the first temp entry cut-at sees may be one of
# theirs, not the bundle's: a reference pass "placed" 8 ms after 2 temps)
waiting_for_secrets() {
  wait_until 20 sh -c '[ "$(nodectl status --json | jq -r ".steps[] | select(.id==\"secrets\") | .state")" = waiting ]' &&
    wait_until 20 sh -c "for d in $AHEAD_DIRS; do test -d \$d || exit 1; done; [ \"\$(find $TREES -name '.*' | wc -l)\" = 0 ]"
}
# setup_controller: a controller as the campaigns run it: the release nodectld, a bootstrap
# kubeconfig for an API double that is then stopped (a controller's kubelet runs standalone).
setup_controller() {
  id etcd >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin etcd
  clean
  stop_apiserver_double
  check "a bootstrap kubeconfig for the API double (then stopped)" start_apiserver_double --ca-key /root/crash-ca.key
  stop_apiserver_double
  install_nodectld /test/controller.toml
  put_bin nodectld-release /usr/local/bin/nodectld
  install -D -m 0600 /root/bootstrap-kubeconfig /etc/kubernetes/kubeconfig
  kubelet_standin
}
# compare_to SNAPSHOT REF [OLD]: each entry of SNAPSHOT (a file) against REF's (or OLD's: the
# node before the pass) entry of the same path. Prints one line per difference, prefixed by its
# kind (partial, empty, mislabeled, owner, mode, unknown); none when each entry is whole, as in
# REF or OLD.
compare_to() {
  local path perm own label hash size rperm rown rlabel rhash rsize ref old
  while read -r path perm own label hash size; do
    ref=$(awk -v p="$path" '$1 == p' "$2")
    old=""; [ -n "${3:-}" ] && old=$(awk -v p="$path" '$1 == p' "$3")
    if [ -z "$ref" ] && [ -z "$old" ]; then echo "unknown $path"; continue; fi
    # the version whose content it has (the reference's, else the old node's)
    if [ -n "$old" ] && [ "$hash" != "$(awk '{print $5}' <<<"$ref")" ]; then ref=$old; fi
    [ -z "$ref" ] && ref=$old
    read -r _ rperm rown rlabel rhash rsize <<<"$ref"
    if [ "$hash" != "$rhash" ]; then
      if [ "$size" = 0 ]; then echo "empty $path"; else echo "partial $path ($size bytes, final $rsize)"; fi
    fi
    [ "$label" != "$rlabel" ] && echo "mislabeled $path $label, final $rlabel"
    [ "${own}" != "${rown}" ] && echo "owner $path $own, final $rown"
    [ "$perm" != "$rperm" ] && echo "mode $path $perm, final $rperm"
  done <"$1"
}
# tally_of DIFFS KIND: how many lines of DIFFS are of KIND.
tally_of() { grep -c "^$2 " "$1"; }
