#!/bin/bash
# avc-gate.sh AVC_LOG [EXPECTED]: fails (exit 1) when AVC_LOG (audit.log's or dmesg's lines) holds
# an SELinux denial that EXPECTED (default: tests/vm/expected-avc, beside this script) does not
# list, and prints each such denial's kind with its count. run-in-vm.sh runs it on every boot's
# denials: a VM suite that causes an unexpected denial fails (issue 39).
# avc-gate.sh --kinds AVC_LOG: every denial's kind, counted (run-in-vm.sh's "denials by kind").
# Both kinds of record count: the kernel's AVC (comm="...") and the USER_AVC of the object
# managers in user space, dbus-daemon (send_msg, acquire_svc: tclass=dbus) and systemd
# (tclass=service, system), which carry no comm= but the program as exe="..." inside their
# msg='...' (issue 63: the gate once read AVC lines alone and let both through).
# EXPECTED: one kind a line, "PERMISSIVE SOURCE-TYPE TARGET-TYPE CLASS COMM PERMS... # reason",
# PERMISSIVE 0 (enforced), 1 (permissive) or * (either); COMM a command (for a USER_AVC, the
# base name of its exe=) or * (any: systemd's generators, which race each other to the same
# early-boot search); PERMS as the denial lists them, in its order. A kind without a reason is
# refused (exit 2): every expected denial says why. A denial line that cannot be read as a kind
# fails the gate too (exit 1): nothing is let through unread.
set -uo pipefail
kinds_only=0
[ "${1:-}" = --kinds ] && { kinds_only=1; shift; }
log=$1
expected=${2:-$(dirname "$0")/expected-avc}

# kinds LOG: each denial as "PERMISSIVE STYPE TTYPE CLASS COMM PERMS...", or "UNREAD <line>"
# for a line that names a denial but lacks a field.
kinds() {
  awk '
    function field(name,   re, v) {
      # name="quoted" or name=bare (up to the next blank or quote)
      if (match($0, " " name "=\"[^\"]*\"")) { v = substr($0, RSTART + length(name) + 3, RLENGTH - length(name) - 4); return v }
      if (match($0, " " name "=[^ \047\"]+")) return substr($0, RSTART + length(name) + 2, RLENGTH - length(name) - 2)
      return ""
    }
    function ctype(ctx,   p) { split(ctx, p, ":"); return p[3] }
    /avc: +denied/ {
      perms = ""
      if (match($0, /avc: +denied +\{[^}]*\}/)) {
        perms = substr($0, RSTART, RLENGTH); sub(/^avc: +denied +\{ */, "", perms); sub(/ *\}$/, "", perms)
      }
      comm = field("comm")
      if (comm == "") { exe = field("exe"); n = split(exe, e, "/"); comm = (n ? e[n] : "") }
      gsub(/ /, "_", comm)
      s = ctype(field("scontext")); t = ctype(field("tcontext")); c = field("tclass"); p = field("permissive")
      if (perms == "" || comm == "" || s == "" || t == "" || c == "" || (p != "0" && p != "1")) { print "UNREAD " $0; next }
      print p, s, t, c, comm, perms
    }' "$1"
}
if [ "$kinds_only" = 1 ]; then
  kinds "$log" | sort | uniq -c | sort -rn
  exit 0
fi
[ -r "$expected" ] || { echo "avc-gate: cannot read $expected" >&2; exit 2; }
if awk '!/^[[:space:]]*(#|$)/ && !/#[[:space:]]*[^[:space:]]/ { print FILENAME ":" FNR ": no reason: " $0; bad = 1 } END { exit !bad }' "$expected" >&2; then
  exit 2
fi
[ -r "$log" ] || { echo "avc-gate: cannot read $log" >&2; exit 2; }
kinds=$(kinds "$log") || { echo "avc-gate: reading $log failed" >&2; exit 2; }
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
  $1 == "UNREAD" { print; next }
  {
    key = $2; for (i = 3; i <= NF; i++) key = key " " $i
    anyc = $2 " " $3 " " $4 " *"; for (i = 6; i <= NF; i++) anyc = anyc " " $i
    if (!(($1 " " key) in want) && !(("* " key) in want) && !(($1 " " anyc) in want) && !(("* " anyc) in want)) print
  }' <<<"$kinds" | sort | uniq -c | sort -rn) || { echo "avc-gate: reading $log against $expected failed" >&2; exit 2; }
[ -z "$unexpected" ] && exit 0
echo "---- SELinux: denials not listed in $expected (count, permissive, source type, target type, class, comm, perms):"
printf '%s\n' "$unexpected"
exit 1
