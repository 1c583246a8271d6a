#!/bin/bash
# reboot.sh: tier 3, Flatcar's reboots for updates through one real reboot of the VM (issue 63):
# the update_engine follower on the real system bus, the real systemd-logind rebooting the machine,
# and after the new boot (a new boot id, as no nspawn container can have) the slot given back. A VM
# session of its own that reboots (run-in-vm.sh with VM_REBOOT=1: the disk's overlay lives as long
# as QEMU); every boot runs this script again, its log and boot count on the share (/test/reboot),
# the last boot prints the log whole (the runner keeps only the last boot's output).
#   boot 1  U1 a worker: nodectld (debug build, its test timers 20x shorter; the shipped unit) with
#              reboot.strategy = "update-engine"; the API double a unit of its own (its objects on
#              the VM's disk, --state, so the cluster outlives the reboot); kubelet a stand-in
#              command; update_engine the stand-in (tests/testkit fake-update-engine) as
#              update-engine.service (Type=dbus) with its bus policy as Flatcar's; all enabled;
#              the journal made persistent
#           U2 nothing while update_engine is idle; `AttemptUpdate` (update_engine_client
#              -check_for_update): UPDATE_AVAILABLE .. UPDATED_NEED_REBOOT, then nodectld takes
#              the slot, drains, cordons and asks the real logind to reboot: the VM reboots
#   boot 2  U3 the previous boot's journal: nodectld's grant and logind's reboot, in that order,
#              after update_engine's NEED_REBOOT
#           U4 a new boot id; the Node not Ready yet (the double started so by a drop-in written
#              before the reboot): the slot still held with boot 1's id, the Node cordoned,
#              nodectld waiting; the Node Ready: the slot given back, the Node uncordoned, the
#              released MESSAGE_ID; update_engine idle in the new boot; no second reboot
. /test/check.sh
. /test/lib.sh
export NO_COLOR=1
R=/test/reboot # (the share: the log, the boot count, boot 1's snapshots)
D=/var/lib/nodectl-test-reboot # (the VM's disk: the double's objects and CA key)
mkdir -p "$R"
exec 3>&1 >>"$R/log" 2>&1
boot_no=$(($(cat "$R/boots" 2>/dev/null || echo 0) + 1))
echo "$boot_no" >"$R/boots"
echo "######## boot $boot_no (uptime $(cut -d' ' -f1 /proc/uptime) s, boot id $(cat /proc/sys/kernel/random/boot_id))"
finish() { cat "$R/log" >&3; exit "$1"; }

