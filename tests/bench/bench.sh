#!/bin/bash
# Tier 3 benchmark (issues 17, 18 and 38), inside the VM in the same boot as the other suites
# (SELinux enforcing with MCS, QEMU TCG): nodectld against what it replaces, on the same
# controller bundle of 22 Typhoon records, and nodectld's footprint in every state it idles in.
#   B1  a fresh controller's first pass (nodectld started, units rendered, kubelet started
#       standalone, waiting for the bundle)
#   B2/B3  five rounds each, in turn, kubelet (the stand-in image, its static pods run with
#       podman) running before the bundle on both sides: Typhoon's flow (the bundle renamed in,
#       /opt/bootstrap/layout: awk, mv, chown/chmod, chcon -R) against nodectld's (the bundle
#       renamed into its inbox). From the rename: (a) every file in place with its final owner,
#       mode and label; (b) every static pod running and having read all its files; (b - a)
#       the pods' own start; reads that failed before the files were in place
#   B4  nodectl status against systemctl status kubelet
#   B5  idle for 30 s in each state: waiting for the bundle, converged standalone with the API
#       away, a refused bundle, a worker waiting for the API (and 5 minutes in), for approval,
#       denied, converged: memory (private, memory.current, RSS), CPU, passes
#   B6  relabel of 20 000 files against chcon -R (relabel-bench)
# Each figure is printed with its baseline or target and the ratio, unrounded, and judged met or
# not met in the table at the end, which goes into docs/testing.md as printed (tests/bench/run.sh).
# No figure fails the run (issue 50: targets are judged in the report, never as wall-clock gates):
# it fails only on what happened (files, owners, labels, failed reads, passes counted, a bound
# of 10x that only catches a hang or a poller).
# BENCH_MODE=full (default; tests/bench/run.sh): five rounds, 30 s idle windows, the API away
# 5 minutes, 20 000 files relabeled, 5 s settling before each idle window. BENCH_MODE=quick
# (the test command's smoke): one round, 3 s windows after 2 s settling, no 5-minute wait,
# 2 000 files; its figures are printed, never judged or kept.
# /test holds: check.sh, lib.sh, nodectld-release, nodectl-release, nodectl, nodectld.service,
# org.nodectl.Agent1.conf, controller.toml, worker.toml, nodectl-apiserver-double, relabel-bench,
# kubelet-standin/, rename-now (a bundle's arrival: the rename, timed right before the call).
. /test/check.sh
. /test/lib.sh
export NO_COLOR=1
BENCH_MODE=${BENCH_MODE:-full}
case $BENCH_MODE in
  full) ROUNDS=5 IDLE_S=30 SETTLE_S=5 RELABEL_FILES=20000 ;;
  quick) ROUNDS=1 IDLE_S=3 SETTLE_S=2 RELABEL_FILES=2000 ;;
  *) echo "BENCH_MODE must be full or quick, not '$BENCH_MODE'" >&2; exit 2 ;;
esac
echo "bench mode: $BENCH_MODE ($ROUNDS rounds, ${IDLE_S} s idle windows, $RELABEL_FILES files relabeled)"
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
    # (terraform-render-bootstrap's shape: the stand-in's fixtures, uid 65534, hostPath pki)
    for r in kube-apiserver kube-controller-manager kube-scheduler; do
      printf '##### static-manifests/%s.yaml\n' "$r"; cat /test/kubelet-standin/fixtures/$r.yaml
    done
    printf '##### manifests/coredns/deployment.yaml\nkind: Deployment\n'
  } >"$1"
}
# The same files, gone (between runs).
clean_node() {
  # nodectld first: a pass of it could start kubelet again between the two stops. The stand-in
  # kubelet killed at once and its container removed: a stop through the unit's `podman stop`
  # and systemd's stop timeout took 60-96 s under TCG, none of it measured.
  systemctl stop nodectld.service 2>/dev/null
  systemctl kill -s SIGKILL kubelet.service 2>/dev/null
  podman rm -f -t 0 kubelet >/dev/null 2>&1
  systemctl stop kubelet.service 2>/dev/null
  systemctl reset-failed nodectld.service kubelet.service 2>/dev/null
  rm -rf /etc/kubernetes/pki /etc/kubernetes/manifests /etc/ssl/etcd /opt/bootstrap/assets /root/glue $INBOX
}

