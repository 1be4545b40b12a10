#!/usr/bin/env bash
# Makes sure the JPEG photographs of Debian's plasma-workspace-wallpapers are
# in /usr/share/wallpapers: as root it installs the package with apt-get,
# otherwise it says what to run. Used by scripts/wallpaper_crops.py, which cuts
# them into ImageNet-sized crops.
set -euo pipefail

have_data() { [ -n "$(find /usr/share/wallpapers -name '*.jpg' -print -quit 2>/dev/null)" ]; }

have_data && exit 0
if [ "$(id -u)" -ne 0 ]; then
    echo "wallpapers: install them with:  sudo apt-get install plasma-workspace-wallpapers" >&2
    exit 1
fi
echo "wallpapers: installing the Debian package plasma-workspace-wallpapers"
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y -q --no-install-recommends plasma-workspace-wallpapers </dev/null; then
    apt-get update -q </dev/null
    apt-get install -y -q --no-install-recommends plasma-workspace-wallpapers </dev/null
fi
have_data || { echo "wallpapers: the package holds no JPEG under /usr/share/wallpapers" >&2; exit 1; }
