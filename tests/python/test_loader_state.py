"""DataLoader.state_dict / load_state_dict / state=: exact resumption, in
this process and in a fresh one, whatever the worker counts, and refusal of
a state that belongs to another configuration."""

import hashlib
import json
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from conftest import array_of
from loaderx import DataLoader, Dataset, RaggedDataset, Sampler

N = 300


@pytest.fixture
def stores(tmp_path):
    data = array_of(np.float32, (N, 5, 3), seed=3)
    labels = np.arange(N, dtype=np.int64) * 11
    ds = Dataset.write(tmp_path / "data.zr", data, durable=False)
    ls = Dataset.write(tmp_path / "label.zr", labels, durable=False)
    yield tmp_path, ds, ls
    ds.close()
    ls.close()


def take(loader, n):
    return [next(loader) for _ in range(n)]


def digest(batch):
    """A hash of a batch's bytes (keys, dtypes and shapes included)."""
    h = hashlib.sha256()
    for key in sorted(batch):
        a = np.ascontiguousarray(batch[key])
        h.update(f"{key}:{a.dtype.str}:{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def test_state_dict_is_small_json_and_names_the_configuration(stores):
    _, ds, ls = stores
    with DataLoader(ds, ls, batch_size=20, mode=2, seed=9, shard=(1, 2)) as loader:
        state = loader.state_dict()
        assert state["step"] == 0
        take(loader, 3)
        state = loader.state_dict()
    text = json.dumps(state)
    assert len(text) < 1000 and json.loads(text) == state
    assert state["version"] == 1 and state["step"] == 3
    assert state["sampler"] == {"mode": 2, "seed": 9, "batch_size": 20, "length": N,
                                "shard": [1, 2]}
    assert state["streams"] == {
        "data": {"kind": "fixed", "dtype": "<f4", "shape": [5, 3], "length": N},
        "label": {"kind": "fixed", "dtype": "<i8", "shape": [], "length": N},
    }
    assert isinstance(state["fingerprint"], str) and len(state["fingerprint"]) == 16
    assert loader.state_dict() == state  # still readable after close


@pytest.mark.parametrize("mode", [0, 1, 2])
@pytest.mark.parametrize("workers", [(1, 4), (4, 1)])
def test_resuming_gives_bit_identical_batches(stores, mode, workers):
    _, ds, ls = stores
    before, after = workers
    with DataLoader(ds, ls, num_workers=before, batch_size=32, mode=mode, seed=5) as loader:
        reference = [digest(b) for b in take(loader, 30)]
    with DataLoader(ds, ls, num_workers=before, batch_size=32, prefetch_size=6, mode=mode,
                    seed=5) as loader:
        first = [digest(b) for b in take(loader, 12)]
        time.sleep(0.05)  # the workers run ahead; the state must not follow them
        state = json.loads(json.dumps(loader.state_dict()))
    assert state["step"] == 12 and first == reference[:12]
    with DataLoader(ds, ls, num_workers=after, batch_size=32, prefetch_size=2, mode=mode,
                    seed=5, state=state) as resumed:
        assert resumed.step == 12
        assert [digest(b) for b in take(resumed, 18)] == reference[12:]


def test_load_state_dict_moves_a_running_loader_backwards_and_forwards(stores):
    _, ds, ls = stores
    loader = DataLoader(ds, ls, batch_size=16, mode=2, seed=1)
    reference = [digest(b) for b in take(loader, 20)]
    at_5 = {**loader.state_dict(), "step": 5}
    loader.load_state_dict(at_5)
    assert loader.step == 5
    assert [digest(b) for b in take(loader, 3)] == reference[5:8]
    loader.load_state_dict({**at_5, "step": 15})
    assert [digest(b) for b in take(loader, 5)] == reference[15:20]
    loader.close()
    loader.load_state_dict(at_5)  # a closed loader only records the position
    assert loader.step == 5 and loader.closed


def test_the_state_counts_what_the_consumer_got_with_a_transform_pool(stores):
    _, ds, ls = stores

    def transform(pair):
        x, y = pair
        return x[:, ::-1].copy(), y + 1

    kwargs = dict(batch_size=10, mode=1, seed=3, transform=transform)
    with DataLoader(ds, ls, transform_workers=3, prefetch_size=8, **kwargs) as loader:
        reference = [digest(b) for b in take(loader, 25)]
    with DataLoader(ds, ls, transform_workers=3, prefetch_size=8, **kwargs) as loader:
        take(loader, 9)
        time.sleep(0.1)  # let the pool and the workers run as far ahead as they may
        state = loader.state_dict()
    assert state["step"] == 9
    with DataLoader(ds, ls, transform_workers=0, state=state, **kwargs) as loader:
        assert [digest(b) for b in take(loader, 16)] == reference[9:]


def test_a_step_whose_transform_raised_counts_as_delivered(stores):
    _, ds, ls = stores

    def transform(pair):
        x, y = pair
        if y[0] == 0:  # step 0 of SEQUENTIAL starts at index 0
            raise RuntimeError("bad batch")
        return pair

    with DataLoader(ds, ls, batch_size=10, mode=0, transform=transform) as loader:
        with pytest.raises(RuntimeError, match="bad batch"):
            next(loader)
        assert loader.state_dict()["step"] == 1
        assert next(loader)["label"][0] == 10 * 11


def test_resume_in_a_fresh_process_with_other_workers(stores):
    tmp, ds, ls = stores
    ragged = RaggedDataset.write(tmp / "ragged", [np.arange(i % 9, dtype=np.int32) + i
                                                  for i in range(N)], durable=False)
    kwargs = dict(batch_size=24, mode=2, seed=21, shard=(0, 2), pad=True)
    streams = {"x": ds, "y": ls, "r": ragged}

    def flat(batch):
        out = {"x": batch["x"], "y": batch["y"]}
        out.update({f"r.{k}": v for k, v in batch["r"].items()})
        return out

    with DataLoader(streams, num_workers=2, **kwargs) as loader:
        reference = [digest(flat(b)) for b in take(loader, 20)]
        loader.load_state_dict({**loader.state_dict(), "step": 7})
        state = loader.state_dict()
    ragged.close()
    script = textwrap.dedent(f"""
        import hashlib, json, sys
        import numpy as np
        from loaderx import DataLoader, Dataset, RaggedDataset
        state = json.loads(sys.stdin.read())
        streams = {{"x": Dataset({str(tmp / 'data.zr')!r}), "y": Dataset({str(tmp / 'label.zr')!r}),
                   "r": RaggedDataset({str(tmp / 'ragged')!r})}}
        def digest(batch):
            h = hashlib.sha256()
            for key in sorted(batch):
                a = np.ascontiguousarray(batch[key])
                h.update(f"{{key}}:{{a.dtype.str}}:{{a.shape}}".encode())
                h.update(a.tobytes())
            return h.hexdigest()
        def flat(batch):
            out = {{"x": batch["x"], "y": batch["y"]}}
            out.update({{f"r.{{k}}": v for k, v in batch["r"].items()}})
            return out
        loader = DataLoader(streams, num_workers=1, prefetch_size=1, state=state,
                            batch_size=24, mode=2, seed=21, shard=(0, 2), pad=True,
                            transform_workers=2)
        print(json.dumps([digest(flat(next(loader))) for _ in range(13)]))
        loader.close()
    """)
    out = subprocess.run([sys.executable, "-c", script], input=json.dumps(state),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == reference[7:]


def test_a_state_of_another_configuration_is_refused(stores, tmp_path):
    tmp, ds, ls = stores
    with DataLoader(ds, ls, batch_size=20, mode=2, seed=9) as loader:
        take(loader, 2)
        state = loader.state_dict()
    longer = Dataset.write(tmp / "longer", np.zeros(N + 1, np.int64), durable=False)
    other_dtype = Dataset.write(tmp / "f32", np.zeros(N, np.float32), durable=False)
    for kwargs, match in [
        (dict(seed=10), "seed"),
        (dict(mode=1), "mode"),
        (dict(batch_size=40), "batch_size"),
        (dict(epochs=1), "epochs"),
    ]:
        with pytest.raises(ValueError, match=match):
            DataLoader(ds, ls, **{"batch_size": 20, "mode": 2, "seed": 9, **kwargs},
                       state=state)
    with pytest.raises(ValueError, match="length"):
        DataLoader(ds, ls, batch_size=20, mode=2, seed=9, state={
            **state, "sampler": {**state["sampler"], "length": N + 1}})
    with pytest.raises(ValueError, match="same length"):
        DataLoader(ds, longer, batch_size=20, mode=2, seed=9, state=state)
    with pytest.raises(ValueError, match="label"):
        DataLoader(ds, other_dtype, batch_size=20, mode=2, seed=9, state=state)
    with pytest.raises(ValueError, match="streams"):
        DataLoader({"data": ds, "labels": ls}, batch_size=20, mode=2, seed=9, state=state)
    for bad, match in [({**state, "version": 2}, "version"), ({**state, "step": -1}, "step"),
                       ({**state, "step": "3"}, "step"), ([1, 2], "dict"),
                       ({**state, "fingerprint": "0" * 16}, "fingerprint")]:
        with pytest.raises(ValueError, match=match):
            DataLoader(ds, ls, batch_size=20, mode=2, seed=9, state=bad)
    with DataLoader(ds, ls, batch_size=20, mode=2, seed=10) as loader:
        with pytest.raises(ValueError, match="seed"):
            loader.load_state_dict(state)
        assert loader.step == 0  # unchanged
    # The matching configuration accepts it, with any worker counts.
    with DataLoader(ds, ls, num_workers=1, prefetch_size=1, batch_size=20, mode=2, seed=9,
                    state=state) as loader:
        assert loader.step == 2
        assert np.array_equal(next(loader)["label"],
                              ls[Sampler(N, 20, 2, 9).batch(2).astype(np.int64)])
    longer.close()
    other_dtype.close()
