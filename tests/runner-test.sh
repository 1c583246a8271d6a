#!/bin/bash
# runner-test.sh: the README's test command fails when a test does not build (issue 39: it once
# recorded "PASS tier 1" after a compile error), when a test fails and when a crash-campaign
# trial fails (issue 63: every failing test was recorded as PASS), when either of tier 2's
# background jobs (crash.sh, suite.sh: run-tests.sh's job/join) fails, and refuses tiers it does
# not know. Here: for each planted fault, a copy of the checkout (its tracked files as they are in
# the work tree), tier 1 only, must exit non-zero, name the planted fault and record
# "FAIL tier 1". The copy builds in a target directory of its own (removed with
# it): cargo hashes a workspace's crates by their paths inside it, so a shared target directory
# would take the copy's test binaries, CARGO_MANIFEST_DIR the copy's, for the checkout's own
# (seen: audit_fixture then read its fixtures from the removed copy). Run by run-tests.sh
# after tier 1; with the checkout's dependencies linked in (below), it builds only the
# workspace's crates.
# Also the VM tier's SELinux gate (tests/vm/avc-gate.sh, run by run-in-vm.sh on each boot's
# denials): a planted denial that the expected list does not name fails it, a kernel AVC or a
# USER_AVC of dbus-daemon or systemd alike.
set -uo pipefail
cd "$(dirname "$0")/.."
copy=$(mktemp -d /tmp/nodectl-runner.XXXXXX)
trap 'rm -rf "$copy"' EXIT
fails=0
PLANT_TIER=1 # (the tier a planted copy runs)
verdict() { # verdict WHAT OK
  if [ "$2" = 0 ]; then echo "ok   - $1"; else echo "FAIL - $1"; fails=$((fails + 1)); fi
}

