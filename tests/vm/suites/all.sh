#!/bin/bash
# Runs the VM suites given as arguments (file names in /test) in this one boot, in order, and
# prints each one's seconds. An argument NAME=VALUE is exported to the suites after it
# (BENCH_MODE=quick bench.sh: the benchmark's smoke in the test command).
rc=0
for s in "$@"; do
  if [[ $s == *=* ]]; then export "${s?}"; continue; fi
  echo "######## $s"
  start=$SECONDS
  bash "/test/$s" || rc=1
  echo "######## $s took $((SECONDS - start)) s"
done
exit $rc
