#!/bin/bash
# Tier 3, inside the VM (SELinux enforcing, MCS, podman): a Typhoon controller.
#   C1  from a Typhoon-form bundle and no API server yet: kubelet (the stand-in image, from the
#       rendered unit) starts standalone and runs the three control-plane static pods in
#       terraform-render-bootstrap's shape (runAsNonRoot, uid 65534, hostPath /etc/kubernetes/pki)
#       with podman, each with its own MCS pair: each reads its keys and kubeconfig; another uid
#       (a pod's or a local user's) cannot
#   C2  the API double starts (standing in for the API server those static pods would serve):
#       nodectld gets the node's certificate by itself, kubelet restarts with it, the static pods
#       are kept
#   C3  the layout nodectl had before (pki root's, 0600/0700): the running pods report the keys
#       unreadable, nodectl audit says why, audit --fix gives them back without a restart
#   C4  /var/lib/kubelet: a plugin with its own MCS pair creates its socket in plugins_registry/
#       and device-plugins/; it cannot read another pod's emptyDir nor the node's credentials
# /test holds: check.sh, lib.sh, nodectld, nodectl, nodectld.service, org.nodectl.Agent1.conf,
# controller.toml, nodectl-apiserver-double, kubelet-standin/ (with fixtures/), sock-listen.
. /test/check.sh
. /test/lib.sh
export NO_COLOR=1
STANDIN=localhost/kubelet-standin:test
INBOX=/var/lib/nodectl/inbox
# pod_name NAME: the stand-in's container for static pod NAME (container NAME).
pod_name() { podman ps --filter "name=^k8s_$1_$1_" --format '{{.Names}}' | head -1; }
# pod_says NAME PATTERN: the pod's latest report matches PATTERN (within 30 s).
pod_says() { wait_until 30 sh -c "n=\$(podman ps --filter 'name=^k8s_$1_$1_' --format '{{.Names}}' | head -1); [ -n \"\$n\" ] && podman logs \"\$n\" 2>&1 | tail -1 | grep -q -- '$2'"; }
last_report() { podman logs "$(pod_name "$1")" 2>&1 | tail -1; }
CP="kube-apiserver kube-controller-manager kube-scheduler"

echo "## C1: a controller from a Typhoon-form bundle, before any API server answers"
systemctl stop nodectld.service kubelet.service 2>/dev/null
for c in $(podman ps -a --filter name=^k8s_ --format '{{.Names}}'); do podman rm -f -t 0 "$c" >/dev/null; done
stop_apiserver_double
rm -rf /etc/kubernetes /var/lib/nodectl /etc/systemd/system/kubelet.service.d /var/lib/kubelet /etc/ssl/etcd /root/double-ca.key
id etcd >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin etcd
check "stand-in image built offline" /test/kubelet-standin/build-image.sh $STANDIN
busybox_image localhost/pod:1
# The double's CA key is kept so that the API server "comes up" later as the CA the bundle's
# bootstrap kubeconfig names; it is stopped again at once.
check "a bootstrap kubeconfig for the API double (then stopped)" start_apiserver_double --ca-key /root/double-ca.key
stop_apiserver_double
cp /root/bootstrap-kubeconfig /root/controller-bootstrap-kubeconfig
install_nodectld /test/controller.toml
# Test timers (agent/src/util/timers.rs; a debug build's, as /test/nodectld is): the node
# certificate's backoff 1/16 as long (2 s doubling to 64 s becomes 125 ms doubling to 4 s), so
# that C2a sees the capped backoff end in seconds (issue 50: no minute-long real wait).
mkdir -p /etc/systemd/system/nodectld.service.d
printf '[Service]\nEnvironment=NODECTL_TEST_TIMERS=scale=1/16\n' >/etc/systemd/system/nodectld.service.d/50-test-timers.conf
mkdir -p /etc/systemd/system/kubelet.service.d
printf '[Service]\nEnvironment=KUBELET_IMAGE=%s\n' $STANDIN >/etc/systemd/system/kubelet.service.d/10-image-override.conf
# (C2 checks that kubelet is restarted on its credentials with its pods kept, not its stop)
kubelet_stop_timeout
systemctl daemon-reload
check "nodectld starts" systemctl start nodectld.service
check "its test timers are announced" wait_until 10 sh -c \
  'journalctl -u nodectld.service --no-pager -o cat | grep -q "NODECTL_TEST_TIMERS: backoffs and rechecks are 1/16 as long"'
{
  typhoon_records
  record kubelet/kubeconfig /root/controller-bootstrap-kubeconfig
} >/tmp/controller-bundle
mkdir -p $INBOX && cp /tmp/controller-bundle $INBOX/.incoming && mv $INBOX/.incoming $INBOX/assets
check "C1a kubelet.service becomes active with no API server" wait_until 60 sh -c '[ "$(systemctl is-active kubelet.service)" = active ]'
check "C1a the stand-in runs standalone, as controller-0" wait_until 60 sh -c \
  'journalctl -u kubelet.service --no-pager -o cat | grep -q "kubelet stand-in: node controller-0, kubeconfig (none: standalone)"'
