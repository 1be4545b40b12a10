"""The guides' Python blocks, run as tests.

Every ```python block of docs/loader.md, docs/reliability.md,
docs/compatibility.md, docs/data.md and docs/images.md runs, in order, in one namespace per guide, in a
temporary directory; each ``print(...)  # value`` line must print that value
(``...`` in it matches anything), and a block must print nothing else. A
block whose first line is ``# needs: jax`` (any comma-separated module
names) runs only where those modules import; the test of that guide and
module reports the skip. Blocks of other languages (shell commands) are not
run. Relative links of the README and the guides must name files that exist.

`run_python_blocks` serves test_readme.py too.
"""

import gc
import importlib.util
import re
import textwrap
from pathlib import Path

import pytest

from conftest import loader_threads

REPO = Path(__file__).resolve().parents[2]
GUIDES = [
    "docs/loader.md", "docs/reliability.md", "docs/compatibility.md", "docs/data.md",
    "docs/images.md",
]

#: A fenced block, possibly indented (inside a list item) as a whole.
_BLOCK = re.compile(r"^( *)```python\n(.*?)^\1```", re.S | re.M)
_NEEDS = re.compile(r"\A# needs: ([\w., ]+)\n")
_SAYS = re.compile(r"^\s*print\(.*\)\s*#\s*(.+)$", re.M)


def python_blocks(path):
    """(first line number in the file, text) of each ```python block."""
    text = path.read_text(encoding="utf-8")
    return [
        (text.count("\n", 0, m.start(2)) + 1, textwrap.dedent(m.group(2)))
        for m in _BLOCK.finditer(text)
    ]


def needs(block):
    """The modules a block declares it needs (``# needs: a, b``)."""
    m = _NEEDS.match(block)
    return [name.strip() for name in m.group(1).split(",")] if m else []


def _missing(block):
    return [name for name in needs(block) if importlib.util.find_spec(name) is None]


def run_python_blocks(path, tmp_path, monkeypatch, capsys):
    """Runs the ```python blocks of `path` as described in the module
    docstring; returns how many ran. Closes every loaderx object the blocks
    left open and checks that no loader thread survives."""
    blocks = python_blocks(path)
    monkeypatch.chdir(tmp_path)
    ns: dict = {"__name__": "__doc_blocks__"}
    ran = 0
    try:
        for line, block in blocks:
            if _missing(block):
                continue
            # Pad with newlines so that tracebacks give the line in the file.
            exec(compile("\n" * (line - 1) + block, str(path), "exec"), ns)
            ran += 1
            printed = capsys.readouterr().out.splitlines()
            said = [m.group(1).strip() for m in _SAYS.finditer(block)]
            where = f"{path.name}, block at line {line}"
            assert len(said) == len(printed), f"{where} prints {printed}, says {said}"
            for want, got in zip(said, printed):
                pattern = ".*".join(re.escape(part) for part in want.split("..."))
                assert re.fullmatch(pattern, got), f"{where} says {want!r}, printed {got!r}"
    finally:
        for value in list(ns.values()):
            if type(value).__module__.startswith("loaderx") and callable(
                getattr(value, "close", None)
            ):
                value.close()
        ns.clear()
        gc.collect()
    assert loader_threads() == []
    return ran


@pytest.mark.parametrize("guide", GUIDES)
def test_guide_python_blocks_run_and_print_what_they_say(guide, tmp_path, monkeypatch, capsys):
    path = REPO / guide
    assert python_blocks(path), f"{guide} has no python block"
    run_python_blocks(path, tmp_path, monkeypatch, capsys)


def _optional():
    pairs = []
    for guide in GUIDES:
        path = REPO / guide
        if path.is_file():
            for _, block in python_blocks(path):
                pairs += [(guide, name) for name in needs(block) if (guide, name) not in pairs]
    return pairs or [pytest.param(None, None, marks=pytest.mark.skip(reason="none"))]


@pytest.mark.parametrize(("guide", "module"), _optional())
def test_blocks_that_need_an_optional_module(guide, module):
    """Reports the blocks that did not run because `module` is missing; where
    it imports, the guide's own test ran them."""
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{guide}: the blocks that need {module} did not run ({module} is not installed)")


_LINK = re.compile(r"\]\(([^)#\s]+)(#[^)\s]*)?\)")


@pytest.mark.parametrize("doc", ["README.md", *GUIDES])
def test_relative_links_name_files_that_exist(doc):
    path = REPO / doc
    broken = [
        target
        for target, _ in _LINK.findall(path.read_text(encoding="utf-8"))
        if "://" not in target and not (path.parent / target).exists()
    ]
    assert not broken, f"{doc} links to files that do not exist: {broken}"
