"""DataLoader(epochs=n): a finite pass, every sample n times, then the
end; a short or padded last batch; sharded so that every host runs the same
steps and the hosts' valid samples are the dataset once; resumable in the
middle; checked in-process and with real processes."""

import textwrap

import numpy as np
import pytest

from conftest import run_hosts
from loaderx import BytesDataset, DataLoader, Dataset, RaggedDataset

N = 101


@pytest.fixture
def ids(tmp_path):
    ds = Dataset.write(tmp_path / "ids", np.arange(N, dtype=np.int64), durable=False)
    yield ds
    ds.close()


@pytest.mark.parametrize("transform_workers", [0, 2])
def test_a_sequential_pass_is_the_dataset_in_order_then_stops(ids, transform_workers):
    with DataLoader(ids, batch_size=16, mode=0, epochs=1, num_workers=2,
                    transform=lambda b: b, transform_workers=transform_workers) as loader:
        assert len(loader) == 7
        batches = [b["data"] for b in loader]
        assert loader.step == 7
        with pytest.raises(StopIteration):
            next(loader)
    assert [len(b) for b in batches] == [16] * 6 + [5]
    assert np.array_equal(np.concatenate(batches), np.arange(N))


def test_a_shuffled_padded_pass_marks_its_padding(ids):
    with DataLoader(ids, batch_size=16, mode=2, seed=4, epochs=3, last_batch="pad") as loader:
        batches = list(loader)
    assert len(batches) == -(-3 * N // 16)
    assert all(b["data"].shape == (16,) and b["valid"].dtype == bool for b in batches)
    valid = np.concatenate([b["data"][b["valid"]] for b in batches])
    assert np.array_equal(np.sort(valid), np.repeat(np.arange(N), 3))
    last = batches[-1]
    assert last["valid"].sum() == 3 * N - 16 * (len(batches) - 1)
    assert not last["valid"][-1] and (last["data"][~last["valid"]] == valid[-1]).all()
    # Each epoch is a permutation: the first N valid samples are all of them.
    assert np.array_equal(np.sort(valid[:N]), np.arange(N))


def test_a_pass_resumes_in_the_middle(ids):
    kwargs = dict(batch_size=8, mode=2, seed=9, epochs=2)
    with DataLoader(ids, **kwargs) as loader:
        whole = [b["data"].tolist() for b in loader]
    with DataLoader(ids, **kwargs) as loader:
        first = [next(loader)["data"].tolist() for _ in range(11)]
        state = loader.state_dict()
    assert state["sampler"]["epochs"] == 2 and state["sampler"]["last_batch"] == "partial"
    with DataLoader(ids, **kwargs, state=state) as loader:
        rest = [b["data"].tolist() for b in loader]
        done = loader.state_dict()
    assert first + rest == whole
    with DataLoader(ids, **kwargs, state=done) as loader:
        assert list(loader) == []
    with pytest.raises(ValueError, match="epochs"):
        DataLoader(ids, batch_size=8, mode=2, seed=9, state=state)


def test_every_stream_kind_has_a_short_last_batch(tmp_path, ids):
    items = [b"x" * (i % 7) for i in range(N)]
    words = BytesDataset.write(tmp_path / "words", items, durable=False)
    rows = RaggedDataset.write(tmp_path / "rows",
                               [np.full(i % 5, i, np.int32) for i in range(N)], durable=False)
    with DataLoader({"id": ids, "word": words, "row": rows}, batch_size=40, mode=0,
                    epochs=1) as loader:
        last = list(loader)[-1]
    assert last["id"].tolist() == list(range(80, N))
    assert last["word"] == items[80:]
    assert last["row"]["offsets"].shape == (N - 80 + 1,)
    words.close()
    rows.close()


def test_a_pass_is_refused_where_it_cannot_be_made(ids):
    with pytest.raises(ValueError, match="IID"):
        DataLoader(ids, mode=1, epochs=1)
    with pytest.raises(ValueError, match="epochs"):
        DataLoader(ids, mode=0, epochs=0)
    with pytest.raises(ValueError, match="last_batch"):
        DataLoader(ids, mode=0, epochs=1, last_batch="drop")
    with pytest.raises(ValueError, match="valid"):
        DataLoader({"valid": ids}, mode=0, epochs=1, last_batch="pad")
    with DataLoader(ids, mode=0) as endless, pytest.raises(TypeError, match="endless"):
        len(endless)


HOST = textwrap.dedent("""
    import json, sys
    import numpy as np
    from loaderx import DataLoader, Dataset
    path, index, count, last = sys.argv[1:]
    with Dataset(path) as ids, DataLoader(
        ids, batch_size=12, mode=2, seed=5, shard=(int(index), int(count)), epochs=1,
        last_batch=last,
    ) as loader:
        out = []
        for b in loader:
            valid = b["valid"] if last == "pad" else np.ones(len(b["data"]), bool)
            out.append({"n": len(b["data"]), "valid": b["data"][valid].tolist()})
    print(json.dumps(out))
""")


@pytest.mark.parametrize("count,last", [(3, "pad"), (4, "partial"), (2, "pad")])
def test_hosts_run_the_same_steps_and_see_the_dataset_once(ids, count, last):
    results = run_hosts(HOST, [(ids.path, i, count, last) for i in range(count)])
    steps = -(-N // 12)
    assert [len(r) for r in results] == [steps] * count
    if last == "pad":
        assert all(b["n"] == 12 // count for r in results for b in r)
    seen = sorted(x for r in results for b in r for x in b["valid"])
    assert seen == list(range(N))
    # The last step's samples are shared out evenly.
    shares = [len(r[-1]["valid"]) for r in results]
    assert max(shares) - min(shares) <= 1 and sum(shares) == N - 12 * (steps - 1)
