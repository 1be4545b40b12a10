#!/usr/bin/env bash
# The loaderx benchmark harness: one command sets everything up and runs it.
#
#   bash bench/run.sh            # full run (~30 min on 2 cores); writes docs/benchmarks.{md,png}
#   bash bench/run.sh --quick    # smoke test (~3 min): small N, 1 s timings; writes bench/out/ only
#   bash bench/run.sh convert    # only the conversion benchmark (bench/convert.sh)
#   bash bench/run.sh training   # only the training-feature benchmark (bench/training_bench.py)
#   bash bench/run.sh images     # only the image-pipeline benchmark (bench/image_bench.py;
#                                # this mode also installs tensorflow-cpu into bench/.venv)
#   bash bench/run.sh transforms # only the transform benchmark (bench/transform_bench.py:
#                                # map/transform on threads, in processes, and under Grain)
#   bash bench/run.sh ray        # only the Ray Data benchmark (bench/ray_bench.py: loaderx.ray
#                                # against Ray's Parquet on a local two-node cluster; this
#                                # mode also installs ray[data] into bench/.venv)
#   bash bench/run.sh collections # only the sharded-collection benchmark (bench/collections_bench.py:
#                                # open time of 10,000 shards, gathers over 16 and 100 shards
#                                # against one store, records of 784 B, 8 KiB and 64 KiB,
#                                # 784 B on one gathering thread too;
#                                # needs only cargo and python3, about 17 minutes)
#
# A full run and --quick end with the conversion benchmark (bench/convert.sh:
# docs/benchmarks-convert.{md,png}, or bench/out/ for --quick) and the
# training-feature one (mixtures, finite passes and packing against the
# plain loader and Grain: docs/benchmarks-training.md, or bench/out/).
#
# Other flags go to bench/harness.py (see `bench/.venv/bin/python bench/harness.py --help`),
# e.g. --systems ours,numpy_ram --workloads A --repeats 5.
#
# What it sets up (each step skipped when already done):
#   bench/.venv    numpy, matplotlib, the peers (lmdb, h5py, pyarrow, array-record, grain)
#                  and our loaderx, built as a release wheel from this checkout with maturin
#                  and installed (a copy, so edits made while it runs do not leak in);
#   .ref050-venv   loaderx 0.5.0 from PyPI (scripts/ref050-venv.sh), run only in its own
#                  subprocesses, never imported here;
#   bench/out/     generated datasets (cached), stores, raw results (results.json).
# A peer that fails to install is recorded in bench/out/install.json and reported as
# NOT INSTALLED in the output, not silently dropped.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ "${1:-}" = convert ]; then
    shift
    exec bash bench/convert.sh "$@"
fi
if [ "${1:-}" = collections ]; then
    shift
    exec python3 bench/collections_bench.py "$@"
fi
TRAINING=
IMAGES=
TRANSFORMS=
RAY=
if [ "${1:-}" = training ]; then
    shift
    TRAINING=1
elif [ "${1:-}" = images ]; then
    shift
    IMAGES=1
elif [ "${1:-}" = transforms ]; then
    shift
    TRANSFORMS=1
elif [ "${1:-}" = ray ]; then
    shift
    RAY=1
fi
ROOT=$PWD
VENV="$ROOT/bench/.venv"
OUT="$ROOT/bench/out"
PY="${PYTHON:-python3}"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

log() { echo "bench: $*" >&2; }
mkdir -p "$OUT"

# 1. The bench venv and its third-party packages, one by one so that one
#    failure does not hide the others.
if [ ! -x "$VENV/bin/python" ]; then
    log "creating $VENV"
    "$PY" -m venv "$VENV"