avc() { # avc COMM STYPE PERMS PERMISSIVE: one audit line
  printf 'type=AVC msg=audit(1733349000.123:456): avc:  denied  { %s } for  pid=812 comm="%s" name="x" dev="vda" ino=1 scontext=system_u:system_r:%s:s0 tcontext=system_u:object_r:shadow_t:s0 tclass=file permissive=%s\n' "$3" "$1" "$2" "$4"
}
printf '0 gate_t shadow_t file tool read write # a reason\n' >"$copy/expected"
avc tool gate_t 'read write' 0 >"$copy/avc.log"
tests/vm/avc-gate.sh "$copy/avc.log" "$copy/expected" >/dev/null
verdict "avc-gate: an expected denial passes" $?
avc nodectld nodectld_t read 0 >>"$copy/avc.log"
out=$(tests/vm/avc-gate.sh "$copy/avc.log" "$copy/expected"); rc=$?
verdict "avc-gate: a planted unexpected denial fails the boot (exit $rc)" "$((rc != 1))"
grep -q 'nodectld_t shadow_t file nodectld read' <<<"$out"
verdict "avc-gate: it names the unexpected denial" $?
avc tool gate_t 'read write' 1 >"$copy/avc.log"
tests/vm/avc-gate.sh "$copy/avc.log" "$copy/expected" >/dev/null
verdict "avc-gate: the same denial in permissive mode is another kind (exit $?)" "$(($? != 1))"
printf '0 gate_t shadow_t file * read write # any command\n' >"$copy/expected"
avc other gate_t 'read write' 0 >"$copy/avc.log"
tests/vm/avc-gate.sh "$copy/avc.log" "$copy/expected" >/dev/null
verdict "avc-gate: a kind listed with command * takes any command" $?
avc other gate_t 'read write' 1 >"$copy/avc.log"
tests/vm/avc-gate.sh "$copy/avc.log" "$copy/expected" >/dev/null
verdict "avc-gate: but not its permissive twin (exit $?)" "$(($? != 1))"
printf '0 gate_t shadow_t file tool read write\n' >"$copy/expected"
tests/vm/avc-gate.sh /dev/null "$copy/expected" 2>/dev/null
verdict "avc-gate: an expected kind without a reason is refused (exit $?)" "$(($? != 2))"
: >"$copy/avc.log"
tests/vm/avc-gate.sh "$copy/avc.log"
verdict "avc-gate: the shipped list (tests/vm/expected-avc) reads and gives every kind a reason" $?
# The USER_AVCs of the object managers in user space (no comm=; the program as exe= inside
# msg='...'), as dbus-daemon and systemd write them on a node agent's bus traffic (issue 63).
user_avc_dbus() { # PERMISSIVE
  printf "type=USER_AVC msg=audit(1733349000.200:457): pid=310 uid=101 auid=4294967295 ses=4294967295 subj=system_u:system_r:system_dbusd_t:s0-s0:c0.c1023 msg='avc:  denied  { send_msg } for msgtype=method_call interface=org.nodectl.Agent1 member=Converge dest=org.nodectl.Agent1 spid=812 tpid=640 scontext=unconfined_u:unconfined_r:unconfined_t:s0-s0:c0.c1023 tcontext=system_u:system_r:initrc_t:s0 tclass=dbus permissive=%s  exe=\"/usr/bin/dbus-daemon\" sauid=101 hostname=? addr=? terminal=?'UID=\"messagebus\" AUID=\"unset\"\n" "$1"
}
user_avc_systemd() {
  printf "type=USER_AVC msg=audit(1733349000.300:458): pid=1 uid=0 auid=4294967295 ses=4294967295 subj=system_u:system_r:init_t:s0 msg='avc:  denied  { start } for auid=n/a uid=0 gid=0 path=\"/etc/systemd/system/kubelet.service\" cmdline=\"\" function=\"bus_unit_method_start\" scontext=system_u:system_r:initrc_t:s0 tcontext=system_u:object_r:systemd_unit_file_t:s0 tclass=service permissive=0  exe=\"/usr/lib/systemd/systemd\" sauid=0 hostname=? addr=? terminal=?'\n"
}
printf '0 gate_t shadow_t file tool read write # a reason\n' >"$copy/expected"
user_avc_dbus 0 >"$copy/avc.log"
user_avc_systemd >>"$copy/avc.log"
out=$(tests/vm/avc-gate.sh "$copy/avc.log" "$copy/expected"); rc=$?
verdict "avc-gate: two unlisted enforced USER_AVCs (dbus-daemon, systemd) fail the boot (exit $rc)" "$((rc != 1))"
grep -q '0 unconfined_t initrc_t dbus dbus-daemon send_msg' <<<"$out" && grep -q '0 initrc_t systemd_unit_file_t service systemd start' <<<"$out"
verdict "avc-gate: it names both, by their exe= and scontext" $?
printf '0 unconfined_t initrc_t dbus dbus-daemon send_msg # a reason\n0 initrc_t systemd_unit_file_t service systemd start # a reason\n' >"$copy/expected"
tests/vm/avc-gate.sh "$copy/avc.log" "$copy/expected" >/dev/null
verdict "avc-gate: listed, they pass (exit $?)" $?
user_avc_dbus 1 >"$copy/avc.log"
tests/vm/avc-gate.sh "$copy/avc.log" "$copy/expected" >/dev/null
verdict "avc-gate: the dbus-daemon denial in permissive mode is another kind (exit $?)" "$(($? != 1))"
printf 'type=USER_AVC msg=audit(1733349000.400:459): pid=1 uid=0 msg=\047avc:  denied  { status } for auid=n/a uid=0 gid=0 scontext=system_u:system_r:initrc_t:s0 tclass=system permissive=0\047\n' >"$copy/avc.log"
out=$(tests/vm/avc-gate.sh "$copy/avc.log" "$copy/expected"); rc=$?
verdict "avc-gate: a denial it cannot read as a kind (no tcontext, no program) fails, shown whole (exit $rc)" "$((rc != 1))"
grep -q 'UNREAD .*{ status }' <<<"$out"
verdict "avc-gate: the unread line is printed" $?
rm -f "$copy/avc.log" "$copy/expected"
# planted_run NAME [MAX [MIN]]: a fresh copy of the checkout in $copy (its tracked files as they are in the
# work tree), planted by the function NAME (given the copy's path), then tier $PLANT_TIER alone
# in it, from MIN to MAX crates compiled (1 and 1 by default: the planted one); sets $out (its
# output) and $rc (its exit status).
planted_run() {
  rm -rf "$copy" && mkdir -p "$copy" || { echo "runner-test: cannot make $copy" >&2; exit 1; }
  git ls-files -z | tar --null -T - -cf - 2>/dev/null | tar -xf - -C "$copy" || { echo "runner-test: cannot copy the checkout" >&2; exit 1; }
  "$1" "$copy"
  if out=$(fast); then rc=0; else rc=$?; fi
  if ! grep -q '^======== summary' <<<"$out"; then # (the fast path could not run: the copy at its own path)
    slow
  else
    compiled=$(grep -c '^ *Compiling ' <<<"$out")
    verdict "$1: the planted crate alone was compiled, against the checkout's crates as built ($compiled crates compiled)" \
      "$((compiled < ${3:-1} || compiled > ${2:-1}))"
  fi
}
# Fast path (root, the checkout's own target/): the copy is bind-mounted over the checkout's
# path in a mount namespace of its own, with a target/debug of hard links to the checkout's:
# the same paths and mtimes, so cargo finds every crate built and compiles the planted test
# alone (seconds; built at a path of its own, the copy compiled the workspace's crates again,
# ~40 s). cargo writes only the new test's files there: a fresh binary is linked into place
# under its name anew (the old link removed first), never written through; its lock file is
# the copy's own. The checkout's build is made current first (by tier 1 it is already).
fast() {
  [ "$(id -u)" = 0 ] && [ -z "${CARGO_TARGET_DIR:-}" ] && [ -d target/debug ] || return 1
  cargo test --workspace --no-run --quiet >/dev/null 2>&1 || return 1
  mkdir -p "$copy/target" && cp -al target/debug "$copy/target/debug" 2>/dev/null || return 1
  cp -a target/.rustc_info.json target/CACHEDIR.TAG "$copy/target/" 2>/dev/null
  rm -f "$copy/target/debug/.cargo-lock"
  NODECTL_RUNNER_TEST=1 TIERS=$PLANT_TIER unshare -m sh -c \
    'mount --make-rprivate / && mount --bind "$1" "$2" && cd "$2" && exec tests/run-tests.sh' _ "$copy" "$PWD" 2>&1
}
slow() {
  rm -rf "$copy/target"
  echo "runner-test: the copy built at a path of its own (no mount namespace here)"
  # The checkout's built dependencies, hard-linked into the copy's target directory (the same
  # filesystem; a plain build of them took ~4 min): cargo reuses a dependency whose
  # fingerprint matches without writing it. The workspace's own crates and targets (cargo
  # hashes them by their paths inside the workspace: the copy's would have the same names)
  # are unlinked from the copy first, so the copy builds them into files of its own and
  # writes nothing through a link into the checkout's target (nor does cargo's lock file link
  # the two builds).
  src_target=${CARGO_TARGET_DIR:-target}
  if [ -d "$src_target/debug" ]; then
    if ! { mkdir -p "$copy/target" && cp -al "$src_target/debug" "$copy/target/debug" 2>/dev/null &&
      tests/lib/cargo-cache.sh drop-workspace "$copy/target"; }; then
      rm -rf "$copy/target"; echo "runner-test: the built dependencies could not be linked in; building them"
    fi
  fi
  out=$(CARGO_TARGET_DIR="$copy/target" NODECTL_RUNNER_TEST=1 TIERS=$PLANT_TIER "$copy/tests/run-tests.sh" 2>&1)
  rc=$?
}
# failed_as NAME WHAT PATTERN: the planted run exited non-zero, recorded tier 1 as failed (never
# as passed), and its output names the planted fault (PATTERN, an extended regex).
failed_as() {
  local n=$fails
  verdict "$1: run-tests.sh exits non-zero (exit $rc)" "$((rc == 0))"
  grep -qE "$3" <<<"$out"
  verdict "$1: the failure is $2" $?
  grep -q "^FAIL tier $PLANT_TIER " <<<"$out"
  verdict "$1: tier $PLANT_TIER is recorded as failed" $?
  ! grep -q "^PASS tier $PLANT_TIER\$" <<<"$out"
  verdict "$1: tier $PLANT_TIER is not recorded as passed" $?
  [ "$fails" = "$n" ] || { echo "--- $1: the planted run's last lines:"; tail -30 <<<"$out"; }
}

