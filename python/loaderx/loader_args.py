"""Internal: the DataLoader's argument checks.

Each function takes one argument (or the stream arguments) as the caller
gave it and returns it normalised, or raises the TypeError or ValueError
that ``DataLoader(...)`` documents. ``dataloader.py`` calls them in the
order its signature lists the arguments.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Any

import numpy as np

from .bytes_dataset import BytesDataset
from .dataset import Dataset
from .ragged import RaggedDataset


#: The most worker threads of either kind. The native workers are capped at
#: one per core anyway, and each transform worker is a Python thread; a
#: larger count is a mistake (``num_workers=2**70`` used to fail inside the
#: binding with "int too big to convert", or start threads without end).
MAX_WORKERS = 1024

#: The most finished steps the workers may hold ahead of the consumer. Each
#: holds a whole batch in memory, and a window nobody drains only costs
#: memory: ``prefetch_size=10**12`` used to be accepted and let memory grow
#: for as long as the workers ran.
MAX_PREFETCH = 1024

#: Seeds are the sampler's unsigned 64-bit integers.
MAX_SEED = 2**64 - 1


def _count(name: str, value: Any, least: int, most: int | None = None) -> int:
    """`value` as an int in [least, most]: TypeError for a non-integer
    (a bool included: True is not a count), ValueError out of range; both
    name the argument and the range."""
    allowed = f"an int from {least} to {most}" if most is not None else f"an int >= {least}"
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be {allowed}, not a bool ({value!r})")
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be {allowed}, not {type(value).__name__}") from None
    if value < least or (most is not None and value > most):
        raise ValueError(f"{name} must be {allowed}, not {value}")
    return value


def positive(name: str, value: Any, most: int | None = None) -> int:
    """`value` as an int of at least 1 (and at most `most`)."""
    return _count(name, value, 1, most)


def non_negative(name: str, value: Any, most: int | None = None) -> int:
    """`value` as an int of at least 0 (and at most `most`)."""
    return _count(name, value, 0, most)


def shard_arg(shard: Any) -> tuple[int, int]:
    """``shard=``: None (the whole batch) or ``(index, count)``."""
    if shard is None:
        return (0, 1)
    try:
        index, count = shard
        index, count = operator.index(index), operator.index(count)
    except (TypeError, ValueError):
        raise TypeError(
            f"shard must be a pair of ints (index, count), not {shard!r}"
        ) from None
    if count < 1:
        raise ValueError(f"shard count must be at least 1, not {count}")
    if not 0 <= index < count:
        raise ValueError(f"shard index {index} is out of range for {count} shards")
    return index, count


def streams_arg(
    dataset: Any, labelset: Any
) -> dict[str, Dataset | RaggedDataset | BytesDataset]:
    """The streams by name, in batch order: a dict of datasets as given, or
    ``{'data': dataset}`` / ``{'data': dataset, 'label': labelset}``."""
    if isinstance(dataset, Mapping):
        if labelset is not None:
            raise TypeError("give the streams either as a dict or as dataset, labelset")
        if not dataset:
            raise ValueError("a DataLoader needs at least one stream")
        streams = {}
        for name, ds in dataset.items():
            if not isinstance(name, str):
                raise TypeError(f"stream names must be str, not {type(name).__name__}")
            if not isinstance(ds, (Dataset, RaggedDataset, BytesDataset)):
                raise TypeError(
                    f"stream {name!r} must be a loaderx.Dataset, RaggedDataset or "
                    f"BytesDataset, not {type(ds).__name__}"
                )
            streams[name] = ds
        return streams
    for name, ds in (("dataset", dataset), ("labelset", labelset)):
        if ds is not None and not isinstance(ds, Dataset):
            raise TypeError(f"{name} must be a loaderx.Dataset, not {type(ds).__name__}")
    if dataset is None:
        raise TypeError("dataset must be a loaderx.Dataset, not None")
    if labelset is None:
        return {"data": dataset}
    return {"data": dataset, "label": labelset}


def stream_lengths(streams: Mapping[str, Any], pair: bool) -> dict[str, int]:
    """Each stream's length; ValueError unless they are all equal. `pair`:
    the streams were given as ``dataset, labelset``."""
    lengths = {name: len(ds) for name, ds in streams.items()}
    if len(set(lengths.values())) > 1:
        if pair:
            raise ValueError(
                f"dataset and labelset must have the same length "
                f"({lengths['data']} != {lengths['label']})"
            )
        raise ValueError(f"all streams must have the same length, got {lengths}")
    return lengths


def pad_arg(pad: Any, streams: Mapping[str, Any]) -> set[str]:
    """``pad=``: the names of the ragged streams to pad (True: all of them)."""
    ragged = {name for name, ds in streams.items() if isinstance(ds, RaggedDataset)}
    if isinstance(pad, (bool, np.bool_)):
        return ragged if pad else set()
    if isinstance(pad, str):
        pad = [pad]
    names = set(pad)
    unknown = names - ragged
    if unknown:
        raise ValueError(
            f"pad names {sorted(unknown)}, which are not ragged streams "
            f"(ragged streams: {sorted(ragged)})"
        )
    return names


def images_arg(images: Any, streams: Mapping[str, Any]) -> dict[str, Any]:
    """``images=``: byte-stream name to :class:`~loaderx.Images`."""
    from .images import Images

    if images is None:
        return {}
    if not isinstance(images, Mapping):
        raise TypeError("images must map byte-stream names to loaderx.Images")
    byte_streams = {name for name, ds in streams.items() if isinstance(ds, BytesDataset)}
    for name, pipeline in images.items():
        if name not in byte_streams:
            raise ValueError(
                f"images names {name!r}, which is not a byte stream "
                f"(byte streams: {sorted(byte_streams)})"
            )
        if not isinstance(pipeline, Images):
            raise TypeError(f"images[{name!r}] must be a loaderx.Images, "
                            f"not {type(pipeline).__name__}")
    return dict(images)


#: What a finite pass's last batch may be: shorter, or padded with a mask.
LAST_BATCH = ("partial", "pad")

#: The stream a padded finite pass adds: which samples of a batch are real.
VALID = "valid"


def pass_args(
    epochs: Any, last_batch: Any, streams: Mapping[str, Any]
) -> tuple[int | None, str]:
    """``epochs=`` (None: endless) and ``last_batch=``."""
    if epochs is not None:
        epochs = positive("epochs", epochs)
    if last_batch not in LAST_BATCH:
        raise ValueError(f"last_batch must be 'partial' or 'pad', not {last_batch!r}")
    if epochs is not None and last_batch == "pad" and VALID in streams:
        raise ValueError(
            f"a padded pass adds a {VALID!r} stream to each batch, and a stream has that name"
        )
    return epochs, last_batch


#: Where ``transform_mode=`` runs the map and transform.
TRANSFORM_MODES = ("thread", "process")


def transform_mode_arg(mode: Any, python_work: bool, workers: int) -> None:
    """Checks ``transform_mode=`` against the rest: processes need work to
    run and at least one of them (the consuming thread never talks to a
    process itself, so that Ctrl-C cannot cut a process's exchange short)."""
    if mode not in TRANSFORM_MODES:
        raise ValueError(f"transform_mode must be one of {TRANSFORM_MODES}, not {mode!r}")
    if mode == "process":
        if not python_work:
            raise ValueError("transform_mode='process' needs a transform or a map to run")
        if workers < 1:
            raise ValueError("transform_mode='process' needs transform_workers >= 1")
