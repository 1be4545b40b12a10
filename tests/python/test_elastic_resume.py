"""Elastic resume: a state saved by the loaders of one shard count resumes
on another, continuing the same global sequence of batches and the same
per-sample random draws; checked with real processes, 4 hosts, then 2,
then 1, against an uninterrupted single-host run."""

import json
import textwrap

import numpy as np
import pytest

from conftest import run_hosts
from loaderx import DataLoader, Dataset

N = 997  # prime: epochs end mid-batch
GLOBAL = 24

HOST = textwrap.dedent("""
    import json, sys
    from loaderx import DataLoader, Dataset
    path, index, count, steps, state = sys.argv[1:]
    index, count, steps = int(index), int(count), int(steps)
    state = json.loads(state) if state != "-" else None

    def draw(batch, rngs):
        batch["draw"] = [int(rngs[k].integers(1 << 40)) for k in range(len(rngs))]
        return batch

    with Dataset(path) as ids, DataLoader(
        ids, batch_size=%d, mode=2, seed=3, shard=(index, count), num_workers=2,
        transform=draw, transform_workers=2, sample_rngs=True, state=state,
    ) as loader:
        batches = []
        for _ in range(steps):
            b = next(loader)
            batches.append({"ids": b["data"].tolist(), "draw": b["draw"]})
        print(json.dumps({"batches": batches, "state": loader.state_dict()}))
""" % GLOBAL)


def hosts(path, count, steps, state):
    """`count` hosts running `steps` steps from `state` (None: the start)."""
    state = json.dumps(state) if state else "-"
    return run_hosts(HOST, [(path, i, count, steps, state) for i in range(count)])


def joined(results, step):
    """The global batch of `step` from the hosts' parts."""
    return ([x for r in results for x in r["batches"][step]["ids"]],
            [x for r in results for x in r["batches"][step]["draw"]])


def test_4_hosts_then_2_then_1_deliver_the_uninterrupted_run(tmp_path):
    ids = Dataset.write(tmp_path / "ids", np.arange(N, dtype=np.int64), durable=False)
    ids.close()
    plan = [(4, 50), (2, 30), (1, 20)]
    single = hosts(tmp_path / "ids", 1, sum(s for _, s in plan), None)[0]["batches"]

    state, step = None, 0
    for count, steps in plan:
        results = hosts(tmp_path / "ids", count, steps, state)
        states = [r["state"] for r in results]
        for i, s in enumerate(states):
            assert s["step"] == step + steps and s["sampler"]["shard"] == [i, count]
        # Each host's state continues the job; take any of them.
        state = states[-1]
        for k in range(steps):
            want = single[step + k]
            assert joined(results, k) == (want["ids"], want["draw"]), (count, step + k)
        step += steps


def test_a_shard_count_that_does_not_divide_the_batch_is_refused(tmp_path):
    ids = Dataset.write(tmp_path / "ids", np.arange(N, dtype=np.int64), durable=False)
    with DataLoader(ids, batch_size=GLOBAL, mode=2, shard=(0, 4)) as loader:
        next(loader)
        state = loader.state_dict()
    with pytest.raises(ValueError, match="divisible"):
        DataLoader(ids, batch_size=GLOBAL, mode=2, shard=(0, 5), state=state)
    with DataLoader(ids, batch_size=GLOBAL, mode=2, shard=(2, 3), state=state) as loader:
        assert loader.step == 1
    ids.close()
