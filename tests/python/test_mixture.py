"""Mixture: sources mixed by weight in the DataLoader; each sample read
from its own source (fixed, ragged and byte streams), a ``source``
stream, the weights held exactly or drawn, every source in its own order and
epochs, exact resume (also on another shard count), and clear refusals."""

import json

import numpy as np
import pytest

from loaderx import BytesDataset, DataLoader, Dataset, Mixture, RaggedDataset, Sampler

SIZES = [50, 400, 7]


@pytest.fixture
def tables(tmp_path):
    """Three tables whose values say which source and which row they are:
    id = 1000 * source + row."""
    out = []
    for j, n in enumerate(SIZES):
        rows = np.arange(n)
        out.append({
            "id": Dataset.write(tmp_path / f"id{j}", 1000 * j + rows, durable=False),
            "vec": Dataset.write(tmp_path / f"vec{j}",
                                 np.stack([1000 * j + rows] * 3, 1).astype(np.float32),
                                 durable=False),
            "tokens": RaggedDataset.write(tmp_path / f"tok{j}",
                                          [np.full(r % 5, 1000 * j + r) for r in rows],
                                          durable=False),
            "text": BytesDataset.write(tmp_path / f"text{j}", [f"{j}:{r}" for r in rows],
                                       durable=False),
        })
    yield out
    for t in out:
        for ds in t.values():
            ds.close()


