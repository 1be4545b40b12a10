"""Per-sample random generators for transforms: ``DataLoader(...,
sample_rngs=True)`` calls ``transform(batch, rngs)`` with a
:class:`SampleRngs` of the batch.

Each sample's seed is a hash of (the loader's seed, the step, the sample's
position in the global batch), computed by the native sampler
(``Sampler.sample_seeds``). So a random crop or noise drawn from it is the
same after a resume, on any number of workers and on any shard count.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import overload

import numpy as np


class SampleRngs(Sequence):
    """One NumPy random generator per sample of a batch, made on demand.

    ``rngs[k]`` is a ``numpy.random.Generator`` (Philox, keyed by
    ``rngs.seeds[k]``): a fresh one at each access, so drawing from
    ``rngs[k]`` twice gives the same values. ``rngs.seeds`` (uint64, one per
    sample) serve frameworks with their own generators, e.g.
    ``jax.random.key(seed)``.
    """

    __slots__ = ("seeds",)

    def __init__(self, seeds: np.ndarray) -> None:
        #: One uint64 seed per sample, in batch order.
        self.seeds = np.asarray(seeds, dtype=np.uint64)

    def __len__(self) -> int:
        return len(self.seeds)

    @overload
    def __getitem__(self, k: int) -> np.random.Generator: ...

    @overload
    def __getitem__(self, k: slice) -> "SampleRngs": ...

    def __getitem__(self, k):
        if isinstance(k, slice):
            return SampleRngs(self.seeds[k])
        return np.random.Generator(np.random.Philox(key=int(self.seeds[k])))

    def __repr__(self) -> str:
        return f"SampleRngs({len(self)} samples)"
