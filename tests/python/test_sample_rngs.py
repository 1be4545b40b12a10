"""DataLoader(sample_rngs=True): each sample's random generator is seeded
from (seed, step, position in the global batch), so transforms draw the
same values on any number of workers, after a resume, and on any shard."""

import numpy as np
import pytest

from loaderx import DataLoader, Dataset, SampleRngs, Sampler

N = 300


@pytest.fixture
def ids(tmp_path):
    ds = Dataset.write(tmp_path / "ids", np.arange(N, dtype=np.int64), durable=False)
    yield ds
    ds.close()


def noise(batch, rngs):
    assert isinstance(rngs, SampleRngs) and len(rngs) == len(batch["data"])
    batch["noise"] = np.array([rngs[k].normal() for k in range(len(rngs))])
    return batch


def run(ids, steps, **kwargs):
    with DataLoader(ids, batch_size=16, mode=2, seed=8, transform=noise, sample_rngs=True,
                    **kwargs) as loader:
        return [next(loader) for _ in range(steps)], loader.state_dict()


def test_draws_do_not_depend_on_workers_and_survive_a_resume(ids):
    want, _ = run(ids, 12, num_workers=1, transform_workers=0)
    for workers, pool in [(2, 3), (4, 1)]:
        got, _ = run(ids, 12, num_workers=workers, transform_workers=pool)
        assert all(np.array_equal(a["noise"], b["noise"]) for a, b in zip(want, got))
    _, state = run(ids, 5)
    with DataLoader(ids, batch_size=16, mode=2, seed=8, transform=noise, sample_rngs=True,
                    state=state) as loader:
        resumed = [next(loader) for _ in range(7)]
    assert all(np.array_equal(a["noise"], b["noise"]) for a, b in zip(want[5:], resumed))
    # Every sample of the run drew its own value.
    values = np.concatenate([b["noise"] for b in want])
    assert len(np.unique(values)) == len(values)


def test_the_seeds_are_the_samplers_and_a_generator_is_fresh_each_time(ids):
    seen = {}

    def keep(batch, rngs):
        seen["rngs"] = rngs
        return batch

    # In the consumer's thread: no transform of a later step replaces it.
    with DataLoader(ids, batch_size=16, mode=2, seed=8, transform=keep, sample_rngs=True,
                    shard=(1, 2), transform_workers=0) as loader:
        next(loader)
    rngs = seen["rngs"]
    whole = Sampler(N, 16, 2, 8).sample_seeds(0)
    assert np.array_equal(rngs.seeds, whole[8:]), "shard 1's half of the global batch"
    assert rngs[3].integers(1 << 60) == rngs[3].integers(1 << 60)
    assert np.array_equal(rngs[2:4].seeds, rngs.seeds[2:4])
    assert repr(rngs) == "SampleRngs(8 samples)"


def test_the_pair_form_gets_its_generators_too(tmp_path, ids):
    labels = Dataset.write(tmp_path / "labels", np.zeros(N, np.int64), durable=False)

    def shift(pair, rngs):
        data, label = pair
        return data, label + np.array([r.integers(10) for r in rngs])

    with DataLoader(ids, labels, batch_size=8, mode=2, transform=shift,
                    sample_rngs=True) as loader:
        batch = next(loader)
    assert set(batch) == {"data", "label"} and batch["label"].shape == (8,)
    labels.close()


def test_generators_need_a_transform(ids):
    with pytest.raises(ValueError, match="transform"):
        DataLoader(ids, sample_rngs=True)