def check(batch):
    """Every stream of every sample belongs to the sample its id names."""
    ids = batch["id"]
    assert np.array_equal(batch["source"], ids // 1000)
    assert batch["source"].dtype == np.int32
    assert np.array_equal(batch["vec"], np.stack([ids] * 3, 1).astype(np.float32))
    assert batch["text"] == [f"{i // 1000}:{i % 1000}" for i in ids]
    offsets = batch["tokens"]["offsets"]
    for k, i in enumerate(ids):
        part = batch["tokens"]["values"][offsets[k]:offsets[k + 1]]
        assert len(part) == (i % 1000) % 5 and (part == i).all()


def test_each_sample_comes_whole_from_its_own_source(tables):
    with DataLoader(Mixture(tables, [0.5, 0.3, 0.2]), batch_size=20, mode=2, seed=3,
                    num_workers=2) as loader:
        for _ in range(30):
            batch = next(loader)
            check(batch)
            assert np.bincount(batch["source"], minlength=3).tolist() == [10, 6, 4]


def test_sources_keep_their_own_order_and_epochs(tables):
    mix = Mixture(tables, [1, 1, 1], modes=Sampler.Mode.SEQUENTIAL)
    with DataLoader(mix, batch_size=30, num_workers=1) as loader:
        ids = np.concatenate([next(loader)["id"] for _ in range(40)])
    for j, n in enumerate(SIZES):
        rows = ids[ids // 1000 == j] % 1000
        assert np.array_equal(rows, np.arange(len(rows)) % n), j  # 7 rows repeat 57 times
    with DataLoader(Mixture(tables, [1, 1, 1], modes=2), batch_size=30) as loader:
        ids = np.concatenate([next(loader)["id"] for _ in range(40)])
    small = ids[ids // 1000 == 2] % 1000
    for epoch in small[: len(small) // 7 * 7].reshape(-1, 7):
        assert sorted(epoch) == list(range(7))


def test_drawn_proportions_vary_per_batch_and_hold_overall(tables):
    weights = [0.6, 0.3, 0.1]
    with DataLoader(Mixture(tables, weights, proportions="drawn"), batch_size=50, mode=2,
                    seed=1) as loader:
        counts = np.array([np.bincount(next(loader)["source"], minlength=3)
                           for _ in range(200)])
    assert len({tuple(c) for c in counts}) > 10, "batches differ"
    expected = 50 * np.array(weights)
    chi2 = ((counts - expected) ** 2 / expected).sum(1)
    assert 1.0 < chi2.mean() < 3.5  # a chi-square(2) draw has mean 2
    total = counts.sum(0)
    assert (((total - total.sum() * np.array(weights)) ** 2)
            / (total.sum() * np.array(weights))).sum() < 13.8  # p = 0.001


def test_a_mixture_resumes_exactly_also_on_another_shard_count(tables):
    kwargs = dict(batch_size=24, mode=2, seed=7)
    mix = Mixture(tables, [0.5, 0.3, 0.2], proportions="drawn")
    with DataLoader(mix, **kwargs) as loader:
        whole = [next(loader)["id"] for _ in range(12)]
    with DataLoader(mix, **kwargs, shard=(1, 2)) as loader:
        for _ in range(5):
            next(loader)
        state = json.loads(json.dumps(loader.state_dict()))
    assert state["sampler"]["mixture"]["weights"] == [5, 3, 2]
    parts = []
    for i in range(3):
        with DataLoader(mix, **kwargs, shard=(i, 3), state=state) as loader:
            parts.append([next(loader)["id"] for _ in range(7)])
    for k in range(7):
        assert np.array_equal(np.concatenate([p[k] for p in parts]), whole[5 + k])
    other = Mixture(tables, [0.5, 0.2, 0.3], proportions="drawn")
    with pytest.raises(ValueError, match="mixture"):
        DataLoader(other, **kwargs, state=state)


def test_datasets_mix_with_the_loaders_options(tables):
    seen = {}

    def keep(batch, rngs):
        seen["seeds"] = rngs.seeds
        return batch

    mix = Mixture([t["id"] for t in tables], [2, 1, 1])
    with DataLoader(mix, batch_size=8, mode=0, transform=keep, sample_rngs=True,
                    transform_workers=0) as loader:
        batch = next(loader)
    assert sorted(batch) == ["data", "source"]
    assert np.array_equal(batch["data"] // 1000, batch["source"])
    assert len(seen["seeds"]) == 8


def test_bad_mixtures_are_refused(tables, tmp_path):
    floats = Dataset.write(tmp_path / "f", np.zeros(5, np.float32), durable=False)
    cases = [
        (lambda: Mixture([tables[0]["id"], floats], [1, 1]), ValueError, "same stream"),
        (lambda: Mixture([tables[0], {"id": tables[1]["id"]}], [1, 1]), ValueError,
         "same stream"),
        (lambda: Mixture(tables, [1, 1]), ValueError, "3 sources but 2 weights"),
        (lambda: Mixture(tables, [1, 1, 1], proportions="random"), ValueError, "proportions"),
        (lambda: Mixture(tables, [1, 1, 1], modes=[0, 1]), ValueError, "modes"),
        (lambda: Mixture([], []), TypeError, "non-empty"),
        (lambda: Mixture([{"source": floats}], [1]), ValueError, "'source' stream"),
        (lambda: Mixture([{"id": tables[0]["id"], "x": tables[1]["id"]}], [1]), ValueError,
         "same length"),
        (lambda: DataLoader(Mixture(tables, [1, 0, 1])), ValueError, "positive"),
        (lambda: DataLoader(Mixture(tables, [1, 1, 1]), epochs=1), ValueError, "endless"),
    ]
    for make, kind, says in cases:
        with pytest.raises(kind, match=says):
            make()
    floats.close()


def test_a_schedule_changes_the_weights_at_its_steps_and_resumes_exactly(tables):
    mix = Mixture(tables[:2], [1, 1], schedule=[(4, [3, 1]), (8, [1, 0.25])])
    kwargs = dict(batch_size=20, mode=2, seed=2)
    with DataLoader(mix, **kwargs) as loader:
        batches = [next(loader) for _ in range(12)]
    counts = [np.bincount(b["source"], minlength=2).tolist() for b in batches]
    assert counts == [[10, 10]] * 4 + [[15, 5]] * 4 + [[16, 4]] * 4
    for b in batches:
        check_ids = b["id"]
        assert np.array_equal(b["source"], check_ids // 1000)
    with DataLoader(mix, **kwargs) as loader:
        for _ in range(3):
            next(loader)
        state = json.loads(json.dumps(loader.state_dict()))
    assert state["sampler"]["mixture"]["schedule"] == [[4, [3, 1]], [8, [4, 1]]]
    with DataLoader(mix, **kwargs, state=state) as loader:
        for k in range(3, 12):
            assert np.array_equal(next(loader)["id"], batches[k]["id"]), k
    with pytest.raises(ValueError, match="mixture"):
        DataLoader(Mixture(tables[:2], [1, 1], schedule=[(5, [3, 1])]), **kwargs, state=state)
    with pytest.raises(ValueError, match="increase"):
        DataLoader(Mixture(tables[:2], [1, 1], schedule=[(0, [3, 1])]))
