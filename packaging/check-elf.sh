#!/bin/bash
# check-elf.sh BINARY...: each must run on current Fedora CoreOS and Flatcar as built here
# (Debian 12): dynamically linked only against libraries both ship, and needing no glibc symbol
# version above the ceiling.
#   libraries: libc.so.6, libm.so.6, libgcc_s.so.1 (glibc and gcc's runtime, in both), and
#     libselinux.so.1 (FCOS: SELinux enforcing; Flatcar ships libselinux for its permissive
#     SELinux), and the interpreter /lib64/ld-linux-x86-64.so.2 (a debug build names it)
#   GLIBC_ ceiling: 2.34 (the oldest glibc in a supported stream: Flatcar LTS; FCOS is newer),
#     ABI markers included (GLIBC_ABI_DT_RELR: glibc 2.36)
#   LIBSELINUX_ ceiling: 1.0 (no symbol of a newer libselinux)
# Env ELF_GLIBC_MAX, ELF_ALLOWED (space-separated) override, for the test that shows a failure.
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,10p' "$0" >&2; exit 2; }
max=${ELF_GLIBC_MAX:-2.34}
allowed=" ${ELF_ALLOWED:-libc.so.6 libm.so.6 libgcc_s.so.1 libselinux.so.1 ld-linux-x86-64.so.2} "
command -v readelf >/dev/null || { echo "check-elf.sh: readelf not found (Debian: binutils)" >&2; exit 2; }
rc=0
for b in "$@"; do
  [ -f "$b" ] || { echo "check-elf.sh: $b: no such file" >&2; rc=1; continue; }
  bad=()
  interp=$(readelf -l -W "$b" | sed -n 's/.*Requesting program interpreter: \(.*\)]/\1/p')
  [ -z "$interp" ] || [ "$interp" = /lib64/ld-linux-x86-64.so.2 ] || bad+=("interpreter $interp")
  for lib in $(readelf -d -W "$b" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
    [[ $allowed == *" $lib "* ]] || bad+=("needs $lib")
  done
  vers=$(readelf -V -W "$b" | grep -oE 'Name: (GLIBC|LIBSELINUX)_[0-9.]+' | sed 's/Name: //' | sort -u)
  top=$(grep '^GLIBC_' <<<"$vers" | sed 's/GLIBC_//' | sort -V | tail -1)
  if [ -n "$top" ] && [ "$(printf '%s\n%s\n' "$top" "$max" | sort -V | tail -1)" != "$max" ]; then
    bad+=("needs GLIBC_$top (ceiling $max)")
  fi
  # ABI markers: what ld adds for a feature the loader must have (-z pack-relative-relocs:
  # GLIBC_ABI_DT_RELR, glibc 2.36); a glibc without it refuses to load the binary.
  for a in $(readelf -V -W "$b" | grep -oE 'Name: GLIBC_ABI_[A-Z0-9_]+' | sed 's/Name: //' | sort -u); do
    case $a in
      GLIBC_ABI_DT_RELR) need=2.36 ;;
      *) bad+=("needs $a (an ABI marker this check does not know)"); continue ;;
    esac
    [ "$(printf '%s\n%s\n' "$need" "$max" | sort -V | tail -1)" = "$max" ] || bad+=("needs $a (glibc $need; ceiling $max)")
  done
  for v in $(grep '^LIBSELINUX_' <<<"$vers"); do [ "$v" = LIBSELINUX_1.0 ] || bad+=("needs $v"); done
  if [ ${#bad[@]} -gt 0 ]; then
    msg=$(printf '%s; ' "${bad[@]}")
    echo "check-elf.sh: $b: ${msg%; }" >&2
    rc=1
  else
    echo "check-elf.sh: $b: ok (GLIBC_${top:-none} <= $max; $(readelf -d -W "$b" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' '))"
  fi
done
exit $rc
