#!/usr/bin/env bash
# Long run of the SIGKILL crash test (crates/zrecord/tests/kill.rs) in release:
# a child process appends, deletes and compacts; it is killed at a random
# instant and the reopened store must hold a state the commit protocol allows.
#
#   scripts/kill-test.sh [ROUNDS]     # default 2000 rounds
#   ZRECORD_KILL_SEED=7 scripts/kill-test.sh 500
#
# Prints the test's summary line (rounds, failures, where the kills landed)
# and exits non-zero when any round failed. CI runs the same test with its
# default of 200 rounds as part of `cargo test`.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROUNDS=${1:-2000}
export ZRECORD_KILL_ROUNDS=$ROUNDS
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

echo "==> kill test: $ROUNDS rounds, seed ${ZRECORD_KILL_SEED:-0}, release build"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
cargo test --release -p zrecord --test kill -- --exact \
    a_killed_writer_leaves_a_state_the_protocol_allows --nocapture >"$log" 2>&1
rc=$?
set -e
grep -E '^(FAIL|kill test:)' "$log" || true
if ! grep -q '^kill test:' "$log"; then
    echo "==> the kill test did not run to its summary (exit $rc); its output:" >&2
    tail -n 40 "$log" >&2
    exit $(( rc == 0 ? 1 : rc ))
fi
if [ "$rc" -ne 0 ]; then
    echo "==> kill test FAILED (exit $rc)" >&2
    exit "$rc"
fi
echo "==> kill test passed"
