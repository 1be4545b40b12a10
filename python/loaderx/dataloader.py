"""The endless, step-based DataLoader.

Gathering happens on Rust threads (the native ``Loader``, over the zloader
crate) outside the GIL: for each step, in order, the sampler's indices are
gathered from the dataset and the labelset into fresh buffers, which become
NumPy arrays without a copy. Batches come out in sampler order whatever
`num_workers` is, so a run is reproducible from its seed.
"""

from __future__ import annotations

import operator
from typing import Any, Callable

from ._native import Loader, Sampler
from .dataset import Dataset


def _identity(x: Any) -> Any:
    return x


def _positive(name: str, value: Any) -> int:
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, not {type(value).__name__}") from None
    if value < 1:
        raise ValueError(f"{name} must be at least 1, not {value}")
    return value


class DataLoader:
    """An endless iterator of ``{'data': ..., 'label': ...}`` batches.

    Each step draws `batch_size` indices from a :class:`Sampler` of
    ``(len(dataset), batch_size, mode, seed)`` and yields
    ``data, label = transform((dataset[idxs], labelset[idxs]))`` as a dict
    (the transform runs in the consuming thread, so its exceptions reach
    the caller). Up to `prefetch_size` steps are gathered ahead by
    `num_workers` threads. The loader never ends on its own; ``len()``
    raises TypeError. Close it (or use it as a context manager) to stop its
    threads; after ``close()`` iteration stops. While it runs, the datasets
    cannot be deleted from or compacted.
    """

    def __init__(
        self,
        dataset: Dataset,
        labelset: Dataset,
        num_workers: int = 4,
        batch_size: int = 256,
        prefetch_size: int = 4,
        mode: int | Sampler.Mode = 1,
        seed: int = 42,
        transform: Callable[[Any], Any] = _identity,
    ) -> None:
        """Starts the loader.

        Raises:
            ValueError: the dataset and labelset lengths differ, the dataset
                is empty, or a size is below 1 or the mode unknown.
            TypeError: `dataset` or `labelset` is not a Dataset.
        """
        self._native = None
        for name, ds in (("dataset", dataset), ("labelset", labelset)):
            if not isinstance(ds, Dataset):
                raise TypeError(f"{name} must be a loaderx.Dataset, not {type(ds).__name__}")
        if len(dataset) != len(labelset):
            raise ValueError(
                f"dataset and labelset must have the same length "
                f"({len(dataset)} != {len(labelset)})"
            )
        num_workers = _positive("num_workers", num_workers)
        batch_size = _positive("batch_size", batch_size)
        prefetch_size = _positive("prefetch_size", prefetch_size)
        if not callable(transform):
            raise TypeError("transform must be callable")
        self.dataset = dataset
        self.labelset = labelset
        #: The sampler's configuration; the loader runs on a copy of it.
        self.sampler = Sampler(len(dataset), batch_size, mode, seed)
        self._transform = transform
        self._layouts = [(ds.dtype, (batch_size, *ds.shape)) for ds in (dataset, labelset)]
        self._native = Loader(
            [dataset._zr(), labelset._zr()],
            [dataset._itemsize, labelset._itemsize],
            self.sampler,
            num_workers,
            prefetch_size,
        )

    def __len__(self) -> int:
        """Raises TypeError: an endless loader has no length."""
        raise TypeError("an endless (step-based) DataLoader has no length")

    def __iter__(self) -> "DataLoader":
        return self

    def __next__(self) -> dict[str, Any]:
        """The next batch, in step order; waits for it with the GIL released."""
        native = self._native
        if native is None:
            raise StopIteration
        _step, _idxs, buffers = next(native)
        data, label = (
            buf.view(dtype).reshape(shape) for buf, (dtype, shape) in zip(buffers, self._layouts)
        )
        data, label = self._transform((data, label))
        return {"data": data, "label": label}

    def close(self) -> None:
        """Stops and joins the worker threads and releases the datasets.
        Prompt in every state; idempotent."""
        native, self._native = getattr(self, "_native", None), None
        if native is not None:
            native.close()

    @property
    def closed(self) -> bool:
        """Whether `close()` has been called."""
        return self._native is None

    def __enter__(self) -> "DataLoader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._native is None else "running"
        return f"DataLoader({self.dataset!r}, {self.labelset!r}, {self.sampler!r}, {state})"
