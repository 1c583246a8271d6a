#!/bin/bash
# Tier 3 benchmark (issues 17 and 18), inside the VM in the same boot as the other suites
# (SELinux enforcing with MCS, QEMU TCG): nodectld against what it replaces, on the same
# controller bundle of 22 Typhoon records, and nodectld's footprint in every state it idles in.
#   B1  a fresh controller's first pass (nodectld started, units rendered, waiting for secrets)
#   B2  Typhoon's glue: the bundle renamed into place, /opt/bootstrap/layout (awk, mv,
#       chown/chmod, chcon -R), systemctl daemon-reload, systemctl start kubelet
#   B3  nodectld: the same bundle renamed into the inbox; kubelet started when its files are in
#       place (no API server: a fresh controller's API server is one of its static pods)
#   B4  nodectl status against systemctl status kubelet
#   B5  idle for 30 s in each state: waiting for secrets, converged standalone with the API away,
#       a refused bundle, a worker waiting for the API, for approval, denied, converged
#   B6  relabel of 20 000 files against chcon -R (relabel-bench)
# Each figure is printed with its baseline or target and the ratio; the table at the end goes
# into docs/testing.md. The run fails when a guard below is exceeded.
# /test holds: check.sh, lib.sh, nodectld-release, nodectl-release, nodectl, nodectld.service,
# org.nodectl.Agent1.conf, controller.toml, worker.toml, nodectl-apiserver-double, relabel-bench,
# rename-now (a bundle's arrival: the rename, timed right before the call).
. /test/check.sh
. /test/lib.sh
export NO_COLOR=1
INBOX=/var/lib/nodectl/inbox
ROWS=/tmp/bench-rows
: >$ROWS
row() { printf '| %s |\n' "$*" >>$ROWS; }

# us: now, in microseconds of the realtime clock (systemd's timestamps are on the same clock).
us() { local t=$EPOCHREALTIME; echo "${t/./}"; }
# A FIFO nothing is written to: `idle_wait N` waits N seconds in the shell itself (no `sleep`
# process). Opened only for the read (read-write: the open does not wait for a writer), so no
# command inherits it (restorecon's setfiles_t is denied an inherited descriptor: an AVC).
IDLE_FIFO=/run/bench-idle.fifo
rm -f "$IDLE_FIFO" && mkfifo -m 0600 "$IDLE_FIFO"
idle_wait() { read -r -t "$1" _ <>"$IDLE_FIFO" || true; }
# unit_us UNIT PROPERTY: a unit's timestamp property in microseconds.
unit_us() {
  local v; v=$(systemctl show -p "$2" --value --timestamp=us+utc "$1")
  [ -n "$v" ] && date -u -d "${v#* }" +%s%6N
}
ms() { echo $((($1) / 1000)); }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }

# The 22 records of a Typhoon controller's assets bundle (terraform-render-bootstrap's names):
# the cluster CA and apiserver keys, the service-account pair, etcd's CA, client, server and peer
# files, three kubeconfigs, three static manifests and one bootstrap manifest.
CERT=$'-----BEGIN CERTIFICATE-----\nMIIBtestcert\n-----END CERTIFICATE-----'
KEY=$'-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEtestkeybytes\n-----END EC PRIVATE KEY-----'
CONF=$'apiVersion: v1\nkind: Config\nusers:\n- name: u\n  user:\n    client-certificate-data: Y2VydA==\n    client-key-data: a2V5\n'
POD=$'apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers: []\n'
make_bundle() {
  local r
  {
    for r in tls/k8s/ca.crt tls/k8s/apiserver.crt tls/k8s/service-account.pub tls/etcd/etcd-client-ca.crt \
      tls/etcd/etcd-client.crt tls/etcd/server-ca.crt tls/etcd/server.crt tls/etcd/peer-ca.crt tls/etcd/peer.crt; do
      printf '##### %s\n%s\n' "$r" "$CERT"
    done
    for r in tls/k8s/ca.key tls/k8s/apiserver.key tls/k8s/service-account.key tls/etcd/etcd-client.key \
      tls/etcd/server.key tls/etcd/peer.key; do
      printf '##### %s\n%s\n' "$r" "$KEY"
    done
    for r in auth/admin.conf auth/controller-manager.conf auth/scheduler.conf; do printf '##### %s\n%s' "$r" "$CONF"; done
    for r in kube-apiserver kube-controller-manager kube-scheduler; do printf '##### static-manifests/%s.yaml\n%s' "$r" "$POD"; done
    printf '##### manifests/coredns/deployment.yaml\nkind: Deployment\n'
  } >"$1"
}
# The same files, gone (between runs).
clean_node() {
  # nodectld first: a pass of it could start kubelet again between the two stops.
  systemctl stop nodectld.service 2>/dev/null
  systemctl stop kubelet.service 2>/dev/null
  systemctl reset-failed nodectld.service kubelet.service 2>/dev/null
  rm -rf /etc/kubernetes/pki /etc/kubernetes/manifests /etc/ssl/etcd /opt/bootstrap/assets /root/glue $INBOX
}

