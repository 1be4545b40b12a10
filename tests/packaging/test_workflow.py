"""The hosted-CI workflow that builds and publishes the wheels is valid.

check-jsonschema (installed into .tools-venv by scripts/build-wheels.sh)
validates it against the GitHub workflow schema it ships, offline.
"""

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHECKER = ROOT / ".tools-venv" / "bin" / "check-jsonschema"


def _check(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(CHECKER), "--builtin-schema", "vendor.github-workflows", str(path)],
        capture_output=True, text=True,
    )


def test_the_wheels_workflow_matches_the_github_schema():
    assert CHECKER.exists(), "run `bash scripts/build-wheels.sh` first (it installs the checker)"
    done = _check(ROOT / ".github" / "workflows" / "wheels.yml")
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_checker_rejects_a_broken_workflow(tmp_path):
    broken = tmp_path / "broken.yml"
    broken.write_text("name: x\non: push\njobs:\n  build:\n    steps: 3\n")
    assert _check(broken).returncode != 0
