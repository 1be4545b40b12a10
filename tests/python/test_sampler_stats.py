"""Statistics of the Python-visible Sampler: chi-square uniformity of IID and
SHUFFLE (index frequencies, consecutive pairs), the permutation property,
seed dependence and shards. Every check is first shown to reject a source
that is wrong in exactly the way it looks for (a negative control), so a
check that cannot fail does not pass silently.

The chi-square p-value uses the Wilson-Hilferty normal approximation (no
scipy), accurate to well under the 1e-4 threshold used here for the degrees
of freedom involved (>= 20). Seeds are fixed, so the tests are
deterministic.
"""

import math

import numpy as np
import pytest

from loaderx import Sampler

P_MIN = 1e-4


def chi_square_p(counts, expected):
    """Upper-tail p-value of the chi-square statistic of `counts` against
    `expected` (arrays of the same shape; cells with expected 0 must be 0)."""
    counts = np.asarray(counts, dtype=np.float64).ravel()
    expected = np.asarray(expected, dtype=np.float64).ravel()
    live = expected > 0
    assert np.all(counts[~live] == 0), "a count where none can occur"
    stat = float((((counts - expected) ** 2)[live] / expected[live]).sum())
    df = int(live.sum()) - 1
    z = ((stat / df) ** (1 / 3) - (1 - 2 / (9 * df))) / math.sqrt(2 / (9 * df))
    return 0.5 * math.erfc(z / math.sqrt(2))


def stream(sampler, steps):
    return np.concatenate([sampler.batch(s) for s in range(steps)]).astype(np.int64)


def frequency_p(values, n):
    counts = np.bincount(values, minlength=n)
    return chi_square_p(counts, np.full(n, len(values) / n))


def iid_pairs_p(values, n):
    """Consecutive positions (p, p+1): uniform over all n*n pairs."""
    pairs = values[:-1] * n + values[1:]
    counts = np.bincount(pairs, minlength=n * n)
    return chi_square_p(counts, np.full(n * n, len(pairs) / (n * n)))