# idle NAME MAX_PASSES [MAX_TICKS]: nodectld's footprint after SETTLE_S (5 s; 2 s in quick
# mode) settling and over IDLE_S (30 s; 3 s in quick mode) of idling: CPU ticks, context switches (wakeups), passes, and its memory at the end:
# - private: anonymous or private dirty, each page once (per mapping of /proc/<pid>/smaps, the
#   larger of Anonymous and Private_Dirty): what nodectld itself holds and the node cannot get
#   back without swap. Target <= 2 MiB in every state: a figure, met or not in the table.
# - the unit's memory.current (cgroup v2: its anonymous memory, the page cache it brought in,
#   kernel memory), with its anon/file split from memory.stat; compared across states at the end.
# - RSS, shown beside them (it counts the binary's code pages, which are page cache).
# No pass but MAX_PASSES (a state that backs off: one pass per attempt, attempts 2 s doubling
# apart to a 64 s cap, with jitter), and at most MAX_TICKS CPU ticks (default 5 plus 30 per
# pass and 2 per connection attempt the request made by itself in the window (1.25-2 each
# measured): a pass costs 5-23 ticks under TCG, its bus calls and file checks; idling itself,
# the late trim and a timer, 0-2 ticks, up to 4 in a boot where the host ran TCG at half speed).
# The ticks are a figure; the run fails only at 10x MAX_TICKS (a poller, not a slow machine).
# The passes are a count of what happened: no pass but MAX_PASSES fails the run.
# Nothing calls nodectld in the window (the pass count comes from its metrics file), so
# serving a call is not counted as idling.
MEM_ROWS=/tmp/bench-mem
: >$MEM_ROWS
idle() {
  local name=$1 max_passes=$2 max_ticks=${3:-} pid t0 t1 w0 w1 p0 p1 rss anon pdirty priv cur cg ticks passes
  idle_wait "$SETTLE_S"
  pid=$(systemctl show -p MainPID --value nodectld.service)
  cg=/sys/fs/cgroup$(systemctl show -p ControlGroup --value nodectld.service)
  ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
  wakeups() { cat /proc/"$pid"/task/*/status | awk '/ctxt_switches/ {n += $2} END {print n}'; }
  # (the pass count from the metrics file nodectld rewrites after each pass: no call to it)
  passes() { awk '$1 == "nodectl_passes_total" {print $2}' /run/nodectl/metrics/nodectl.prom; }
  local wsince wus attempts
  wsince=$(date '+%Y-%m-%d %H:%M:%S') wus=$(us)
  t0=$(ticks); w0=$(wakeups); p0=$(passes)
  idle_wait "$IDLE_S"
  t1=$(ticks); w1=$(wakeups); p1=$(passes)
  # the request's own attempts in the window (a backoff retries by itself, 2 s doubling: four
  # in a first 30 s), each a connection: 1.25-2 ticks each measured under TCG
  attempts=$(journal_us "$wsince" | awk -F'\t' -v t0="$wus" '$1 >= t0 && $3 ~ /requesting a node client certificate/ {n++} END {print n + 0}')
  rss=$(awk '/^Rss:/ {print $2}' "/proc/$pid/smaps_rollup")
  anon=$(awk '/^Anonymous:/ {print $2}' "/proc/$pid/smaps_rollup")
  pdirty=$(awk '/^Private_Dirty:/ {print $2}' "/proc/$pid/smaps_rollup")
  priv=$(awk '/^[0-9a-f]+-[0-9a-f]+ / {t += (a > d ? a : d); a = 0; d = 0} /^Anonymous:/ {a = $2} /^Private_Dirty:/ {d = $2}
              END {t += (a > d ? a : d); print t}' "/proc/$pid/smaps")
  cur=$(($(cat "$cg/memory.current") / 1024))
  local cg_anon cg_file
  cg_anon=$(awk '$1 == "anon" {print int($2 / 1024)}' "$cg/memory.stat")
  cg_file=$(awk '$1 == "file" {print int($2 / 1024)}' "$cg/memory.stat")
  ticks=$((t1 - t0)) passes=$((p1 - p0))
  [ -n "$max_ticks" ] || max_ticks=$((5 + 30 * passes + 2 * attempts))
  echo "  | idle '$name': private (anonymous or dirty) $priv kB (anonymous $anon kB, private dirty $pdirty kB), memory.current $cur kB (anon $cg_anon kB, file $cg_file kB), RSS $rss kB; CPU $ticks ticks, $((w1 - w0)) wakeups, $passes passes, $attempts connection attempts in $IDLE_S s ($(nodectl status | head -1))"
  awk '/^[0-9a-f]+-[0-9a-f]+ / {name = ($6 == "" ? "[anon]" : $6)} /^Anonymous:/ {a[name] += $2} /^Rss:/ {r[name] += $2}
       END {for (n in r) if (r[n] >= 256) printf "  |   %6d kB resident, %6d kB anonymous  %s\n", r[n], a[n], n}' "/proc/$pid/smaps" | sort -k5
  echo "  |   threads: $(cat /proc/"$pid"/task/*/comm | sort | uniq -c | tr -s ' ' | tr '\n' ',')"
  mib() { awk -v k="$1" 'BEGIN { printf "%.2f", k / 1024 }'; }
  row "idle: $name | private $(mib "$priv") MiB (anonymous $(mib "$anon"), dirty $(mib "$pdirty")); memory.current $(mib "$cur") MiB; RSS $(mib "$rss") MiB | $ticks CPU ticks (at most $max_ticks: $([ "$ticks" -le "$max_ticks" ] && echo met || echo "not met")), $((w1 - w0)) wakeups, $passes passes in $IDLE_S s | private <= 2 MiB: $([ "$priv" -le 2048 ] && echo met || echo "not met")"
  echo "$cur $name" >>$MEM_ROWS
  check "B5 $name: $passes passes in $IDLE_S s (at most $max_passes)" test "$passes" -le "$max_passes"
  check "B5 $name: $ticks CPU ticks in $IDLE_S s, under 10x the figure's $max_ticks (a poller)" test "$ticks" -le $((10 * max_ticks))
}

