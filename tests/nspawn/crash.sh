#!/bin/bash
# Tier 2, inside systemd-nspawn (real systemd PID 1 and system bus; no SELinux): the crash
# campaign on real systemd (issue 17). agent/tests/crash_campaign.rs's host test, run here on
# this container's root: a controller's bundle placed by `nodectl apply` (with crash points),
# killed at every crash point -- every file effect, the credential store, the CSR, and each
# systemd call (EnableUnitFiles, StartUnit, ...) done over the bus -- and at random instants,
# then re-run; kubelet is a stand-in unit whose starts systemd counts (its ExecStart). Then the
# daemon's campaign: nodectld.service (with crash points) aborted at each crash point of the pass
# it runs on a fresh controller, then started again without them.
# /test holds: check.sh, crash_campaign (the test binary, feature failpoints),
# nodectl-failpoints and nodectld-failpoints (with crash points), nodectld.service,
# org.nodectl.Agent1.conf; optionally crash.env: CRASH_CAMPAIGN=full for every hit of every
# crash point and 500 trials (CRASH_TRIALS=5000 for more), sample (the default) for three hits
# of each point and 20 random kills (agent/tests/crash_campaign.rs, Extent).
. /test/check.sh
[ -f /test/crash.env ] && . /test/crash.env
export CRASH_TRIALS CRASH_CAMPAIGN=${CRASH_CAMPAIGN:-sample}
export NO_COLOR=1

echo "## a fresh controller: its config, the etcd user, DNS; kubelet a counting stand-in"
install -D -m 0644 /dev/stdin /etc/nodectl/config.d/10-node.toml <<<$'[node]\nrole = "controller"\nname = "controller-0"'
id etcd >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin etcd
# node-identity waits for a resolver; --private-network has none
echo "nameserver 10.0.0.2" >/etc/resolv.conf
mkdir -p /etc/systemd/system/kubelet.service.d
# Every start of kubelet appends a line, then it runs until stopped. The line is written by
# ExecStartPre (done before the start job is: for Type=simple the job ends at the main
# process's fork, before its shell would have written anything).
printf '[Service]\nExecStartPre=\nExecStartPre=/bin/sh -c %s\nExecStart=\nExecStart=/bin/sleep infinity\nExecStop=\n' \
  "'echo start >>/run/kubelet-standin.starts'" \
  >/etc/systemd/system/kubelet.service.d/90-test-standin.conf
# nodectld as packaging/ ships it, with crash points; not started (the daemon's campaign starts it)
install -m 0755 /test/nodectld-failpoints /usr/local/bin/nodectld
install -m 0755 /test/nodectl-failpoints /usr/local/bin/nodectl
install -m 0644 /test/nodectld.service /etc/systemd/system/nodectld.service
install -D -m 0644 /test/org.nodectl.Agent1.conf /etc/dbus-1/system.d/org.nodectl.Agent1.conf
busctl call org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus ReloadConfig
systemctl daemon-reload
expect "kubelet.service not installed yet" "$(systemctl show -p LoadState --value kubelet.service)" not-found

# campaign NAME TEST MIN: one of the binary's host campaigns; its tally line must show >= MIN trials
campaign() {
  local name=$1 test=$2 min=$3 out rc line n
  echo "## $name"
  start=$SECONDS
  out=$(NODECTL_TEST_SEED=$(cat /test/seed 2>/dev/null) NODECTL_CRASH_HOST=1 NODECTL_BIN=/test/nodectl-failpoints RUST_BACKTRACE=1 \
    /test/crash_campaign --ignored --exact "$test" --nocapture --test-threads=1 2>&1)
  rc=$?
  # the summary lines and each trial that did not converge (with the first line of its output)
  printf '%s\n' "$out" | grep -E 'crash campaign: seed|reference pass|hits per|trials at crash points|^trials [0-9]|^test result|not converged|^  [a-z].*: ' |
    cut -c1-400 | sed 's/^/  | /'
  [ $rc = 0 ] || printf '%s\n' "$out" | grep -v '^$' | tail -30 | sed 's/^/  | /'
  echo "  | took $((SECONDS - start)) s"
  [ $rc = 0 ] && pass "$name" || fail "$name (exit $rc)"
  line=$(grep -o '^trials [0-9]*, converged [0-9]*, partial [0-9]*, mislabeled [0-9]*, wrong mode [0-9]*, wrong owner [0-9]*' <<<"$out")
  n=$(awk '{print $2}' <<<"${line//,/}")
  expect "$name: it printed its tally with at least $min trials" "$([ "${n:-0}" -ge "$min" ] && echo yes || echo "no: '$line'")" yes
  check "$name: libtest ran it and it passed" grep -q "^test result: ok. 1 passed" <<<"$out"
}
# (the minimums: the test's own, MIN_SAMPLED_TRIALS and MIN_TRIALS in crash_campaign.rs)
if [ "$CRASH_CAMPAIGN" = full ]; then min_apply=500 min_daemon=60; else min_apply=50 min_daemon=25; fi
echo "## campaigns: $CRASH_CAMPAIGN"
campaign "crash campaign on real systemd (nodectl apply: every crash point, then random SIGKILLs)" \
  on_real_systemd_a_pass_killed_anywhere_leaves_nothing_partial_and_the_next_converges $min_apply
campaign "the daemon's crash campaign (nodectld.service aborted at each crash point)" \
  on_real_systemd_the_daemon_killed_at_each_crash_point_leaves_nothing_partial $min_daemon

echo "## a pass blocked in a system call: systemd's watchdog aborts nodectld and starts it again"
# Issue 51, 3: a pass that never returns (a read of a FIFO did) hung nodectld for good. The
# keep-alive comes from the thread passes run on, so a blocked pass stops it. The block: a
# crash point made to sleep (fail's sleep action), reached only when a file's mode is fixed in
# place, which the start pass of this converged node does not do. A 2 s watchdog for the test.
wd=/run/systemd/system/nodectld.service.d/60-test-watchdog.conf
mkdir -p "${wd%/*}"
printf '[Service]\nWatchdogSec=2s\nLimitCORE=0\nEnvironment=FAILPOINTS=fsio::fixed=sleep(600000)\n' >"$wd"
systemctl daemon-reload
systemctl reset-failed nodectld.service 2>/dev/null
check "nodectld starts with a 2 s watchdog" systemctl start nodectld.service
restarts() { systemctl show -p NRestarts --value nodectld.service; }
sleep 5
expect "kept alive while idle: no restart over 5 s, 2.5 watchdog periods" "$(systemctl is-active nodectld.service) $(restarts)" "active 0"
chmod 0600 /etc/sysctl.d/50-nodectl.conf
systemctl kill -s HUP nodectld.service
check "a pass blocked (fixing a mode, asleep at the crash point): the watchdog aborts nodectld" \
  wait_until 30 sh -c '[ "$(systemctl show -p Result --value nodectld.service)" = watchdog ]'
# (before the restart, RestartSec=5s later: its first pass would block too, before READY,
# where no watchdog runs)
chmod 0644 /etc/sysctl.d/50-nodectl.conf
check "systemd says so" sh -c "journalctl -u nodectld.service --no-pager -o cat | grep -q 'Watchdog timeout'"
check "and starts it again (Restart=on-failure)" \
  wait_until 30 sh -c '[ "$(systemctl is-active nodectld.service)" = active ] && [ "$(systemctl show -p NRestarts --value nodectld.service)" = 1 ]'
systemctl stop nodectld.service
rm -f "$wd"
systemctl daemon-reload

summary crash-nspawn
