#!/usr/bin/env bash
# Build what `pip install loaderx` takes, into dist/:
#   - a manylinux2014 (glibc 2.17) abi3 wheel for x86-64 and one for aarch64,
#     cross-compiled with zig as the C compiler and linker, so the wheels run
#     on any Linux with glibc 2.17 or newer whatever this machine's glibc is;
#   - an sdist, from which pip builds loaderx with a Rust toolchain.
# Each wheel is checked with auditwheel: it must be manylinux2014 compliant.
#
#   scripts/build-wheels.sh                      # both wheels and the sdist
#   WHEEL_TARGETS=x86_64 scripts/build-wheels.sh # only the x86-64 wheel (and the sdist)
#
# The tools (maturin, ziglang, auditwheel, check-jsonschema for the workflow test) come from PyPI into .tools-venv;
# the Rust targets come from rustup. Builds use target/wheels, apart from the
# development build in target/.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
TOOLS="$ROOT/.tools-venv"
OUT="$ROOT/dist"
TARGETS="${WHEEL_TARGETS:-x86_64 aarch64}"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target/wheels}"
# Each wheel builds libjpeg-turbo from the turbojpeg-sys crate, for its own
# target with its own compiler, whatever library the native builds link.
unset TURBOJPEG_SOURCE TURBOJPEG_LIB_DIR

log() { echo "build-wheels: $*"; }

if [ ! -x "$TOOLS/bin/python" ]; then
    log "creating $TOOLS"
    python3 -m venv "$TOOLS"
fi
"$TOOLS/bin/python" -c 'import ziglang, auditwheel, check_jsonschema' 2>/dev/null && [ -x "$TOOLS/bin/maturin" ] \
    || "$TOOLS/bin/python" -m pip install --quiet "maturin>=1.9,<2" ziglang auditwheel check-jsonschema
# maturin finds zig as `python -m ziglang` of the interpreter on PATH.
export PATH="$TOOLS/bin:$PATH"

mkdir -p "$OUT"
rm -f "$OUT"/loaderx-*.whl "$OUT"/loaderx-*.tar.gz

for arch in $TARGETS; do
    triple="$arch-unknown-linux-gnu"
    rustup target list --installed | grep -qx "$triple" || rustup target add "$triple"
    log "wheel for $triple (manylinux2014, abi3)"
    maturin build --release --quiet --zig --target "$triple" \
        --compatibility manylinux2014 --out "$OUT"
done

log "sdist"
maturin sdist --out "$OUT"

for whl in "$OUT"/loaderx-*.whl; do
    # auditwheel exits non-zero when the wheel is not manylinux2014-compliant.
    report=$(auditwheel show "$whl")
    echo "$report" | tr -s ' \n' ' ' | fold -s -w 100
    echo
    grep -q '"manylinux_2_17_' <<<"$report" \
        || { echo "build-wheels: $(basename "$whl") is not manylinux2014 (glibc 2.17)" >&2; exit 1; }
done
log "done:"
ls -l "$OUT"
