#!/bin/bash
# bless.sh: rewrite the golden files (tests/golden/) and the malformed corpus' expected errors
# (agent/tests/corpus/malformed.expected) to what the code renders now, then show what changed:
# review the diff before committing it. The test command (tests/run-tests.sh) never blesses: it
# clears NODECTL_BLESS, so a stray export cannot turn a changed rendering into a pass.
set -euo pipefail
cd "$(dirname "$0")/.."
NODECTL_BLESS=1 cargo test -p nodectl --test golden
NODECTL_BLESS=1 cargo test -p nodectl --lib malformed
git status --short -- tests/golden agent/tests/corpus
