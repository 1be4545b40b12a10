#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/: the engine, the image pipeline), replays
# their committed corpus (fuzz/corpus/<target>, plus the seeds make_seeds
# writes from real stores), then fuzzes each target for a while.
#
#   scripts/fuzz.sh                    # CI: 5 s per target, its replay first
#   FUZZ_SECONDS=600 scripts/fuzz.sh   # a real campaign
#   FUZZ_SECONDS=0 scripts/fuzz.sh     # replay only
#
# New inputs go to fuzz/target/new-corpus/<target> (not committed; to keep
# the interesting ones, merge them into fuzz/corpus/<target> with
# `fuzz/target/<host>/fuzz/<target> -merge=1 corpus/<target> target/new-corpus/<target>`).
# A crash stops the script and leaves its input in fuzz/artifacts/<target>/.
#
# Plain cargo builds the targets with the flags cargo-fuzz would pass, so
# nothing needs installing; fuzz/Cargo.toml's `fuzz` profile says why short
# runs are not built as cargo-fuzz's `-O` is (runs over a minute are, at
# opt-level 3). RUSTC_BOOTSTRAP=1 lets the stable toolchain
# take the nightly-only sanitizer flag.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../fuzz"
SECONDS_EACH="${FUZZ_SECONDS:-5}"
export RUSTC_BOOTSTRAP=1
host=$(rustc -vV | sed -n 's/^host: //p')

# libFuzzer's coverage feedback (cargo-fuzz 0.13's defaults) and
# AddressSanitizer. `--target` keeps them off build scripts and proc macros.
flags=(
    -Cpasses=sancov-module
    -Cllvm-args=-sanitizer-coverage-level=4
    -Cllvm-args=-sanitizer-coverage-inline-8bit-counters
    -Cllvm-args=-sanitizer-coverage-pc-table
    -Cllvm-args=-sanitizer-coverage-trace-compares
    -Cllvm-args=-sanitizer-coverage-stack-depth
    -Cllvm-args=-simplifycfg-branch-fold-threshold=0
    --cfg fuzzing
    -Zsanitizer=address
)
# A campaign's executions repay a fully optimised build.
optimise=()
if [ "$SECONDS_EACH" -gt 60 ]; then
    optimise=(--config profile.fuzz.opt-level=3 --config profile.fuzz.package.zimage.opt-level=3)
fi
RUSTFLAGS="${flags[*]}" cargo build --profile fuzz --target "$host" --bins "${optimise[@]}"
bin="target/$host/fuzz"

seeds=target/seeds/open_and_gather
rm -rf "$seeds"
# make_seeds is built with the targets (instrumented, which does no harm).
"$bin/make_seeds" "$seeds"

# Runs a target quietly, printing libFuzzer's last line, or all of its tail
# when it fails.
run() {
    local target=$1 log=target/fuzz-run.log
    shift
    mkdir -p "artifacts/$target"
    if "$bin/$target" -artifact_prefix="artifacts/$target/" "$@" >"$log" 2>&1; then
        tail -n 1 "$log"
    else
        tail -n 60 "$log" >&2
        echo "fuzz: FAILED: $bin/$target $*" >&2
        return 1
    fi
}

for t in open_and_gather operations images; do
    extra=()
    [ "$t" = open_and_gather ] && extra=("$seeds")
    if [ "$SECONDS_EACH" -gt 0 ]; then
        # libFuzzer runs every input of its corpus folders before it mutates
        # any, so a fuzzing run is the replay too.
        mkdir -p "target/new-corpus/$t"
        echo "fuzz: $t: replaying corpus/$t ${extra[*]}, then fuzzing for ${SECONDS_EACH}s"
        run "$t" "target/new-corpus/$t" "corpus/$t" "${extra[@]}" -max_total_time="$SECONDS_EACH"
    else
        echo "fuzz: $t: replaying corpus/$t ${extra[*]}"
        run "$t" "corpus/$t" "${extra[@]}" -runs=0
    fi
done