boot_1() {
  echo "## U1 a Flatcar-shaped worker, every part enabled for the next boot"
  expect "SELinux enforcing" "$(getenforce)" Enforcing
  cat /proc/sys/kernel/random/boot_id >"$R/boot1-id"
  mkdir -p /var/log/journal && systemd-tmpfiles --create --prefix /var/log/journal && journalctl --flush
  rm -rf "$D" /etc/kubernetes /var/lib/nodectl /var/lib/kubelet/pki /var/lib/kubelet/kubeconfig
  mkdir -p "$D"
  put_bin nodectl-apiserver-double /usr/local/bin/nodectl-apiserver-double
  put_bin fake-update-engine /usr/local/bin/fake-update-engine
  cat >/etc/systemd/system/apiserver-double.service <<UNIT
[Unit]
Description=the kube-apiserver double (tests/apiserver-double), its objects kept across reboots
Before=nodectld.service
[Service]
ExecStart=/usr/local/bin/nodectl-apiserver-double --listen 127.0.0.1:6443 --token abcdef.0123456789abcdef --node worker-1 --ca-key $D/ca.key --state $D/double.json --write-bootstrap-kubeconfig $D/bootstrap-kubeconfig
[Install]
WantedBy=multi-user.target
UNIT
  # update_engine as Flatcar runs it (update-engine.service, Type=dbus) and its bus policy
  # (tests/lib/com.coreos.update1.conf, flatcar/update_engine's); its update checks every 2 s
  cat >/etc/systemd/system/update-engine.service <<'UNIT'
[Unit]
Description=update_engine stand-in (tests/testkit fake-update-engine)
[Service]
Type=dbus
BusName=com.coreos.update1
ExecStart=/usr/local/bin/fake-update-engine 3975.2.1 2000
[Install]
WantedBy=multi-user.target
UNIT
  install -m 0644 /test/com.coreos.update1.conf /etc/dbus-1/system.d/com.coreos.update1.conf
  restorecon -R /etc/systemd/system /etc/dbus-1/system.d "$D" >/dev/null 2>&1
  { cat /test/worker.toml; printf '\n[reboot]\nstrategy = "update-engine"\n'; } >/tmp/reboot-worker.toml
  install_nodectld /tmp/reboot-worker.toml
  mkdir -p /etc/systemd/system/nodectld.service.d
  printf '[Service]\nEnvironment=NODECTL_TEST_TIMERS=scale=1/20\n' >/etc/systemd/system/nodectld.service.d/50-test-timers.conf
  kubelet_standin
  setup "the double, update_engine and nodectld enabled for the next boot" \
    systemctl enable apiserver-double.service update-engine.service nodectld.service
  setup "the double listens" sh -c "systemctl start apiserver-double.service && for i in \$(seq 100); do [ -s $D/bootstrap-kubeconfig ] && exit 0; sleep 0.1; done; exit 1"
  install -D -m 0600 "$D/bootstrap-kubeconfig" /etc/kubernetes/kubeconfig
  setup "update_engine starts (it owns com.coreos.update1)" systemctl start update-engine.service
  check "nodectld starts" systemctl start nodectld.service
  check "the node converges: its credentials, kubelet active" wait_until 90 sh -c \
    'nodectl status --json | jq -e ".credentials.subject == \"system:node:worker-1\" and .kubelet.active == \"active\"" >/dev/null'
  check "nodectld follows update_engine on the system bus (its status asked: idle)" wait_until 30 sh -c \
    'nodectl status --json | jq -e ".reboot.endpoint == \"update_engine (D-Bus)\"" >/dev/null && journalctl -u nodectld.service -o cat | grep -q "update_engine.s status: UPDATE_STATUS_IDLE"'

  echo "## U2 idle, then an update: the slot, the drain, the real logind"
  sleep 3
  expect "nothing while update_engine is idle (state)" "$(nodectl status --json | jq -r .reboot.state)" idle
  expect "no slot held" "$(jq -r '[.leases[]?[2].metadata.annotations // {} | keys[] | select(endswith(".reboot-holders.nodectl.io/slot"))] | length' "$D/double.json")" 0
  # In the next boot the double starts with worker-1 not Ready (as kubelet reports a node before
  # its first heartbeat after a reboot), so the suite reads the node as it came back (the slot
  # still held, the Node still cordoned, nodectld waiting) before the Node is Ready. A drop-in
  # not reloaded now: this boot's double keeps running as it is.
  mkdir -p /etc/systemd/system/apiserver-double.service.d
  printf '[Service]\nExecStart=\nExecStart=/usr/local/bin/nodectl-apiserver-double --listen 127.0.0.1:6443 --token abcdef.0123456789abcdef --not-ready worker-1 --ca-key %s/ca.key --state %s/double.json --write-bootstrap-kubeconfig %s/bootstrap-kubeconfig\n' \
    "$D" "$D" "$D" >/etc/systemd/system/apiserver-double.service.d/50-not-ready-at-boot.conf
  check "an update is attempted (AttemptUpdate, as update_engine_client -check_for_update)" \
    busctl call com.coreos.update1 /com/coreos/update1 com.coreos.update1.Manager AttemptUpdate
  echo "  | waiting for the reboot (logind stops this script with the machine)"
  sleep 240
  fail "U2 the machine did not reboot within 240 s"
  nodectl status --json | jq -c .reboot | sed 's/^/  | /'
  journalctl -u nodectld.service -o cat -n 20 | sed 's/^/  | nodectld: /'
  summary reboot
  finish 1
}

