#!/usr/bin/env bash
# Builds the cargo-fuzz targets (fuzz/: the engine, the image pipeline), replays their
# committed corpus (fuzz/corpus/<target>, plus the seeds make_seeds writes
# from real stores), then fuzzes each target for a while.
#
#   scripts/fuzz.sh                    # CI: 5 s per target, its replay first
#   FUZZ_SECONDS=600 scripts/fuzz.sh   # a real campaign
#   FUZZ_SECONDS=0 scripts/fuzz.sh     # replay only
#
# New inputs go to fuzz/target/new-corpus/<target> (not committed; to keep
# the interesting ones, merge them into fuzz/corpus/<target> with
# `cargo fuzz run <target> corpus/<target> target/new-corpus/<target> -- -merge=1`).
# A crash stops the script and leaves its input in fuzz/artifacts/<target>/.
# cargo-fuzz comes from crates.io; RUSTC_BOOTSTRAP=1 lets the stable
# toolchain take the sanitizer flags libFuzzer needs.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../fuzz"
SECONDS_EACH="${FUZZ_SECONDS:-5}"
export RUSTC_BOOTSTRAP=1

command -v cargo-fuzz >/dev/null || cargo install --locked --quiet cargo-fuzz

cargo fuzz build -O
seeds=target/seeds/open_and_gather
rm -rf "$seeds"
# cargo fuzz builds make_seeds with the targets (instrumented, which does
# no harm), so it needs no build of its own.
"target/$(rustc -vV | sed -n 's/^host: //p')/release/make_seeds" "$seeds"

# Runs cargo fuzz quietly, printing libFuzzer's last line, or all of its
# tail when it fails.
run() {
    local log=target/fuzz-run.log
    if cargo fuzz run -O "$@" >"$log" 2>&1; then
        tail -n 1 "$log"
    else
        tail -n 60 "$log" >&2
        echo "fuzz: FAILED: cargo fuzz run $*" >&2
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
        run "$t" "target/new-corpus/$t" "corpus/$t" "${extra[@]}" -- -max_total_time="$SECONDS_EACH"
    else
        echo "fuzz: $t: replaying corpus/$t ${extra[*]}"
        run "$t" "corpus/$t" "${extra[@]}" -- -runs=0
    fi
done