def shuffle_pairs_p(values, n):
    """Consecutive positions within an epoch: uniform over the n*(n-1)
    ordered pairs of distinct indices (a permutation never repeats one)."""
    epochs = values[: len(values) // n * n].reshape(-1, n)
    pairs = (epochs[:, :-1] * n + epochs[:, 1:]).ravel()
    counts = np.bincount(pairs, minlength=n * n)
    expected = np.full((n, n), len(pairs) / (n * (n - 1)))
    np.fill_diagonal(expected, 0)
    return chi_square_p(counts, expected)


def position_value_p(values, n):
    """Which index lands at each in-epoch position, over many epochs:
    uniform over the n*n (position, index) cells."""
    epochs = values[: len(values) // n * n].reshape(-1, n)
    cells = (np.arange(n)[None, :] * n + epochs).ravel()
    counts = np.bincount(cells, minlength=n * n)
    return chi_square_p(counts, np.full(n * n, len(cells) / (n * n)))


# -- the checks can fail --------------------------------------------------------


def test_negative_controls_are_rejected():
    rng = np.random.default_rng(0)
    n = 50
    # Frequencies: a source that favours low indices a little.
    biased = np.minimum(rng.integers(0, n + 5, size=200_000), n - 1)
    assert frequency_p(biased, n) < P_MIN
    # Pairs: SEQUENTIAL has perfectly uniform frequencies but every pair is
    # (i, i+1).
    seq = stream(Sampler(n, 10, Sampler.Mode.SEQUENTIAL), 20_000)
    assert frequency_p(seq, n) > 0.99
    assert iid_pairs_p(seq, n) < P_MIN
    assert shuffle_pairs_p(seq, n) < P_MIN
    assert position_value_p(seq, n) < P_MIN
    # A "shuffle" that only rotates the epoch by a random amount: a
    # permutation each epoch, but its pairs are always (i, i+1).
    rot = np.concatenate([np.roll(np.arange(n), rng.integers(n)) for _ in range(4000)])
    assert position_value_p(rot, n) > P_MIN  # rotations fool this one...
    assert shuffle_pairs_p(rot, n) < P_MIN  # ...not this one
    # A uniform source passes, so the threshold is not simply too strict.
    good = rng.integers(0, n, size=200_000)
    assert frequency_p(good, n) > P_MIN and iid_pairs_p(good, n) > P_MIN


# -- IID ------------------------------------------------------------------------


@pytest.mark.parametrize("n", [10, 37, 64])
def test_iid_index_frequencies_and_pairs_are_uniform(n):
    values = stream(Sampler(n, 64, Sampler.Mode.IID, seed=1234), 3000)
    assert ((0 <= values) & (values < n)).all()
    assert frequency_p(values, n) > P_MIN
    assert iid_pairs_p(values, n) > P_MIN
    # Pairs across a batch boundary are as independent as inside a batch.
    tail_head = np.stack([values[63::64][:-1], values[64::64]], axis=1)
    counts = np.bincount(tail_head[:, 0] * n + tail_head[:, 1], minlength=n * n)
    if len(tail_head) >= 5 * n * n:
        assert chi_square_p(counts, np.full(n * n, len(tail_head) / (n * n))) > P_MIN


# -- SHUFFLE --------------------------------------------------------------------


@pytest.mark.parametrize("n,batch", [(10, 4), (37, 37), (64, 48), (5, 12)])
def test_shuffle_is_a_permutation_every_epoch(n, batch):
    values = stream(Sampler(n, batch, Sampler.Mode.SHUFFLE, seed=5), 60 * n // batch + 60)
    epochs = values[: len(values) // n * n].reshape(-1, n)
    assert len(epochs) >= 60
    for epoch in epochs:
        assert np.array_equal(np.sort(epoch), np.arange(n))
    # Epochs are fresh orders: as many distinct ones as random draws from
    # the n! orders would give (n = 5 has only 120, so repeats are due).
    orders = math.factorial(n)
    expected_distinct = orders * (1 - math.exp(-len(epochs) / orders))
    assert len({e.tobytes() for e in epochs}) > 0.8 * expected_distinct


@pytest.mark.parametrize("n", [10, 37])
def test_shuffle_positions_and_pairs_are_uniform(n):
    values = stream(Sampler(n, 50, Sampler.Mode.SHUFFLE, seed=77), 4000)
    assert position_value_p(values, n) > P_MIN
    assert shuffle_pairs_p(values, n) > P_MIN
    # Over whole epochs, every index is drawn exactly equally often.
    whole = values[: len(values) // n * n]
    assert len(set(np.bincount(whole, minlength=n).tolist())) == 1


def test_shuffle_of_a_large_dataset_needs_no_permutation_in_memory():
    n = 10**12  # a permutation array would be 8 TB
    s = Sampler(n, 1024, Sampler.Mode.SHUFFLE, seed=3)
    b = s.batch(10**9)
    assert len(set(b.tolist())) == 1024 and int(b.max()) < n
    assert np.array_equal(b, s.batch(10**9))


# -- seeds ------------------------------------------------------------------------


@pytest.mark.parametrize("mode", [Sampler.Mode.IID, Sampler.Mode.SHUFFLE])
def test_different_seeds_give_different_orders(mode):
    orders = [stream(Sampler(1000, 100, mode, seed=seed), 10) for seed in range(20)]
    assert len({o.tobytes() for o in orders}) == 20
    # Not just different: unrelated (few positions agree by chance: ~1/1000).
    agree = np.mean([np.mean(orders[0] == o) for o in orders[1:]])
    assert agree < 0.01
    # Negative control: the same seed gives the same order, and SEQUENTIAL
    # ignores the seed, so this check does detect equal orders.
    assert np.array_equal(orders[3], stream(Sampler(1000, 100, mode, seed=3), 10))
    seq = [stream(Sampler(1000, 100, 0, seed=seed), 10) for seed in range(3)]
    assert len({o.tobytes() for o in seq}) == 1


def test_any_step_is_a_pure_function_of_seed_and_step():
    for mode in (0, 1, 2):
        a = Sampler(999, 32, mode, seed=8)
        forward = [a.next() for _ in range(40)]
        b = Sampler(999, 32, mode, seed=8)
        for step in reversed(range(40)):
            assert np.array_equal(b.batch(step), forward[step])
        b.seek(17)
        assert np.array_equal(next(b), forward[17])


# -- shards ---------------------------------------------------------------------


@pytest.mark.parametrize("mode", [0, 1, 2])
def test_shards_of_a_step_are_the_global_batch(mode):
    whole = Sampler(1000, 48, mode, seed=2)
    for count in (1, 2, 3, 4):
        shards = [Sampler(1000, 48, mode, seed=2, shard=(i, count)) for i in range(count)]
        for s in shards:
            assert s.batch_size == 48 and s.local_batch_size == 48 // count
        for step in (0, 1, 7, 10**12):
            parts = [s.batch(step) for s in shards]
            assert np.array_equal(np.concatenate(parts), whole.batch(step))


def test_shard_arguments_are_checked():
    with pytest.raises(ValueError, match="divisible"):
        Sampler(100, 10, 1, shard=(0, 3))
    with pytest.raises(ValueError, match="out of range"):
        Sampler(100, 10, 1, shard=(2, 2))
    with pytest.raises(ValueError, match="at least 1"):
        Sampler(100, 10, 1, shard=(0, 0))
    s = Sampler(100, 10, 1, shard=(1, 2))
    assert s.shard == (1, 2) and "shard=(1, 2)" in repr(s)
    assert Sampler(100, 10, 1).shard == (0, 1)
