#!/bin/bash
# cargo-cache.sh restore|save: the built dependencies of the workspace, kept between clean
# clones like the VM image (/var/cache/nodectl-vm). CI and the README's test command run on a
# fresh clone, whose empty target/ built ~300 crates again each time (clippy's check, the test
# build, the release build: most of .ci/run's first ten minutes on 2 cores).
#   restore  when ./target does not exist: target/ made of hard links to the cache (instant;
#            cargo finds every dependency whose fingerprint matches and builds the workspace's
#            own crates alone)
#   save     the cache made anew from ./target's dependencies (hard links), swapped in whole
# Only the dependencies are kept, never the workspace's own crates, binaries or tests: cargo
# names a workspace crate's files by its path inside the workspace, not the checkout's, so a
# clone's binary could be taken for another clone's whose sources are older (CARGO_MANIFEST_DIR
# baked in: seen with tests/runner-test.sh's copies). A dependency's files are named by its
# version, features and profile: a clone needing another version or features builds new files
# beside them and never writes into a kept one (cargo writes a dependency's files only when
# their fingerprint does not match, and then under new names).
# Keyed on the toolchain (`rustc -vV`): another rustc starts from nothing. Dropped whole when
# larger than NODECTL_CARGO_CACHE_MAX_GB (default 20): the next run builds every dependency
# once more and keeps what it used. NODECTL_CARGO_CACHE=off: neither restore nor save.
# A target directory given with CARGO_TARGET_DIR is the caller's: left alone.
#   drop-workspace DIR  the workspace's own crates, binaries and tests removed from the target
#            directory DIR (hard links of another's: tests/runner-test.sh's copies build them at
#            their own path), the dependencies left; the same pruning as save's
set -uo pipefail
cd "$(dirname "$0")/../.."
base=${NODECTL_CARGO_CACHE_DIR:-/var/cache/nodectl-cargo}

# drop_workspace DIR: from each profile directory of the target directory DIR (debug,
# release), the workspace's packages and targets as cargo names their files (dashes and
# underscores both), the incremental builds (only the workspace's crates have them), the
# examples (the workspace's), the build lock and the uplifted files at the top; fails when
# cargo metadata does.
drop_workspace() {
  local names n p
  names=$(cargo metadata --no-deps --offline --format-version 1 2>/dev/null | jq -r '.packages[] | .name, (.targets[].name)' | sort -u)
  [ -n "$names" ] || { echo "cargo-cache: cargo metadata failed" >&2; return 1; }
  for p in "$1"/*/; do
    [ -d "$p/.fingerprint" ] || continue # (a profile's directory: debug, release)
    rm -f "$p/.cargo-lock"
    rm -rf "$p/examples" "$p/incremental"
    for n in $names ${names//-/_}; do
      rm -rf "$p/.fingerprint/$n"-* "$p/build/$n"-* "$p/deps/$n"-* "$p/deps/lib$n"-* "$p/deps/lib$n".* \
        "$p/$n" "$p/$n".d "$p/lib$n".*
    done
    # (what is left at the top of a profile's directory is uplifted binaries and libraries of
    # the workspace's: already gone above; stray files of other names are dropped too)
    find "$p" -maxdepth 1 -type f -delete
  done
}

case ${1:-} in
drop-workspace)
  [ -d "${2:-}" ] || { echo "usage: $0 drop-workspace TARGET-DIR" >&2; exit 2; }
  drop_workspace "$2"
  exit
  ;;
esac
[ "${NODECTL_CARGO_CACHE:-on}" != off ] && [ -z "${CARGO_TARGET_DIR:-}" ] || exit 0
key=$(rustc -vV 2>/dev/null | sha256sum | cut -c1-16)
[ -n "$key" ] || { echo "cargo-cache: rustc -vV printed nothing: no cache" >&2; exit 0; }
cache=$base/rustc-$key

case ${1:-} in
restore)
  [ ! -e target ] || exit 0
  [ -d "$cache/target" ] || { echo "cargo-cache: no built dependencies in $cache yet: building them"; exit 0; }
  start=$SECONDS
  # (the same filesystem as the checkout, or hard links cannot be: then cargo builds them)
  if cp -al "$cache/target" target 2>/dev/null; then
    echo "cargo-cache: target/ from $cache ($(du -sh target 2>/dev/null | cut -f1), $((SECONDS - start)) s): the dependencies built, the workspace's crates build here"
  else
    rm -rf target
    echo "cargo-cache: $cache cannot be linked into $PWD (another filesystem?): building every dependency"
  fi
  ;;
save)
  [ -d target ] || exit 0
  mkdir -p "$base" || exit 0
  new=$(mktemp -d "$base/.new.XXXXXX") || exit 0
  if ! cp -al target "$new/target" 2>/dev/null; then
    rm -rf "$new"; echo "cargo-cache: target/ cannot be linked into $base (another filesystem?): nothing saved"; exit 0
  fi
  drop_workspace "$new/target" || { rm -rf "$new"; echo "cargo-cache: nothing saved" >&2; exit 0; }
  rm -rf "$new"/target/tmp "$new"/target/.rustc_info.json "$new"/target/*/.future-incompat-report.json
  size=$(du -sm "$new/target" | cut -f1)
  max=$((${NODECTL_CARGO_CACHE_MAX_GB:-20} * 1024))
  if [ "$size" -gt "$max" ]; then
    rm -rf "$new" "$cache"
    echo "cargo-cache: the built dependencies take $size MiB (> $max): cache dropped, the next run builds them once more"
    exit 0
  fi
  rm -rf "$cache.old" && { [ ! -e "$cache" ] || mv "$cache" "$cache.old"; } && mv "$new" "$cache" && rm -rf "$cache.old"
  echo "cargo-cache: the built dependencies kept in $cache ($size MiB)"
  ;;
*)
  echo "usage: $0 restore|save|drop-workspace DIR" >&2
  exit 2
  ;;
esac
