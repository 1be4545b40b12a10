"""Hand-off to PyTorch: an IterableDataset over a DataLoader, and DLPack.

Batch arrays are NumPy arrays that own their memory, so they export
``__dlpack__`` and ``torch.from_dlpack(batch['data'])`` (or
``np.from_dlpack``) takes them without a copy. :func:`as_tensors` does that
for a whole batch.

:class:`IterableLoader` wraps the loader's arguments as a
``torch.utils.data.IterableDataset`` (when torch is installed; a plain
iterable otherwise), for code that expects one::

    from loaderx.torch import IterableLoader

    data = IterableLoader({'image': images, 'label': labels}, batch_size=256,
                          shard=(rank, world_size))
    for batch in torch.utils.data.DataLoader(data, batch_size=None):
        ...

Use it with ``batch_size=None`` (the loader batches) and ``num_workers=0``
(the loader has its own threads; for Python transforms on many cores, give
it ``transform_mode='process'`` and ``transform_workers=`` instead). Importing this module does not import
torch; :class:`IterableLoader` and :func:`as_tensors` do, when used.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np

__all__ = ["IterableLoader", "as_tensors"]


def as_tensors(batch: Any) -> Any:
    """`batch` with every NumPy array replaced by a ``torch.Tensor`` sharing
    its memory (through DLPack: no copy), in dicts, lists and tuples."""
    import torch

    def convert(x: Any) -> Any:
        if isinstance(x, np.ndarray):
            return torch.from_dlpack(x)
        if isinstance(x, dict):
            return {k: convert(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return type(x)(convert(v) for v in x)
        return x

    return convert(batch)


class _IterableLoader:
    """An endless iterable of a :class:`~loaderx.DataLoader`'s batches.

    Takes the DataLoader's arguments; the loader itself is created when
    iteration starts (so the object pickles, by its datasets' paths). A new
    ``iter()`` continues where the previous one stopped. `tensors`: yield
    ``torch.Tensor`` batches (:func:`as_tensors`); default: when torch is
    installed. :meth:`state_dict` / :meth:`load_state_dict` follow the
    consumer exactly (torchdata's ``StatefulDataLoader`` calls them).
    """

    def __init__(
        self, dataset: Any, labelset: Any = None, *, tensors: bool | None = None, **kwargs: Any
    ) -> None:
        if kwargs.get("state") is not None:
            raise TypeError("use load_state_dict() instead of state=")
        kwargs.pop("state", None)
        self.dataset = dataset
        self.labelset = labelset
        self.kwargs = kwargs
        self.tensors = _torch_available() if tensors is None else bool(tensors)
        self._state: Any = None
        self._loader: Any = None

    def _check_worker(self) -> None:
        if not _torch_available():
            return
        from torch.utils.data import get_worker_info

        info = get_worker_info()
        if info is not None and info.num_workers > 1:
            raise RuntimeError(
                "loaderx.torch.IterableLoader runs its own worker threads: use it with "
                "torch.utils.data.DataLoader(..., num_workers=0) (every torch worker would "
                "otherwise produce the same batches)"
            )

    def __iter__(self) -> Any:
        from .dataloader import DataLoader

        self._check_worker()
        self.close()
        loader = DataLoader(self.dataset, self.labelset, state=self._state, **self.kwargs)
        self._loader = loader
        return self._generate(loader)

    def _generate(self, loader: Any) -> Any:
        try:
            for batch in loader:
                yield as_tensors(batch) if self.tensors else batch
        finally:
            if self._loader is loader:
                self._state = loader.state_dict()
            loader.close()

    def state_dict(self) -> dict[str, Any] | None:
        """The state of the running loader (None before the first
        iteration, unless one was loaded)."""
        if self._loader is not None:
            return self._loader.state_dict()
        return self._state

    def load_state_dict(self, state: Any) -> None:
        """Continues from `state` (checked when iteration starts, or now if
        a loader runs)."""
        self._state = state
        if self._loader is not None:
            self._loader.load_state_dict(state)

    def close(self) -> None:
        """Closes the running loader, keeping its position."""
        loader, self._loader = self._loader, None
        if loader is not None:
            self._state = loader.state_dict()
            loader.close()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_loader"] = None
        return state

    def __del__(self) -> None:
        loader = getattr(self, "_loader", None)
        if loader is not None:
            loader.close()


def _torch_available() -> bool:
    return importlib.util.find_spec("torch") is not None


_resolved: dict[str, type] = {}


def __getattr__(name: str) -> Any:
    # IterableLoader is built on first use, on top of torch's IterableDataset
    # when torch is installed, so that importing this module imports no torch.
    if name != "IterableLoader":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    cls = _resolved.get(name)
    if cls is None:
        bases: tuple[type, ...] = (_IterableLoader,)
        if _torch_available():
            from torch.utils.data import IterableDataset

            bases = (_IterableLoader, IterableDataset)
        cls = type("IterableLoader", bases, {"__module__": __name__, "__doc__": _IterableLoader.__doc__})
        _resolved[name] = cls
    return cls