# idle NAME MAX_PASSES: nodectld's footprint after 5 s settling and over 30 s of idling: CPU
# ticks, context switches (wakeups), passes, RSS and anonymous memory at the end. Guards: RSS
# <= 12 MiB and anonymous <= 4 MiB (the targets are 8 and 2; the table says which are met); no
# pass but MAX_PASSES (a state that backs off: two passes per attempt, one starting it and one
# when it ends, attempts 2 s doubling apart), and at most 5 CPU ticks plus 30 per pass (a pass
# costs 5-23 ticks under TCG: its bus calls and file checks; 13-14 a pass where a request backs
# off in boots at the usual speed, 23 in a boot where the host ran TCG 1.5x slower; idling itself, the late trim and a
# timer, 0-2 ticks, up to 4 in a boot where the host ran TCG at half speed; the 2 s retry loop
# of issue 18 cost 36). Nothing calls nodectld in the window (the pass count comes from its
# metrics file), so serving a call is not counted as idling.
idle() {
  local name=$1 max_passes=$2 pid t0 t1 w0 w1 p0 p1 rss anon
  sleep 5
  pid=$(systemctl show -p MainPID --value nodectld.service)
  ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
  wakeups() { cat /proc/"$pid"/task/*/status | awk '/ctxt_switches/ {n += $2} END {print n}'; }
  # (the pass count from the metrics file nodectld rewrites after each pass: no call to it)
  passes() { awk '$1 == "nodectl_passes_total" {print $2}' /run/nodectl/metrics/nodectl.prom; }
  t0=$(ticks); w0=$(wakeups); p0=$(passes)
  sleep 30
  t1=$(ticks); w1=$(wakeups); p1=$(passes)
  rss=$(awk '/^Rss:/ {print $2}' "/proc/$pid/smaps_rollup")
  anon=$(awk '/^Anonymous:/ {print $2}' "/proc/$pid/smaps_rollup")
  local ticks=$((t1 - t0)) passes=$((p1 - p0))
  echo "  | idle '$name': RSS $rss kB, anonymous $anon kB, CPU $ticks ticks, $((w1 - w0)) wakeups, $passes passes in 30 s ($(nodectl status | head -1))"
  awk '/^[0-9a-f]+-[0-9a-f]+ / {name = ($6 == "" ? "[anon]" : $6)} /^Anonymous:/ {a[name] += $2} /^Rss:/ {r[name] += $2}
       END {for (n in r) if (r[n] >= 256) printf "  |   %6d kB resident, %6d kB anonymous  %s\n", r[n], a[n], n}' "/proc/$pid/smaps" | sort -k5
  # Unnamed mappings holding 1 MiB or more: their size tells a thread stack (2 MiB) from a malloc
  # arena (64 MiB reserved).
  awk '/^[0-9a-f]+-[0-9a-f]+ / {m = $1; anon = ($6 == "")} /^Size:/ {sz = $2} /^Rss:/ {if (anon && $2 >= 1024) printf "  |   unnamed mapping %s: size %d kB, resident %d kB\n", m, sz, $2}' "/proc/$pid/smaps"
  echo "  |   threads: $(cat /proc/"$pid"/task/*/comm | sort | uniq -c | tr -s ' ' | tr '\n' ',')"
  row "idle: $name | RSS $((rss / 1024)).$(((rss % 1024) * 10 / 1024)) MiB, anonymous $((anon / 1024)).$(((anon % 1024) * 10 / 1024)) MiB | $ticks CPU ticks, $((w1 - w0)) wakeups, $passes passes in 30 s | RSS <= 8 MiB, anonymous <= 2 MiB: $([ "$rss" -le 8192 ] && [ "$anon" -le 2048 ] && echo met || echo "not met")"
  check "B5 $name: RSS $rss kB <= 12 MiB (guard)" test "$rss" -le 12288
  check "B5 $name: anonymous $anon kB <= 4 MiB (guard)" test "$anon" -le 4096
  check "B5 $name: $passes passes in 30 s (at most $max_passes)" test "$passes" -le "$max_passes"
  check "B5 $name: $ticks CPU ticks in 30 s (at most 5 + 30 per pass)" test "$ticks" -le $((5 + 30 * passes))
}