fi
VPY="$VENV/bin/python"
declare -A MODULE=(
    [numpy]=numpy [matplotlib]=matplotlib [maturin]=maturin
    [lmdb]=lmdb [h5py]=h5py [pyarrow]=pyarrow
    [array-record]=array_record.python.array_record_module [grain]=grain
    [Pillow]=PIL [simplejpeg]=simplejpeg [tensorflow-cpu]=tensorflow ["ray[data]"]=ray.data
)
PACKAGES=(numpy matplotlib maturin lmdb h5py pyarrow array-record grain Pillow simplejpeg)
# tf.data is a peer of the image benchmark only, and a large download.
if [ -n "$IMAGES" ]; then PACKAGES+=(tensorflow-cpu); fi
# Ray is a peer of the Ray benchmark only.
if [ -n "$RAY" ]; then PACKAGES+=("ray[data]"); fi
INSTALL_JSON="$OUT/install.json"
status=()
for pkg in "${PACKAGES[@]}"; do
    mod=${MODULE[$pkg]}
    if [ "$pkg" = maturin ]; then check=(test -x "$VENV/bin/maturin"); else check=("$VPY" -c "import $mod"); fi
    if ! "${check[@]}" >/dev/null 2>&1; then
        log "installing $pkg"
        if ! "$VPY" -m pip install --quiet --timeout 60 --retries 2 "$pkg" >"$OUT/pip-$pkg.log" 2>&1; then
            log "FAILED to install $pkg (see $OUT/pip-$pkg.log)"
        fi
    fi
    if "${check[@]}" >/dev/null 2>&1; then
        status+=("\"$pkg\": \"ok\"")
    else
        status+=("\"$pkg\": \"failed: $(tail -n 1 "$OUT/pip-$pkg.log" 2>/dev/null | tr -d '"\\' | cut -c1-200)\"")
    fi
done

# 2. Our loaderx: a release wheel of this checkout, rebuilt when a build input changed
#    (with the C tools it needs).
bash scripts/build-tools.sh
build_inputs_hash() {
    {
        "$VPY" -c 'import sys; print(sys.version)'
        rustc -V
        find pyproject.toml Cargo.toml Cargo.lock crates python \
            -type f \( -name '*.rs' -o -name '*.toml' -o -name '*.lock' -o -name '*.py' \
                       -o -name '*.pyi' -o -name '*.typed' \) \
            -not -path '*/target/*' -print0 2>/dev/null \
            | LC_ALL=C sort -z | xargs -0 sha256sum
    } | sha256sum | cut -d' ' -f1
}
STAMP="$VENV/.loaderx-build"
want=$(build_inputs_hash)
if [ "$want" != "$(cat "$STAMP" 2>/dev/null || true)" ] || ! "$VPY" -c 'import loaderx._native' 2>/dev/null; then
    log "building our loaderx wheel (maturin build --release)"
    rm -rf "$OUT/wheel" "$STAMP"
    (
        unset CONDA_PREFIX VIRTUAL_ENV
        "$VENV/bin/maturin" build --release --quiet --interpreter "$VPY" --out "$OUT/wheel"
    )
    "$VPY" -m pip install --quiet --force-reinstall --no-deps "$OUT"/wheel/loaderx-*.whl
    echo "$want" > "$STAMP"
fi
if "$VPY" -c 'import loaderx._native' >/dev/null 2>&1; then
    status+=("\"loaderx (ours)\": \"ok\"")
else
    status+=("\"loaderx (ours)\": \"failed to build or import\"")
fi

# 3. loaderx 0.5.0 in its own venv.
bash scripts/ref050-venv.sh >&2 || true
if [ -x .ref050-venv/bin/python ] && .ref050-venv/bin/python -c 'import loaderx' >/dev/null 2>&1; then
    status+=("\"loaderx==0.5.0\": \"ok\"")
else
    status+=("\"loaderx==0.5.0\": \"failed to install (scripts/ref050-venv.sh)\"")
fi
( IFS=,; echo "{${status[*]}}" ) > "$INSTALL_JSON"

# 4. Run. The harness itself only orchestrates: every system runs in its own subprocess.
if [ -n "$TRAINING" ]; then
    bash scripts/fashion-mnist.sh
    exec "$VPY" bench/training_bench.py "$@"
fi
if [ -n "$IMAGES" ]; then
    exec "$VPY" bench/image_bench.py "$@"
fi
if [ -n "$TRANSFORMS" ]; then
    bash scripts/fashion-mnist.sh
    exec "$VPY" bench/transform_bench.py "$@"
fi
if [ -n "$RAY" ]; then
    bash scripts/fashion-mnist.sh
    exec "$VPY" bench/ray_bench.py "$@"
fi
"$VPY" bench/harness.py "$@"

# 5. The conversion and training-feature benchmarks, after a full run or a
#    quick one (not after a run of chosen workloads or systems).
case "$*" in
    "")
        bash bench/convert.sh
        bash scripts/fashion-mnist.sh && "$VPY" bench/training_bench.py ;;
    --quick)
        bash bench/convert.sh --quick
        bash scripts/fashion-mnist.sh && "$VPY" bench/training_bench.py --seconds 0.5 \
            --rounds 1 --samples 20000 --out bench/out/benchmarks-training-quick ;;
esac