boot_2() {
  echo "## U3 what the last boot did before it went down"
  local b1 need grant down
  b1=$(cat "$R/boot1-id")
  check "the previous boot's journal was kept" sh -c "journalctl --list-boots --no-pager | grep -q ${b1//-/}"
  # (the journal's realtime clock across the two, microseconds; NEED_REBOOT as the stand-in logs it)
  need=$(journalctl -b -1 -u update-engine.service -o json | jq -s -r 'map(select(.MESSAGE == "fake-update-engine: UPDATE_STATUS_UPDATED_NEED_REBOOT 0")) | .[0].__REALTIME_TIMESTAMP // "none"')
  grant=$(journalctl -b -1 -u nodectld.service -o json | jq -s -r 'map(select(.MESSAGE | tostring | test("rebooting through logind$"))) | .[0].__REALTIME_TIMESTAMP // "none"')
  down=$(journalctl -b -1 -u systemd-logind.service -o json | jq -s -r 'map(select(.MESSAGE | tostring | test("System is rebooting"))) | .[0].__REALTIME_TIMESTAMP // "none"')
  echo "  | boot 1: update_engine NEED_REBOOT at $need, nodectld's grant at $grant, logind 'System is rebooting' at $down (us)"
  journalctl -b -1 -u nodectld.service -o cat | grep -E 'update_engine|slot|drain|granted|logind' | tail -8 | sed 's/^/  | nodectld: /'
  check "nodectld asked logind after update_engine said NEED_REBOOT, and logind rebooted the machine after that" \
    sh -c "[ '$need' != none ] && [ '$grant' != none ] && [ '$down' != none ] && [ $need -le $grant ] && [ $grant -le $down ]"
  echo "## U4 the new boot: the slot kept until the Node is Ready, then given back"
  check "a new boot id" test "$(cat /proc/sys/kernel/random/boot_id)" != "$b1"
  check "nodectld started at boot, the double and update_engine too" sh -c \
    '[ "$(systemctl is-active nodectld.service apiserver-double.service update-engine.service | sort -u)" = active ]'
  check "nodectld waits for the Node to be Ready before it gives the slot back" wait_until 60 sh -c \
    'nodectl status --json | jq -e ".reboot.state == \"waiting-for-ready\" and .reboot.holders[0].node == \"worker-1\"" >/dev/null'
  nodectl status --json | jq -c '.reboot | {state, detail}' | sed 's/^/  | /'
  check "the slot still worker-1's, taken in the last boot (its boot id)" jq -e --arg b "$b1" \
    '[.leases[][2].metadata.annotations["worker-1.reboot-holders.nodectl.io/slot"] // empty | fromjson | select(.boot == $b)] | length == 1' "$D/double.json"
  check "and the Node still cordoned" jq -e '.nodes["worker-1"].spec.unschedulable == true' "$D/double.json"
  # the Node Ready: the double again, as it started in boot 1 (its objects from its state file)
  rm /etc/systemd/system/apiserver-double.service.d/50-not-ready-at-boot.conf
  systemctl daemon-reload
  setup "the double again, worker-1 Ready" systemctl restart apiserver-double.service
  check "the slot given back (the Lease has no entry of worker-1's)" wait_until 90 sh -c \
    "jq -e '[.leases[][2].metadata.annotations // {} | keys[] | select(startswith(\"worker-1.\"))] | length == 0' $D/double.json"
  check "the Node schedulable again" wait_until 30 jq -e '.nodes["worker-1"].spec.unschedulable != true' "$D/double.json"
  check "nodectld says so, with the released MESSAGE_ID" sh -c \
    'journalctl -b -u nodectld.service -o json MESSAGE_ID=8b3c4d5e6f7041829304b5c6d7e8f9a2 | jq -e -s "map(select(.MESSAGE | startswith(\"after the boot\"))) | length > 0" >/dev/null'
  check "its status: idle, no holder" wait_until 30 sh -c \
    'nodectl status --json | jq -e ".reboot.state == \"idle\" and (.reboot.holders | length) == 0" >/dev/null'
  check "update_engine idle in the new boot (asked by nodectld)" sh -c \
    'journalctl -b -u nodectld.service -o cat | grep -q "update_engine.s status: UPDATE_STATUS_IDLE"'
  sleep 5
  expect "no second reboot: still this boot" "$(cat "$R/boots")" 2
  systemctl disable --now nodectld.service update-engine.service apiserver-double.service >/dev/null 2>&1
  summary reboot
  finish $?
}

case $boot_no in
  1) boot_1 ;;
  2) boot_2 ;;
  *) fail "boot $boot_no: the machine rebooted again"; summary reboot; finish 1 ;;
esac
