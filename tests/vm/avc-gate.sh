#!/bin/bash
# avc-gate.sh AVC_LOG [EXPECTED]: fails (exit 1) when AVC_LOG (audit.log's or dmesg's lines) holds
# an SELinux denial that EXPECTED (default: tests/vm/expected-avc, beside this script) does not
# list, and prints each such denial's kind with its count. run-in-vm.sh runs it on every boot's
# denials: a VM suite that causes an unexpected denial fails (issue 39).
# EXPECTED: one kind a line, "PERMISSIVE SOURCE-TYPE TARGET-TYPE CLASS COMM PERMS... # reason",
# PERMISSIVE 0 (enforced), 1 (permissive) or * (either); COMM a command or * (any: systemd's
# generators, which race each other to the same early-boot search); PERMS as the denial lists
# them, in its order. A kind without a reason is refused (exit 2): every expected denial says why.
set -uo pipefail
log=$1
expected=${2:-$(dirname "$0")/expected-avc}
[ -r "$expected" ] || { echo "avc-gate: cannot read $expected" >&2; exit 2; }
if awk '!/^[[:space:]]*(#|$)/ && !/#[[:space:]]*[^[:space:]]/ { print FILENAME ":" FNR ": no reason: " $0; bad = 1 } END { exit !bad }' "$expected" >&2; then
  exit 2
fi
# each denial as "PERMISSIVE STYPE TTYPE CLASS COMM PERMS..."
kinds=$(sed -n 's/.*avc: *denied *{ *\([^}]*[^ }]\) *}.*comm="\([^"]*\)".*scontext=[^:]*:[^:]*:\([^: ]*\)[^ ]* tcontext=[^:]*:[^:]*:\([^: ]*\)[^ ]* tclass=\([^ ]*\) permissive=\([01]\).*/\6 \3 \4 \5 \2 \1/p' "$log" 2>/dev/null)
[ -n "$kinds" ] || exit 0
unexpected=$(awk -v lst="$expected" '
  BEGIN {
    while ((getline line < lst) > 0) {
      sub(/#.*/, "", line); n = split(line, f, " ")
      if (n < 6) continue
      key = f[2]; for (i = 3; i <= n; i++) key = key " " f[i]
      want[f[1] " " key] = 1
    }
  }
  {
    key = $2; for (i = 3; i <= NF; i++) key = key " " $i
    anyc = $2 " " $3 " " $4 " *"; for (i = 6; i <= NF; i++) anyc = anyc " " $i
    if (!(($1 " " key) in want) && !(("* " key) in want) && !(($1 " " anyc) in want) && !(("* " anyc) in want)) print
  }' <<<"$kinds" | sort | uniq -c | sort -rn) || { echo "avc-gate: reading $log against $expected failed" >&2; exit 2; }
[ -z "$unexpected" ] && exit 0
echo "---- SELinux: denials not listed in $expected (count, permissive, source type, target type, class, comm, perms):"
printf '%s\n' "$unexpected"
exit 1