for m in $CP; do
  check "C1b static pod $m started as uid 65534" wait_until 60 sh -c \
    "journalctl -u kubelet.service --no-pager -o cat | grep -q 'static pod $m/$m: started as uid 65534'"
done
journalctl -u kubelet.service --no-pager -o cat | grep 'stand-in' | sed 's/^/  | kubelet: /'
check "C1c kube-apiserver reads its 8 files (keys, CA, etcd client, service account)" pod_says kube-apiserver 'uid 65534: read 8 files'
check "C1c kube-controller-manager reads its kubeconfig and keys" pod_says kube-controller-manager 'uid 65534: read 4 files'
check "C1c kube-scheduler reads its kubeconfig (a single-file hostPath)" pod_says kube-scheduler 'uid 65534: read 1 files'
for m in $CP; do echo "  | $(last_report $m)"; done
for m in $CP; do
  ctx=$(podman inspect "$(pod_name $m)" --format '{{.ProcessLabel}}')
  check "C1d $m runs confined with its own MCS pair ($ctx)" grep -Eq '^system_u:system_r:container_t:s0:c[0-9]+,c[0-9]+$' <<<"$ctx"
done
out=$(podman run --rm --user 1000:1000 -v /etc/kubernetes/pki:/etc/kubernetes/pki:ro localhost/pod:1 \
  cat /etc/kubernetes/pki/apiserver.key /etc/kubernetes/pki/scheduler.conf 2>&1)
expect "C1e a pod as another uid, same hostPath, reads neither key nor kubeconfig" "$(grep -c 'Permission denied' <<<"$out")" 2
out=$(setpriv --reuid=1000 --regid=1000 --clear-groups cat /etc/kubernetes/pki/ca.key 2>&1)
check "C1e nor does a local user" grep -q 'Permission denied' <<<"$out"
expect "C1f nodectl audit: no finding on this controller" "$(nodectl audit --json | jq -r '.findings | length')" 0
nodectl audit --json | jq -r '.findings[] | "  | finding: \(.id) \(.path) \(.evidence)"' 
# (a controller's pass never waits for the API: the step is done for now, retrying in the background)
check "C1g the node's credentials wait for the API server, kubelet standalone meanwhile" sh -c \
  "nodectl status --json | jq -r '.steps[] | select(.id == \"kubelet-credentials\") | .detail' | grep -q 'kubelet standalone until the node.s certificate is issued'"
echo "  | kubelet-credentials: $(step_field kubelet-credentials detail)"
# Issue 37, 2: standalone, kubelet authorizes AlwaysAllow, and every worker's client certificate
# is signed by the cluster CA: it must serve no API (the stand-in serves :10250 unless
# `enableServer: false`, as kubelet's startKubelet does). Refused at TCP, before any certificate.
listens_10250() { ss -ltnH 'sport = :10250' | grep -q .; }
check "C1h the standalone kubelet serves no API: nothing listens on :10250" sh -c '! ss -ltnH "sport = :10250" | grep -q .'
check "C1h a connection to :10250 is refused (no certificate gets anything)" sh -c '! timeout 5 bash -c "exec 3<>/dev/tcp/127.0.0.1/10250" 2>/dev/null'

# attempts: the failed attempts of this nodectld's node certificate requests, "ATTEMPT RETRY_IN_S"
attempts() {
  journalctl _SYSTEMD_INVOCATION_ID="$(systemctl show -p InvocationID --value nodectld.service)" --no-pager -o json |
    jq -r 'select(.ATTEMPT != null) | "\(.ATTEMPT) \(.RETRY_IN_S)"'
}
capped() { attempts | awk '$1 >= 7 { f = 1 } END { exit !f }'; }
check "C1i the request's backoff reaches its cap (attempt 7 failed: 4 s apart from the 6th on)" wait_until 60 capped

