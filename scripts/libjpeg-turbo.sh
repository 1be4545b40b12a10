#!/usr/bin/env bash
# Builds libjpeg-turbo's static TurboJPEG library once per checkout, from the
# sources of the turbojpeg-sys crate that Cargo.lock pins, into
# target/libjpeg-turbo/turbojpeg-sys-<version>/, and prints that folder.
# setup.sh and test.sh link their native builds against it (turbojpeg-sys's
# "explicit" source: TURBOJPEG_SOURCE=explicit, TURBOJPEG_LIB_DIR=<folder>)
# instead of letting each cargo profile build the whole of libjpeg-turbo, its
# programs and tests included: in a CI run, three builds become one of the
# library alone (the sdist test, run by test.sh, links it too). The wheels,
# plain cargo commands and pip outside these scripts build it from the crate
# as usual, from the same sources with the same options.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/build-tools.sh >&2
cargo fetch --locked --quiet >&2
read -r source version < <(cargo metadata --format-version 1 --locked | python3 -c '
import json, os, sys
for p in json.load(sys.stdin)["packages"]:
    if p["name"] == "turbojpeg-sys":
        print(os.path.join(os.path.dirname(p["manifest_path"]), "libjpeg-turbo"), p["version"])
')
out="$PWD/target/libjpeg-turbo/turbojpeg-sys-$version"
if [ ! -f "$out/libturbojpeg.a" ]; then
    build="$out.build"
    rm -rf "$build"
    mkdir -p "$build"
    echo "libjpeg-turbo: building the static TurboJPEG library into $out" >&2
    # The options turbojpeg-sys gives cmake: static only, SIMD required;
    # position-independent, for the Python extension.
    if ! { cmake -S "$source" -B "$build" -DENABLE_SHARED=0 -DENABLE_STATIC=1 \
            -DREQUIRE_SIMD=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_POSITION_INDEPENDENT_CODE=ON \
            && cmake --build "$build" --target turbojpeg-static --parallel "$(nproc)"; } \
            >"$build/log" 2>&1; then
        tail -n 40 "$build/log" >&2
        echo "libjpeg-turbo: the build failed (log: $build/log)" >&2
        exit 1
    fi
    mkdir -p "$out"
    cp "$build/libturbojpeg.a" "$out/"
    rm -rf "$build"
fi
echo "$out"
