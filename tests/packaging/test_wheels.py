"""What `pip install loaderx` gets: the wheels and the sdist in dist/.

`scripts/build-wheels.sh` builds them (scripts/test.sh runs it before these
tests). `scripts/smoke-test-wheel.sh` installs one into a virtual
environment that holds nothing but numpy and runs the quick start there.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DIST = ROOT / "dist"
MACHINE = platform.machine()
#: What the smoke test prints: the quick start's two lines, then the
#: installed console script's ``loaderx --version``.
VERSION = re.search(r'^version = "([^"]+)"', (ROOT / "Cargo.toml").read_text(), re.M).group(1)
SMOKE = ["(256, 3, 32, 32) (256,)", "imported from site-packages", f"loaderx {VERSION}"]


def _one(pattern: str) -> Path:
    found = sorted(DIST.glob(pattern))
    if len(found) != 1:
        pytest.fail(
            f"expected exactly one {pattern} in {DIST}, found {[p.name for p in found]}: "
            "run `bash scripts/build-wheels.sh` first"
        )
    return found[0]


def _smoke_test(artifact: Path, **env_extra: str) -> list[str]:
    env = dict(os.environ, **env_extra)
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "smoke-test-wheel.sh"), str(artifact)],
        capture_output=True, text=True, env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.splitlines()


def test_the_wheels_are_manylinux2014_abi3():
    # This machine's wheel at least; CI builds no other (scripts/test.sh),
    # `bash scripts/build-wheels.sh` the aarch64 one too.
    _one(f"loaderx-*-manylinux2014_{MACHINE}.*.whl")
    for wheel in sorted(DIST.glob("loaderx-*.whl")):
        tag = re.fullmatch(r"loaderx-[^-]+-cp310-abi3-manylinux2014_(\w+)\.manylinux_2_17_\1\.whl",
                           wheel.name)
        assert tag, wheel.name
        _check_wheel(wheel, tag.group(1))


def _check_wheel(wheel: Path, arch: str) -> None:
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        meta = z.read(next(n for n in names if n.endswith(".dist-info/WHEEL"))).decode()
    assert f"Tag: cp310-abi3-manylinux_2_17_{arch}" in meta
    # The native module, the Python sources and the stubs are all there.
    assert any(n.startswith("loaderx/_native") and n.endswith(".so") for n in names)
    for name in ("__init__.py", "dataloader.py", "dataset.py", "_native.pyi", "py.typed"):
        assert f"loaderx/{name}" in names


def test_the_wheel_runs_the_quick_start_in_a_clean_venv():
    wheel = _one(f"loaderx-*-manylinux2014_{MACHINE}.*.whl")
    assert _smoke_test(wheel) == SMOKE


def test_the_sdist_builds_and_runs_the_quick_start_in_a_clean_venv():
    sdist = _one("loaderx-*.tar.gz")
    # pip builds it in isolation with maturin from PyPI. It shares the
    # target folder of scripts/setup.sh's build: cargo names a workspace's
    # artifacts by paths relative to its root, so the unpacked sdist reuses
    # what that build compiled from the same sources, and compiles whatever
    # differs. A file the sdist lacks still fails the build.
    out = _smoke_test(sdist, CARGO_TARGET_DIR=str(ROOT / "target"))
    assert out == SMOKE
