"""DataLoader(shard=(index, count)): every process gets a disjoint,
deterministic part of each global batch, and the parts together are the
unsharded batch; checked in-process and across real processes."""

import textwrap

import numpy as np
import pytest

from conftest import run_hosts
from loaderx import DataLoader, Dataset, Sampler

N = 1000
GLOBAL = 24


@pytest.fixture
def indexed(tmp_path):
    """Streams whose values encode the sample index, so a batch tells which
    samples it holds."""
    ids = Dataset.write(tmp_path / "ids", np.arange(N, dtype=np.int64), durable=False)
    rows = Dataset.write(tmp_path / "rows",
                         (np.arange(N)[:, None] * 3 + np.arange(3)).astype(np.int32),
                         durable=False)
    yield tmp_path, ids, rows
    ids.close()
    rows.close()


@pytest.mark.parametrize("mode", [0, 1, 2])
def test_the_shards_of_every_step_are_the_global_batch(indexed, mode):
    _, ids, rows = indexed
    streams = {"id": ids, "row": rows}
    with DataLoader(streams, batch_size=GLOBAL, mode=mode, seed=6) as whole:
        reference = [next(whole) for _ in range(30)]
    for count in (2, 3, 4):
        loaders = [DataLoader(streams, batch_size=GLOBAL, mode=mode, seed=6,
                              shard=(i, count), num_workers=1) for i in range(count)]
        for step, want in enumerate(reference):
            parts = [next(loader) for loader in loaders]
            for p in parts:
                assert p["id"].shape == (GLOBAL // count,)
            for key in ("id", "row"):
                assert np.array_equal(np.concatenate([p[key] for p in parts]), want[key])
        for loader in loaders:
            loader.close()


def test_shards_of_a_shuffle_epoch_are_disjoint_and_cover_it(indexed):
    _, ids, _ = indexed
    count, steps = 4, N // 40  # batch 40: one epoch is 25 steps
    seen = []
    for i in range(count):
        with DataLoader(ids, batch_size=40, mode=2, seed=1, shard=(i, count)) as loader:
            seen.append(np.concatenate([next(loader)["data"] for _ in range(steps)]))
    everything = np.concatenate(seen)
    assert np.array_equal(np.sort(everything), np.arange(N))  # each sample once


def test_bad_shards_are_refused(indexed):
    _, ids, _ = indexed
    with pytest.raises(ValueError, match="divisible"):
        DataLoader(ids, batch_size=10, shard=(0, 4))
    with pytest.raises(ValueError, match="out of range"):
        DataLoader(ids, batch_size=10, shard=(2, 2))
    with pytest.raises(ValueError, match="at least 1"):
        DataLoader(ids, batch_size=10, shard=(0, 0))
    for bad in ((1,), "01", (0.0, 2), 3):
        with pytest.raises(TypeError, match="shard"):
            DataLoader(ids, batch_size=10, shard=bad)
    loader = DataLoader(ids, batch_size=10, shard=(1, 5))
    assert loader.sampler.shard == (1, 5) and loader.sampler.local_batch_size == 2
    assert next(loader)["data"].shape == (2,)
    loader.close()


WORKER = textwrap.dedent("""
    import json, sys
    import numpy as np
    from loaderx import DataLoader, Dataset
    path, index, count, mode, steps, start = sys.argv[1:]
    index, count, mode, steps, start = map(int, (index, count, mode, steps, start))
    ids = Dataset(path)
    loader = DataLoader(ids, batch_size=%d, mode=mode, seed=17, shard=(index, count))
    state = {**loader.state_dict(), "step": start}
    loader.load_state_dict(state)
    batches = [next(loader)["data"].tolist() for _ in range(steps)]
    print(json.dumps({"batches": batches, "state": loader.state_dict()}))
    loader.close()
""" % GLOBAL)


@pytest.mark.parametrize("mode", [1, 2])
def test_several_processes_see_each_sample_of_a_step_exactly_once(indexed, mode):
    tmp, ids, _ = indexed
    count, steps, start = 3, 12, 40
    results = run_hosts(WORKER, [(tmp / "ids", i, count, mode, steps, start)
                                 for i in range(count)])
    sampler = Sampler(N, GLOBAL, mode, 17)
    for k in range(steps):
        union = np.concatenate([r["batches"][k] for r in results])
        assert np.array_equal(union, sampler.batch(start + k).astype(np.int64)), k
    for i, r in enumerate(results):
        assert r["state"]["step"] == start + steps
        assert r["state"]["sampler"]["shard"] == [i, count]
