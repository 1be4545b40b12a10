#!/usr/bin/env bash
# Checks that the engine crates (zrecord, zsampler, zloader) build for the
# platforms loaderx ships to besides this one, and lint clean there:
#
#   scripts/check-targets.sh                                    # all of them
#   CHECK_TARGETS="x86_64-apple-darwin" scripts/check-targets.sh  # some
#
# Default targets: x86_64-apple-darwin, x86_64-pc-windows-gnu,
# x86_64-pc-windows-msvc, aarch64-unknown-linux-gnu. It runs
# `cargo clippy -- -D warnings` (cargo check plus the lints) for each, in
# target/cross. Nothing is linked, but the build scripts of libdeflate-sys and
# zstd-sys compile their C for the target, so zig (PyPI `ziglang`, installed
# into .tools-venv) serves as the C compiler through small wrappers. zig has
# no MSVC headers: for the MSVC target the C is compiled against its MinGW
# headers (and archived with `zig lib`), while the Rust code is checked for
# the MSVC target itself. Quiet on success but for one line; on failure it
# prints cargo's output.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
TOOLS="$ROOT/.tools-venv"
export CARGO_TARGET_DIR="$ROOT/target/cross"
WRAPPERS="$CARGO_TARGET_DIR/zig-wrappers"
TARGETS="${CHECK_TARGETS:-x86_64-apple-darwin x86_64-pc-windows-gnu x86_64-pc-windows-msvc aarch64-unknown-linux-gnu}"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

fail() { echo "check-targets: $*" >&2; exit 1; }

if [ ! -x "$TOOLS/bin/python" ]; then
    python3 -m venv "$TOOLS" || fail "could not create $TOOLS"
fi
if ! "$TOOLS/bin/python" -c 'import ziglang' 2>/dev/null; then
    "$TOOLS/bin/python" -m pip install --quiet ziglang || fail "could not install ziglang into $TOOLS"
fi

# zig's name for a Rust target's C target, for its C compiler.
zig_target() {
    case "$1" in
        x86_64-apple-darwin) echo x86_64-macos ;;
        aarch64-apple-darwin) echo aarch64-macos ;;
        x86_64-pc-windows-gnu | x86_64-pc-windows-msvc) echo x86_64-windows-gnu ;;
        aarch64-unknown-linux-gnu) echo aarch64-linux-gnu ;;
        x86_64-unknown-linux-gnu) echo x86_64-linux-gnu ;;
        *) fail "no zig target known for $1" ;;
    esac
}

mkdir -p "$WRAPPERS"
write_wrapper() { # name, command line; written whole, then moved into place
    local tmp
    tmp=$(mktemp "$WRAPPERS/.tmp.XXXXXX")
    printf '#!/bin/sh\n%s\n' "$2" >"$tmp"
    chmod +x "$tmp"
    mv -f "$tmp" "$WRAPPERS/$1"
}
ZIG="\"$TOOLS/bin/python\" -m ziglang"
write_wrapper ar "exec $ZIG ar \"\$@\""
write_wrapper lib "exec $ZIG lib \"\$@\""

log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$SECONDS
for target in $TARGETS; do
    rustup target list --installed | grep -qx "$target" \
        || rustup target add "$target" >"$log" 2>&1 \
        || { cat "$log" >&2; fail "rustup could not add $target"; }
    zt=$(zig_target "$target")
    # cc-rs adds its own --target (and a macOS version floor) in Rust's
    # spelling, which zig does not parse: zig gets its own -target instead.
    write_wrapper "cc-$zt" "for a; do
    shift
    case \"\$a\" in --target=* | -mmacosx-version-min=*) ;; *) set -- \"\$@\" \"\$a\" ;; esac
done
exec $ZIG cc -target $zt \"\$@\""
    var=${target//-/_}
    archiver="$WRAPPERS/ar"
    case "$target" in *-msvc) archiver="$WRAPPERS/lib" ;; esac
    # libjpeg-turbo (zimage) is built with cmake, which this cross check
    # does not set up: its sources are left out ("explicit", a library
    # folder that the check, which links nothing, never reads).
    if ! env "CC_$var=$WRAPPERS/cc-$zt" "AR_$var=$archiver" \
        TURBOJPEG_SOURCE=explicit "TURBOJPEG_LIB_DIR=$WRAPPERS" \
        cargo clippy --quiet --locked -p zrecord -p zsampler -p zloader --target "$target" \
        -- -D warnings >"$log" 2>&1; then
        cat "$log" >&2
        fail "$target does not build"
    fi
done
echo "check-targets: ok: $TARGETS ($((SECONDS - start)) s)"
