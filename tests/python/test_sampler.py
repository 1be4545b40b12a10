"""loaderx.Sampler: the endless step-based index generator."""

import itertools

import numpy as np
import pytest

from loaderx import Sampler


def test_modes_have_0_5_0_values():
    assert Sampler.Mode.SEQUENTIAL == 0 and int(Sampler.Mode.SEQUENTIAL) == 0
    assert Sampler.Mode.IID == 1 and int(Sampler.Mode.IID) == 1
    assert Sampler.Mode.SHUFFLE == 2 and int(Sampler.Mode.SHUFFLE) == 2
    assert repr(Sampler.Mode.IID) == "Mode.IID"


def test_sequential_is_a_sliding_circular_window():
    s = Sampler(10, 4, Sampler.Mode.SEQUENTIAL)
    got = [b.tolist() for b in itertools.islice(s, 4)]
    assert got == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 0, 1], [2, 3, 4, 5]]
    assert s.step == 4


def test_batches_are_uint64_arrays_of_batch_size():
    for mode in (0, 1, 2):
        b = next(Sampler(1000, 33, mode, seed=5))
        assert b.dtype == np.uint64 and b.shape == (33,)
        assert (b < 1000).all()


def test_iid_depends_on_the_seed_and_is_reproducible():
    a = [next(Sampler(10**6, 64, 1, seed=1)) for _ in range(2)]
    assert np.array_equal(a[0], a[1])
    assert not np.array_equal(a[0], next(Sampler(10**6, 64, 1, seed=2)))
    assert Sampler(10, 2, 1).seed == 42


def test_shuffle_visits_every_index_once_per_epoch():
    s = Sampler(100, 10, Sampler.Mode.SHUFFLE, seed=3)
    epoch = np.concatenate([next(s) for _ in range(10)])
    assert sorted(epoch.tolist()) == list(range(100))


def test_batch_seek_next_and_properties():
    s = Sampler(1000, 16, Sampler.Mode.IID, seed=9)
    assert (s.length, s.batch_size, s.mode, s.seed, s.step) == (1000, 16, Sampler.Mode.IID, 9, 0)
    first = [next(s) for _ in range(5)]
    for step, b in enumerate(first):
        assert np.array_equal(s.batch(step), b)
    s.seek(2)
    assert np.array_equal(s.next(), first[2])
    assert np.array_equal(next(s), first[3])
    assert s.step == 4
    assert "step=4" in repr(s) and "Sampler.Mode.IID" in repr(s)
    assert iter(s) is s


def test_bad_arguments():
    for args in ((0, 4, 0), (10, 0, 0)):
        with pytest.raises(ValueError):
            Sampler(*args)
    for mode in (3, -1, "iid", None, 1.0):
        with pytest.raises(ValueError, match="mode"):
            Sampler(10, 4, mode)
    with pytest.raises(ValueError, match="batch_size"):
        Sampler(10, 1 << 40, 0)
    with pytest.raises(ValueError, match="length must be an int in 0"):
        Sampler(-1, 4, 0)
    with pytest.raises(ValueError, match="seed must be an int in 0"):
        Sampler(10, 4, 0, seed=-1)
