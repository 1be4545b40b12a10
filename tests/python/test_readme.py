"""The examples of the loaderx 0.5.0 README, run as written.

They run in a temporary directory on small generated .npy files. When the
spec README is reachable (shared/spec beside the repository), the snippets
below are checked to be exactly its code blocks. The last test runs the
Python blocks of this repository's README the way test_docs.py runs the
guides'.
"""

import gc
import re
import textwrap
from pathlib import Path

import numpy as np
import pytest

from conftest import loader_threads
from test_docs import run_python_blocks

CONVERTING = textwrap.dedent("""\
    import numpy as np
    from loaderx import Dataset

    Dataset.write('train_data.zr', np.load('data.npy', mmap_mode='r'))
    Dataset.write('train_label.zr', np.load('label.npy', mmap_mode='r'))
""")

QUICK_START = textwrap.dedent("""\
    from loaderx import Dataset, DataLoader

    dataset = Dataset('train_data.zr')
    labelset = Dataset('train_label.zr')

    loader = DataLoader(dataset, labelset)

    for i, batch in enumerate(loader):
        if i >= 256:
            break

    print(batch['data'].shape)
    print(batch['label'].shape)
""")

REMOVING = textwrap.dedent("""\
    ds = Dataset('train_data.zr')
    ds.delete([7, 12, 40])   # len shrinks; survivors stay addressable as 0..len
    ds.compact()             # reclaim the freed space on disk
    print(ds.stats())        # {'records': ..., 'live_bytes': ..., 'reclaimable': ...}
""")


def _spec_readme():
    here = Path(__file__).resolve()
    for base in here.parents:
        candidate = base / "shared" / "spec" / "loaderx-0.5.0-README.md"
        if candidate.is_file():
            return candidate
    return None


def test_snippets_are_the_spec_readme_code_blocks():
    readme = _spec_readme()
    if readme is None:
        pytest.skip("shared/spec/loaderx-0.5.0-README.md is not reachable from here")
    blocks = re.findall(r"```python\n(.*?)```", readme.read_text(), re.S)
    for snippet in (QUICK_START, CONVERTING, REMOVING):
        assert snippet in blocks


def test_readme_examples_run_as_written(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)
    np.save("data.npy", rng.integers(0, 256, size=(1000, 28, 28), dtype=np.uint8))
    np.save("label.npy", rng.integers(0, 10, size=1000).astype(np.int64))

    exec(CONVERTING, {})
    exec(QUICK_START, {})
    gc.collect()  # the example leaves its loader to the garbage collector
    assert loader_threads() == []
    assert capsys.readouterr().out == "(256, 28, 28)\n(256,)\n"

    ns = {}
    exec("from loaderx import Dataset\n" + REMOVING, ns)
    out = capsys.readouterr().out
    stats = eval(out)
    assert stats["records"] == 997 and stats["reclaimable"] == 0
    assert set(stats) == {"records", "live_bytes", "chunk_bytes", "reclaimable"}
    data = np.load("data.npy")
    kept = {data[i].tobytes() for i in range(1000) if i not in (7, 12, 40)}
    assert {s.tobytes() for s in ns["ds"][:]} == kept
    ns["ds"].close()


def test_our_readme_python_blocks_run_and_print_what_they_say(tmp_path, monkeypatch, capsys):
    """Every ```python block of this repository's README runs, in order, in
    one namespace, and each ``print(...)  # value`` line prints that value
    (``...`` in it matches anything); see test_docs.run_python_blocks."""
    readme = Path(__file__).resolve().parents[2] / "README.md"
    assert run_python_blocks(readme, tmp_path, monkeypatch, capsys) >= 3