# journal_us SINCE: nodectld's journal since SINCE (a date), one line per entry: the time the
# kernel took the line from nodectld's socket (journald's _SOURCE_REALTIME_TIMESTAMP, from
# SO_TIMESTAMP: when it was logged, not when a busy journald got to it), journald's receive time
# (both in us), the message. (A line without the source time: its receive time twice.)
journal_us() {
  journalctl -u nodectld.service --since "$1" --no-pager -o json --output-fields=MESSAGE,_SOURCE_REALTIME_TIMESTAMP |
    jq -r '[(._SOURCE_REALTIME_TIMESTAMP // .__REALTIME_TIMESTAMP), .__REALTIME_TIMESTAMP, (.MESSAGE | tostring)] | @tsv'
}
# nodectld's journal since $1 (a date), each line with its ms after $2 (us, the time it was
# logged) and journald's lag in receiving it (ms), the per-file lines of a placement left out.
journal_from() {
  journal_us "$1" | while IFS=$'\t' read -r src rcv msg; do
    printf '  |   %6d %+4d  %s\n' $(((src - $2) / 1000)) $(((rcv - src) / 1000)) "$(cut -c1-200 <<<"$msg")"
  done 2>/dev/null | grep -v -e ' secrets: write ' -e ' secrets: create directory ' | head -60
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
put_bin nodectld-release /usr/local/bin/nodectld && put_bin nodectl-release /usr/local/bin/nodectl
# nodectld logs as it ships (info): its debug lines (each step's and each placement phase's
# time) cost journald as much CPU again as the pods' start leaves it (one boot: journald 220 ms
# with them in a round's window, 110 ms in the glue's), which no user pays. A step's and a
# phase's time: NODECTL_LOG=info,nodectl::engine=debug,nodectl::fsio=debug (docs/testing.md).
rm -f /etc/systemd/system/nodectld.service.d/50-bench.conf
install -D -m 0600 /root/bootstrap-kubeconfig /etc/kubernetes/kubeconfig
# kubelet: the stand-in image (an operator's image drop-in, as controller.sh), which runs the
# static pods with podman: the same kubelet and pod runner for nodectld and the glue (B2/B3).
check "stand-in kubelet image built offline" /test/kubelet-standin/build-image.sh localhost/kubelet-standin:test
busybox_image localhost/pod:1
mkdir -p /etc/systemd/system/kubelet.service.d
printf '[Service]\nEnvironment=KUBELET_IMAGE=localhost/kubelet-standin:test\n' >/etc/systemd/system/kubelet.service.d/10-image-override.conf
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
check "B1 the first pass ended (${first} ms: a figure, target 1 s; a hang at 10 s)" test "$first" -le 10000
check "B1 the files Ignition placed are nodectld's: no oneshot restarted" sh -c "! journalctl -u nodectld.service --since '$since' --no-pager | grep -q 'restart systemd-'"
check "B1 the controller waits for its secrets" wait_until 20 sh -c '[ "$(nodectl status --json | jq -r ".steps[] | select(.id==\"secrets\") | .state")" = waiting ]'
# As Typhoon's: kubelet runs (standalone) before the bundle; what it starts pods from comes last.
check "B1 kubelet runs before the bundle" wait_until 60 sh -c '[ "$(systemctl is-active kubelet.service)" = active ]'
# (the first pass and the one that makes the bundle's directories ahead, after the look-ahead)
expect "B1 no step failed on the way" "$(journalctl -u nodectld.service --since "$since" --no-pager | grep -c 'step [a-z-]* failed')" 0

idle "waiting for the bundle (fresh controller, kubelet standalone)" 0

echo "## B2/B3: Typhoon's flow and nodectld's, kubelet running before the bundle"
# Typhoon's flow, as it runs on a controller: kubelet.service is already running (enabled in
# Ignition on the clouds, started by kubelet.path on bare metal; its unit makes
# /etc/kubernetes/manifests first: `ExecStartPre=/bin/mkdir -p /etc/kubernetes/manifests`), and
# Terraform's ssh.tf copies the bundle to /home/core/assets and runs `sudo /opt/bootstrap/layout`.
# The layout script is Typhoon's, verbatim in effect (poseidon/typhoon
# fedora-coreos/kubernetes/butane/controller.yaml, /opt/bootstrap/layout): awk splits the
# bundle, mv, chown/chmod, chcon -R last. kubelet picks the static manifests up from its
# staticPodPath (the stand-in watches it as kubelet's file source does). Nothing else runs.
cat >/root/layout <<'LAYOUT'
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
LAYOUT
chmod 0544 /root/layout
make_bundle /tmp/bench-bundle
expect "the bundle has 22 records" "$(grep -c '^#####' /tmp/bench-bundle)" 22
rm -f /tmp/bench-bundle
PODS="kube-apiserver kube-controller-manager kube-scheduler"
# pod_lines: every line the static pods' containers logged (k8s-file: "TIME stdout F TEXT"),
# read from their log files (no podman process while a round is measured).
pod_lines() { cat /var/lib/containers/storage/overlay-containers/*/userdata/ctr.log 2>/dev/null | grep ' static pod '; }
# pods_read: how many of the three static pods have read all their files.
pods_read() { pod_lines | grep -E 'uid [0-9]+: read [0-9]+ files' | grep -oE 'static pod [a-z-]+/' | sort -u | wc -l; }
# pods_all_read T0: sets pods_b, (b) for this round in us after T0: the last of the three pods' first
# "read N files" line (printed once every file it names was read); sets failed_reads: the
# attempts, one a second, in which a pod could not read some file before that line (its
# "(K failed reads before)", summed over the pods).
pods_all_read() {
  local m l t last=0
  failed_reads=0 pods_b=
  for m in $PODS; do
    l=$(pod_lines | grep -E "static pod $m/$m uid [0-9]+: read [0-9]+ files" | head -1)
    [ -n "$l" ] || { pods_b="no-read-$m"; return; }
    t=$(date -u -d "${l%% *}" +%s%6N)
    [ "$t" -gt "$last" ] && last=$t
    failed_reads=$((failed_reads + $(sed -n 's/.*(\([0-9]*\) failed reads before)$/\1/p' <<<"$l")))
  done
  pods_b=$((last - $1))
}
# round_reset: no kubelet, no static pod, none of the bundle's files.
round_reset() {
  local c t=$SECONDS
  clean_node
  for c in $(podman ps -a --filter name=^k8s_ --format '{{.Names}}'); do podman rm -f -t 0 "$c" >/dev/null 2>&1; done
  reset_s=$((SECONDS - t))
}
# kubelet_watching: the stand-in (started by systemd) runs and watches its staticPodPath.
kubelet_watching() {
  wait_until 60 sh -c "journalctl -u kubelet.service --since '$1' --no-pager -o cat | grep -q 'kubelet stand-in: watching'"
}
# await_pods T0: waits (without a process in between looks: a FIFO read) for the three pods to
# have read their files, at most 90 s.
await_pods() {
  local i
  for i in $(seq 90); do
    idle_wait 1
    [ "$(pods_read)" = 3 ] && return 0
  done
  return 1
}
# cpu_ms UNIT: the CPU time (ms) the unit's cgroup has used (cpu.stat usage_usec; 0 when the unit
# has no cgroup).
cpu_ms() {
  local cg; cg=$(systemctl show -p ControlGroup --value "$1")
  [ -n "$cg" ] || { echo 0; return; } # (stopped: no cgroup, and / is the whole machine's)
  cg=/sys/fs/cgroup$cg
  awk '$1 == "usage_usec" {print int($2 / 1000); found = 1} END {if (!found) print 0}' "$cg/cpu.stat" 2>/dev/null || echo 0
}
# window_cpu: the CPU nodectld and journald used from the rename to the pods' reads (set by
# window_start before the rename): what competes with the pods' own start on the VM's 2 vCPUs.
window_start() { w_nodectld=$(cpu_ms nodectld.service) w_journald=$(cpu_ms systemd-journald.service); }
window_cpu() { echo "nodectld $(($(cpu_ms nodectld.service) - w_nodectld)) ms, journald $(($(cpu_ms systemd-journald.service) - w_journald)) ms"; }
# glue_round: Typhoon's flow on a fresh bundle; sets glue_a, glue_b (us after the rename) and
# glue_failed.
glue_round() {
  local t0 t_layout since
  glue_a= glue_b= glue_failed=
  round_t=$SECONDS
  round_reset
  systemctl stop nodectld.service
  since=$(date '+%Y-%m-%d %H:%M:%S')
  # (Typhoon's kubelet.service ExecStartPre)
  mkdir -p /etc/kubernetes/manifests
  systemctl start kubelet.service
  kubelet_watching "$since" || { fail "glue round: the kubelet stand-in watches its staticPodPath"; return 1; }
  mkdir -p /root/glue && make_bundle /root/glue/.assets
  sync
  window_start
  t0=$(/test/rename-now /root/glue/.assets /root/glue/assets)
  [[ $t0 =~ ^[0-9]+$ ]] || { fail "the glue's bundle renamed in (rename-now: '$t0')"; return 1; }
  (cd /root/glue && /root/layout)
  # (read in this shell: $(us) would fork a subshell first, a few ms under TCG on its side)
  t_layout=${EPOCHREALTIME/./}
  glue_a=$((t_layout - t0))
  await_pods || { fail "glue round: the three static pods read their files within 90 s"; return 1; }
  pods_all_read "$t0"; glue_b=$pods_b glue_failed=$failed_reads
  echo "  | (glue round: reset ${reset_s} s, $((SECONDS - round_t)) s in all; CPU from the rename to the pods' reads: $(window_cpu))"
}
# nodectld_round NAME: the same bundle renamed into nodectld's inbox, kubelet started by
# nodectld before it; sets n_a, n_b (us after the rename), n_failed, n_t0 and n_since.
nodectld_round() {
  local name=$1 since opened placed
  n_a= n_b= n_failed=
  round_t=$SECONDS
  round_reset
  since=$(date '+%Y-%m-%d %H:%M:%S')
  check "$name: nodectld starts" systemctl start nodectld.service
  check "$name: it waits for the bundle" wait_until 20 sh -c '[ "$(nodectl status --json | jq -r ".steps[] | select(.id==\"secrets\") | .state")" = waiting ]'
  check "$name: kubelet runs before the bundle, as Typhoon's does" wait_until 30 sh -c '[ "$(systemctl is-active kubelet.service)" = active ]'
  kubelet_watching "$since" || { fail "$name: the kubelet stand-in watches its staticPodPath"; return 1; }
  # As on a real controller, where Terraform copies the bundle in well after the first boot:
  # the labels its pass needs are looked up once the waiting pass is done, and the directories
  # every bundle fills are made (empty) right after, with their final owner, mode and label.
  check "$name: it looks up the bundle's default labels while waiting" wait_until 20 sh -c "journalctl -u nodectld.service --since '$since' --no-pager | grep -q 'looked up ahead'"
  check "$name: the directories a bundle fills are made while it waits" wait_until 10 test -d /etc/ssl/etcd/etcd
  expect "$name: /etc/ssl/etcd/etcd: owner and mode" "$(stat -c '%U %a' /etc/ssl/etcd/etcd)" "etcd 700"
  # (matchpathcon, as secrets.sh R2: restorecon would run in setfiles_t, denied the suite's log)
  expect "$name: the directories made ahead carry the policy's labels" "$(for f in /etc/ssl/etcd /etc/ssl/etcd/etcd \
    /opt/bootstrap/assets /opt/bootstrap/assets/manifests; do [ "$(stat -c %C "$f")" = "$(matchpathcon -n "$f")" ] || echo "$(stat -c %C "$f") $f"; done)" ""
  expect "$name: they are empty" "$(find /etc/kubernetes/pki /etc/ssl/etcd /opt/bootstrap -type f | wc -l)" 0
  mkdir -p $INBOX && make_bundle $INBOX/.assets
  sync
  n_since=$(date '+%Y-%m-%d %H:%M:%S')
  window_start
  n_t0=$(/test/rename-now $INBOX/.assets $INBOX/assets)
  [[ $n_t0 =~ ^[0-9]+$ ]] || { fail "$name: the bundle renamed in (rename-now: '$n_t0')"; return 1; }
  await_pods || { fail "$name: the three static pods read their files within 90 s"; return 1; }
  pods_all_read "$n_t0"; n_b=$pods_b n_failed=$failed_reads
  n_cpu=$(window_cpu)
  # (a): the bundle's pass logs "placed N files" once the last rename is done (journald's
  # receive time, in us).
  # (the time nodectld logged it, not when journald received it: journal_us)
  placed=$(journal_us "$n_since" | grep -m1 'placed 22 files from' | cut -f1)
  [[ $placed =~ ^[0-9]+$ ]] || { fail "$name: nodectld logged the bundle's placement"; return 1; }
  n_a=$((placed - n_t0))
  expect "$name: nodectld placed 22 files" "$(find /etc/kubernetes/pki /etc/kubernetes/manifests /etc/ssl/etcd /opt/bootstrap/assets -type f | wc -l)" 22
  opened=$(journalctl -u nodectld.service --since "$n_since" --no-pager -o short-unix | awk -v t0="$n_t0" '
    { t = $1; sub(/\./, "", t); if (substr(t, 1, 16) + 0 < t0 + 0) next }
    /file_contexts handle opened/ { n++ }
    /pass finished/ { done = 1; exit }
    END { print (done ? n + 0 : "no-pass-line") }')
  expect "$name: the bundle's pass opened no file_contexts handle" "$opened" 0
  echo "  | ($name: reset ${reset_s} s, $((SECONDS - round_t)) s in all; CPU from the rename to the pods' reads: $n_cpu)"
}
# (the kubelet unit nodectld rendered in B1, with the stand-in image: the same on both sides)
G_A=() G_B=() G_F=() N_A=() N_B=() N_F=()
for round in $(seq $ROUNDS); do
  glue_round
  check "B2 round $round: the glue placed 22 files" test "$(find /etc/kubernetes/pki /etc/kubernetes/manifests /etc/ssl/etcd /opt/bootstrap/assets -type f | wc -l)" = 22
  G_A+=("$glue_a") G_B+=("$glue_b") G_F+=("$glue_failed")
  nodectld_round "B3 round $round"
  N_A+=("$n_a") N_B+=("$n_b") N_F+=("$n_failed")
  [ "$round" = 1 ] && { echo "  | nodectld's journal from the rename (ms):"; journal_from "$n_since" "$n_t0"; }
done
# The last round's node stays (nodectld converged, kubelet standalone, the API away: B4, B5);
# its static pods go (a manifest removed: the stand-in stops its pod, as kubelet does), so their
# reads every second do not run beside the figures below.
rm -f /etc/kubernetes/manifests/*.yaml
check "B3 the static pods stop when their manifests go" wait_until 60 sh -c '[ -z "$(podman ps --filter name=^k8s_ --format "{{.Names}}")" ]'
# A round whose times could not be read is no figure.
expect "B3 every round's times are after its arrival" "$(for v in "${G_A[@]}" "${G_B[@]}" "${N_A[@]}" "${N_B[@]}"; do
  [[ $v =~ ^[0-9]+$ ]] && [ "$v" -gt 0 ] || echo "$v"; done)" ""
median() { printf '%s\n' "$@" | sort -n | sed -n "$((($# + 1) / 2))p"; }
# unrounded: the ratio as computed, 6 significant digits (judged as is, never rounded first)
uratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.6g", (b > 0 ? a / b : 0) }'; }
le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a <= b) }'; }
for i in $(seq 0 $((ROUNDS - 1))); do
  echo "  | round $((i + 1)): (a) files placed: glue $(ms "${G_A[i]}") ms, nodectld $(ms "${N_A[i]}") ms = $(uratio "${N_A[i]}" "${G_A[i]}")x;" \
    "(b) pods read their files: glue $(ms "${G_B[i]}") ms, nodectld $(ms "${N_B[i]}") ms = $(uratio "${N_B[i]}" "${G_B[i]}")x;" \
    "failed reads: glue ${G_F[i]}, nodectld ${N_F[i]}"
done
ga=$(median "${G_A[@]}") na=$(median "${N_A[@]}") gb=$(median "${G_B[@]}") nb=$(median "${N_B[@]}")
gr=$(median $(for i in $(seq 0 $((ROUNDS - 1))); do echo $((G_B[i] - G_A[i])); done))
nr=$(median $(for i in $(seq 0 $((ROUNDS - 1))); do echo $((N_B[i] - N_A[i])); done))
gf=$(printf '%s\n' "${G_F[@]}" | awk '{n += $1} END {print n + 0}') nf=$(printf '%s\n' "${N_F[@]}" | awk '{n += $1} END {print n + 0}')
ra=$(uratio "$na" "$ga") rb=$(uratio "$nb" "$gb")
# spread: the lowest and highest of the rounds' own ratios
spread() { # spread NODECTLD_ARRAY_NAME GLUE_ARRAY_NAME
  local -n nn=$1 gg=$2
  local i
  for i in $(seq 0 $((ROUNDS - 1))); do uratio "${nn[i]}" "${gg[i]}"; echo; done | sort -g | sed -n '1p;$p' | paste -sd- -
}
sa=$(spread N_A G_A) sb=$(spread N_B G_B)
echo "  | (a) arrival -> every file placed with its final owner, mode and label (median of $ROUNDS): glue $(ms $ga) ms, nodectld $(ms $na) ms = ${ra}x (target <= 0.2x)"
echo "  | (b) arrival -> every static pod running, its files read (median of $ROUNDS): glue $(ms $gb) ms, nodectld $(ms $nb) ms = ${rb}x (target <= 1x)"
echo "  |     of which the pods' own start (b - a, median): glue $(ms $gr) ms, nodectld $(ms $nr) ms"
echo "  | failed reads (a pod reading a file not yet in place or labeled): glue $gf, nodectld $nf in $ROUNDS rounds"
met() { le "$1" "$2" && echo met || echo "not met"; }
row "(a) arrival -> all 22 files placed, final owner, mode, label (median of $ROUNDS) | nodectld $(ms $na) ms | glue's layout $(ms $ga) ms | ${ra}x (rounds ${sa}x), target <= 0.2x: $(met "$ra" 0.2)"
row "(b) arrival -> 3 static pods running, files read (median of $ROUNDS) | nodectld $(ms $nb) ms (pods' own start $(ms $nr) ms) | glue $(ms $gb) ms (pods' own start $(ms $gr) ms) | ${rb}x (rounds ${sb}x), target <= 1x: $(met "$rb" 1)"
row "failed reads before the files were in place | nodectld $nf | glue $gf | target 0"
# (a) and (b) are figures, judged met or not in the table (docs/testing.md): medians of (a)
# 0.19-0.34x in five boots move with the boot's speed, the glue's forks most.
expect "B3 no static pod read a file of nodectld's before it was in place with its label" "$nf" 0

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

echo "## B5: idle in every state"
# (the node's certificate request retries by itself while the API is away: no pass for it; one
# is allowed where the failure may change, say from a refused connection to a timeout)
idle "controller converged, kubelet standalone, API away" 1
# A refused bundle (a record escaping the bundle): the secrets step fails and stays failed.
# The node's certificate request goes on backing off meanwhile (a bad bundle in the inbox does
# not hold back the node's credentials: bootstrap-kubeconfig only runs after secrets).
printf '##### tls/k8s/extra.crt\n%s\n##### ../../etc/cron.d/x\nx\n' "$CERT" >$INBOX/.bad && mv $INBOX/.bad $INBOX/bad
check "B5 the bad bundle is refused" wait_until 20 sh -c \
  'nodectl status --json | jq -e ".steps[] | select(.id==\"secrets\") | .error | test(\"escapes the bundle\")"'
idle "a refused bundle (secrets failed)" 1
rm -f $INBOX/bad

# A worker: the bootstrap kubeconfig names the double, which is away, then asks, then denies.
clean_node
rm -rf /var/lib/kubelet /var/lib/nodectl
install -D -m 0644 /test/worker.toml /etc/nodectl/config.d/10-node.toml
check "nodectld starts as a worker" systemctl start nodectld.service
check "B5 the worker waits for the API" wait_until 30 sh -c \
  'nodectl status --json | jq -e ".steps[] | select(.id==\"kubelet-credentials\") | .state == \"waiting\""'
idle "worker waiting for the API (unreachable)" 1
# The API away for 5 minutes: the attempts, spaced by the capped backoff (64 s, jitter 0.8-1.2:
# at least 51 s apart, so a 30 s window holds one at most), are the request's own connections,
# no pass (target: <= 5 CPU ticks and <= 1 pass in 30 s; guard 5 + 2 ticks, the idling noise
# of a slow boot).
started=$(unit_us nodectld.service ActiveEnterTimestamp)
# B6 runs in the wait (3-4 minutes of it; its tree is in /var/tmp, which nodectld does not watch:
# nodectld's own CPU ticks, the figure here, are its own whatever else runs, and the window
# below starts after B6 ends).
echo "## B6: relabel of $RELABEL_FILES files (while the worker waits for the API)"
/test/relabel-bench "$RELABEL_FILES" >/tmp/relabel.out
rc=$?
grep -v '^| ' /tmp/relabel.out
grep '^| relabel ' /tmp/relabel.out >>$ROWS
check "B6 relabel-bench ran, every check's counts as expected (its figures are the table's)" test "$rc" = 0
expect "B6 three relabel figures" "$(grep -c '^| relabel ' /tmp/relabel.out)" 3

echo "## B5: idle in every state (continued)"
if [ "$BENCH_MODE" = full ]; then
  wait_s=$(((started + 295000000 - $(us)) / 1000000))
  [ "$wait_s" -gt 0 ] && idle_wait "$wait_s"
  idle "worker waiting for the API, 5 min in" 1 7
else
  echo "  | (quick mode: the state 5 minutes in is not measured)"
fi
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
# memory.current: no state holds more than 2 MiB above the converged one (a figure).
conv=$(awk '/worker converged/ {print $1}' $MEM_ROWS)
while read -r cur name; do
  echo "  | memory.current '$name': $cur kB, $((cur - conv)) kB against the converged worker's ($([ "$cur" -le $((conv + 2048)) ] && echo met || echo "not met"): target <= converged + 2 MiB)"
done <$MEM_ROWS
stop_apiserver_double
clean_node
rm -f /etc/systemd/system/nodectld.service.d/50-bench.conf && systemctl daemon-reload

# The table parses: every row four cells, a verdict in each figure's, one row per figure.
expect "the table's rows have four cells each" "$(awk -F'|' 'NF != 6' $ROWS)" ""
expect "every figure's row says met or not met (the failed reads' row: its target)" \
  "$(grep -v -e ': met |$' -e ': not met |$' -e '| target 0 |$' $ROWS)" ""
expect "the table has its rows" "$(wc -l <$ROWS)" $([ "$BENCH_MODE" = full ] && echo 16 || echo 15)
echo "## the table (docs/testing.md; bench mode: $BENCH_MODE)"
echo "| measured | nodectld | baseline | ratio / target |"
echo "|---|---|---|---|"
cat $ROWS
summary bench
