#!/bin/bash
# runner-test.sh: the README's test command fails when a test does not build. It once ran
# `cargo test --no-run` in an `if` with no `else` and recorded "PASS tier 1" after a compile
# error (issue 39). Here: a copy of the checkout (its tracked files as they are in the work tree)
# with a compile error planted in a test file, tier 1 only, must exit non-zero, name the planted
# file and record "FAIL tier 1". The copy builds in a target directory of its own (removed with
# it): cargo hashes a workspace's crates by their paths inside it, so a shared target directory
# would take the copy's test binaries, CARGO_MANIFEST_DIR the copy's, for the checkout's own
# (seen: audit_fixture then read its fixtures from the removed copy). Run by run-tests.sh
# after tier 1; with the checkout's dependencies linked in (below), it builds only the
# workspace's crates.
# Also the VM tier's SELinux gate (tests/vm/avc-gate.sh, run by run-in-vm.sh on each boot's
# denials): a planted denial that the expected list does not name fails it.
set -uo pipefail
cd "$(dirname "$0")/.."
copy=$(mktemp -d /tmp/nodectl-runner.XXXXXX)
trap 'rm -rf "$copy"' EXIT
fails=0
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
rm -f "$copy/avc.log" "$copy/expected"
git ls-files -z | tar --null -T - -cf - 2>/dev/null | tar -xf - -C "$copy" || { echo "runner-test: cannot copy the checkout" >&2; exit 1; }
planted=agent/tests/planted_compile_error.rs
printf '// planted by tests/runner-test.sh: must not compile\n#[test]\nfn planted() {\n    let _n: u32 = "not a number";\n}\n' >"$copy/$planted"
# Fast path (root, the checkout's own target/): the copy is bind-mounted over the checkout's
# path in a mount namespace of its own, with a target/debug of hard links to the checkout's:
# the same paths and mtimes, so cargo finds every crate built and compiles the planted test
# alone (seconds; built at a path of its own, the copy compiled the workspace's crates again,
# ~40 s). cargo writes only the new test's files there: a fresh binary is linked into place
# under its name anew (the old link removed first), never written through; its lock file is
# the copy's own.
fast() {
  [ "$(id -u)" = 0 ] && [ -z "${CARGO_TARGET_DIR:-}" ] && [ -d target/debug ] || return 1
  # (the checkout's build current first: nothing after tier 1, which has just built it)
  cargo test --workspace --no-run --quiet >/dev/null 2>&1 || return 1
  mkdir -p "$copy/target" && cp -al target/debug "$copy/target/debug" 2>/dev/null || return 1
  cp -a target/.rustc_info.json target/CACHEDIR.TAG "$copy/target/" 2>/dev/null
  rm -f "$copy/target/debug/.cargo-lock"
  NODECTL_RUNNER_TEST=1 TIERS=1 unshare -m sh -c \
    'mount --make-rprivate / && mount --bind "$1" "$2" && cd "$2" && exec tests/run-tests.sh' _ "$copy" "$PWD" 2>&1
}
if out=$(fast); then rc=0; else rc=$?; fi
if ! grep -q '^======== summary' <<<"$out"; then # (the fast path could not run: the copy at its own path)
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
    own=$(cargo metadata --no-deps --offline --format-version 1 2>/dev/null | jq -r '.packages[] | .name, (.targets[].name)' | sort -u)
    if [ -n "$own" ] && mkdir -p "$copy/target" && cp -al "$src_target/debug" "$copy/target/debug" 2>/dev/null; then
      d=$copy/target/debug
      rm -f "$d/.cargo-lock"
      for n in $own; do
        for v in "$n" "${n//-/_}"; do
          rm -rf "$d/.fingerprint/$v"-* "$d/build/$v"-* "$d/deps/$v"-* "$d/deps/lib$v"-* "$d/deps/lib$v".* \
            "$d/incremental/$v"-* "$d/$v" "$d/$v".d "$d/lib$v".*
        done
      done
    else
      rm -rf "$copy/target"; echo "runner-test: the built dependencies could not be linked in; building them"
    fi
  fi
  out=$(CARGO_TARGET_DIR="$copy/target" NODECTL_RUNNER_TEST=1 TIERS=1 "$copy/tests/run-tests.sh" 2>&1)
  rc=$?
else
  compiled=$(grep -c '^ *Compiling ' <<<"$out")
  verdict "the planted test alone was compiled, against the checkout's crates as built ($compiled crate compiled)" "$((compiled != 1))"
fi
verdict "run-tests.sh exits non-zero when a test file does not compile (exit $rc)" "$((rc == 0))"
grep -q 'planted_compile_error.rs' <<<"$out"
verdict "the failure is the planted compile error" $?
grep -q '^FAIL tier 1 ' <<<"$out"
verdict "tier 1 is recorded as failed" $?
! grep -q '^PASS tier 1$' <<<"$out"
verdict "tier 1 is not recorded as passed" $?
[ "$fails" = 0 ] || { echo "--- the planted run's last lines:"; tail -30 <<<"$out"; }
[ "$fails" = 0 ]