# 1. A test file that does not compile (issue 39: the build once failed into "PASS tier 1").
compile_error() {
  printf '// planted by tests/runner-test.sh: must not compile\n#[test]\nfn planted() {\n    let _n: u32 = "not a number";\n}\n' \
    >"$1/agent/tests/planted_compile_error.rs"
}
planted_run compile_error
failed_as compile_error "the planted compile error" 'planted_compile_error\.rs'

# 2. A test that fails (issue 63: `[ "$rc" = 0 ] && rc=$?` took the status of the `[`, and every
# failing test was recorded as PASS). In kubectl-nodectl, whose tests cargo runs first: the run
# stops there. Run with NODECTL_BLESS set, which the test command clears: the planted test says
# so when it reaches it.
panic_test() {
  printf '// planted by tests/runner-test.sh: must fail\n#[test]\nfn planted() {\n    assert!(std::env::var_os("NODECTL_BLESS").is_none(), "NODECTL_BLESS reached the tests");\n    panic!("planted panic: this test must fail the run");\n}\n' \
    >"$1/kubectl-nodectl/tests/planted_panic.rs"
}
export NODECTL_BLESS=1
planted_run panic_test
unset NODECTL_BLESS
failed_as panic_test "the planted panic (not NODECTL_BLESS reaching the tests)" 'planted panic: this test must fail the run'
grep -q 'NODECTL_BLESS is set: cleared' <<<"$out"
verdict "panic_test: the run said it cleared NODECTL_BLESS" $?

