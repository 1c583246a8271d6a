# child.sh: sourced by run-in-vm.sh and run-in-nspawn.sh. The machine they start (QEMU, nspawn)
# is their child, stopped when they end however they end: `child` holds its pid, `work` the
# run's directory (removed unless KEEP=1).
child=
# stop_child GRACE: TERM to the child, KILL after GRACE tenths of a second, waited for.
stop_child() {
  [ -n "$child" ] && kill -0 "$child" 2>/dev/null || { child=; return 0; }
  kill -TERM "$child" 2>/dev/null
  local i
  for i in $(seq "$1"); do kill -0 "$child" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$child" 2>/dev/null; wait "$child" 2>/dev/null
  child=
}
child_ends() {
  set +e
  stop_child "$CHILD_GRACE"
  if [ "${KEEP:-0}" = 1 ]; then echo "---- kept $work" >&2; else rm -rf "$work"; fi
}
trap child_ends EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP
# tick: one second's wait that a trapped signal ends at once (a read with a timeout on a FIFO
# nothing writes to, not `sleep`, which would hold the trap back until it ended).
mkfifo "$work/tick"
tick() { read -r -t 1 _ <>"$work/tick" || true; }