echo "## C2: the API server answers: the node's certificate, kubelet with it, static pods kept"
kept=$(for m in $CP; do podman inspect "$(pod_name $m)" --format '{{.Id}}'; done | sort | tr '\n' ' ')
kubelet_since=$(systemctl show -p ActiveEnterTimestampMonotonic --value kubelet.service)
check "the API double starts, the same CA" start_apiserver_double --ca-key /root/double-ca.key
start=$SECONDS
# (its capped backoff is 4 s +-20% here and kubelet's restart at most ~12 s: a hang bound of 60 s)
check "C2a nodectld gets the node's certificate by itself (its backoff, no operator)" wait_until 60 \
  sh -c '[ "$(nodectl status --json | jq -r .credentials.subject)" = system:node:controller-0 ]'
echo "  | after $((SECONDS - start)) s: $(nodectl status --json | jq -c '.credentials | {subject, expires_in_s}')"
if [ "$(nodectl status --json | jq -r .credentials.subject)" != system:node:controller-0 ]; then
  echo "  | the API double's log:"; tail -15 /tmp/apiserver-double.log | sed 's/^/  |   /'
  echo "  | nodectld's journal:"
  journalctl -u nodectld.service --no-pager -o short-monotonic | tail -40 | cut -c1-300 | sed 's/^/  |   /'
fi
# What the backoff did while the API was away: each failed attempt's number and RETRY_IN_S
# (the count starts again at 1 when the API server's pod starts on this node, C1b).
retries=$(attempts)
echo "  | failed attempts (attempt retry_in_s): $(head -9 <<<"$retries" | paste -sd, -), ... $(tail -1 <<<"$retries")"
check "C2a every retry was 125 ms doubling per attempt to its cap, 4 s (+-20%)" awk '
  { e = 0.125 * 2 ^ ($1 - 1); if (e > 4) e = 4; if ($2 < e * 0.8 - 0.001 || $2 > e * 1.2 + 0.001) bad++ }
  END { exit !(NR >= 7 && !bad) }' <<<"$retries"
echo "  | kubelet-credentials: $(step_field kubelet-credentials state): $(step_field kubelet-credentials detail)"
check "C2b kubelet restarts with the node's kubeconfig" wait_until 60 sh -c \
  'journalctl -u kubelet.service --no-pager -o cat | grep -q "kubelet stand-in: node controller-0, kubeconfig /var/lib/kubelet/kubeconfig"'
if ! journalctl -u kubelet.service --no-pager -o cat | grep -q "kubelet stand-in: node controller-0, kubeconfig /var/lib/kubelet/kubeconfig"; then
  echo "  | systemd's jobs: $(systemctl list-jobs --no-pager --no-legend | tr '\n' ';')"
  systemctl status kubelet.service --no-pager 2>&1 | head -25 | sed 's/^/  |   /'
  echo "  | kubelet's and nodectld's journal:"
  journalctl -u kubelet.service -u nodectld.service --no-pager -o short-monotonic | tail -40 | cut -c1-300 | sed 's/^/  |   /'
fi
check "C2b (a new kubelet start)" sh -c "[ \"\$(systemctl show -p ActiveEnterTimestampMonotonic --value kubelet.service)\" != '$kubelet_since' ]"
now=$(for m in $CP; do podman inspect "$(pod_name $m)" --format '{{.Id}}'; done | sort | tr '\n' ' ')
expect "C2c the static pods are the same containers (kept across kubelet's restart)" "$now" "$kept"
check "C2c kube-apiserver still reads its files" pod_says kube-apiserver 'uid 65534: read 8 files'
check "C2d with its credentials (webhook authorization) kubelet serves its API on :10250" wait_until 30 listens_10250

echo "## C3: the layout before (pki root's): the control plane cannot read; audit --fix mends it live"
started=$(podman inspect "$(pod_name kube-apiserver)" --format '{{.State.StartedAt}}')
systemctl stop nodectld.service   # (its relabel/placement would mend it first)
chown -R root:root /etc/kubernetes/pki
check "C3a the running kube-apiserver cannot read its key" pod_says kube-apiserver 'cannot read /etc/kubernetes/pki/apiserver.key: Permission denied'
echo "  | $(last_report kube-apiserver | cut -c1-160)..."
check "C3b nodectl audit finds the key's owner" sh -c "nodectl audit --json | jq -e '[.findings[] | select(.path == \"/etc/kubernetes/pki/apiserver.key\")] | length > 0' >/dev/null"
nodectl audit --json | jq -r '.findings[] | select(.path == "/etc/kubernetes/pki/apiserver.key") | "  | finding: \(.id): \(.evidence) -> \(.fix)"' 
nodectl audit --fix >/dev/null 2>&1
check "C3c after audit --fix it reads again" pod_says kube-apiserver 'uid 65534: read 8 files'
expect "C3c the same container, not restarted" "$(podman inspect "$(pod_name kube-apiserver)" --format '{{.State.StartedAt}}')" "$started"
check "nodectld starts again" systemctl start nodectld.service

