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
#              after update_engine's NEED_REBOOT; the Lease held with boot 1's id and the Node
#              cordoned when the machine went down (snapshots taken every 0.2 s)
#           U4 a new boot id; nodectld gives the slot back once kubelet is active and the Node
#              Ready, uncordons; update_engine idle in the new boot; no second reboot
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
  # (flatcar/update_engine's com.coreos.update1.conf); its update checks every 2 s
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
  cat >/etc/dbus-1/system.d/com.coreos.update1.conf <<'POLICY'
<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-BUS Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <policy user="root">
    <allow own="com.coreos.update1"/>
    <allow send_destination="com.coreos.update1"/>
  </policy>
  <policy context="default">
    <deny send_destination="com.coreos.update1"/>
  </policy>
</busconfig>
POLICY
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
  # boot 1's last word, every 0.2 s until the machine goes down: the double's objects and
  # nodectld's status (the share outlives the reboot)
  ( while :; do
      cp "$D/double.json" "$R/double-boot1.json.new" 2>/dev/null && mv "$R/double-boot1.json.new" "$R/double-boot1.json"
      # (the daemon's own status while it reboots: once the shutdown stops nodectld, status is
      # read offline and has no reboot state)
      nodectl status --json 2>/dev/null | jq -e '.source == "daemon" and .reboot.state == "rebooting"' >/dev/null 2>&1 \
        && nodectl status --json >"$R/status-boot1.json.new" 2>/dev/null && mv "$R/status-boot1.json.new" "$R/status-boot1.json"
      sleep 0.2
    done ) &
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
  check "when it went down the slot was worker-1's, with boot 1's id" jq -e --arg b "$b1" \
    '[.leases[][2].metadata.annotations["worker-1.reboot-holders.nodectl.io/slot"] // empty | fromjson | select(.boot == $b)] | length == 1' "$R/double-boot1.json"
  check "and the Node cordoned" jq -e '.nodes["worker-1"].spec.unschedulable == true' "$R/double-boot1.json"
  check "nodectld's status said rebooting, worker-1 the holder, drained" jq -e \
    '.reboot.state == "rebooting" and .reboot.holders[0].node == "worker-1" and (.reboot.detail | startswith("drained"))' "$R/status-boot1.json"

  echo "## U4 the new boot: the slot back once kubelet is active and the Node Ready"
  check "a new boot id" test "$(cat /proc/sys/kernel/random/boot_id)" != "$b1"
  check "nodectld started at boot, the double and update_engine too" sh -c \
    '[ "$(systemctl is-active nodectld.service apiserver-double.service update-engine.service | sort -u)" = active ]'
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
