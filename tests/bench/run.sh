#!/bin/bash
# tests/bench/run.sh: the benchmark, its own command (issue 50). As root on Debian 12, like the
# test command: builds what the guests run (tests/run-tests.sh --bench), boots the VM once for
# bench.sh in full (five rounds against Typhoon's glue, every idle state, the API away 5 minutes,
# 20 000 files relabeled; ~15 minutes), then writes its table into docs/testing.md
# (tests/bench/table.sh --update) and keeps its output as docs/bench-last-run.txt.
# Its exit status says whether it ran (and nothing it checks went wrong: files, labels, failed
# reads, passes), never whether a target was met: that is the table's "met" / "not met".
#   --no-docs   leave docs/ alone (the run's output stays in the log named at the end)
set -uo pipefail
cd "$(dirname "$0")/../.."
docs=1
[ "${1:-}" = --no-docs ] && docs=0
log=$(mktemp /tmp/nodectl-bench.XXXXXX.log)
BENCH_LOG=$log tests/run-tests.sh --bench
rc=$?
if [ "$rc" = 0 ] && [ "$docs" = 1 ]; then
  tests/bench/table.sh --update "$log" || rc=1
  echo "commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- agent units selinux tests || echo ' (with uncommitted changes)')"
fi
echo "bench output: $log"
exit "$rc"
