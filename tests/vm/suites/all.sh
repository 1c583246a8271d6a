#!/bin/bash
# Runs the VM suites given as arguments (file names in /test) in this one boot, in order.
rc=0
for s in "$@"; do
  echo "######## $s"
  start=$SECONDS
  bash "/test/$s" || rc=1
  echo "######## $s took $((SECONDS - start)) s"
done
exit $rc
