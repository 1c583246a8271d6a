#!/bin/bash
# Tier 3, inside the VM (SELinux enforcing, MCS, enforcing container_t): bootstrap secrets.
#   R1  Typhoon's glue (mv, chcon afterwards) makes a running static pod fail: the bug, reproduced
#   R2  nodectld places the same secrets into the running pod's directory: read at once, no restart
#   R3  every file that appears is seen with its final label at first sight (inotify observer)
#   R4  shared files end at s0; a :Z private pair is put back to s0 by nodectld's relabel; a
#       watched directory swapped for a symlink to /etc leads no pass outside the tree
#   R5  bad bundles: clear error in status and journal, nothing placed; workers refuse etcd keys
# /test holds: check.sh, lib.sh, nodectld, nodectl, nodectld.service, org.nodectl.Agent1.conf,
# controller.toml, label-observer.
. /test/check.sh
. /test/lib.sh
export NO_COLOR=1
SHARED=system_u:object_r:container_file_t:s0
IMG=localhost/reader:1
INBOX=/var/lib/nodectl/inbox
CERT=$'-----BEGIN CERTIFICATE-----\nMIIBtestcert\n-----END CERTIFICATE-----'
KEY=$'-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEtestkeybytes\n-----END EC PRIVATE KEY-----'

busybox_image $IMG
id etcd >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin etcd

