#!/bin/bash
# Runs the VM suites given as arguments (file names in /test) in this one boot, in order, and
# prints each one's seconds. An argument NAME=VALUE is exported to the suites after it
# (BENCH_MODE=quick bench.sh: the benchmark's smoke in the test command; SUITE_TRACE=1 traces).
rc=0
for s in "$@"; do
  if [[ $s == *=* ]]; then export "${s?}"; continue; fi
  echo "######## $s"
  start=$SECONDS
  if [ -n "${SUITE_TRACE:-}" ]; then # (SUITE_TRACE=1 among the arguments: each command traced with
    # the suite's second, to find where its time goes; bash takes no PS4 from the environment
    # when run as root, hence BASH_ENV)
    echo "PS4='+[\${SECONDS}s] '" >/tmp/suite-trace.env
    BASH_ENV=/tmp/suite-trace.env bash -x "/test/$s" || rc=1
  else
    bash "/test/$s" || rc=1
  fi
  echo "######## $s took $((SECONDS - start)) s"
done
exit $rc