# 3. A crash-campaign trial that fails (its check finds a partial file): the campaign, run first
# in tier 1, fails the run.
crash_trial() {
  perl -0pi -e 's/(fn trial\(bed: &dyn Bed,[^\n]*\{\n    t\.trials \+= 1;\n)/$1    if t.trials == 1 {\n        t.partial.push(format!("{name}: planted by tests\/runner-test.sh"));\n    }\n/' \
    "$1/agent/tests/crash_campaign.rs"
  grep -q 'planted by tests/runner-test.sh' "$1/agent/tests/crash_campaign.rs" || { echo "runner-test: could not plant the failing trial" >&2; exit 1; }
}
planted_run crash_trial 2 # (nodectl twice: the campaign with crash points, then the plain build)
failed_as crash_trial "the campaign's planted partial file" 'partial 1,|: planted by tests/runner-test.sh'

# 4. Tier 2's jobs (run in the background beside tier 1 and the VM, their output and status
# taken when joined: tests/run-tests.sh `job`/`join`): each one's failure fails tier 2, the other
# passing at once. Tier 2 alone in the copy (the guests' build is the checkout's, linked in; two
# nspawn boots of a line each: seconds).
PLANT_TIER=2
nspawn_crash_fails() {
  sed -i '2i echo "planted crash.sh failure (tests/runner-test.sh)"; exit 3' "$1/tests/nspawn/crash.sh"
  sed -i '2i echo "planted: suite.sh passes at once"; exit 0' "$1/tests/nspawn/suite.sh"
}
planted_run nspawn_crash_fails 0 0 # (nothing planted in Rust: nothing compiled)
failed_as nspawn_crash_fails "crash.sh's planted exit 3" 'FAIL tier 2 \(exit 3\)'
nspawn_suite_fails() {
  sed -i '2i echo "planted: crash.sh passes at once"; exit 0' "$1/tests/nspawn/crash.sh"
  sed -i '2i echo "planted suite.sh failure (tests/runner-test.sh)"; exit 4' "$1/tests/nspawn/suite.sh"
}
planted_run nspawn_suite_fails 0 0
failed_as nspawn_suite_fails "suite.sh's planted exit 4" 'FAIL tier 2 \(exit 4\)'
PLANT_TIER=1

# 5. Tiers it does not know: refused before anything runs, never a run of nothing.
out=$(TIERS=1,2,3 tests/run-tests.sh 2>&1); rc=$?
verdict "TIERS=1,2,3 is refused (exit $rc)" "$((rc != 2))"
grep -q "TIERS: no tier '1,2,3'" <<<"$out"
verdict "it names the tier it does not know" $?
! grep -q 'passed, .* failed' <<<"$out"
verdict "and runs nothing" $?
out=$(TIERS=' ' tests/run-tests.sh 2>&1); rc=$?
verdict "an empty TIERS is refused (exit $rc)" "$((rc != 2))"

[ "$fails" = 0 ]
