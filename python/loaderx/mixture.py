"""Weighted mixtures of datasets or tables: ``DataLoader(Mixture([web,
code, books], [0.7, 0.2, 0.1]))``.

The indices are the native ``MixtureSampler``'s (zsampler's
``mixture.rs``): each step's positions are dealt to the sources by weight,
and each source serves its share in its own order and epochs, so every
batch is a pure function of (seed, step, position, shard) and a run resumes
exactly from its step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Union

from ._native import Sampler
from .bytes_dataset import BytesDataset
from .dataset import Dataset
from .loader_args import stream_lengths, streams_arg
from .loader_streams import stream_adapters
from .ragged import RaggedDataset

#: What a mixture may mix: one dataset, or named streams (a table).
Source = Union[Dataset, RaggedDataset, BytesDataset, Mapping[str, Any]]

#: The stream a mixture's batches get: each sample's source number.
SOURCE = "source"

PROPORTIONS = ("exact", "drawn")


class Mixture:
    """Sources mixed by weight, for the DataLoader.

    Args:
        sources: datasets, or tables (mappings of stream name to dataset)
            with the same stream names, kinds, dtypes and per-sample shapes
            (ragged and byte streams allowed); their lengths may differ.
        weights: one positive weight per source; only their ratios matter
            (``[0.7, 0.2, 0.1]`` or ``[7, 2, 1]``).
        modes: each source's order, ``Sampler.Mode`` values: one for all or
            a list (default: the DataLoader's `mode`). Each source walks
            its own order and its own epochs, so a small source repeats
            while a big one is still in its first epoch.
        proportions: ``'exact'``: every batch holds each source's weighted
            count, rounded (between two sources: down or up), and the
            running counts never drift from the weights by more than
            ``ceil(log2(sources))``; ``'drawn'``: each batch's counts are a
            random draw, as if every sample picked its source by weight
            (exact over windows of 2^20 samples).
        schedule: weights that change with the step: ``[(step, weights),
            ...]``, steps increasing from above 0; from each step on, batches
            follow its weights. Each source goes on where it was, and a
            resume is still exact.

    Batches carry a ``source`` stream: each sample's int32 source number.
    A mixture is endless (no ``epochs=``).
    """

    def __init__(
        self,
        sources: Sequence[Source],
        weights: Sequence[float],
        *,
        modes: int | Sampler.Mode | Sequence[int | Sampler.Mode] | None = None,
        proportions: str = "exact",
        schedule: Sequence[tuple[int, Sequence[float]]] | None = None,
    ) -> None:
        if isinstance(sources, Mapping) or not isinstance(sources, Sequence) or not sources:
            raise TypeError("sources must be a non-empty list of datasets or tables")
        self.streams: list[dict[str, Any]] = [streams_arg(s, None) for s in sources]
        shapes = [
            {name: a.identity for name, a in stream_adapters(s, set(), {}).items()}
            for s in self.streams
        ]
        for j, shape in enumerate(shapes[1:], 1):
            if shape != shapes[0]:
                raise ValueError(
                    f"source {j} has streams {shape}, source 0 {shapes[0]}: a mixture's "
                    "sources need the same stream names, kinds, dtypes and shapes"
                )
        if SOURCE in self.streams[0]:
            raise ValueError(f"a mixture adds a {SOURCE!r} stream, and a stream has that name")
        weights = [float(w) for w in weights]
        if len(weights) != len(self.streams):
            raise ValueError(f"{len(self.streams)} sources but {len(weights)} weights")
        self.weights = weights
        if modes is not None and not isinstance(modes, Sequence):
            modes = [modes] * len(self.streams)
        if modes is not None and len(modes) != len(self.streams):
            raise ValueError(f"{len(self.streams)} sources but {len(modes)} modes")
        self.modes = None if modes is None else list(modes)
        if proportions not in PROPORTIONS:
            raise ValueError(f"proportions must be 'exact' or 'drawn', not {proportions!r}")
        self.proportions = proportions
        self.schedule = [(int(step), [float(w) for w in ws]) for step, ws in schedule or ()]
        # Each source's streams share a length (the loader's own check).
        self.lengths = [next(iter(stream_lengths(s, pair=False).values()))
                        for s in self.streams]

    def sampler(
        self, mode: Any, batch_size: int, seed: int, shard: tuple[int, int]
    ) -> Any:
        """The native sampler of this mixture in a loader of these settings
        (`mode`: the sources' order where `modes` is None)."""
        from ._native import MixtureSampler

        modes = self.modes if self.modes is not None else [mode] * len(self.streams)
        return MixtureSampler(self.lengths, modes, self.weights, batch_size, seed,
                              shard=shard, proportions=self.proportions,
                              schedule=self.schedule)

    def __repr__(self) -> str:
        return (f"Mixture({len(self.streams)} sources of {sorted(self.streams[0])}, "
                f"weights={self.weights}, proportions={self.proportions!r})")