echo "## C4: /var/lib/kubelet: plugin sockets shared, pods and credentials not"
sock_image localhost/sock:1
# (what the CSI driver's DaemonSet asks: hostPath plugins/<driver>, DirectoryOrCreate)
mkdir -p /var/lib/kubelet/plugins/example.csi.k8s.io
expect "C4a a driver's directory made in plugins/ inherits the shared type and level" \
  "$(stat -c %C /var/lib/kubelet/plugins/example.csi.k8s.io | cut -d: -f3-)" "container_file_t:s0"
expect "C4a plugin dirs labeled shared (s0, no pair)" \
  "$(stat -c %C /var/lib/kubelet/plugins_registry /var/lib/kubelet/plugins /var/lib/kubelet/device-plugins | sort -u)" \
  "system_u:object_r:container_file_t:s0"
# kube-controller-manager (uid 65534, its own pair) mounts kubelet's volumePluginDir by hostPath
expect "C4a volumeplugins/ labeled shared (s0), as Typhoon's /var/lib/kubelet:z left it" \
  "$(stat -c %C /var/lib/kubelet/volumeplugins)" "system_u:object_r:container_file_t:s0"
expect "C4a /var/lib/kubelet itself and pods/ keep the policy default" \
  "$(stat -c %C /var/lib/kubelet | cut -d: -f3)" "$(matchpathcon -n /var/lib/kubelet | cut -d: -f3)"
# node-driver-registrar's shape: not privileged, its own MCS pair, hostPath on the registry.
out=$(podman run --rm -v /var/lib/kubelet/plugins_registry:/registration \
  -v /var/lib/kubelet/plugins/example.csi.k8s.io:/csi localhost/sock:1 \
  /sock-listen /registration/example.csi.k8s.io-reg.sock /csi/csi.sock 2>&1)
echo "  | $out"
check "C4b a plugin with its own pair creates its sockets in plugins_registry/ and plugins/" \
  test -S /var/lib/kubelet/plugins_registry/example.csi.k8s.io-reg.sock -a -S /var/lib/kubelet/plugins/example.csi.k8s.io/csi.sock
out=$(podman run --rm -v /var/lib/kubelet/device-plugins:/device-plugins localhost/sock:1 /sock-listen /device-plugins/example.sock 2>&1)
check "C4b a device plugin creates its socket in device-plugins/" test -S /var/lib/kubelet/device-plugins/example.sock
# Another pod's emptyDir, as the runtime labels it (that pod's own pair).
d=/var/lib/kubelet/pods/0000-other/volumes/kubernetes.io~empty-dir/data
mkdir -p $d && echo private >$d/file && chcon -R -t container_file_t -l s0:c5,c6 /var/lib/kubelet/pods/0000-other
out=$(podman run --rm --security-opt label=level:s0:c1,c2 -v /var/lib/kubelet:/var/lib/kubelet localhost/sock:1 \
  cat $d/file /var/lib/kubelet/pki/kubelet-client-current.pem /var/lib/kubelet/kubeconfig 2>&1)
expect "C4c a pod with /var/lib/kubelet mounted reads neither another pod's emptyDir nor the credentials" \
  "$(grep -c 'Permission denied' <<<"$out")" 3
echo "$out" | sed 's/^/  | /'
nodectl converge >/dev/null
expect "C4d a pass leaves the emptyDir's pair alone" "$(stat -c %C $d/file | cut -d: -f3-)" "container_file_t:s0:c5,c6"
rm -rf /var/lib/kubelet/pods/0000-other /var/lib/kubelet/plugins_registry/*.sock /var/lib/kubelet/plugins/example.csi.k8s.io /var/lib/kubelet/device-plugins/example.sock

systemctl stop kubelet.service nodectld.service
rm -f /etc/systemd/system/nodectld.service.d/50-test-timers.conf && systemctl daemon-reload
for c in $(podman ps -a --filter name=^k8s_ --format '{{.Names}}'); do podman rm -f -t 0 "$c" >/dev/null; done
stop_apiserver_double
summary controller
