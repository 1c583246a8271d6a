#!/bin/bash
# Tier 2, inside systemd-nspawn (real systemd PID 1 and system bus; no SELinux): the crash
# campaign on real systemd (issue 17). agent/tests/crash_campaign.rs's host test, run here on
# this container's root: a controller's bundle placed by `nodectl apply` (with crash points),
# killed at every crash point -- every file effect, the credential store, the CSR, and each
# systemd call (EnableUnitFiles, StartUnit, ...) done over the bus -- and at random instants,
# then re-run; kubelet is a stand-in unit whose starts systemd counts (its ExecStart).
# /test holds: check.sh, crash_campaign (the test binary, feature failpoints),
# nodectl-failpoints (nodectl with crash points); optionally crash.env, e.g. CRASH_TRIALS=5000
# for a longer run (default 500 trials in all).
. /test/check.sh
[ -f /test/crash.env ] && . /test/crash.env && export CRASH_TRIALS
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
systemctl daemon-reload
expect "kubelet.service not installed yet" "$(systemctl show -p LoadState --value kubelet.service)" not-found

echo "## the campaign (every crash point, then random SIGKILLs)"
start=$SECONDS
out=$(NODECTL_CRASH_HOST=1 NODECTL_BIN=/test/nodectl-failpoints RUST_BACKTRACE=1 \
  /test/crash_campaign --ignored --nocapture --test-threads=1 2>&1)
rc=$?
# the summary lines and each trial that did not converge (with the first line of its output)
printf '%s\n' "$out" | grep -E 'reference pass|hits per|trials at crash points|^trials [0-9]|^test result|not converged|^  [a-z].*: ' |
  cut -c1-400 | sed 's/^/  | /'
[ $rc = 0 ] || printf '%s\n' "$out" | grep -v '^$' | tail -30 | sed 's/^/  | /'
echo "  | took $((SECONDS - start)) s"
[ $rc = 0 ] && pass "crash campaign on real systemd" || fail "crash campaign on real systemd (exit $rc)"
line=$(grep -o '^trials [0-9]*, converged [0-9]*, partial [0-9]*, mislabeled [0-9]*, wrong mode [0-9]*' <<<"$out")
n=$(awk '{print $2}' <<<"${line//,/}")
expect "it printed its tally with at least 500 trials" "$([ "${n:-0}" -ge 500 ] && echo yes || echo "no: '$line'")" yes
check "libtest ran the host campaign and it passed" grep -q "^test result: ok. 1 passed" <<<"$out"
summary crash-nspawn
