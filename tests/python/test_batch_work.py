"""How a per-sample `map`'s results become a batch (loaderx.batch_work.stack),
against a model of the rule the loader guide states: a key's values become
one array when each, made an array, has the same shape and dtype, and stay a
list otherwise."""

import random

import numpy as np

from loaderx.batch_work import stack


def model(values):
    if values and all(isinstance(v, (np.ndarray, np.generic, int, float, bool)) for v in values):
        arrays = [np.asarray(v) for v in values]
        if all(a.shape == arrays[0].shape and a.dtype == arrays[0].dtype for a in arrays):
            return np.stack(arrays)
    return values


#: Makers of one value each, some of one type and several dtypes or shapes.
MAKERS = [
    lambda r: r.randrange(-5, 5),
    lambda r: r.choice([2**62, 2**63, 2**64, -2**63, 2**70]),
    lambda r: r.random(),
    lambda r: r.random() < 0.5,
    lambda r: complex(r.random(), 1),
    lambda r: np.int64(r.randrange(100)),
    lambda r: np.int32(r.randrange(100)),
    lambda r: np.uint8(r.randrange(100)),
    lambda r: np.float32(r.random()),
    lambda r: np.float64(r.random()),
    lambda r: np.bool_(r.random() < 0.5),
    lambda r: np.str_("x" * r.randrange(1, 4)),
    lambda r: np.datetime64(r.randrange(100), r.choice(["s", "ms"])),
    lambda r: np.full(r.choice([(2,), (3,)]), r.random()),
    lambda r: np.zeros((2, 2), r.choice([np.uint8, np.float32])),
    lambda r: np.array(r.random()),
    lambda r: np.full(3, r.random()).view(np.ma.MaskedArray),
    lambda r: "text",
    lambda r: None,
    lambda r: [1, 2],
]


def same(got, want):
    assert type(got) is type(want)
    if isinstance(want, np.ndarray):
        assert got.dtype == want.dtype and got.shape == want.shape
        assert np.array_equal(got, want, equal_nan=want.dtype.kind in "fc")
    else:
        assert len(got) == len(want) and all(a is b for a, b in zip(got, want))


def test_map_results_are_stacked_as_the_model_says():
    r = random.Random(0)
    for _ in range(4000):
        n = r.randrange(0, 6)
        # Mostly values of one maker (the usual map), else of several.
        makers = [r.choice(MAKERS)] if r.random() < 0.7 else r.sample(MAKERS, 3)
        values = [r.choice(makers)(r) for _ in range(n)]
        same(stack(values), model(values))
        # A dict per sample: each key's values alike.
        same(stack([{"k": v} for v in values])["k"] if values else stack([]), model(values))
