#!/usr/bin/env bash
# Makes sure the tools that build libjpeg-turbo, the image pipeline's JPEG
# decoder (compiled from the sources the turbojpeg-sys crate carries), are
# here: cmake, and nasm for its x86 SIMD code (without which the build
# stops: the decoder would be several times slower). As root it installs
# Debian's packages with apt-get, otherwise it says what to run. Called by
# scripts/libjpeg-turbo.sh and bench/run.sh.
set -euo pipefail

missing=()
command -v cmake >/dev/null || missing+=(cmake)
case "$(uname -m)" in
    x86_64 | i?86) command -v nasm >/dev/null || command -v yasm >/dev/null || missing+=(nasm) ;;
esac
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
    echo "build-tools: building libjpeg-turbo needs ${missing[*]}; install them" \
        "(Debian, Ubuntu: sudo apt-get install ${missing[*]})" >&2
    exit 1
fi
echo "build-tools: installing ${missing[*]} (Debian packages) to build libjpeg-turbo"
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y -q "${missing[@]}" </dev/null; then
    apt-get update -q </dev/null
    apt-get install -y -q "${missing[@]}" </dev/null
fi