# bundle FILE PATH CONTENT [PATH CONTENT...]: a Typhoon assets bundle, as its Terraform writes it.
bundle() {
  local out=$1; shift
  : >"$out"
  local first=1
  while [ $# -ge 2 ]; do
    [ $first = 1 ] || printf '\n' >>"$out"
    printf '##### %s\n%s' "$1" "$2" >>"$out"
    first=0; shift 2
  done
}
# deliver FILE: provisioning drops a bundle into the inbox (written aside, renamed in).
deliver() { mkdir -p $INBOX && cp "$1" $INBOX/.incoming && mv $INBOX/.incoming "$INBOX/${2:-assets}"; }

# A stand-in static pod: level s0 (as kube-apiserver's pod is), pki mounted read-only WITHOUT
# relabel, printing what it can read every 0.3 s.
start_reader() {
  podman rm -f -t 0 reader >/dev/null 2>&1
  rm -f /run/reader.log
  podman run -d --name reader --network none --security-opt label=level:s0 \
    --log-driver k8s-file --log-opt path=/run/reader.log \
    -v /etc/kubernetes/pki:/etc/kubernetes/pki:ro $IMG sh -c '
    trap "exit 0" TERM
    while true; do
      echo "ca=[$(cat /etc/kubernetes/pki/ca.crt 2>&1 | head -2 | tail -1)] key=[$(cat /etc/kubernetes/pki/apiserver.key 2>&1 | head -2 | tail -1)]"
      sleep 0.3
    done' >/dev/null
  podman inspect --format '{{.State.Pid}} {{.State.StartedAt}}' reader
}
# reader_sees PATTERN: wait (15 s) for a reader line matching PATTERN.
reader_sees() { wait_until 15 sh -c "tail -n 3 /run/reader.log | grep -q -- '$1'"; }
last_line() { tail -n 1 /run/reader.log | cut -d' ' -f4-; }

echo "## R1: Typhoon's glue, the bug (#808): mv into a running pod's directory, chcon only afterwards"
systemctl stop nodectld.service kubelet.service 2>/dev/null
rm -rf /etc/kubernetes /etc/ssl/etcd $INBOX
mkdir -p /etc/kubernetes/pki && printf '%s\n' "$CERT" >/etc/kubernetes/pki/ca.crt
chcon -R -u system_u -t container_file_t -l s0 /etc/kubernetes/pki
start_reader >/dev/null
check "R1a reader reads ca.crt" reader_sees 'ca=\[MIIBtestcert\]'
printf '%s\n' "$KEY" >/root/apiserver.key && chmod 600 /root/apiserver.key
mv /root/apiserver.key /etc/kubernetes/pki/apiserver.key       # what /opt/bootstrap/layout does
echo "  | moved key labeled $(stat -c %C /etc/kubernetes/pki/apiserver.key)"
check "R1b the running pod gets Permission denied on the moved key" reader_sees 'key=\[cat: can.t open .*Permission denied\]'
echo "  | reader: $(last_line)"
podman rm -f -t 0 reader >/dev/null 2>&1
rm -rf /etc/kubernetes

echo "## R2: nodectld on a controller"
# The controller's bundle carries a bootstrap kubeconfig for the API double on loopback, so the
# node gets its credentials at once (against an unreachable server nodectld would retry with a
# backoff, and each retry's pass would repair labels while the R4 checks look at them).
check "the API double listens on 127.0.0.1:6443" start_apiserver_double
install_nodectld /test/controller.toml
kubelet_standin
check "nodectld starts" systemctl start nodectld.service
expect "secrets waits for its bundle" "$(step_field secrets state)" waiting
# (the bootstrap kubeconfig comes in this bundle: kubelet waits for it; one placed by provisioning
# would have kubelet running standalone before the bundle, as bench.sh B1-B3 have)
expect "kubelet not started before its bootstrap kubeconfig (in the bundle)" "$(systemctl is-active kubelet.service)" inactive
bundle /tmp/b1 tls/k8s/ca.crt "$CERT" tls/k8s/ca.key "$KEY" tls/etcd/peer.crt "$CERT" tls/etcd/peer.key "$KEY" \
  tls/etcd/server.crt "$CERT" tls/etcd/etcd-client.key "$KEY" auth/admin.conf $'apiVersion: v1\nusers:\n- user:\n    client-key-data: a2V5' \
  static-manifests/kube-apiserver.yaml $'apiVersion: v1\nkind: Pod' manifests/coredns/service.yaml $'kind: Service' \
  kubelet/kubeconfig "$(cat /root/bootstrap-kubeconfig)"
deliver /tmp/b1
check "R2a kubelet starts once the bundle (its bootstrap kubeconfig) is placed" wait_until 20 sh -c '[ "$(systemctl is-active kubelet.service)" = active ]'
expect "R2b bundle removed from the inbox" "$(ls $INBOX | wc -l)" 0
expect "R2c ca.key mode" "$(stat -c %a /etc/kubernetes/pki/ca.key)" 600
expect "R2c pki dir mode" "$(stat -c %a /etc/kubernetes/pki)" 700
expect "R2f pki owner: the control plane's uid (65534)" "$(stat -c '%u:%g %a' /etc/kubernetes/pki /etc/kubernetes/pki/ca.key /etc/kubernetes/pki/admin.conf | sort -u | tr '\n' ' ')" "65534:65534 600 65534:65534 700 "
# terraform-render-bootstrap's static pods run as runAsUser 65534 (runAsNonRoot, no groups) with
# /etc/kubernetes/pki by hostPath: that uid reads its keys, another uid (a container's or a local
# user's) does not.
out=$(podman run --rm --security-opt label=level:s0 --user 65534:65534 -v /etc/kubernetes/pki:/etc/kubernetes/pki:ro $IMG sh -c 'cat /etc/kubernetes/pki/ca.key /etc/kubernetes/pki/admin.conf' 2>&1)
check "R2f a pod running as uid 65534 reads the keys" grep -q 'PRIVATE KEY' <<<"$out"
check "R2f and the kubeconfigs" grep -q client-key-data <<<"$out"
out=$(podman run --rm --security-opt label=level:s0 --user 1000:1000 -v /etc/kubernetes/pki:/etc/kubernetes/pki:ro $IMG cat /etc/kubernetes/pki/ca.key 2>&1)
check "R2f a pod running as another uid cannot" grep -q 'Permission denied' <<<"$out"
out=$(setpriv --reuid=1000 --regid=1000 --clear-groups cat /etc/kubernetes/pki/ca.key 2>&1)
check "R2f nor can a local user" grep -q 'Permission denied' <<<"$out"
expect "R2c etcd dir owner and mode" "$(stat -c '%U %a' /etc/ssl/etcd/etcd)" "etcd 700"
expect "R2c etcd key owner and mode" "$(stat -c '%U %a' /etc/ssl/etcd/etcd/peer.key)" "etcd 600"
bad=$(find /etc/kubernetes/pki /etc/kubernetes/manifests -exec stat -c '%C %n' {} + | grep -v "^$SHARED ")
expect "R2d every shared file and directory (pki, manifests) is $SHARED" "$bad" ""
# etcd's keys are private to the etcd container (mounted :Z): never a shared label, the policy's
# default (not readable by containers) until podman relabels them for etcd.
bad=$(find /etc/ssl/etcd /opt/bootstrap/assets | while read -r f; do [ "$(stat -c %C "$f")" = "$(matchpathcon -n "$f")" ] || echo "$(stat -c %C "$f") $f"; done)
expect "R2d private files (etcd, bootstrap assets) keep the policy default, not $SHARED" "$bad" ""
out=$(podman run --rm --security-opt label=level:s0 -v /etc/ssl/etcd:/etcd:ro $IMG cat /etcd/etcd/peer.key 2>&1)
check "R2d a pod cannot read etcd's keys" grep -q 'Permission denied' <<<"$out"

echo "## R2/R3: a spare controller: kubelet runs, a pod reads pki, the next secrets arrive"
kubelet_since=$(systemctl show -p ActiveEnterTimestampMonotonic --value kubelet.service)
started=$(start_reader)
check "R2e reader reads ca.crt; no apiserver.key yet" reader_sees 'ca=\[MIIBtestcert\] key=\[cat: can.t open .*No such file'
rm -f /run/observed /run/observed.ready /run/observed.stop
/test/label-observer /run/observed /etc/kubernetes /etc/ssl &
obs=$!
wait_until 10 test -f /run/observed.ready
bundle /tmp/b2 tls/k8s/ca.crt "$CERT" tls/k8s/apiserver.crt "$CERT" tls/k8s/apiserver.key "$KEY" \
  tls/etcd/server.key "$KEY" static-manifests/kube-scheduler.yaml $'apiVersion: v1\nkind: Pod'
deliver /tmp/b2
check "R2f the running pod reads the new key at once" reader_sees 'key=\[MHcCAQEEtestkeybytes\]'
echo "  | reader: $(last_line)"
expect "R2g same pod instance throughout, no restart" "$(podman inspect --format '{{.State.Pid}} {{.State.StartedAt}}' reader)" "$started"
expect "R2h kubelet not restarted" "$(systemctl show -p ActiveEnterTimestampMonotonic --value kubelet.service)" "$kubelet_since"
wait_until 10 sh -c "[ \"\$(ls $INBOX | wc -l)\" = 0 ]"
sleep 0.5; touch /run/observed.stop; wait $obs
echo "  | observer saw $(wc -l </run/observed) entries appear, e.g.:"; grep -m4 -E 'nodectl-|apiserver' /run/observed | sed 's/^/  |   /'
check "R3a the observer saw the new files" grep -q 'pki/apiserver.key$' /run/observed
# Whether a temp file is read before its rename is timing; those that are, R3b compares.
echo "  | temp files read before their rename: $(grep -v '^<gone>' /run/observed | grep -c '/\.[^/]*\.nodectl-')"
echo "  | $(grep -c -v '^<gone>' /run/observed) read at first sight, $(grep -c '^<gone>' /run/observed) (temp files) gone before they could be read"
# Every entry that appeared carried, at first sight, the label it has now.
wrong=$(while IFS=$'\t' read -r seen path; do
  [ "$seen" = "<gone>" ] && continue
  # A temp file (.NAME.nodectl-XXXXXX) was renamed to NAME: compare with NAME's final label.
  final=$path
  case ${path##*/} in .*.nodectl-*) n=${path##*/}; n=${n#.}; final=${path%/*}/${n%.nodectl-*} ;; esac
  now=$(stat -c %C "$final" 2>/dev/null) || { echo "$path: $final does not exist"; continue; }
  [ "$seen" = "$now" ] || echo "$path: first seen $seen, final $now"
done </run/observed)
expect "R3b no entry under /etc/kubernetes or /etc/ssl ever seen with a label other than its final one" "$wrong" ""
expect "R3c the new pki files were shared at first sight" \
  "$(grep -E 'pki/apiserver\.(key|crt)$' /run/observed | cut -f1 | sort -u)" "$SHARED"
podman rm -f -t 0 reader >/dev/null 2>&1

echo "## R4: :z vs :Z; shared files end at s0"
cats=$(find /etc/kubernetes/pki -exec stat -c %C {} + | grep -c ':s0:c')
expect "R4a no category pair on shared files" "$cats" 0
podman run --rm -v /etc/kubernetes/pki:/pki:Z $IMG true >/dev/null 2>&1   # a bootstrap pod with :Z (#708)
echo "  | after a :Z mount: $(stat -c %C /etc/kubernetes/pki/ca.crt)"
check "R4b :Z gave the files a private pair" sh -c "stat -c %C /etc/kubernetes/pki/ca.crt | grep -q ':s0:c[0-9]*,c[0-9]*$'"
out=$(podman run --rm --security-opt label=level:s0 -v /etc/kubernetes/pki:/pki:ro $IMG cat /pki/ca.crt 2>&1)
check "R4c a level s0 pod cannot read them now" grep -q 'Permission denied' <<<"$out"
nodectl converge >/dev/null
check "R4d nodectld's relabel puts them back to s0" wait_until 15 sh -c "[ \"\$(stat -c %C /etc/kubernetes/pki/ca.crt)\" = $SHARED ]"
expect "R4e no category pair left" "$(find /etc/kubernetes -exec stat -c %C {} + | grep -c ':s0:c')" 0
out=$(podman run --rm --security-opt label=level:s0 -v /etc/kubernetes/pki:/pki:ro $IMG cat /pki/ca.crt 2>&1 | head -2 | tail -1)
expect "R4f the level s0 pod reads again" "$out" MIIBtestcert
echo "  | relabel step: $(step_field relabel detail)"
# The daemon's tracker sees single changes by inotify and repairs just those on the next pass.
chcon -t etc_t /etc/kubernetes/pki/apiserver.crt
printf 'stray\n' >/root/stray.crt && mv /root/stray.crt /etc/kubernetes/pki/stray.crt
echo "  | before: $(stat -c %C /etc/kubernetes/pki/apiserver.crt) $(stat -c %C /etc/kubernetes/pki/stray.crt)"
nodectl converge >/dev/null
check "R4g a chcon'ed file and a file mv'ed from /root are put back" wait_until 15 sh -c \
  "[ \"\$(stat -c %C /etc/kubernetes/pki/apiserver.crt) \$(stat -c %C /etc/kubernetes/pki/stray.crt)\" = \"$SHARED $SHARED\" ]"
wait_until 10 sh -c "nodectl status --json | jq -e '.steps[] | select(.id==\"relabel\") | .state == \"converged\"'"
nodectl converge >/dev/null
# (waits for the converge's pass to finish; under TCG it can take more than a second)
check "R4h a pass with nothing changed reads no labels (incremental, no full scan)" wait_until 10 \
  sh -c "nodectl status --json | jq -r '.steps[] | select(.id==\"relabel\") | .detail' | grep -q '^0 entries changed since the last check'"
echo "  | relabel step: $(step_field relabel detail)"
rm -f /etc/kubernetes/pki/stray.crt
# Symlinks are labeled themselves, never their targets.
passwd_label=$(stat -c %C /etc/passwd)
ln -s /etc/passwd /etc/kubernetes/pki/passwd-link
nodectl converge >/dev/null
check "R4i a symlink in a managed tree gets the label itself" wait_until 15 sh -c "[ \"\$(stat -c %C /etc/kubernetes/pki/passwd-link)\" = $SHARED ]"
expect "R4i its target keeps its own label" "$(stat -c %C /etc/passwd)" "$passwd_label"
rm -f /etc/kubernetes/pki/passwd-link

# A process that may write in the tree moves a watched directory away, puts a symlink to /etc in
# its place and writes in the moved directory: the event names pki/sub/shadow, which now leads
# to /etc/shadow. The next pass labels nothing outside the tree (issue 14, item 1).
mkdir -p /etc/kubernetes/pki/sub && echo x >/etc/kubernetes/pki/sub/a
nodectl converge >/dev/null
wait_until 15 sh -c "[ \"\$(stat -c %C /etc/kubernetes/pki/sub/a)\" = $SHARED ]"
shadow_label=$(stat -c %C /etc/shadow)
mv /etc/kubernetes/pki/sub /etc/kubernetes/pki/moved
ln -s /etc /etc/kubernetes/pki/sub
echo y >/etc/kubernetes/pki/moved/shadow
nodectl converge >/dev/null
check "R4j the swapped-in symlink is labeled itself" wait_until 15 sh -c "[ \"\$(stat -c %C /etc/kubernetes/pki/sub)\" = $SHARED ]"
expect "R4j /etc/shadow keeps its label" "$(stat -c %C /etc/shadow)" "$shadow_label"
expect "R4j the relabel step reports no error" "$(nodectl status --json | jq -r '.steps[] | select(.id == "relabel") | .error // ""')" ""
rm -rf /etc/kubernetes/pki/sub /etc/kubernetes/pki/moved

echo "## R5: bad bundles"
count_pki() { find /etc/kubernetes /etc/ssl/etcd | wc -l; }
n=$(count_pki)
for case in "dotdot|../../etc/cron.d/x|escapes the bundle" "truncated|tls/k8s/front-proxy.key|truncated record" "unknown|secrets/other|unknown destination" "empty||the bundle is empty"; do
  IFS='|' read -r name path why <<<"$case"
  case $name in
    truncated) bundle /tmp/bad tls/k8s/extra.crt "$CERT" "$path" "${KEY:0:40}" ;;
    empty) : >/tmp/bad ;;
    *) bundle /tmp/bad tls/k8s/extra.crt "$CERT" "$path" x ;;
  esac
  since=$(date '+%Y-%m-%d %H:%M:%S')
  deliver /tmp/bad "bad-$name"
  check "R5 $name: status shows the error" wait_until 15 sh -c "nodectl status --json | jq -e '.steps[] | select(.id==\"secrets\") | .error | test(\"$why\")'"
  check "R5 $name: the journal has it" sh -c "journalctl -u nodectld.service --since '$since' --no-pager -o cat | grep -q '$why'"
  expect "R5 $name: nothing placed" "$(count_pki)" "$n"
  rm -f "$INBOX/bad-$name"
  nodectl converge >/dev/null
  wait_until 10 sh -c "[ \"\$(nodectl status --json | jq -r '.steps[] | select(.id==\"secrets\") | .state')\" != failed ]"
done
echo "  | $(journalctl -u nodectld.service --no-pager -o cat | grep -m1 'escapes the bundle')"
leaks=$( { journalctl -u nodectld.service --no-pager -o verbose; nodectl status --json; } | grep -c -e testkeybytes -e 0123456789abcdef -e a2V5)
expect "R5 no key or token bytes in the journal (all fields) or status" "$leaks" 0
# A worker never receives etcd credentials.
sed -i 's/role = "controller"/role = "worker"/' /etc/nodectl/config.d/10-node.toml
bundle /tmp/bw kubelet/kubeconfig "$(grep -v '^#' /test/bootstrap-kubeconfig)" tls/etcd/etcd-client.key "$KEY"
deliver /tmp/bw worker-bundle
check "R5 worker: etcd credentials refused" wait_until 15 sh -c "nodectl status --json | jq -e '.steps[] | select(.id==\"secrets\") | .error | test(\"etcd credentials are refused on a worker\")'"
rm -f $INBOX/worker-bundle

stop_apiserver_double
summary secrets