# nodectld's journal since $1 (a date), each line with its ms after $2 (us), the per-file lines
# of a placement left out.
journal_from() {
  journalctl -u nodectld.service --since "$1" --no-pager -o short-unix | while read -r ts rest; do
    t=${ts/./}; t=${t:0:16}
    printf '  |   %6d  %s\n' $(((t - $2) / 1000)) "$(cut -c1-200 <<<"${rest#* }")"
  done 2>/dev/null | grep -v -e ': secrets: write ' -e ': secrets: create directory ' | head -60
}

# ignition_node_files: what nodectl's Ignition config gives a fresh node before its first boot's
# oneshots run: the kernel modules and sysctls nodectld keeps (packaging/butane; this VM's
# generic OS gets Flatcar's sysctls), taken from the shipped Flatcar controller template as
# rendered and translated for a release, written where Ignition writes them and labeled as it
# labels them (coreos/ignition internal/exec/util RelabelFiles: `setfiles -vF0`, the whole
# context), then applied as the boot applies them (systemd-modules-load, systemd-sysctl).
ignition_node_files() {
  local d=/tmp/bench-ign f src
  rm -rf $d && mkdir -p $d/files && cp /root/bootstrap-kubeconfig $d/files/bootstrap-kubeconfig
  { cat /test/example.vars; echo "nodectl_version=0.0.0"; echo "nodectl_url=http://127.0.0.1:8080"
    echo "nodectl_sysext_flatcar_sha512=$(printf '%0128d' 0)"; echo "nodectl_sysext_fcos_sha512=$(printf '%0128d' 0)"
    echo "nodectl_release_key_base64=$(printf 'no key: the bench installs no update' | base64 -w0)"; } >$d/vars
  /test/nodectl-butane render $d/vars /test/butane/flatcar-controller.bu $d/c.bu &&
    /test/nodectl-butane translate $d/files $d/c.bu $d/c.ign || return 1
  for f in /etc/modules-load.d/nodectl.conf /etc/sysctl.d/50-nodectl.conf; do
    src=$(jq -r --arg p "$f" '.storage.files[] | select(.path == $p) | .contents.source' $d/c.ign)
    [ "${src#data:,}" != "$src" ] || return 1
    mkdir -p "${f%/*}" && printf '%b' "$(sed 's/%/\\x/g' <<<"${src#data:,}")" >"$f" && chmod 0644 "$f" && restorecon -F "$f" || return 1
  done
  systemctl restart systemd-modules-load.service systemd-sysctl.service
}

echo "## B1: a fresh controller's first pass"
clean_node
stop_apiserver_double
rm -rf /etc/kubernetes /var/lib/nodectl /etc/systemd/system/kubelet.service /etc/systemd/system/kubelet.service.d /var/lib/kubelet /root/bench-ca.key
id etcd >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin etcd
check "a bootstrap kubeconfig for the API double (then stopped: no API server yet)" start_apiserver_double --ca-key /root/bench-ca.key
stop_apiserver_double
install_nodectld /test/controller.toml
check "the kernel modules and sysctls from nodectl's Ignition config, applied as at boot" ignition_node_files
# What ships: both release builds (the status figure is the release CLI's).
install -m 0755 /test/nodectld-release /usr/local/bin/nodectld && install -m 0755 /test/nodectl-release /usr/local/bin/nodectl
restorecon /usr/local/bin/nodectld /usr/local/bin/nodectl
# Debug for the placement phases (nodectl::fsio) and each step's time (nodectl::engine) only.
mkdir -p /etc/systemd/system/nodectld.service.d
printf '[Service]\nEnvironment=NODECTL_LOG=info,nodectl::fsio=debug,nodectl::engine=debug,nodectl_units::systemd=debug\n' >/etc/systemd/system/nodectld.service.d/50-bench.conf
install -D -m 0600 /root/bootstrap-kubeconfig /etc/kubernetes/kubeconfig
kubelet_standin
systemctl daemon-reload
# From a synced disk, as B2 and B3: what the earlier suites left dirty is not this pass's to
# write (its first fsync commits the ext4 journal, which in data=ordered first writes every
# dirty block the transaction carries: 260 ms of a 3-file placement after the secrets suite).
sync
since=$(date '+%Y-%m-%d %H:%M:%S')
t0=$(us)
check "nodectld starts (READY after its first pass)" systemctl start nodectld.service
t1=$(us)
first=$(nodectl status --json | jq '.daemon.last_pass.duration_ms')
echo "  | first pass: $first ms ($(nodectl status --json | jq -r '.daemon.last_pass.changes_applied') changes); start to READY $(ms $((t1 - t0))) ms"
echo "  | its journal (ms after systemctl start):"
journal_from "$since" "$t0"
row "first pass on a fresh controller | $first ms | start to READY $(ms $((t1 - t0))) ms | <= 1000 ms: $([ "$first" -le 1000 ] && echo met || echo "not met")"
check "B1 the first pass within 3 s (guard; the target is 1 s)" test "$first" -le 3000
check "B1 the files Ignition placed are nodectld's: no oneshot restarted" sh -c "! journalctl -u nodectld.service --since '$since' --no-pager | grep -q 'restart systemd-'"
check "B1 the controller waits for its secrets" wait_until 20 sh -c '[ "$(nodectl status --json | jq -r ".steps[] | select(.id==\"secrets\") | .state")" = waiting ]'
expect "B1 kubelet not started before the secrets" "$(systemctl is-active kubelet.service)" inactive
# (the first pass and the one that makes the bundle's directories ahead, after the look-ahead)
expect "B1 no step failed on the way" "$(journalctl -u nodectld.service --since "$since" --no-pager | grep -c 'step [a-z-]* failed')" 0

idle "waiting for secrets (fresh controller)" 0

echo "## B2: Typhoon's glue on the bundle"
clean_node
cat >/root/layout <<'EOF'
#!/bin/bash -e
mkdir -p -- auth tls/{etcd,k8s} static-manifests manifests/{coredns,kube-proxy,network}
awk '/#####/ {filename=$2; next} {print > filename}' assets
mkdir -p /etc/ssl/etcd/etcd
mkdir -p /etc/kubernetes/pki
mv tls/etcd/{peer*,server*} /etc/ssl/etcd/etcd/
mv tls/etcd/etcd-client* /etc/kubernetes/pki/
chown -R etcd:etcd /etc/ssl/etcd
chmod -R 500 /etc/ssl/etcd
mv auth/* /etc/kubernetes/pki/
mv tls/k8s/* /etc/kubernetes/pki/
mkdir -p /etc/kubernetes/manifests
mv static-manifests/* /etc/kubernetes/manifests/
mkdir -p /opt/bootstrap/assets
mv manifests /opt/bootstrap/assets/manifests
rm -rf assets auth static-manifests tls manifests
chcon -R -u system_u -t container_file_t /etc/kubernetes/pki
EOF
chmod 0544 /root/layout
make_bundle /tmp/bench-bundle
expect "the bundle has 22 records" "$(grep -c '^#####' /tmp/bench-bundle)" 22
rm -f /tmp/bench-bundle
# glue_round: one timed run of the glue on a fresh bundle; sets glue_job, glue_active,
# glue_layout, glue_reload (ms after the rename, as microseconds).
glue_round() {
  local t0 t_layout t_reload g_job g_active
  glue_job= glue_active=
  clean_node
  [ "$(systemctl is-active kubelet.service)" = inactive ] || { fail "kubelet inactive before the glue's round"; return 1; }
  mkdir -p /root/glue
  make_bundle /root/glue/.assets
  sync
  t0=$(/test/rename-now /root/glue/.assets /root/glue/assets)
  [[ $t0 =~ ^[0-9]+$ ]] || { fail "the glue's bundle renamed in (rename-now: '$t0')"; return 1; }
  (cd /root/glue && /root/layout)
  t_layout=$(us)
  systemctl daemon-reload
  t_reload=$(us)
  systemctl start kubelet.service
  g_job=$(unit_us kubelet.service InactiveExitTimestamp)
  g_active=$(unit_us kubelet.service ActiveEnterTimestamp)
  glue_job=$((g_job - t0)); glue_active=$((g_active - t0))
  glue_layout=$((t_layout - t0)); glue_reload=$((t_reload - t_layout)); glue_start=$((g_active - t_reload))
}
glue_round
g1_layout=$glue_layout g1_reload=$glue_reload
check "B2 the glue's kubelet is active" test "$(systemctl is-active kubelet.service)" = active
echo "  | glue: layout $(ms $glue_layout) ms, daemon-reload $(ms $glue_reload) ms, start $(ms $glue_start) ms: start job at $(ms $glue_job) ms, active at $(ms $glue_active) ms"
count=$(find /etc/kubernetes/pki /etc/kubernetes/manifests /etc/ssl/etcd /opt/bootstrap/assets -type f | wc -l)
expect "B2 the glue placed 22 files" "$count" 22

echo "## B3: nodectld on the same bundle"
# nodectld_round NAME: one timed run of nodectld on a fresh bundle, its checks named NAME; sets
# n_job, n_active (after the rename, in microseconds), n_t0 and n_since (the rename's time).
nodectld_round() {
  local name=$1 b3 opened
  n_job= n_active=
  clean_node
  b3=$(date '+%Y-%m-%d %H:%M:%S')
  check "$name: nodectld starts" systemctl start nodectld.service
  check "$name: it waits for the secrets" wait_until 20 sh -c '[ "$(nodectl status --json | jq -r ".steps[] | select(.id==\"secrets\") | .state")" = waiting ]'
  expect "$name: kubelet inactive" "$(systemctl is-active kubelet.service)" inactive
  # As on a real controller, where Terraform copies the bundle in well after the first boot:
  # the labels its pass needs are looked up once the waiting pass is done.
  check "$name: it looks up the bundle's default labels while waiting" wait_until 20 sh -c "journalctl -u nodectld.service --since '$b3' --no-pager | grep -q 'looked up ahead'"
  # ... and the directories every bundle fills are made (empty) in a pass right after that,
  # with their final owner, mode and the policy's label, so the bundle's pass only writes files.
  check "$name: the directories a bundle fills are made while it waits" wait_until 10 test -d /etc/ssl/etcd/etcd
  expect "$name: /etc/ssl/etcd/etcd: owner and mode" "$(stat -c '%U %a' /etc/ssl/etcd/etcd)" "etcd 700"
  # (matchpathcon, as secrets.sh R2: restorecon would run in setfiles_t, denied the suite's log)
  expect "$name: the directories made ahead carry the policy's labels" "$(for f in /etc/ssl/etcd /etc/ssl/etcd/etcd \
    /opt/bootstrap/assets /opt/bootstrap/assets/manifests; do [ "$(stat -c %C "$f")" = "$(matchpathcon -n "$f")" ] || echo "$(stat -c %C "$f") $f"; done)" ""
  expect "$name: they are empty" "$(find /etc/kubernetes/pki /etc/ssl/etcd /opt/bootstrap -type f | wc -l)" 0
  mkdir -p $INBOX && make_bundle $INBOX/.assets
  sync
  n_since=$(date '+%Y-%m-%d %H:%M:%S')
  n_t0=$(/test/rename-now $INBOX/.assets $INBOX/assets)
  [[ $n_t0 =~ ^[0-9]+$ ]] || { fail "$name: the bundle renamed in (rename-now: '$n_t0')"; return 1; }
  # The times are systemd's (InactiveExitTimestamp), whenever they are read: the first look
  # waits a second, without a process (a read that times out on a FIFO nobody writes), so that
  # the polling's own `sh` and `systemctl` (tens of ms of CPU each under TCG, and requests
  # systemd serves ahead of its idle-priority run queue) do not compete with the pass they
  # measure, as nothing runs beside the glue's commands in B2.
  idle_wait 1
  check "$name: kubelet becomes active" wait_until 30 sh -c '[ "$(systemctl is-active kubelet.service)" = active ]'
  n_job=$(($(unit_us kubelet.service InactiveExitTimestamp) - n_t0))
  n_active=$(($(unit_us kubelet.service ActiveEnterTimestamp) - n_t0))
  expect "$name: nodectld placed 22 files" "$(find /etc/kubernetes/pki /etc/kubernetes/manifests /etc/ssl/etcd /opt/bootstrap/assets -type f | wc -l)" 22
  # the bundle's pass: from the rename to its "pass finished" line
  opened=$(journalctl -u nodectld.service --since "$n_since" --no-pager -o short-unix | awk -v t0="$n_t0" '
    { t = $1; sub(/\./, "", t); if (substr(t, 1, 16) + 0 < t0 + 0) next }
    /file_contexts handle opened/ { n++ }
    /pass finished/ { done = 1; exit }
    END { print (done ? n + 0 : "no-pass-line") }')
  expect "$name: the bundle's pass opened no file_contexts handle" "$opened" 0
}
nodectld_round B3
echo "  | nodectld: start job at $(ms $n_job) ms, active at $(ms $n_active) ms after the rename; its journal from then (ms after the rename):"
journal_from "$n_since" "$n_t0"
# Two more rounds, the glue's and nodectld's in turn (a boot's speed drifts: both see it), and
# the median of the three of each: one round's noise (phases vary by up to 2x under TCG) is not
# the figure. Every round is printed.
G_JOB=("$glue_job") G_ACTIVE=("$glue_active") N_JOB=("$n_job") N_ACTIVE=("$n_active")
for round in 2 3; do
  glue_round
  check "B2 round $round: the glue's kubelet is active" test "$(systemctl is-active kubelet.service)" = active
  nodectld_round "B3 round $round"
  G_JOB+=("$glue_job") G_ACTIVE+=("$glue_active") N_JOB+=("$n_job") N_ACTIVE+=("$n_active")
done
# A round whose times could not be read (or a kubelet started before its arrival) is no figure.
expect "B3 every round's times are after its arrival" "$(for v in "${G_JOB[@]}" "${G_ACTIVE[@]}" "${N_JOB[@]}" "${N_ACTIVE[@]}"; do
  [[ $v =~ ^[0-9]+$ ]] && [ "$v" -gt 0 ] || echo "$v"; done)" ""
median() { printf '%s\n' "$@" | sort -n | sed -n "$((($# + 1) / 2))p"; }
for i in 0 1 2; do
  echo "  | round $((i + 1)): start job glue $(ms "${G_JOB[i]}") ms, nodectld $(ms "${N_JOB[i]}") ms = $(ratio "${N_JOB[i]}" "${G_JOB[i]}")x; active glue $(ms "${G_ACTIVE[i]}") ms, nodectld $(ms "${N_ACTIVE[i]}") ms"
done
glue_job=$(median "${G_JOB[@]}"); glue_active=$(median "${G_ACTIVE[@]}")
n_job=$(median "${N_JOB[@]}"); n_active=$(median "${N_ACTIVE[@]}")
r_job=$(ratio "$n_job" "$glue_job"); r_active=$(ratio "$n_active" "$glue_active")
echo "  | arrival -> kubelet start job (median of 3): glue $(ms $glue_job) ms, nodectld $(ms $n_job) ms = ${r_job}x (target <= 0.1x)"
echo "  | arrival -> kubelet active (median of 3):    glue $(ms $glue_active) ms, nodectld $(ms $n_active) ms = ${r_active}x"
row "arrival -> kubelet start job (22 records, median of 3 rounds) | nodectld $(ms $n_job) ms | glue $(ms $glue_job) ms (round 1: layout $(ms $g1_layout) ms incl. chcon -R, daemon-reload $(ms $g1_reload) ms) | ${r_job}x, target <= 0.1x: $(awk -v r="$r_job" 'BEGIN{print (r <= 0.1 ? "met" : "not met")}')"
row "arrival -> kubelet active (median of 3 rounds) | nodectld $(ms $n_active) ms | glue $(ms $glue_active) ms | ${r_active}x"
check "B3 arrival -> start job within 0.6x of the glue's (guard; the target is 0.1x)" \
  awk -v r="$r_job" 'BEGIN { exit !(r <= 0.6) }'

echo "## B4: nodectl status against systemctl status kubelet"
# The median of 11 calls each: a call that comes while nodectld runs a pass waits for it (the
# node's certificate request backs off in passes 2 s, 4 s, ... after B3), which says how long a
# pass takes, not how long a status call does.
median_us() {
  local i t0 t1 all=()
  for i in $(seq 11); do t0=$(us); "$@" >/dev/null; t1=$(us); all+=($((t1 - t0))); done
  printf '%s\n' "${all[@]}" | sort -n | sed -n 6p
}
st_n() { median_us nodectl status; }
st_s() { median_us systemctl status kubelet.service; }
st_n >/dev/null; st_s >/dev/null
n=$(st_n); s=$(st_s); r=$(ratio "$n" "$s")
echo "  | nodectl status $(ms "$n") ms, systemctl status kubelet $(ms "$s") ms (median of 11): ${r}x"
row "nodectl status | $(ms "$n") ms | systemctl status kubelet $(ms "$s") ms | ${r}x, target <= 1x: $(awk -v r="$r" 'BEGIN{print (r <= 1 ? "met" : "not met")}')"
check "B4 nodectl status no slower than systemctl status kubelet" awk -v r="$r" 'BEGIN { exit !(r <= 1) }'

echo "## B5: idle in every state"
idle "controller converged, kubelet standalone, API away" 8
# A refused bundle (a record escaping the bundle): the secrets step fails and stays failed.
# The node's certificate request goes on backing off meanwhile (a bad bundle in the inbox does
# not hold back the node's credentials: bootstrap-kubeconfig only runs after secrets), so the
# same backoff passes as above are allowed.
printf '##### tls/k8s/extra.crt\n%s\n##### ../../etc/cron.d/x\nx\n' "$CERT" >$INBOX/.bad && mv $INBOX/.bad $INBOX/bad
check "B5 the bad bundle is refused" wait_until 20 sh -c \
  'nodectl status --json | jq -e ".steps[] | select(.id==\"secrets\") | .error | test(\"escapes the bundle\")"'
idle "a refused bundle (secrets failed)" 8
rm -f $INBOX/bad

# A worker: the bootstrap kubeconfig names the double, which is away, then asks, then denies.
clean_node
rm -rf /var/lib/kubelet /var/lib/nodectl
install -D -m 0644 /test/worker.toml /etc/nodectl/config.d/10-node.toml
check "nodectld starts as a worker" systemctl start nodectld.service
check "B5 the worker waits for the API" wait_until 30 sh -c \
  'nodectl status --json | jq -e ".steps[] | select(.id==\"kubelet-credentials\") | .state == \"waiting\""'
idle "worker waiting for the API (unreachable)" 8
check "the double asks for manual approval" start_apiserver_double --ca-key /root/bench-ca.key --approval manual
systemctl restart nodectld.service
check "B5 the worker waits for approval" wait_until 30 sh -c \
  'nodectl status --json | jq -e ".steps[] | select(.id==\"kubelet-credentials\") | .waiting_for // \"\" | test(\"pending approval\")"'
idle "worker waiting for approval" 0
check "the double denies" start_apiserver_double --ca-key /root/bench-ca.key --approval 'deny:not on the list'
systemctl restart nodectld.service
check "B5 the request is denied" wait_until 30 sh -c \
  'nodectl status --json | jq -e ".steps[] | select(.id==\"kubelet-credentials\") | .error // \"\" | test(\"denied\")"'
idle "worker denied" 0
check "the double approves" start_apiserver_double --ca-key /root/bench-ca.key
systemctl restart nodectld.service
check "B5 the worker converges" wait_until 60 sh -c \
  'nodectl status --json | jq -e ".daemon.status_line == \"node converged\" and .kubelet.active == \"active\""'
idle "worker converged (credentials, kubelet active)" 0
stop_apiserver_double
clean_node
rm -f /etc/systemd/system/nodectld.service.d/50-bench.conf && systemctl daemon-reload

echo "## B6: relabel of 20 000 files"
/test/relabel-bench 20000 >/tmp/relabel.out
rc=$?
grep -v '^| ' /tmp/relabel.out
grep '^| relabel ' /tmp/relabel.out >>$ROWS
check "B6 relabel within its guards (relabel-bench)" test "$rc" = 0

echo "## the table (docs/testing.md)"
echo "| measured | nodectld | baseline | ratio / target |"
echo "|---|---|---|---|"
cat $ROWS
summary bench
